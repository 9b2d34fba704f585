"""A config key's one declaration: its dataclass field, with its default and how it enters the
config hash in the field's metadata (as torchtitan declares a component's options in its nested
`Config`). provenance.config_hash reads these facts; no table of key names repeats them.

    n_layer: int = setting(4)                                  hashed as it is
    progress: bool = setting(True, hashed=False)               changes no number
    z_loss: float = setting(0.0, before=0.0)                   added after runs were recorded
    rope_base: float = setting(1e4, when=lambda m: m["position"] == "rope")
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

HASHING = "ablate.hashing"  # the metadata entry of a key declared by `setting`


class _Unset:
    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Hashing:
    """How one key enters the config hash.

    hashed:  False for a key that cannot change a run's numbers (where it is written, how progress
             is shown, whether to run at all): the key and everything under it are left out.
    before:  the value every run had before the key existed: at it the key is left out, so a run
             recorded then hashes as it did and its records stay found.
    when:    given the key's section (its values by field name), whether the key counts: an option
             that only acts with another (rope_base with position=rope) is left out without it.
    hash_as: the name it is hashed under, where runs were recorded under another key's name.
    """

    hashed: bool = True
    before: Any = UNSET
    when: Callable[[dict], bool] | None = None
    hash_as: str | None = None

    def counts(self, value: Any, section: dict) -> bool:
        if not self.hashed:
            return False
        if self.before is not UNSET and value == self.before:
            return False
        return self.when is None or bool(self.when(section))


def setting(
    default: Any = UNSET,
    *,
    factory: Callable[[], Any] | None = None,
    hashed: bool = True,
    before: Any = UNSET,
    when: Callable[[dict], bool] | None = None,
    hash_as: str | None = None,
) -> Any:
    """A dataclass field declaring a key: its default (or `factory` for a list or dict) and its
    Hashing facts. A field without a default (a section of RunConfig) passes neither."""
    metadata = {HASHING: Hashing(hashed, before, when, hash_as)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    if default is UNSET:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def hashing(f: dataclasses.Field) -> Hashing | None:
    """The Hashing facts a field was declared with; None for a field not declared by `setting`."""
    return f.metadata.get(HASHING)


def section_classes(cls: type, name: str) -> tuple[type, ...]:
    """The dataclasses field `name` of `cls` may hold: one, or each member of a union of them
    (RunConfig.data: one schema per data source); none for a plain value."""
    hint = typing.get_type_hints(cls)[name]
    members = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    return tuple(m for m in members if isinstance(m, type) and dataclasses.is_dataclass(m))


def declared_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field]]:
    """Every key under dataclass `cls` as (dotted key, field), each member of a union of sections
    included (data.kind is declared by each data source)."""
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        out.append((key, f))
        for member in section_classes(cls, f.name):
            out += declared_fields(member, key + ".")
    return out
