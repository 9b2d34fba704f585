"""The Optuna sweeper's loop, in the launching process: ask a trial, launch it, tell its outcome.

Asynchronous (the default) on a launcher that can (sweep/launch/feed.py: hydra/launcher=parallel,
sequential, slurm): n_jobs trials run, and a new one is asked as soon as one ends, finished or
pruned, with TPE's constant liar standing in for the values of the trials still running. On any
other launcher, or with asynchronous=false, trials go in batches of n_jobs and each batch waits
for its slowest. Either way the trials reach their jobs through SWEEP_DIR/optuna.json and the
shared storage, not through the launcher, and come back through each job's result.json (trial.py).
Relaunching the same study continues it: `n_trials` counts the whole study, and trials whose
driver was stopped are failed and their parameters queued again (the run itself resumes from its
checkpoint).

MLflow: the study has one run ("study:NAME", tag ablate.kind=study), reused by every launch. Each
launch's sweep run (SweepCallback) is nested under it and holds that launch's trials, so every
trial is a run under the study's run; each trial run is tagged with optuna.study, optuna.trial
and its final state optuna.state (COMPLETE, PRUNED, FAIL). The study's files (search_report) are
rewritten after every trial (the plots after every launch) and logged to the study run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ablate.config import SearchConfig
from ablate.files import read_json_object
from ablate.search import report as search_report
from ablate.search.space import search_space, trial_overrides
from ablate.search.storage import (
    DRIVER_ATTR,
    ENDED_ATTR,
    MEMORY_CONSTRAINT,
    REASON_ATTR,
    REUSED_ATTR,
    RUN_ATTR,
    SCHEDULE_ATTR,
    SCHEDULES,
    SLOTS_ATTR,
    STEPS_ATTR,
    Drivers,
    counted,
    give_back,
    grid_size,
    open_storage,
    open_study,
    reopen,
)
from ablate.search.trial import Outcome, memory_excess_gb, objective_values, outcome, write_trials_file
from ablate.sweep import SlotLauncher, read_sweep_file
from ablate.tracking import KIND_TAG, REASON_TAG, run_tags

STUDY_KIND = "study"
STUDY_TAG, TRIAL_TAG, STATE_TAG = "optuna.study", "optuna.trial", "optuna.state"


def run_study(cfg: SearchConfig, config, launcher, arguments: list[str]) -> list:
    """The sweeper's `sweep`: returns the launcher's JobReturns, one list per launch."""
    from omegaconf import OmegaConf

    cwd = str(config.hydra.runtime.cwd)
    cfg = cfg.resolved(cwd)
    space, fixed = search_space(cfg, arguments)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir = sweep_dir if sweep_dir.is_absolute() else Path(cwd) / sweep_dir
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")

    storage = open_storage(cfg.storage)
    study = open_study(cfg, space, storage)
    tracking = Tracking(read_sweep_file(sweep_dir), study, cfg)
    drivers = Drivers(study, cfg.stale_after_s)
    drivers.beat()
    for orphan in drivers.orphans():
        give_back(study, reopen(study, storage, orphan), "its driver stopped before the trial ended")
    asynchronous = cfg.asynchronous and isinstance(launcher, SlotLauncher)
    trials = StudyTrials(study, cfg, space, fixed, sweep_dir, drivers.id, tracking, asynchronous)
    done, _ = counted(study)
    print(
        f"optuna study {cfg.study_name}: {done} of {trials.budget} trials done, storage {cfg.storage}", file=sys.stderr
    )
    if cfg.asynchronous and not asynchronous:
        print(
            f"optuna: {type(launcher).__name__} launches batches only: {cfg.n_jobs} trials at a time, "
            "each batch waiting for its slowest (hydra/launcher=parallel or slurm ask a trial as each ends)",
            file=sys.stderr,
        )
    job_num = next_job_num(sweep_dir)
    set_aside_stale_trials(sweep_dir)
    try:
        with heartbeat(drivers, cfg.stale_after_s / 6), sigterm_as_interrupt():
            if asynchronous:
                returns = [launcher.launch_as_slots_free(trials, cfg.n_jobs, job_num)]
            else:
                returns = run_batches(launcher, trials, cfg.n_jobs, job_num)
    except BaseException:
        trials.settle_interrupted()
        tracking.close("KILLED", "the driver was stopped; launching the study again continues it")
        raise
    files = search_report.export(study, cfg)
    tracking.close("FINISHED", "", files)
    summary = json.loads((Path(cfg.studies_dir) / cfg.study_name / "trials.json").read_text())["summary"]
    print(describe(cfg, summary), file=sys.stderr)
    return returns


def run_batches(launcher, trials: StudyTrials, n_jobs: int, job_num: int) -> list:
    """Hydra's Launcher API: n_jobs trials launched together, the next batch after the slowest."""
    returns = []
    while True:
        batch = []
        while len(batch) < n_jobs and (overrides := trials.next_job(job_num + len(batch))) is not None:
            batch.append(overrides)
        if not batch:
            return returns
        results = launcher.launch(batch, initial_job_idx=job_num)
        for i, ret in enumerate(results):
            trials.job_ended(job_num + i, ret)
        job_num += len(batch)
        returns.append(results)


class StudyTrials:
    """The study as a JobFeed (sweep/launch/feed.py): a trial asked for each job, told when its job
    ends. Every trial is stamped with this driver, the slots and the schedule, so that the report
    can say how busy each launch kept its slots."""

    def __init__(
        self,
        study,
        cfg: SearchConfig,
        space: dict,
        fixed: list[str],
        sweep_dir: Path,
        driver_id: str,
        tracking: Tracking,
        asynchronous: bool,
    ):
        self.study, self.cfg, self.space, self.fixed = study, cfg, space, fixed
        self.sweep_dir, self.tracking = sweep_dir, tracking
        self.stamp = {DRIVER_ATTR: driver_id, SLOTS_ATTR: cfg.n_jobs, SCHEDULE_ATTR: SCHEDULES[asynchronous]}
        self.budget = trial_budget(cfg, space)
        self.in_flight: dict = {}  # job number -> optuna Trial

    def next_job(self, num: int) -> list[str] | None:
        done, running = counted(self.study)
        if done + running >= self.budget:
            return None
        trial = self.study.ask(self.space)
        for key, value in self.stamp.items():
            trial.set_user_attr(key, value)
        write_trials_file(self.sweep_dir, self.cfg, {num: {"number": trial.number}})
        self.in_flight[num] = trial
        return self.fixed + trial_overrides(trial.params)

    def job_ended(self, num: int, ret) -> None:
        trial = self.in_flight.pop(num)
        tell(self.study, self.cfg, trial, read_result(ret, self.sweep_dir, num), self.tracking)
        search_report.export(self.study, self.cfg, with_plots=False)

    def settle_interrupted(self) -> None:
        """Trials in flight when the driver was stopped: a job that ended (finished or pruned) is
        told as usual; the others are failed and their parameters queued for the next launch."""
        for num, trial in self.in_flight.items():
            result = read_result(None, self.sweep_dir, num)
            if result and result.get("status") in ("finished", "pruned"):
                tell(self.study, self.cfg, trial, result, self.tracking)
            else:
                give_back(self.study, trial, "the driver was stopped before the trial ended")
        self.in_flight = {}


def trial_budget(cfg: SearchConfig, space: dict) -> int:
    """n_trials, or the grid's size where the grid sampler has fewer points."""
    size = grid_size(cfg, space)
    return cfg.n_trials if size is None else min(cfg.n_trials, size)


SUPERSEDED = "superseded"  # SWEEP_DIR/superseded/: an earlier launch's trials that never ended


def set_aside_stale_trials(sweep_dir: Path) -> list[Path]:
    """A relaunch into a sweep folder an earlier launch was stopped in: that launch's job folders
    whose run never ended (killed, or no result.json) held trials the study has given back and asks
    again as new ones, so they are moved into SWEEP_DIR/superseded/, where this launch's summary
    does not count them as failed; finished, pruned and failed trials stay. One line says so."""
    moved = []
    for job in sorted(d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()):
        status = read_json_object(job / "result.json").get("status")
        if status not in (None, "killed"):
            continue
        target = sweep_dir / SUPERSEDED / job.name
        target.parent.mkdir(exist_ok=True)
        if target.exists():
            continue
        os.replace(job, target)
        moved.append(job)
    if moved:
        print(
            f"optuna: {len(moved)} job folder(s) of an earlier launch that never ended moved to "
            f"{sweep_dir / SUPERSEDED} (their trials are asked again)",
            file=sys.stderr,
        )
    return moved


def next_job_num(sweep_dir: Path) -> int:
    """Job numbers continue after the job dirs already in the sweep dir (a relaunch into the same dir)."""
    nums = [int(d.name) for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()]
    return max(nums, default=-1) + 1


def read_result(ret, sweep_dir: Path, num: int) -> dict | None:
    """The job's result.json (its output dir from Hydra's JobReturn, else the run dir a launcher
    that composed the job itself set as its working dir, else SWEEP_DIR/NUM); a job that wrote none
    falls back to its return value when that is a dict."""
    from hydra.core.utils import JobStatus
    from omegaconf import OmegaConf

    hydra_cfg = getattr(ret, "hydra_cfg", None)
    # Set by Hydra's run_job in the job's process; a job composed for submission (SLURM) has none.
    out_dir = OmegaConf.select(hydra_cfg, "hydra.runtime.output_dir", default=None) if hydra_cfg is not None else None
    job_dir = out_dir or (getattr(ret, "working_dir", None) if hydra_cfg is not None else None)
    for d in filter(None, (job_dir, sweep_dir / str(num))):
        if (Path(d) / "result.json").is_file():
            try:
                return json.loads((Path(d) / "result.json").read_text())
            except ValueError:
                pass
    if ret is None or ret.status != JobStatus.COMPLETED:
        return None
    return ret.return_value if isinstance(ret.return_value, dict) else None


def tell(study, cfg: SearchConfig, trial, result: dict | None, tracking: Tracking) -> Outcome:
    """Tell Optuna how the job of `trial` (a RUNNING optuna Trial) ended: its state, its objective
    values, the memory constraint, and what the report needs (steps, reason, run, end time)."""
    from optuna.trial import TrialState

    out = outcome(result, tracking.final_val_loss)
    if out.state == "COMPLETE" and out.reused and cfg.costs:
        out.state, out.reason = "FAIL", "it reused a finished run, whose costs this study has not measured"
    attrs = {
        STEPS_ATTR: out.steps,
        REASON_ATTR: out.reason,
        RUN_ATTR: out.mlflow_run_id,
        REUSED_ATTR: out.reused,
        ENDED_ATTR: out.ended_at or time.time(),
    }
    for key, value in attrs.items():
        if value is not None:
            trial.set_user_attr(key, value)
    excess = memory_excess_gb(cfg, out)
    if excess is not None:
        trial.set_constraint(MEMORY_CONSTRAINT, excess)
    if out.state == "COMPLETE":
        study.tell(trial, objective_values(cfg, out))
    else:
        study.tell(trial, state=TrialState[out.state])
    tracking.tag_trial(out, trial.number)
    return out


@contextmanager
def heartbeat(drivers: Drivers, interval_s: float):
    """Tell other drivers of this study that this one is alive (see storage.Drivers)."""
    stop = threading.Event()

    def beat():
        while not stop.wait(interval_s):
            try:
                drivers.beat()
            except Exception as exc:  # a storage hiccup must not end the search
                print(f"optuna: heartbeat failed: {exc}", file=sys.stderr)

    thread = threading.Thread(target=beat, name="optuna-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def sigterm_as_interrupt():
    """`kill PID` stops the driver as Ctrl-C does: the batch's trials are given back, not lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def describe(cfg: SearchConfig, summary: dict) -> str:
    best = summary.get("best")
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(summary["counts"].items()))
    lines = [f"optuna study {cfg.study_name}: {counts}"]
    if best:
        lines.append(
            f"best: trial {best['number']}, val loss {best['value']:.4f}: {' '.join(trial_overrides(best['params']))}"
        )
        lines.append(f"use it: python -m ablate 'hydra.searchpath=[file://{cfg.studies_dir}]' +best={cfg.study_name}")
    lines.append(f"files: {Path(cfg.studies_dir) / cfg.study_name}")
    return "\n".join(lines)


class Tracking:
    """The study's MLflow run and the tags on each trial's run (nothing when tracking=none)."""

    def __init__(self, sweep_info: dict, study, cfg: SearchConfig):
        self.uri = sweep_info.get("tracking_uri")
        self.client, self.run_id = None, None
        if not self.uri or not sweep_info.get("parent_run_id"):
            return
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        self.study_name = cfg.study_name
        self.run_id = self._study_run(study, cfg, sweep_info["experiment_id"])
        self.client.set_tag(sweep_info["parent_run_id"], "mlflow.parentRunId", self.run_id)
        self.client.set_tag(sweep_info["parent_run_id"], STUDY_TAG, cfg.study_name)

    def _study_run(self, study, cfg: SearchConfig, experiment_id: str) -> str:
        """The study's run in this store: reopened on a relaunch, created on the first one."""
        from mlflow.exceptions import MlflowException

        known = study.user_attrs.get("mlflow_runs", {})
        run_id = known.get(self.uri)
        if run_id:
            try:
                run = self.client.get_run(run_id)
                if run.info.lifecycle_stage == "active":
                    self.client.update_run(run_id, status="RUNNING")
                    return run_id
            except MlflowException:
                pass
        run = self.client.create_run(
            experiment_id,
            run_name=f"study:{cfg.study_name}",
            tags={KIND_TAG: STUDY_KIND, STUDY_TAG: cfg.study_name, "optuna.storage": cfg.storage, **run_tags()},
        )
        study.set_user_attr("mlflow_runs", {**known, self.uri: run.info.run_id})
        return run.info.run_id

    def final_val_loss(self, run_id: str) -> float | None:
        if self.client is None:
            return None
        metrics = self.client.get_run(run_id).data.metrics
        return metrics.get("final/val_loss", metrics.get("val/loss"))

    def tag_trial(self, out: Outcome, number: int) -> None:
        if self.client is None or not out.mlflow_run_id:
            return
        from mlflow.entities import RunTag

        tags = {
            STUDY_TAG: self.study_name,
            TRIAL_TAG: str(number),
            STATE_TAG: out.state,
            "ablate.study_run_id": self.run_id,
        }
        if out.value is not None:
            tags["optuna.value"] = f"{out.value:.6g}"
        try:
            self.client.log_batch(out.mlflow_run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        except Exception as exc:  # the study is the record; a tag lost to an outage is reported, not fatal
            print(f"optuna: could not tag MLflow run {out.mlflow_run_id}: {exc}", file=sys.stderr)

    def close(self, status: str, reason: str, files: list | None = None) -> None:
        if self.client is None:
            return

        try:
            for path in files or []:
                self.client.log_artifact(self.run_id, str(path))
            self.client.set_tag(self.run_id, REASON_TAG, reason)
            self.client.set_terminated(self.run_id, status=status)
        except Exception as exc:  # the study's files are on disk; a store outage must not hide the real error
            print(f"optuna: could not close the study's MLflow run {self.run_id}: {exc}", file=sys.stderr)
