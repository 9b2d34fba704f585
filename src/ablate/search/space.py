"""The search space: Hydra's sweep grammar (choice, range, interval, tag(log, ...)) as Optuna
distributions, and a trial's parameters back as Hydra overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.config import ConfigError, SearchConfig, flatten_params, parse_search
from ablate.files import check_writable_dir
from ablate.search.storage import make_pruner, make_sampler


def search_space(cfg: SearchConfig, arguments: list[str]) -> tuple[dict, list[str]]:
    """Optuna distributions for the searched keys, and the plain overrides every trial shares.

    Sweep overrides on the command line (`train.batch_size=8,16,32`) join the space as
    categorical or range dimensions and take precedence over the catalogue.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    catalogue = flatten_params(cfg.params)
    chosen = cfg.search if cfg.search is not None else list(catalogue)
    parser = OverridesParser.create()
    space, fixed = {}, []
    for key in chosen:
        space[key] = distribution(parser.parse_override(f"{key}={catalogue[key]}"))
    for override in parser.parse_overrides(arguments):
        key = override.get_key_element()
        if override.is_sweep_override():
            space[key] = distribution(override)
        elif key not in space:
            fixed.append(override.input_line)
    if not space:
        raise ConfigError("the search space is empty (valid: keys in hydra.sweeper.params and hydra.sweeper.search)")
    return space, fixed


def distribution(override):
    """Hydra sweep grammar -> Optuna distribution: choice -> categorical, range -> stepped
    int/float, interval -> uniform (log-uniform with tag(log, ...)), int(interval) -> integers."""
    key, value = override.get_key_element(), override.value()
    try:
        return _distribution(override, key, value)
    except (ValueError, TypeError) as exc:  # Optuna's own check: low > high, log of a value <= 0, ...
        raise ConfigError(
            f"hydra.sweeper.params.{key}={override.input_line.split('=', 1)[1]} is invalid: {exc}"
        ) from None


def _distribution(override, key, value):
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    log = "log" in getattr(value, "tags", set())
    if isinstance(value, ChoiceSweep):
        return CategoricalDistribution(value.list)
    if isinstance(value, RangeSweep):
        values = list(override.sweep_iterator())
        if all(isinstance(v, int) for v in values):
            return IntDistribution(values[0], values[-1], step=int(value.step))
        return FloatDistribution(float(values[0]), float(values[-1]), step=float(value.step))
    if isinstance(value, IntervalSweep):
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)
    raise ConfigError(
        f"hydra.sweeper.params.{key}={value!r} is not a sweep "
        "(valid: choice(...), range(...), interval(...), tag(log, interval(...)))"
    )


def trial_overrides(params: dict) -> list[str]:
    return [f"{k}={_override_value(v)}" for k, v in params.items()]


def _override_value(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def check_sweeper(tree: dict, arguments: list[str], config: dict, cwd: str) -> SearchConfig:
    """The Optuna sweeper's settings (hydra.sweeper, a plain resolved dict) checked before anything
    is created, as the sweeper will use them: parse_search, the search space with the command
    line's sweeps (every searched key a key of the run's `config`), the sampler and pruner built
    from their settings, and a storage that can be opened without creating a folder that is not
    there. ConfigError (one line) otherwise."""

    cfg = parse_search(tree)
    space, _ = search_space(cfg, arguments)
    for key in space:
        if not _has_key(config, key):
            parent = key.rpartition(".")[0]
            node = _node(config, parent) if parent else config
            valid = ", ".join(sorted(node)) if isinstance(node, dict) else "keys of the run's config"
            raise ConfigError(f"hydra.sweeper searches {key}, which is not a config key (valid: {valid})")
    for kind, make in (("sampler", lambda: make_sampler(cfg, space)), ("pruner", lambda: make_pruner(cfg))):
        try:
            make()
        except (ValueError, TypeError, ImportError) as exc:
            name = getattr(cfg, kind)
            raise ConfigError(f"hydra.sweeper.{kind}s.{name} is invalid: {str(exc).splitlines()[0]}") from None
    resolved = cfg.resolved(cwd)
    check_writable_dir(resolved.studies_dir, "hydra.sweeper.studies_dir")
    storage = resolved.storage
    if "://" in storage:
        scheme = storage.split("://", 1)[0].split("+", 1)[0]
        if scheme not in ("sqlite", "postgresql", "mysql", "oracle", "mssql"):
            raise ConfigError(
                f"hydra.sweeper.storage={cfg.storage!r} is not a database URL Optuna can open "
                "(valid: null for a journal file, a file path, or postgresql://..., mysql://..., sqlite:///...)"
            )
        if scheme == "sqlite":
            check_writable_dir(str(Path(storage.split(":///", 1)[1]).parent), "hydra.sweeper.storage")
    else:
        check_writable_dir(str(Path(storage).parent), "hydra.sweeper.storage")
    return cfg


def _node(tree, dotted: str):
    for part in dotted.split(".") if dotted else []:
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _has_key(tree: dict, dotted: str) -> bool:
    parent, _, leaf = dotted.rpartition(".")
    node = _node(tree, parent)
    return isinstance(node, dict) and leaf in node
