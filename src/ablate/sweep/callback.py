"""A sweep is many runs plus one summary.

`SweepCallback` (a Hydra callback, configured in conf/config.yaml) holds the sweep's state in the
launching process; Hydra hands it to the sweeper and the launcher in their context
(`sweep_callback`), and everything it does happens in the launching process or inside each job:
- when the sweep starts, nothing: Hydra then builds the sweeper and the launcher, which check
  their settings; a process launcher has it start the warm worker (`start_worker`);
- before any job starts: the grid sweeper plans each batch through it (`plan`: sweep_plan, which
  jobs will run, be skipped as finished, or resume from a checkpoint) and opens the sweep (`open`):
  one line saying what it will do, the MLflow store, the experiment and a parent run, written to
  SWEEP_DIR/sweep.json, which every job reads (whatever process or node it runs in); a sweeper that
  does not plan (Optuna's) opens it unplanned;
- while the jobs run: a live line with runs done/total and the ETA (progress.SweepProgress), fed
  by the job directories; each job reports its step, loss and tokens/s to its own directory;
- at the end: the summary (sweep_summary), printed and logged to the parent run.

Under the process launchers the work here that needs torch or MLflow (the plan's checks and
decisions, the parent run, the summary) runs in processes forked from the sweep's warm worker
(pool.Pool.call), which has both loaded: the launching process imports neither. Under the other
launchers it runs here.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.experimental.callback import Callback

from ablate.faults import failpoint
from ablate.files import WriteError, disk_errors, redact_files, write_json
from ablate.host import available_cores, process_alive
from ablate.run import SweepProgress, WatchedJob
from ablate.sweep import plan as sweep_plan
from ablate.sweep.context import LAUNCHES_FILE, SWEEP_FILE, read_sweep_file
from ablate.sweep.design import design_lines, launch_at_once
from ablate.sweep.launch.pool import Pool
from ablate.sweep.launch.worker import can_fork
from ablate.sweep.summary import summarize
from ablate.tracking import (
    HOST_TAG,
    KIND_TAG,
    PID_TAG,
    REASON_TAG,
    SWEEP_TAG,
    bound_http_retries,
    close_orphaned_runs,
    ensure_experiment,
    run_tags,
    spool_ending,
    views,
)

if TYPE_CHECKING:
    from ablate.sweep.summary import SweepSummary


class SweepCallback(Callback):
    """The sweep's own state in the launching process: its warm worker, its plan, its parent run,
    its live line and its summary. Hydra hands it to the sweeper and the launcher in their context
    (sweep_callback): the sweeper plans through it, the launcher runs the planned jobs with it."""

    def __init__(self) -> None:
        self._progress = None  # the live line, in the launching process only
        self._open_parent: dict | None = None  # sweep.json contents while the parent run is open
        self._pool = None  # the process launchers' warm worker, for the work that needs torch or MLflow
        self._config = None  # the sweep's config, from on_multirun_start
        self._info: dict | None = None  # sweep.json's contents once the sweep is open
        self._jobs: list = []  # the planned jobs, with their compositions
        self.summary: SweepSummary | None = None  # once the sweep has ended: the command's exit status
        self.unwritten: str | None = None  # once the sweep has ended without its summary: the one line why

    def __getstate__(self) -> dict:
        # Launchers pickle the callbacks into every job; the live parts belong to the launcher's process.
        return {**self.__dict__, "_progress": None, "_open_parent": None, "_pool": None, "_config": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({**state, "_info": None, "_jobs": [], "summary": None, "unwritten": None})

    def _call(self, fn, *args):
        """fn(*args) where torch and MLflow are loaded: the warm worker when there is one, else here."""
        return self._pool.call(fn, *args) if self._pool is not None else fn(*args)

    def on_multirun_start(self, config, **kwargs) -> None:
        """Nothing is created yet: the sweeper plans its jobs first (plan), then opens the sweep (open)."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        # Jobs get HydraConfig set by Hydra; the launching process does not, and the tracking
        # URI interpolates ${hydra:runtime.cwd}.
        HydraConfig.instance().set_config(config)
        self._config = config
        # Before the warm worker starts: it, the jobs and the sweep's own MLflow calls inherit it.
        bound_http_retries(str(OmegaConf.select(config, "tracking.uri", default="") or ""))

    def on_job_start(self, config, **kwargs) -> None:
        # A job run in this process (Hydra's basic launcher) under a sweeper that did not open the sweep.
        self.ensure_open()

    def start_worker(self, mlflow_uri: str | None) -> Pool | None:
        """The process launchers' warm worker, started now (when Hydra sets the launcher up): it
        imports torch, the project and MLflow while this process composes the sweep's jobs
        (sweep/launch/pool.py). It creates no file. This callback runs the sweep's own work that
        needs torch or MLflow in it and closes it at the sweep's end. None where the platform
        cannot fork."""
        if self._pool is None and can_fork():
            self._pool = Pool(mlflow_uri).start()
        return self._pool

    def plan(self, loader, batch: list, first_num: int) -> list:
        """A batch's jobs composed and parsed here, checked and hashed where torch is loaded
        (sweep/plan.py); raises on a bad job, before anything is created."""
        try:
            jobs = sweep_plan.compose(loader, self._config, batch, first_num)
            checked = self._call(sweep_plan.assess, jobs)
        except BaseException:
            self._close_pool(timeout_s=0.0)  # still importing perhaps, and a bad command fails fast
            raise
        for job, composed in zip(checked, jobs, strict=True):
            job.composed = composed.composed
        return checked

    def open(self, jobs: list | None) -> None:
        """The sweep begins: its MLflow store, experiment and parent run, what each planned job will
        do, SWEEP_DIR/sweep.json, one line saying so and the live line. jobs=None: a sweeper that
        does not plan (Optuna's). Once only: the grid sweeper plans its whole grid at once."""
        from omegaconf import OmegaConf

        config = self._config
        if self._info is not None:
            raise RuntimeError("the sweep is open already")
        sweep_dir = Path(config.hydra.sweep.dir)
        name = sweep_name(config)
        slug = re.sub(r"[^A-Za-z0-9_.]+", "-", name)  # sweep ids go into tags, view ids and URLs
        sweep_dir.mkdir(parents=True, exist_ok=True)
        info = {
            "sweep_id": f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
            "name": name,
            "started": time.time(),
        }
        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        tracked = tracking.get("backend") == "mlflow"
        parent, decided = self._call(open_sweep, tracking if tracked else None, info["sweep_id"], name, jobs)
        if tracked:
            info.update(parent)
            # Where the parent's ending goes if the store is unreachable then (`ablate sync` delivers it)
            info["spool_dir"] = str(Path(str(config.state_dir)) / "spool")
            self._open_parent = info
            atexit.register(self._abandon)
        if jobs is not None:
            self._jobs = _with_compositions(decided, jobs)
            info["plan"] = [j.to_dict() for j in self._jobs]
        self._info = info
        write_json(sweep_dir / SWEEP_FILE, info)
        print(f"sweep {info['sweep_id']}: results in {sweep_dir}", file=sys.stderr)
        if jobs is not None:
            print(sweep_plan.describe(self._jobs, name), file=sys.stderr)
            for line in design_lines(self._jobs, at_once=launch_at_once(config, self._jobs)):
                print(line, file=sys.stderr)
            self._start_progress(name, self._jobs, bool(OmegaConf.select(config, "train.progress", default=True)))

    def ensure_open(self) -> None:
        """Open the sweep unplanned where its sweeper has not opened it (a sweeper of Hydra's own)."""
        if self._info is None and self._config is not None:
            self.open(None)

    def job_plan(self, num: int):
        """What the plan made of job `num`, for the launcher to send it (PlannedJob.handoff: its
        composition, its parsed config and its runs' hashes), or None where no plan made it (Optuna's
        trials)."""
        return next((j.handoff() for j in self._jobs if j.num == num), None)

    def on_multirun_end(self, config, **kwargs) -> None:
        if self._progress is not None:
            self._progress.stop()
        sweep_dir = Path(config.hydra.sweep.dir)
        info = read_sweep_file(sweep_dir)
        redact_files(sweep_dir, "multirun.yaml")  # Hydra saved the overrides as given: tracking.uri's password
        try:
            self.summary = self._call(close_sweep, sweep_dir, info)
            print(self.summary.table, file=sys.stderr)
            with disk_errors(sweep_dir / LAUNCHES_FILE, "hydra.sweep.dir"):
                record_launch(sweep_dir, info, self.summary)
        except WriteError as exc:  # a full disk: Hydra would make a warning of it, and exit 0
            self.summary = None
            self.unwritten = f"{exc}; once the disk has room, the same command writes it and resumes what it stopped"
        except Exception as exc:  # the summary's process died or its code failed: never a success
            self.summary = None
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.unwritten = (
                f"hydra.sweep.dir: the sweep's summary in {sweep_dir} was not written ({why}); "
                "its parent run is FAILED (valid: the same command again writes it)"
            )
            if info.get("parent_run_id"):
                with contextlib.suppress(Exception):  # Hydra would turn any error here into a warning
                    close_parent_run(info, "FAILED", f"the sweep's summary was not written: {why}")
        else:
            print(where_to_look(sweep_dir, info, self.summary), file=sys.stderr)
        finally:
            self._open_parent = None
            atexit.unregister(self._abandon)
            self._close_pool()

    def _start_progress(self, name: str, jobs: list, enabled: bool) -> None:
        self._progress = SweepProgress(name, _watched(jobs), enabled=enabled).start()

    def quiet(self) -> None:
        """Stop the sweep's live line now, saying nothing more: an interrupted launcher says how the
        sweep ended in one line."""
        if self._progress is not None:
            self._progress.stop(final=False)

    def refused(self, reason: str) -> None:
        """The sweep stopped by an error said in one line (sbatch refused its jobs): its parent run
        closed FAILED with that reason, not KILLED as an interruption at exit."""
        if self._progress is not None:
            self._progress.stop(final=False)
        if self._open_parent:
            self._call(close_parent_run, self._open_parent, "FAILED", reason)
            self._open_parent = None
        atexit.unregister(self._abandon)
        self._close_pool()

    def _abandon(self) -> None:
        """At exit without on_multirun_end (Ctrl-C, an exception): no parent run left RUNNING."""
        if self._progress is not None:
            self._progress.stop()
        if self._open_parent:  # through the worker: MLflow cannot be imported this late in an exit
            self._call(close_parent_run, self._open_parent, "KILLED", "the sweep was interrupted before its end")
        self._close_pool()

    def _close_pool(self, timeout_s: float = 10.0) -> None:
        if self._pool is not None:
            self._pool.close(timeout_s)
            self._pool = None


def _watched(jobs: list) -> list[WatchedJob]:
    return [
        WatchedJob(
            j.num,
            Path(j.job_dir),
            j.cost_flops if j.action in ("run", "resume") else 0.0,
            j.label,
            counted=j.action != "unsupported",
            steps=j.total_steps,
        )
        for j in jobs
    ]


def _with_compositions(decided: list, planned: list) -> list:
    """The jobs as the worker decided them, each with its composition again (which stays here)."""
    for job, mine in zip(decided, planned, strict=True):
        job.composed = mine.composed
    return decided


def sweep_callback(hydra_context) -> SweepCallback | None:
    """The sweep's callback, found through Hydra's context, which Hydra hands every sweeper and
    launcher: what it owns (the warm worker, the live line) is theirs to use."""
    for cb in getattr(hydra_context.callbacks, "callbacks", []):
        if isinstance(cb, SweepCallback):
            return cb
    return None


def warm_pool(hydra_context) -> Pool | None:
    """The warm worker the sweep's callback started, for the launcher to run the jobs in; None
    where it started none."""
    cb = sweep_callback(hydra_context)
    return cb._pool if cb is not None else None


def open_sweep(tracking: dict | None, sweep_id: str, name: str, jobs: list | None) -> tuple[dict, list | None]:
    """The parent run (with `tracking`, the sweep's MLflow settings), then what each planned job will
    do (sweep_plan.decide_all, one search of the store): (the parent run's fields for sweep.json, jobs)."""
    parent = start_parent_run(tracking, sweep_id, name) if tracking is not None else {}
    try:
        if jobs is not None:
            sweep_plan.decide_all(jobs)
    except BaseException:  # the launcher never learns this parent run's id: it is closed here
        if parent:
            close_parent_run(parent, "FAILED", "the sweep's plan failed")
        raise
    return parent, jobs


def close_sweep(sweep_dir: Path, info: dict) -> SweepSummary:
    """The summary (table, plots, points), logged to the parent run, which is then closed; FAILED
    with the one line why when the summary cannot be written (WriteError, raised)."""
    if info.get("parent_run_id"):
        close_lost_runs(info)
    try:
        failpoint("sweep.summary")  # a kill here: the summary's writer gone, its parent still open
        summary = summarize(sweep_dir, info)
    except WriteError as exc:
        if info.get("parent_run_id"):
            close_parent_run(info, "FAILED", f"the sweep's summary was not written: {exc}")
        raise
    if info.get("parent_run_id"):
        finish_parent_run(info, summary)
    return summary


def close_lost_runs(info: dict) -> None:
    """Every job has ended by now: a run of the sweep still RUNNING lost its process before its
    watchdog could close it (killed at its start), and is closed KILLED, as the watchdog would, for
    the same command to resume. During an outage it stays RUNNING, which the same command resumes too."""
    reason = "its job's process ended without closing the run (killed); the same command resumes it"
    keep = (info["parent_run_id"],)
    try:
        closed = close_orphaned_runs(
            info["tracking_uri"], info["experiment_id"], info["sweep_id"], "KILLED", reason, keep
        )
    except Exception as exc:
        print(f"tracking: runs of the sweep not checked for a lost process ({type(exc).__name__})", file=sys.stderr)
        return
    for run_id in closed:
        print(f"marked MLflow run {run_id} KILLED: {reason}", file=sys.stderr)


def sweep_name(config) -> str:
    """The sweep preset's name (+sweep=NAME), else the keys it sweeps: "model x train.seed"."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    preset = OmegaConf.select(config, "hydra.runtime.choices.sweep")
    if preset:
        return preset
    axes = list(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {})
    task = list(OmegaConf.select(config, "hydra.overrides.task", default=None) or [])
    try:
        parsed = OverridesParser.create().parse_overrides(task)
    except Exception:  # the overrides were checked before Hydra ran; a name is not worth failing for
        parsed = []
    axes += [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]
    return " x ".join(dict.fromkeys(axes)) or "sweep"


def start_parent_run(tracking: dict, sweep_id: str, name: str) -> dict:
    from mlflow.tracking import MlflowClient

    experiment_id = ensure_experiment(tracking["uri"], tracking["experiment"])
    client = MlflowClient(tracking_uri=tracking["uri"])
    reap_orphan_sweeps(client, experiment_id)
    run = client.create_run(
        experiment_id,
        run_name=f"sweep:{name}",
        tags={
            SWEEP_TAG: sweep_id,
            KIND_TAG: "sweep",
            HOST_TAG: socket.gethostname(),
            PID_TAG: str(os.getpid()),
            **run_tags(),
            **{str(k): str(v) for k, v in (tracking.get("tags") or {}).items()},
        },
    )
    view_name = f"sweep {name}, {time.strftime('%Y-%m-%d %H:%M')}"
    view = views.save_sweep_view(client, experiment_id, sweep_id, view_name, [sweep_id])  # live while it runs
    return {
        "experiment": tracking["experiment"],
        "experiment_id": experiment_id,
        "parent_run_id": run.info.run_id,
        "tracking_uri": tracking["uri"],
        "view_name": view_name,
        "view_link": view,
    }


def reap_orphan_sweeps(client, experiment_id: str) -> None:
    """Parent runs still RUNNING whose launching process on this host is gone (kill -9, power
    loss) are closed as KILLED, so that a relaunch leaves no stale RUNNING sweep behind."""

    stale = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{KIND_TAG}` = 'sweep' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    for run in stale:
        tags = run.data.tags
        if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
            continue
        if process_alive(int(tags[PID_TAG]), started_before=run.info.start_time / 1000):
            continue
        client.set_tag(run.info.run_id, REASON_TAG, "its launching process is gone (killed)")
        client.set_terminated(run.info.run_id, status="KILLED")


def finish_parent_run(info: dict, summary: SweepSummary) -> None:
    """The parent run closed with the summary's files, then the sweep's saved view (an experiment
    tag, so after the close is as good as before); during an outage only the ending, spooled."""
    from mlflow.tracking import MlflowClient

    if not close_parent_run(info, "FAILED" if summary.failed else "FINISHED", artifacts=summary.files):
        return
    try:
        save_view(MlflowClient(tracking_uri=info["tracking_uri"]), info, summary)
    except Exception as exc:  # a chart layout is not worth failing a sweep for: say so, go on
        print(f"mlflow: the sweep's chart view was not updated ({type(exc).__name__}: {exc})", file=sys.stderr)


def save_view(client, info: dict, summary: SweepSummary) -> None:
    """The sweep's saved view in the MLflow UI, now by run id (its parent left out): runs skipped or
    resumed from an earlier launch carry that launch's sweep tag, so the view names every tag among them."""

    trained = dict.fromkeys(r.mlflow_run_id for r in summary.rows if r.mlflow_run_id)
    run_ids = [info["parent_run_id"], *trained]
    found = client.search_runs(
        [info["experiment_id"]], filter_string=views.view_state([], run_ids)["searchFilter"], max_results=len(run_ids)
    )
    sweep_ids = [s for s in dict.fromkeys([info["sweep_id"], *(r.data.tags.get(SWEEP_TAG) for r in found)]) if s]
    name = info.get("view_name") or f"sweep {info.get('name', 'sweep')}"
    # A WSD trunk's curve is its branches' up to their forks (each branch's history starts at step 0):
    # the view draws the branches, one line a size and budget, not a trunk beside them.
    trunks = {r.mlflow_run_id for r in summary.rows if r.kind == "trunk"}
    runs = [views.SweepRun(r.info.run_id, r.info.run_name, r.data.params) for r in found]
    runs = [r for r in runs if r.run_id != info["parent_run_id"]]
    runs = [r for r in runs if r.run_id not in trunks] or runs
    swept = list(dict.fromkeys(k for r in summary.rows for k in r.overrides))
    views.log_curves(client, [r.run_id for r in runs])
    views.save_sweep_view(client, info["experiment_id"], info["sweep_id"], name, sweep_ids, runs, swept)


def close_parent_run(info: dict, status: str, reason: str = "", artifacts=()) -> bool:
    """The parent run ended with its artifacts, reason and status; True once the store has it. A
    store that cannot take it (an outage) gets it spooled to the state dir, as a training run's end
    is (tracking/spool.py): one line, and `ablate sync` delivers it, so the sweep ends on time."""
    from mlflow.tracking import MlflowClient

    run_id = info["parent_run_id"]
    client = MlflowClient(tracking_uri=info["tracking_uri"])
    try:
        for path in artifacts:
            client.log_artifact(run_id, str(path))
        if reason:
            client.set_tag(run_id, REASON_TAG, reason)
        client.set_terminated(run_id, status=status)
        return True
    except Exception as exc:
        spool_dir = Path(info.get("spool_dir") or Path(".ablate") / "state" / "spool")
        path = spool_ending(spool_dir, info["tracking_uri"], run_id, status, reason, artifacts)
        print(
            f"tracking: could not close the sweep's parent run {run_id} ({type(exc).__name__}); its ending is "
            f"spooled to {path}; run `python -m ablate sync {spool_dir}` when the store is back",
            file=sys.stderr,
        )
        return False


def where_to_look(sweep_dir: Path, info: dict, summary: SweepSummary) -> str:
    """The lines that end a sweep's output: its folder, its plots and its chart in the MLflow UI."""
    lines = [f"sweep folder: {sweep_dir}"]
    plots = [p.name for p in summary.files if p.suffix == ".png"]
    if plots:
        lines.append(f"plots:        {', '.join(plots)} (in the sweep folder)")
    if info.get("view_link"):
        uri = info.get("tracking_uri", "")
        if uri.startswith(("http://", "https://")):
            lines.append(f"MLflow UI:    {uri.rstrip('/')}/{info['view_link']}")
        else:
            store = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else uri
            lines.append(f"MLflow UI:    {ui_command(store)}, then open")
            lines.append(f"              http://127.0.0.1:5000/{info['view_link']}")
    return "\n".join(lines)


def ui_command(store: str, cwd: Path | None = None) -> str:
    """How this install starts the UI: `ablate ui` where the ablate script is on the PATH (an
    installed package, an activated venv), else `python -m ablate ui`; `(or make ui)` only in a
    checkout whose Makefile has that target and whose store is the one it opens (./mlflow.db)."""
    cwd = cwd or Path.cwd()
    command = f"{'ablate' if shutil.which('ablate') else 'python -m ablate'} ui --store {store}"
    makefile = cwd / "Makefile"
    try:
        has_target = makefile.is_file() and "\nui:" in "\n" + makefile.read_text()
    except OSError:
        has_target = False
    if has_target and Path(store).resolve() == (cwd / "mlflow.db").resolve():
        command += "   (or make ui)"
    return command


def record_launch(sweep_dir: Path, info: dict, summary: SweepSummary) -> None:
    """Append this launch (when, how long, what it did) to SWEEP_DIR/launches.jsonl."""
    counts: dict = {}
    for row in summary.rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    planned: dict = {}
    for job in info.get("plan", []):
        planned[job["action"]] = planned.get(job["action"], 0) + 1
    record = {
        "sweep_id": info.get("sweep_id"),
        "started": info.get("started"),
        "ended": time.time(),
        "wall_s": time.time() - info["started"] if info.get("started") else None,
        "planned": planned,
        "statuses": counts,
        "host": socket.gethostname(),
        "cores": available_cores(),
    }
    with open(sweep_dir / LAUNCHES_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")
