"""Hyperparameter search with Optuna: the study, its search space, and each trial's pruning hook.

The driver (the Hydra sweeper in src/hydra_plugins/ablate_optuna) asks the study for a batch of
trials, turns each into Hydra overrides and launches the batch through whatever launcher is
configured (sequential, parallel, SLURM). It writes SWEEP_DIR/optuna.json, mapping each job
number to its trial, before the batch starts. Each job (`python -m ablate` task) rebuilds its
trial from the shared storage with `trial_hook` and reports the validation loss after every
evaluation; the pruner's verdict ends the run as "pruned". The driver then tells the study each
job's outcome from its result.json: COMPLETE with the final validation loss, PRUNED, or FAIL.

Storage: Optuna's journal file (JournalStorage over JournalFileBackend, whose lock works on a
shared filesystem) at STUDY_DIR/journal.log unless `storage` names another file or any database
URL. Launching the same study name on the same storage continues it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from ablate.config import ConfigError, build

TRIALS_FILE = "optuna.json"
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
}
# Trial user attributes written by the driver.
RUN_ATTR, STEPS_ATTR, REASON_ATTR, RETRY_ATTR, DRIVER_ATTR, REUSED_ATTR = (
    "mlflow_run_id", "steps", "reason", "retried_as_new_trial", "driver", "reused_finished_run",
)
DRIVERS_ATTR = "ablate.drivers"  # study system attribute: {driver id: {host, pid, heartbeat}}


@dataclass
class SearchConfig:
    """The sweeper's slice (conf/hydra/sweeper/optuna.yaml); one study per study_name+storage."""

    study_name: str = "study"
    # None: a journal file STUDY_DIR/journal.log. A path: a journal file there. A URL with "://":
    # an Optuna RDB storage (postgresql://, mysql://, sqlite:/// for a single worker).
    storage: Optional[str] = None
    # Studies live in STUDIES_DIR/NAME/ (the default journal, trials.json, plots, best.args), and
    # the best parameters also in STUDIES_DIR/best/NAME.yaml, a config group for `+best=NAME`.
    studies_dir: str = "studies"
    # Trials of the whole study: a relaunch runs only the ones still missing.
    n_trials: int = 16
    # Trials asked for and launched together, as one launcher batch.
    n_jobs: int = 2
    seed: int = 0
    sampler: Literal["tpe", "random"] = "tpe"
    samplers: dict = field(default_factory=dict)
    pruner: Literal["median", "percentile", "hyperband", "successive_halving", "none"] = "median"
    pruners: dict = field(default_factory=dict)
    # The search space catalogue: config key -> Hydra sweep grammar, e.g. "tag(log, interval(1e-4, 1e-2))",
    # "choice(8, 16, 32)", "range(0, 101, 10)", "int(interval(0, 100))".
    params: dict = field(default_factory=dict)
    # Which catalogue keys this study searches; None: all of them.
    search: Optional[list] = None
    # A RUNNING trial whose driver has not been heard from for this long (or whose driver process
    # on this host is gone) failed with its driver; it is failed and its parameters run again.
    stale_after_s: float = 600.0

    def validate(self) -> None:
        if not self.study_name or "/" in self.study_name or self.study_name == "best":
            raise ConfigError(
                f"hydra.sweeper.study_name={self.study_name!r} is invalid (valid: a non-empty name without '/', not 'best')"
            )
        for key in ("n_trials", "n_jobs", "stale_after_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"hydra.sweeper.{key}={getattr(self, key)} must be positive (valid: > 0)")
        _check_settings("sampler", self.sampler, self.samplers, SAMPLER_KEYS)
        _check_settings("pruner", self.pruner, self.pruners, PRUNER_KEYS)
        params = flatten_params(self.params)
        for key in self.search or []:
            if key not in params:
                raise ConfigError(
                    f"hydra.sweeper.search has {key!r}, not in hydra.sweeper.params (valid: {', '.join(sorted(params))})"
                )

    @property
    def study_dir(self) -> Path:
        return Path(self.studies_dir) / self.study_name

    def resolved(self, cwd: str) -> "SearchConfig":
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


# -- storage, sampler, pruner ---------------------------------------------------------------
def open_storage(storage: str):
    """A journal file (path) or an RDB storage (URL). Journal appends are serialised by a
    symlink lock next to the file, which is atomic on NFS too."""
    import optuna

    if "://" in storage:
        return optuna.storages.RDBStorage(storage)
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(storage))


def make_sampler(cfg: SearchConfig, trials_so_far: int = 0):
    """The seed is offset by the study's trial count: a relaunch draws new points instead of
    replaying the first launch's random start-up trials."""
    import optuna

    kwargs = dict((cfg.samplers or {}).get(cfg.sampler) or {})
    seed = cfg.seed + trials_so_far
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, **kwargs)


def make_pruner(cfg: SearchConfig):
    """Median (Optuna's MedianPruner), percentile, Hyperband (Li et al. 2018), successive halving
    (Jamieson & Talwalkar 2016; asynchronous as in Li et al. 2020), or none. Resource = training step."""
    import optuna

    kwargs = dict((cfg.pruners or {}).get(cfg.pruner) or {})
    pruners = optuna.pruners
    if cfg.pruner == "median":
        return pruners.MedianPruner(**kwargs)
    if cfg.pruner == "percentile":
        return pruners.PercentilePruner(**kwargs)
    if cfg.pruner == "hyperband":
        return pruners.HyperbandPruner(**kwargs)
    if cfg.pruner == "successive_halving":
        return pruners.SuccessiveHalvingPruner(**kwargs)
    return pruners.NopPruner()


def open_study(cfg: SearchConfig):
    """Create the study, or load it when it exists (a relaunch continues it)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=cfg.study_name, storage=open_storage(cfg.storage), sampler=make_sampler(cfg),
                                pruner=make_pruner(cfg), direction="minimize", load_if_exists=True)
    study.sampler = make_sampler(cfg, len(study.get_trials(deepcopy=False)))
    return study


# -- search space ---------------------------------------------------------------------------
def flatten_params(params: dict, prefix: str = "") -> dict:
    """{"optim": {"lr": "..."}} and {"optim.lr": "..."} both mean the key optim.lr."""
    out = {}
    for k, v in (params or {}).items():
        if isinstance(v, dict):
            out.update(flatten_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


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
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    key, value = override.get_key_element(), override.value()
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
        f"hydra.sweeper.params.{key}={value!r} is not a sweep (valid: choice(...), range(...), interval(...), tag(log, interval(...)))"
    )


def trial_overrides(params: dict) -> list[str]:
    return [f"{k}={_override_value(v)}" for k, v in params.items()]


def _override_value(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


# -- one trial, inside its job ---------------------------------------------------------------
def trial_hook(hc) -> Callable[[int, float, float], None] | None:
    """The `on_eval` hook of a job that is a trial of an Optuna study (else None).

    It reports the validation loss at each evaluation step and raises StopRun("pruned") when
    the study's pruner says so. `hc` is the job's HydraConfig.
    """
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return None
    info = read_trials_file(sweep_dir_of(hc))
    entry = (info.get("trials") or {}).get(str(hc.job.num))
    if not entry:
        return None
    cfg = SearchConfig(**info["search"])
    return PruningHook(cfg, entry["number"], entry["trial_id"])


class PruningHook:
    def __init__(self, cfg: SearchConfig, number: int, trial_id: int):
        import optuna

        self.number = number
        self.pruner_name = cfg.pruner
        # The sampler is not used here (the driver sampled the parameters); a random one costs nothing.
        study = optuna.load_study(study_name=cfg.study_name, storage=open_storage(cfg.storage),
                                  sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(cfg))
        self.trial = optuna.trial.Trial(study, trial_id)

    def __call__(self, step: int, val_loss: float, flops: float) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        from ablate.train import StopRun

        value = val_loss if math.isfinite(val_loss) else float("inf")
        try:
            self.trial.report(value, step)
            prune = self.trial.should_prune()
        except UpdateFinishedTrialError:
            return  # its driver gave the trial up (stopped); the run itself goes on
        if prune:
            raise StopRun("pruned", f"optuna trial {self.number}: val loss {val_loss:.4f} at step {step} ({self.pruner_name} pruner)")


def sweep_dir_of(hc) -> Path:
    d = Path(hc.sweep.dir)
    return d if d.is_absolute() else Path(hc.runtime.cwd) / d


def read_trials_file(sweep_dir: Path) -> dict:
    try:
        return json.loads((sweep_dir / TRIALS_FILE).read_text())
    except (OSError, ValueError):
        return {}


# -- the driver's side -----------------------------------------------------------------------
@dataclass
class Outcome:
    state: str  # COMPLETE, PRUNED, FAIL
    value: float | None
    reason: str
    steps: int
    mlflow_run_id: str | None
    reused: bool = False  # the job found the same config already run and trained nothing


def outcome(result: dict | None, final_val_loss_of: Callable[[str], float | None]) -> Outcome:
    """What a job's result.json means for its trial. A run skipped because the same config had
    already run (in this study or another one) counts with that run's outcome."""
    if not result:
        return Outcome("FAIL", None, "the job wrote no result.json", 0, None)
    status, reason, run_id = result.get("status"), result.get("reason") or "", result.get("mlflow_run_id")
    steps, value = int(result.get("steps") or 0), result.get("final_val_loss")
    reused = status == "skipped"
    if reused:
        if reason.startswith("already finished") and run_id:
            value = final_val_loss_of(run_id)
            status = "finished"
        elif reason.startswith("pruned"):
            status = "pruned"
    if status == "finished" and value is not None and math.isfinite(value):
        return Outcome("COMPLETE", float(value), "", steps, run_id, reused)
    if status == "pruned":
        return Outcome("PRUNED", None, reason, steps, run_id, reused)
    return Outcome("FAIL", None, f"{status}: {reason}" if reason else str(status), steps, run_id, reused)


class Drivers:
    """Which driver process owns which RUNNING trials, so that a relaunch can tell a trial whose
    driver was stopped (fail it, run its parameters again) from one another driver is running."""

    def __init__(self, study, stale_after_s: float):
        self.study, self.stale_after_s = study, stale_after_s
        self.id = f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"

    def beat(self) -> None:
        storage = self.study._storage
        study_id = self.study._study_id
        drivers = dict(storage.get_study_system_attrs(study_id).get(DRIVERS_ATTR) or {})
        drivers = {k: v for k, v in drivers.items() if not self._gone(v)}
        drivers[self.id] = {"host": socket.gethostname(), "pid": os.getpid(), "heartbeat": time.time()}
        storage.set_study_system_attr(study_id, DRIVERS_ATTR, drivers)

    def _gone(self, d: dict) -> bool:
        if time.time() - d.get("heartbeat", 0) > self.stale_after_s:
            return True
        return d.get("host") == socket.gethostname() and not _pid_alive(int(d.get("pid", 0)))

    def orphans(self) -> list:
        """RUNNING trials whose driver is gone."""
        from optuna.trial import TrialState

        drivers = self.study._storage.get_study_system_attrs(self.study._study_id).get(DRIVERS_ATTR) or {}
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return [t for t in running if t.user_attrs.get(DRIVER_ATTR) != self.id
                and (t.user_attrs.get(DRIVER_ATTR) not in drivers or self._gone(drivers[t.user_attrs[DRIVER_ATTR]]))]


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def give_back(study, trial_number: int, reason: str) -> bool:
    """Fail a trial that did not get to finish (its driver stopped) and queue its parameters
    again, so that the next launch runs them (resuming the run from its checkpoint)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    trial = study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(study._study_id, trial_number))
    if trial.state != TrialState.RUNNING:
        return False
    try:
        study._storage.set_trial_user_attr(trial._trial_id, REASON_ATTR, reason)
        study._storage.set_trial_user_attr(trial._trial_id, RETRY_ATTR, True)
        study.tell(trial_number, state=TrialState.FAIL)
    except (UpdateFinishedTrialError, RuntimeError, ValueError):
        return False  # another driver gave it back first
    study.enqueue_trial(trial.params, user_attrs={"retry_of": trial_number})
    return True


def counted(study) -> tuple[int, int]:
    """(finished trials that count toward n_trials, trials RUNNING now)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    done = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and not t.user_attrs.get(RETRY_ATTR)
               for t in trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return done, running


def write_trials_file(sweep_dir: Path, cfg: SearchConfig, trials: dict) -> None:
    """SWEEP_DIR/optuna.json: the study and {job number: trial}; written before a batch starts."""
    from ablate.sweep import write_json

    info = read_trials_file(sweep_dir)
    merged = {**(info.get("trials") or {}), **{str(k): v for k, v in trials.items()}}
    write_json(sweep_dir / TRIALS_FILE, {"search": asdict(cfg), "trials": merged})
