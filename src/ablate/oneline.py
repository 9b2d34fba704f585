"""Bad input as the user reads it: one line on stderr, `error: WHAT (valid: ...)`, no traceback, exit 2.

Library code raises ConfigError (errors.py); `one_line` is the one place that turns it into that
line, around each command's work and inside the Hydra app's run and sweep (hydra_app.py), whose
plugins raise it too. `explain` words Hydra's and OmegaConf's composition errors the same way; it
takes a composition from its caller, so this module loads neither.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from ablate.errors import ConfigError


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input: one line on stderr, no traceback, a non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


@contextlib.contextmanager
def one_line(said: Callable[[str], str] = str) -> Iterator[None]:
    """A ConfigError raised inside becomes fail's one line; `said(message)` first, which may reword it
    (`ablate ui` names its own flag) or close what the error ended (a sweep's parent run, FAILED)."""
    try:
        yield
    except ConfigError as exc:
        fail(said(str(exc)))


# OmegaConf's words for a value a typed key refuses -> what the key takes (a schema's keys: the
# launchers', the sweeper's; OmegaConf reads 1e6 as a float, which an integer key refuses)
TYPE_WORDS = {
    "Integer": "a whole number (valid: digits only, such as 4 or 1000000; no exponent or decimal point)",
    "Float": "a number (valid: such as 0.5, 60 or 1e-3)",
    "Boolean": "true or false (valid: true, false)",
}


def explain(
    exc: Exception,
    overrides: list[str],
    config_dir: str | None = None,
    *,
    missing: bool = False,
    compose: Callable[[list[str]], Any] | None = None,
) -> str:
    """One line for a composition error: what was asked for and what is valid. `missing`: Hydra found
    no such preset (MissingConfigException); `compose(overrides)`, the config composed without the
    override that named an unknown key, lists the keys that are."""
    from ablate.config import group_options  # the presets' reader loads YAML: not for fail's importers

    if missing or "Could not find" in str(exc):
        for o in overrides:
            key, _, value = o.lstrip("+~").partition("=")
            options = group_options(key, config_dir)
            unknown = [v for v in value.split(",") if v not in options]  # a sweep's values, each
            if options and unknown:
                return f"{key}={unknown[0]} is not a known option (valid: {', '.join(options)})"
    text = str(exc)
    if text.startswith("Error merging override") and exc.__cause__ is not None:
        override = text.removeprefix("Error merging override ").strip()
        cause = str(exc.__cause__).strip().splitlines() or [type(exc.__cause__).__name__]
        wanted = next((v for k, v in TYPE_WORDS.items() if cause[0].endswith(f"could not be converted to {k}")), None)
        return f"{override} is not {wanted}" if wanted else f"{override}: {cause[0]}"
    if text.startswith("Could not override '") and compose is not None:
        known = _known_keys(text.split("'")[1], overrides, compose)
        if known is not None:
            return known
    return first_line(exc)


def _known_keys(key: str, overrides: list[str], compose: Callable[[list[str]], Any]) -> str | None:
    """`unknown key KEY (valid: ...)` from the config composed without KEY's override; None where
    that composition is itself broken (Hydra's words are then said instead)."""
    from omegaconf import OmegaConf  # a dependency: loaded by the commands that compose

    rest = [_one_value(o) for o in overrides if not o.lstrip("+~").startswith(f"{key}=")]
    try:
        node = compose(rest)
        parent = key.rpartition(".")[0]
        while parent and not OmegaConf.is_dict(OmegaConf.select(node, parent)):
            key, parent = parent, parent.rpartition(".")[0]  # trian.steps: 'trian' is the unknown key
        keys = OmegaConf.select(node, parent).keys() if parent else (k for k in node if k != "hydra")
        valid = sorted(str(k) for k in keys if not str(k).startswith("_"))  # not a plugin's _target_
        return f"unknown key {key} (valid: {', '.join(valid)})"
    except Exception:  # the composition itself is broken: fall back to Hydra's words
        return None


def _one_value(override: str) -> str:
    """A sweep override (KEY=a,b) as its first value, so that one composition can list the keys."""
    key, _, value = override.partition("=")
    return f"{key}={value.split(',')[0]}" if "," in value and "[" not in value and "(" not in value else override


def first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return "; ".join(lines[:2]) if lines else type(exc).__name__
