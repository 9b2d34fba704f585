"""What every command shares: where the configs live, one-line errors, the Hydra entry."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, NoReturn

# conf/ sits at the repository root next to src/ (the package is installed in editable mode).
CONF_DIR = Path(os.environ.get("ABLATE_CONF", Path(__file__).resolve().parents[2] / "conf"))


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input: one line on stderr, no traceback, a non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def hydra_main(task: Callable, config_name: str) -> None:
    import hydra

    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        fail(f"no {config_name}.yaml in {CONF_DIR} (valid: run from a checkout installed with `make install`, or set ABLATE_CONF)")
    if config_name == "config":
        sys.argv += budget_override(sys.argv[1:])
    if not os.environ.get("HYDRA_FULL_ERROR"):
        precheck([a for a in sys.argv[1:] if not a.startswith("-")], config_name)
    hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)()


def budget_override(args: list[str]) -> list[str]:
    """A run has exactly one budget and the default one is train.steps: `train.tokens=...` or
    `train.flops=...` on the command line, without train.steps, replaces it (["train.steps=null"])."""
    keys = {a.split("=", 1)[0].lstrip("+~"): a.split("=", 1)[1] for a in args if "=" in a and not a.startswith("-")}
    if "train.steps" in keys:
        return []
    given = [k for k in ("train.tokens", "train.flops") if keys.get(k, "null") != "null"]
    return ["train.steps=null"] if given else []


def precheck(args: list[str], config_name: str) -> None:
    """Compose the config once per distinct choice before Hydra runs, so that a typo fails in
    one line that names the valid choices, instead of Hydra's multi-line report.

    Sweep overrides (a,b,c) are checked value by value.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        fail(_first_line(exc))
    plain = [o.input_line for o in parsed if not o.is_sweep_override()]
    sweeps = [o for o in parsed if o.is_sweep_override()]
    trials = [plain + [_with_value(o, _values(o)[0]) for o in sweeps]]
    for i, o in enumerate(sweeps):
        for v in _values(o)[1:]:
            trial = list(trials[0])
            trial[len(plain) + i] = _with_value(o, v)
            trials.append(trial)
    for overrides in trials:
        try:
            _compose(config_name, overrides)
        except (HydraException, OmegaConfBaseException) as exc:
            fail(explain(exc, overrides, config_name))


def _compose(config_name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _values(override) -> list[str]:
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.INTERVAL_SWEEP:  # a continuous range: check its two ends
        v = override.value()
        return [str(v.start), str(v.end)]
    return list(override.sweep_string_iterator())


def _with_value(override, value: str) -> str:
    return f"{override.get_key_element()}={value}"


def explain(exc: Exception, overrides: list[str], config_name: str = "config") -> str:
    """One line for Hydra's composition errors: what was asked for and what is valid."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException) or "Could not find" in str(exc):
        for o in overrides:
            key, _, value = o.lstrip("+~").partition("=")
            group = CONF_DIR / key
            if group.is_dir() and not (group / f"{value}.yaml").is_file():
                options = sorted(p.stem for p in group.glob("*.yaml"))
                return f"{key}={value} is not a known option (valid: {', '.join(options)})"
    text = str(exc)
    if text.startswith("Could not override '"):
        key = text.split("'")[1]
        parent, _, leaf = key.rpartition(".")
        rest = [o for o in overrides if not o.startswith(f"{key}=")]
        try:
            node = _compose(config_name, rest)
            valid = sorted(node[parent].keys()) if parent else sorted(k for k in node.keys() if k != "hydra")
            return f"unknown key {key} (valid: {', '.join(map(str, valid))})"
        except Exception:  # the composition itself is broken: fall back to Hydra's words
            pass
    return _first_line(exc)


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return "; ".join(lines[:2]) if lines else type(exc).__name__
