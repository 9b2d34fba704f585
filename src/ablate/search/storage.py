"""Opening a study (storage, sampler, pruner), and keeping it whole across drivers: which driver owns
which RUNNING trials, and giving back the trials of a driver that stopped."""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
import warnings
from pathlib import Path

from ablate.config import ConfigError, SearchConfig
from ablate.files import read_regular
from ablate.host import process_alive

# Trial user attributes written by the driver.
RUN_ATTR, STEPS_ATTR, REASON_ATTR, RETRY_ATTR, DRIVER_ATTR, REUSED_ATTR = (
    "mlflow_run_id",
    "steps",
    "reason",
    "retried_as_new_trial",
    "driver",
    "reused_finished_run",
)
# When the trial's run ended (the job's clock), how many trials its launch ran at once, and how it
# scheduled them: what the report's busy share of each launch is computed from.
ENDED_ATTR, SLOTS_ATTR, SCHEDULE_ATTR = "ended_at", "slots", "schedule"
SCHEDULES = {True: "asynchronous", False: "batch"}
MEMORY_CONSTRAINT = "memory_gb_over_limit"  # Optuna constraint: feasible at <= 0
DRIVERS_ATTR = "ablate.drivers"  # study user attribute: {driver id: {host, pid, heartbeat}}


def open_storage(storage: str):
    """A journal file (path) or an RDB storage (URL). Journal appends are serialised by a
    symlink lock next to the file, which is atomic on NFS too."""
    import optuna

    if "://" in storage:
        return optuna.storages.RDBStorage(storage)
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    repair_journal(Path(storage))
    return JournalStorage(JournalFileBackend(storage))


def repair_journal(path: Path) -> None:
    """A journal a killed driver cut mid-line is repaired, one line says so: its last line, which
    never got its newline, was never written whole, so no reader has acted on it (Optuna skips it
    while it is last, and fails on it once another launch appends after it). A line that is not
    JSON anywhere else is not a cut: ConfigError, one line, the journal left as it is."""
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"hydra.sweeper.storage={path} cannot be read ({exc.strerror})") from None
    whole, _, torn = data.rpartition(b"\n")
    if torn and not data.endswith(b"\n"):
        kept = whole + b"\n" if whole else b""
        from optuna.storages.journal import JournalFileSymlinkLock

        lock = JournalFileSymlinkLock(str(path))  # Optuna's own: no driver appends meanwhile
        lock.acquire()
        try:
            if read_regular(path) != data:  # a live driver finished its line: nothing was cut
                return
            os.truncate(path, len(kept))
        finally:
            lock.release()
        print(f"ablate: {path} ended in a line cut short ({len(torn)} bytes); removed", file=sys.stderr)
        data = kept
    for number, line in enumerate(data.splitlines(), 1):
        try:
            json.loads(line)
        except ValueError:
            raise ConfigError(
                f"hydra.sweeper.storage={path}: line {number} is not a journal entry (valid: the journal Optuna "
                "wrote, or another hydra.sweeper.storage)"
            ) from None


def make_sampler(cfg: SearchConfig, space: dict, trials_so_far: int = 0):
    """The seed is offset by the study's trial count: a relaunch draws new points instead of
    replaying the first launch's random start-up trials. ValueError or TypeError (from Optuna, or
    for a space the sampler cannot search) when the settings are wrong."""
    import optuna

    kwargs = dict((cfg.samplers or {}).get(cfg.sampler) or {})
    # GP and QMC are marked experimental: chosen by name here, their warning at every launch says nothing new.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _sampler(cfg.sampler, kwargs, space, cfg.seed + trials_so_far)


def _sampler(name: str, kwargs: dict, space: dict, seed: int):
    import optuna

    samplers = optuna.samplers
    if name == "random":
        return samplers.RandomSampler(seed=seed)
    if name == "gp":
        return samplers.GPSampler(seed=seed, **kwargs)
    if name == "cmaes":
        _require_numeric(space, "cmaes")
        return samplers.CmaEsSampler(seed=seed, **kwargs)
    if name == "qmc":
        return samplers.QMCSampler(seed=seed, **kwargs)
    if name == "grid":
        return samplers.GridSampler(grid(space, **kwargs), seed=seed)
    return samplers.TPESampler(seed=seed, **kwargs)


def _require_numeric(space: dict, sampler: str) -> None:
    from optuna.distributions import CategoricalDistribution

    categorical = sorted(k for k, d in space.items() if isinstance(d, CategoricalDistribution))
    if categorical:
        raise ValueError(f"{sampler} searches numbers only, and {', '.join(categorical)} is a choice (valid: tpe, gp)")


def grid(space: dict, points_per_interval: int = 5) -> dict[str, list]:
    """Every searched key's values: a choice's options, a range's steps, and an interval's
    `points_per_interval` evenly spaced points (log-spaced under tag(log, ...); an integer
    interval's rounded, each once). Integers in steps of 1 are taken for an interval."""
    import numpy as np
    from optuna.distributions import CategoricalDistribution

    if not space:
        raise ValueError("the grid sampler needs a search space")
    if int(points_per_interval) < 2:
        raise ValueError(f"points_per_interval={points_per_interval} must be at least 2")
    values = {}
    for key, d in space.items():
        if isinstance(d, CategoricalDistribution):
            values[key] = list(d.choices)
        elif d.step is not None and not (isinstance(d.low, int) and d.step == 1):
            values[key] = np.round(np.arange(d.low, d.high + d.step / 2, d.step), 12).tolist()
        else:
            spaced = np.geomspace if d.log else np.linspace
            points = spaced(d.low, d.high, int(points_per_interval))
            values[key] = sorted({int(round(p)) for p in points}) if isinstance(d.low, int) else points.tolist()
    return values


def grid_size(cfg: SearchConfig, space: dict) -> int | None:
    """How many trials the grid has (None: not a grid sampler, no end of its own)."""
    if cfg.sampler != "grid":
        return None
    settings = (cfg.samplers or {}).get("grid") or {}
    return math.prod(len(v) for v in grid(space, **settings).values())


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


def open_study(cfg: SearchConfig, space: dict | None = None, storage=None):
    """Create the study, or load it when it exists (a relaunch continues it); `space` is what the
    grid sampler walks; `storage` one already opened on cfg.storage."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = space or {}
    study = optuna.create_study(
        study_name=cfg.study_name,
        storage=storage or open_storage(cfg.storage),
        sampler=make_sampler(cfg, space),
        pruner=make_pruner(cfg),
        directions=["minimize"] * len(cfg.objectives),
        load_if_exists=True,
    )
    if len(study.directions) != len(cfg.objectives):
        raise ConfigError(
            f"study {cfg.study_name} minimises {len(study.directions)} objective(s), not {len(cfg.objectives)} "
            f"({', '.join(cfg.objectives)}) (valid: its own costs, or another hydra.sweeper.study_name)"
        )
    study.sampler = make_sampler(cfg, space, len(study.get_trials(deepcopy=False)))
    return study


class Drivers:
    """Which driver process owns which RUNNING trials, so that a relaunch can tell a trial whose
    driver was stopped (fail it, run its parameters again) from one another driver is running."""

    def __init__(self, study, stale_after_s: float):
        self.study, self.stale_after_s = study, stale_after_s
        self.id = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"

    def beat(self) -> None:
        drivers = dict(self.study.user_attrs.get(DRIVERS_ATTR) or {})
        drivers = {k: v for k, v in drivers.items() if not self._gone(v)}
        drivers[self.id] = {"host": socket.gethostname(), "pid": os.getpid(), "heartbeat": time.time()}
        self.study.set_user_attr(DRIVERS_ATTR, drivers)

    def _gone(self, d: dict) -> bool:
        if time.time() - d.get("heartbeat", 0) > self.stale_after_s:
            return True
        return d.get("host") == socket.gethostname() and not process_alive(int(d.get("pid", 0)))

    def orphans(self) -> list:
        """RUNNING trials whose driver is gone."""
        from optuna.trial import TrialState

        drivers = self.study.user_attrs.get(DRIVERS_ATTR) or {}
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return [
            t
            for t in running
            if t.user_attrs.get(DRIVER_ATTR) != self.id
            and (t.user_attrs.get(DRIVER_ATTR) not in drivers or self._gone(drivers[t.user_attrs[DRIVER_ATTR]]))
        ]


def give_back(study, trial, reason: str) -> bool:
    """Fail a RUNNING trial (an optuna Trial) that did not get to finish (its driver stopped) and
    queue its parameters again, so that the next launch runs them (resuming the run from its
    checkpoint)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        trial.set_user_attr(REASON_ATTR, reason)
        trial.set_user_attr(RETRY_ATTR, True)
        study.tell(trial, state=TrialState.FAIL)
    except (UpdateFinishedTrialError, RuntimeError, ValueError):
        return False  # another driver gave it back first
    study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
    return True


def reopen(study, storage, frozen):
    """A RUNNING trial of another driver, from get_trials, as a Trial this driver can update."""
    from optuna.trial import Trial

    return Trial(study, trial_id(storage, study.study_name, frozen.number))


def trial_id(storage, study_name: str, number: int) -> int:
    """The storage id of trial `number`, which optuna.trial.Trial(study, id) rebuilds a trial from:
    Trial and FrozenTrial keep it private, the storage's public API maps a number to it."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), number)


def counted(study) -> tuple[int, int]:
    """(finished trials that count toward n_trials, trials RUNNING now)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    done = sum(
        t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and not t.user_attrs.get(RETRY_ATTR)
        for t in trials
    )
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return done, running
