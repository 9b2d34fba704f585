"""How a composed tree becomes a typed dataclass: `build` checks its keys and coerces each value to
its field's type; the range checks every schema shares; `as_dict` for the way back."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from ablate.errors import ConfigError

# The largest integer a float holds exactly (2^53): a count beyond it (train.eval_batches=1e30) is no
# count a loop finishes or a float formula keeps, so every integer key stops there.
MAX_INT = 2**53


def build(cls: type, tree: Any, prefix: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, checking keys and coercing scalar types."""
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{prefix}={tree!r} is not a mapping (valid: a config group such as {prefix}=<name>)")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    reject_unknown(prefix, tree, names)
    values = {k: coerce(f"{prefix}.{k}" if prefix else k, v, hints[k]) for k, v in tree.items()}
    return cls(**values)


def reject_unknown(prefix: str, tree: dict, valid) -> None:
    for key in tree:
        if key not in valid:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"unknown key {where} (valid: {', '.join(sorted(valid))})")


def coerce(key: str, value: Any, hint: Any) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return coerce(key, value, args[0])
        # A scalar or a list of that scalar (a list of budgets): each element is checked.
        scalars = [a for a in args if a not in (list, dict) and get_origin(a) not in (list, dict)]
        if len(scalars) == 1 and list in args and isinstance(value, list):
            return [coerce(f"{key}[{i}]", v, scalars[0]) for i, v in enumerate(value)]
        if len(scalars) == 1 and not isinstance(value, (list, dict)):
            return coerce(key, value, scalars[0])
        return value
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is invalid (valid: {', '.join(map(str, choices))})")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r} is not a boolean (valid: true, false)")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}={value!r} is not an integer")
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            value = int(value)
        if isinstance(value, int):
            if abs(value) > MAX_INT:
                raise ConfigError(
                    f"{key}={value:g} is too large (valid: a whole number within 2^53 = {MAX_INT:.3g} of 0, "
                    "the largest a float counts exactly)"
                )
            return value
        raise ConfigError(f"{key}={value!r} is not an integer (valid: a whole number such as 100 or 1e6)")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{key}={value!r} is not finite (valid: a finite number)")
            return float(value)
        raise ConfigError(f"{key}={value!r} is not a number (valid: e.g. 3e-4)")
    if hint is str:
        if value is None:
            raise ConfigError(f"{key}=null is not allowed (valid: a string)")
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}={value!r} is not a string")
        return str(value)
    if hint in (list, dict) or origin in (list, dict):
        expected = list if (hint is list or origin is list) else dict
        if not isinstance(value, expected):
            raise ConfigError(f"{key}={value!r} is not a {expected.__name__}")
        return value
    return value


def require_positive(key: str, value: Any) -> None:
    if isinstance(value, bool) or (value is not None and not isinstance(value, (int, float))):
        # a key inside a dict (hardware.peak_flops.fp32=abc) has no dataclass type to coerce it
        raise ConfigError(f"{key}={value!r} is not a number (valid: a number > 0, such as 1e15)")
    if value is None or value <= 0:
        raise ConfigError(f"{key}={value} must be positive (valid: > 0)")


def require_at_most(key: str, value: float, limit: float, unit: str) -> None:
    """`value` <= `limit`, else one line naming the key and the bound."""
    if value > limit:
        raise ConfigError(f"{key}={value:g} is too large (valid: at most {limit:g} {unit})")


def require_fraction(key: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{key}={value} is invalid (valid: 0 <= value < 1)")


def as_dict(obj: Any) -> dict:
    return dataclasses.asdict(obj)
