"""A sweep is many runs plus one summary.

`SweepCallback` (a Hydra callback, configured in conf/config.yaml) works with any launcher,
because everything it does happens in the launching process or inside each job:
- before any job starts: it plans the sweep (sweep_plan: which jobs will run, be skipped as
  finished, or resume from a checkpoint) and says so in one line; it creates the MLflow store, the
  experiment and a parent run, and writes them to SWEEP_DIR/sweep.json, which every job reads
  (whatever process or node it runs in);
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
import json
import os
import re
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.experimental.callback import Callback

from ablate.files import write_json
from ablate.host import available_cores, process_alive
from ablate.provenance import code_version
from ablate.run import progress
from ablate.run.progress import SweepProgress, WatchedJob
from ablate.sweep import plan as sweep_plan
from ablate.sweep.context import LAUNCHES_FILE, PROGRESS_FILE, SWEEP_FILE, read_sweep_file
from ablate.sweep.launch import pool
from ablate.sweep.launch.process import tracking_uri
from ablate.sweep.summary import summarize
from ablate.tracking import views
from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import HOST_TAG, KIND_TAG, PID_TAG, REASON_TAG, SWEEP_TAG

if TYPE_CHECKING:
    from ablate.sweep.summary import SweepSummary

LAST_SUMMARY: SweepSummary | None = None
PROCESS_LAUNCHER = "ablate_launcher.process_launcher.ProcessLauncher"


class SweepCallback(Callback):
    def __init__(self) -> None:
        self._progress = None  # the live line, in the launching process only
        self._open_parent: dict | None = None  # sweep.json contents while the parent run is open
        self._pool = None  # the process launchers' warm worker, for the work that needs torch or MLflow

    def __getstate__(self) -> dict:
        # Launchers pickle the callbacks into every job; the live parts belong to the launcher's process.
        return {"_progress": None, "_open_parent": None, "_pool": None}

    def _call(self, fn, *args):
        """fn(*args) where torch and MLflow are loaded: the warm worker when there is one, else here."""
        return self._pool.call(fn, *args) if self._pool is not None else fn(*args)

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        # Jobs get HydraConfig set by Hydra; the launching process does not, and the tracking
        # URI interpolates ${hydra:runtime.cwd}.
        HydraConfig.instance().set_config(config)
        sweep_dir = Path(config.hydra.sweep.dir)
        name = sweep_name(config)
        slug = re.sub(r"[^A-Za-z0-9_.]+", "-", name)  # sweep ids go into tags, view ids and URLs
        self._pool = prestart_worker(config)
        # fails here, before anything is created, on a bad job config
        jobs = sweep_plan.prepare(config, self._call)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        info = {
            "sweep_id": f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
            "name": name,
            "started": time.time(),
        }
        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        tracked = tracking.get("backend") == "mlflow"
        parent, jobs = self._call(open_sweep, tracking if tracked else None, info["sweep_id"], name, jobs)
        if tracked:
            info.update(parent)
            self._open_parent = info
            atexit.register(self._abandon)
        if jobs is not None:
            info["plan"] = [j.to_dict() for j in jobs]
        write_json(sweep_dir / SWEEP_FILE, info)
        print(f"sweep {info['sweep_id']}: results in {sweep_dir}", file=sys.stderr)
        if jobs is not None:
            print(sweep_plan.describe(jobs, name), file=sys.stderr)
            self._start_progress(name, jobs, bool(OmegaConf.select(config, "train.progress", default=True)))

    def on_job_start(self, config, **kwargs) -> None:
        from hydra.types import RunMode

        if config.hydra.mode == RunMode.MULTIRUN:
            progress.report_to(Path(config.hydra.runtime.output_dir) / PROGRESS_FILE)

    def on_job_end(self, config, **kwargs) -> None:

        progress.report_to(None)

    def on_multirun_end(self, config, **kwargs) -> None:
        global LAST_SUMMARY

        if self._progress is not None:
            self._progress.stop()
        sweep_dir = Path(config.hydra.sweep.dir)
        info = read_sweep_file(sweep_dir)
        LAST_SUMMARY = self._call(close_sweep, sweep_dir, info)
        print(LAST_SUMMARY.table, file=sys.stderr)
        record_launch(sweep_dir, info, LAST_SUMMARY)
        print(where_to_look(sweep_dir, info, LAST_SUMMARY), file=sys.stderr)
        self._open_parent = None
        atexit.unregister(self._abandon)
        self._close_pool()

    def _start_progress(self, name: str, jobs: list, enabled: bool) -> None:

        watched = [
            WatchedJob(j.num, Path(j.job_dir), j.cost_flops if j.action in ("run", "resume") else 0.0, j.label)
            for j in jobs
        ]
        self._progress = SweepProgress(name, watched, enabled=enabled).start()

    def _abandon(self) -> None:
        """At exit without on_multirun_end (Ctrl-C, an exception): no parent run left RUNNING."""
        if self._progress is not None:
            self._progress.stop()
        if self._open_parent:  # through the worker: MLflow cannot be imported this late in an exit
            self._call(close_parent_run, self._open_parent, "KILLED", "the sweep was interrupted before its end")
        self._close_pool()

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def prestart_worker(config):
    """Under the process launchers, start their warm worker now: it imports torch, the project and
    MLflow while this process composes the sweep's jobs (sweep/launch/pool.py). It creates no file.
    The pool, or None under other launchers."""
    from omegaconf import OmegaConf

    if str(OmegaConf.select(config, "hydra.launcher._target_", default="")).endswith(PROCESS_LAUNCHER):
        return pool.prestart(tracking_uri(config))
    pool.discard_prestarted()  # the command line guessed another launcher from the arguments
    return None


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
    """The summary (table, plots, points), logged to the parent run, which is then closed."""
    summary = summarize(sweep_dir, info)
    if info.get("parent_run_id"):
        finish_parent_run(info, summary)
    return summary


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
            **code_version(),
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
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=info["tracking_uri"])
    for path in summary.files:
        client.log_artifact(info["parent_run_id"], str(path))
    try:
        save_view(client, info, summary)
    except Exception as exc:  # a chart layout is not worth a parent run left RUNNING: say so, go on
        print(f"mlflow: the sweep's chart view was not updated ({type(exc).__name__}: {exc})", file=sys.stderr)
    close_parent_run(info, "FAILED" if summary.failed else "FINISHED")


def save_view(client, info: dict, summary: SweepSummary) -> None:
    """The sweep's saved view in the MLflow UI, now by run id: runs skipped or resumed from an
    earlier launch carry that launch's sweep tag, so the view groups by every tag among them."""

    trained = dict.fromkeys(r["mlflow_run_id"] for r in summary.rows if r.get("mlflow_run_id"))
    run_ids = [info["parent_run_id"], *trained]
    found = client.search_runs(
        [info["experiment_id"]], filter_string=views.view_state([], run_ids)["searchFilter"], max_results=len(run_ids)
    )
    sweep_ids = [s for s in dict.fromkeys([info["sweep_id"], *(r.data.tags.get(SWEEP_TAG) for r in found)]) if s]
    name = info.get("view_name") or f"sweep {info.get('name', 'sweep')}"
    views.save_sweep_view(client, info["experiment_id"], info["sweep_id"], name, sweep_ids, run_ids)


def close_parent_run(info: dict, status: str, reason: str = "") -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=info["tracking_uri"])
    if reason:
        client.set_tag(info["parent_run_id"], REASON_TAG, reason)
    client.set_terminated(info["parent_run_id"], status=status)


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
            lines.append(f"MLflow UI:    python -m ablate ui --store {store}   (or make ui), then open")
            lines.append(f"              http://127.0.0.1:5000/{info['view_link']}")
    return "\n".join(lines)


def record_launch(sweep_dir: Path, info: dict, summary: SweepSummary) -> None:
    """Append this launch (when, how long, what it did) to SWEEP_DIR/launches.jsonl."""
    counts: dict = {}
    for row in summary.rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
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
