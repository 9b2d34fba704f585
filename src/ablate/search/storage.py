"""Opening a study (storage, sampler, pruner), and keeping it whole across drivers: which driver owns
which RUNNING trials, and giving back the trials of a driver that stopped."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ablate.config import SearchConfig
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
DRIVERS_ATTR = "ablate.drivers"  # study system attribute: {driver id: {host, pid, heartbeat}}


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
    study = optuna.create_study(
        study_name=cfg.study_name,
        storage=open_storage(cfg.storage),
        sampler=make_sampler(cfg),
        pruner=make_pruner(cfg),
        direction="minimize",
        load_if_exists=True,
    )
    study.sampler = make_sampler(cfg, len(study.get_trials(deepcopy=False)))
    return study


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
        return d.get("host") == socket.gethostname() and not process_alive(int(d.get("pid", 0)))

    def orphans(self) -> list:
        """RUNNING trials whose driver is gone."""
        from optuna.trial import TrialState

        drivers = self.study._storage.get_study_system_attrs(self.study._study_id).get(DRIVERS_ATTR) or {}
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return [
            t
            for t in running
            if t.user_attrs.get(DRIVER_ATTR) != self.id
            and (t.user_attrs.get(DRIVER_ATTR) not in drivers or self._gone(drivers[t.user_attrs[DRIVER_ATTR]]))
        ]


def give_back(study, trial_number: int, reason: str) -> bool:
    """Fail a trial that did not get to finish (its driver stopped) and queue its parameters
    again, so that the next launch runs them (resuming the run from its checkpoint)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    trial = study._storage.get_trial(
        study._storage.get_trial_id_from_study_id_trial_number(study._study_id, trial_number)
    )
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
    done = sum(
        t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and not t.user_attrs.get(RETRY_ATTR)
        for t in trials
    )
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return done, running
