"""The schema of a search (`hydra/sweeper=ablate_optuna`), checked before any study exists. The Optuna
sweeper plugin registers it in Hydra's ConfigStore (hydra_plugins/ablate_optuna/config.py), so Hydra
composes hydra.sweeper against it: an unknown key or a wrong type stops at composition.

One study per study_name + storage. Storage: Optuna's journal file (JournalStorage over
JournalFileBackend, whose lock works on a shared filesystem) at STUDY_DIR/journal.log unless
`storage` names another file or any database URL. Launching the same study name on the same
storage continues it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ablate.config.schema import build, require_at_most
from ablate.errors import ConfigError
from ablate.files import safe_name

# Each trial is a training run and every batch a launch: beyond these a study never ends, and a
# stale-trial wait beyond a week is no wait a relaunch would see through.
SEARCH_LIMITS = {
    "n_trials": (100_000, "trials"),
    "n_jobs": (1024, "trials at once"),
    "stale_after_s": (604_800, "seconds"),
}
PRUNER_KEYS = {
    "median": {"n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"},
    "percentile": {"percentile", "n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"},
    "hyperband": {"min_resource", "max_resource", "reduction_factor"},
    "successive_halving": {"min_resource", "reduction_factor", "min_early_stopping_rate"},
    "none": set(),
}
SAMPLER_KEYS = {
    "tpe": {"n_startup_trials", "multivariate", "constant_liar", "n_ei_candidates"},
    "random": set(),
    "gp": {"n_startup_trials", "deterministic_objective"},
    "cmaes": {"n_startup_trials", "sigma0", "popsize", "restart_strategy", "use_separable_cma", "with_margin"},
    "qmc": {"qmc_type", "scramble"},
    "grid": {"points_per_interval"},
}
# What a trial can cost besides its validation loss, each a key of its result.json.
COSTS = {"flops": "flops", "wall_s": "wall_s"}
# Samplers that cannot rank trials on several objectives at once.
SINGLE_OBJECTIVE_SAMPLERS = {"cmaes"}


@dataclass
class SearchConfig:
    """hydra.sweeper of `hydra/sweeper=ablate_optuna`; one study per study_name+storage."""

    study_name: str = "study"
    # None: a journal file STUDY_DIR/journal.log. A path: a journal file there. A URL with "://":
    # an Optuna RDB storage (postgresql://, mysql://, sqlite:/// for a single worker).
    storage: str | None = None
    # Studies live in STUDIES_DIR/NAME/ (the default journal, trials.json, plots, best.args), and
    # the best parameters also in STUDIES_DIR/best/NAME.yaml, a config group for `+best=NAME`.
    studies_dir: str = "studies"
    # Trials of the whole study: a relaunch runs only the ones still missing.
    n_trials: int = 16
    # Trials running at once. Asynchronous: a new trial is asked whenever one ends (the launcher's
    # slots, or SLURM jobs in flight); batch: n_jobs trials are asked and launched together, and the
    # next batch waits for the slowest.
    n_jobs: int = 2
    asynchronous: bool = True
    seed: int = 0
    sampler: str = "tpe"  # a key of SAMPLER_KEYS
    # each sampler's settings, by name: the one `sampler` names is used
    samplers: dict[str, Any] = field(
        default_factory=lambda: {
            "tpe": {"n_startup_trials": 5, "multivariate": True, "constant_liar": True},
            "random": {},
            "gp": {"n_startup_trials": 5, "deterministic_objective": False},
            "cmaes": {"n_startup_trials": 1, "restart_strategy": None, "use_separable_cma": False},
            "qmc": {"qmc_type": "sobol", "scramble": True},
            "grid": {"points_per_interval": 5},
        }
    )
    # Minimised beside the validation loss (keys of COSTS): a multi-objective study whose report
    # is the Pareto front. Optuna prunes single-objective studies only, so costs need pruner=none.
    costs: list[str] = field(default_factory=list)
    # A trial whose modelled peak memory per device (perf/memory.py, the planner's model) exceeds
    # this is infeasible: Optuna's samplers steer away from it and it is never the best.
    memory_limit_gb: float | None = None
    pruner: str = "median"  # a key of PRUNER_KEYS
    # each pruner's settings, by name; resources and warm-ups are in training steps
    pruners: dict[str, Any] = field(
        default_factory=lambda: {
            "median": {"n_startup_trials": 4, "n_warmup_steps": 0, "interval_steps": 1},
            "percentile": {"percentile": 25.0, "n_startup_trials": 4, "n_warmup_steps": 0, "interval_steps": 1},
            "hyperband": {"min_resource": 1, "max_resource": "auto", "reduction_factor": 3},
            "successive_halving": {"min_resource": 1, "reduction_factor": 3, "min_early_stopping_rate": 0},
            "none": {},
        }
    )
    # The search space catalogue: config key -> Hydra sweep grammar, e.g. "tag(log, interval(1e-4, 1e-2))",
    # "choice(8, 16, 32)", "range(0, 101, 10)", "int(interval(0, 100))".
    params: dict[str, Any] = field(default_factory=dict)
    # Which catalogue keys this study searches; None: all of them.
    search: list[str] | None = None
    # A RUNNING trial whose driver has not been heard from for this long (or whose driver process
    # on this host is gone) failed with its driver; it is failed and its parameters run again.
    stale_after_s: float = 600.0

    def validate(self) -> None:
        # The study's folder is STUDIES_DIR/NAME and its config group STUDIES_DIR/best/NAME.yaml.
        if safe_name(self.study_name) != self.study_name or self.study_name == "best":
            raise ConfigError(
                f"hydra.sweeper.study_name={self.study_name!r} is invalid "
                "(valid: letters, digits, '.', '-' and '_', not starting with '.', not 'best')"
            )
        if self.seed < 0:
            raise ConfigError(f"hydra.sweeper.seed={self.seed} is negative (valid: >= 0)")
        for kind, name, valid in (("sampler", self.sampler, SAMPLER_KEYS), ("pruner", self.pruner, PRUNER_KEYS)):
            if name not in valid:
                raise ConfigError(f"hydra.sweeper.{kind}={name!r} is invalid (valid: {', '.join(valid)})")
        for key in ("n_trials", "n_jobs", "stale_after_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"hydra.sweeper.{key}={getattr(self, key)} must be positive (valid: > 0)")
        for key, (limit, unit) in SEARCH_LIMITS.items():
            require_at_most(f"hydra.sweeper.{key}", getattr(self, key), limit, unit)
        _check_settings("sampler", self.sampler, self.samplers, SAMPLER_KEYS)
        _check_settings("pruner", self.pruner, self.pruners, PRUNER_KEYS)
        self._check_objectives()
        params = flatten_params(self.params)
        for key in self.search or []:
            if key not in params:
                raise ConfigError(
                    f"hydra.sweeper.search has {key!r}, not in hydra.sweeper.params "
                    f"(valid: {', '.join(sorted(params))})"
                )

    def _check_objectives(self) -> None:
        for cost in self.costs:
            if cost not in COSTS:
                raise ConfigError(f"hydra.sweeper.costs has {cost!r} (valid: {', '.join(COSTS)})")
        if len(set(self.costs)) != len(self.costs):
            raise ConfigError(f"hydra.sweeper.costs={self.costs} names a cost twice (valid: each at most once)")
        if self.costs and self.pruner != "none":
            raise ConfigError(
                f"hydra.sweeper.costs={self.costs} with pruner={self.pruner}: Optuna prunes single-objective "
                "studies only (valid: hydra.sweeper.pruner=none, or no costs)"
            )
        if self.costs and self.sampler in SINGLE_OBJECTIVE_SAMPLERS:
            raise ConfigError(
                f"hydra.sweeper.sampler={self.sampler} cannot minimise costs={self.costs} too "
                "(valid: tpe, gp, random, qmc, grid)"
            )
        if self.memory_limit_gb is not None and self.memory_limit_gb <= 0:
            raise ConfigError(f"hydra.sweeper.memory_limit_gb={self.memory_limit_gb} must be positive (valid: > 0)")

    @property
    def objectives(self) -> list[str]:
        """What the study minimises, the validation loss first."""
        return ["val_loss", *self.costs]

    @property
    def study_dir(self) -> Path:
        return Path(self.studies_dir) / self.study_name

    def resolved(self, cwd: str) -> SearchConfig:
        """Absolute paths, so that jobs on any node and in any directory agree."""
        studies = Path(self.studies_dir)
        studies = studies if studies.is_absolute() else Path(cwd) / studies
        storage = self.storage or str(studies / self.study_name / "journal.log")
        if "://" not in storage and not Path(storage).is_absolute():
            storage = str(Path(cwd) / storage)
        return SearchConfig(**{**asdict(self), "studies_dir": str(studies), "storage": storage})


def _check_settings(kind: str, name: str, settings: dict, valid: dict) -> None:
    for key in (settings or {}).get(name) or {}:
        if key not in valid[name]:
            raise ConfigError(
                f"unknown key hydra.sweeper.{kind}s.{name}.{key} (valid: {', '.join(sorted(valid[name])) or 'none'})"
            )


def parse_search(tree: dict) -> SearchConfig:
    tree = {k: v for k, v in (tree or {}).items() if k != "_target_"}
    cfg = build(SearchConfig, tree, "hydra.sweeper")
    cfg.validate()
    return cfg


def flatten_params(params: dict, prefix: str = "") -> dict:
    """{"optim": {"lr": "..."}} and {"optim.lr": "..."} both mean the key optim.lr."""
    out = {}
    for k, v in (params or {}).items():
        if isinstance(v, dict):
            out.update(flatten_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out
