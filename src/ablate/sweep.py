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
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.experimental.callback import Callback

if TYPE_CHECKING:
    from ablate.sweep_summary import SweepSummary

SWEEP_FILE = "sweep.json"
LAUNCHES_FILE = "launches.jsonl"  # one line per launch into this sweep dir (a relaunch appends)
PROGRESS_FILE = "progress.json"
USAGE_FILE = "usage.json"  # written by the process launchers: a job's CPU time
KIND_TAG = "ablate.kind"
HOST_TAG = "ablate.launcher_host"
PID_TAG = "ablate.launcher_pid"
LAST_SUMMARY: "SweepSummary | None" = None


@dataclass
class JobContext:
    in_sweep: bool = False
    sweep_id: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    threads: int | None = None


def job_context(hc) -> JobContext:
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return JobContext()
    info = read_sweep_file(Path(hc.sweep.dir))
    return JobContext(
        in_sweep=True,
        sweep_id=info.get("sweep_id"),
        experiment_id=info.get("experiment_id"),
        parent_run_id=info.get("parent_run_id"),
        threads=info.get("threads_per_job"),
    )


def read_sweep_file(sweep_dir: Path) -> dict:
    try:
        return json.loads((sweep_dir / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        return {}


class SweepCallback(Callback):
    def __init__(self) -> None:
        self._progress = None  # the live line, in the launching process only
        self._open_parent: dict | None = None  # sweep.json contents while the parent run is open

    def __getstate__(self) -> dict:
        # Launchers pickle the callbacks into every job; the live parts belong to the launcher's process.
        return {"_progress": None, "_open_parent": None}

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        from ablate import sweep_plan

        # Jobs get HydraConfig set by Hydra; the launching process does not, and the tracking
        # URI interpolates ${hydra:runtime.cwd}.
        HydraConfig.instance().set_config(config)
        sweep_dir = Path(config.hydra.sweep.dir)
        name = OmegaConf.select(config, "hydra.runtime.choices.sweep") or "sweep"
        jobs = sweep_plan.prepare(config)  # fails here, before anything is created, on a bad job config
        sweep_dir.mkdir(parents=True, exist_ok=True)
        info = {"sweep_id": f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}", "name": name,
                "started": time.time()}
        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        if tracking.get("backend") == "mlflow":
            info.update(start_parent_run(tracking, info["sweep_id"], name))
            self._open_parent = info
            atexit.register(self._abandon)
        if jobs is not None:
            sweep_plan.decide(jobs)
            info["plan"] = [j.to_dict() for j in jobs]
        write_json(sweep_dir / SWEEP_FILE, info)
        print(f"sweep {info['sweep_id']}: results in {sweep_dir}", file=sys.stderr)
        if jobs is not None:
            print(sweep_plan.describe(jobs, name), file=sys.stderr)
            self._start_progress(name, jobs, bool(OmegaConf.select(config, "train.progress", default=True)))

    def on_job_start(self, config, **kwargs) -> None:
        from hydra.types import RunMode

        from ablate import progress

        if config.hydra.mode == RunMode.MULTIRUN:
            progress.report_to(Path(config.hydra.runtime.output_dir) / PROGRESS_FILE)

    def on_job_end(self, config, **kwargs) -> None:
        from ablate import progress

        progress.report_to(None)

    def on_multirun_end(self, config, **kwargs) -> None:
        global LAST_SUMMARY
        from ablate.sweep_summary import summarize

        if self._progress is not None:
            self._progress.stop()
        sweep_dir = Path(config.hydra.sweep.dir)
        info = read_sweep_file(sweep_dir)
        LAST_SUMMARY = summarize(sweep_dir, info)
        print(LAST_SUMMARY.table, file=sys.stderr)
        record_launch(sweep_dir, info, LAST_SUMMARY)
        if info.get("parent_run_id"):
            finish_parent_run(info, LAST_SUMMARY)
        self._open_parent = None
        atexit.unregister(self._abandon)

    def _start_progress(self, name: str, jobs: list, enabled: bool) -> None:
        from ablate.progress import SweepProgress, WatchedJob

        watched = [WatchedJob(j.num, Path(j.job_dir), j.cost_flops if j.action in ("run", "resume") else 0.0,
                              j.label) for j in jobs]
        self._progress = SweepProgress(name, watched, enabled=enabled).start()

    def _abandon(self) -> None:
        """At exit without on_multirun_end (Ctrl-C, an exception): no parent run left RUNNING."""
        if self._progress is not None:
            self._progress.stop()
        if self._open_parent:
            close_parent_run(self._open_parent, "KILLED", "the sweep was interrupted before its end")


def start_parent_run(tracking: dict, sweep_id: str, name: str) -> dict:
    from mlflow.tracking import MlflowClient

    from ablate.provenance import code_version
    from ablate.tracking import SWEEP_TAG, ensure_experiment

    experiment_id = ensure_experiment(tracking["uri"], tracking["experiment"])
    client = MlflowClient(tracking_uri=tracking["uri"])
    reap_orphan_sweeps(client, experiment_id)
    run = client.create_run(
        experiment_id,
        run_name=f"sweep:{name}",
        tags={SWEEP_TAG: sweep_id, KIND_TAG: "sweep", HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()),
              **code_version()},
    )
    return {"experiment": tracking["experiment"], "experiment_id": experiment_id, "parent_run_id": run.info.run_id,
            "tracking_uri": tracking["uri"]}


def reap_orphan_sweeps(client, experiment_id: str) -> None:
    """Parent runs still RUNNING whose launching process on this host is gone (kill -9, power
    loss) are closed as KILLED, so that a relaunch leaves no stale RUNNING sweep behind."""
    import psutil

    from ablate.tracking import REASON_TAG

    stale = client.search_runs(
        [experiment_id], filter_string=f"tags.`{KIND_TAG}` = 'sweep' and attributes.status = 'RUNNING'", max_results=1000
    )
    for run in stale:
        tags = run.data.tags
        if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
            continue
        if _alive_since(int(tags[PID_TAG]), run.info.start_time / 1000, psutil):
            continue
        client.set_tag(run.info.run_id, REASON_TAG, "its launching process is gone (killed)")
        client.set_terminated(run.info.run_id, status="KILLED")


def _alive_since(pid: int, started: float, psutil) -> bool:
    """True when process `pid` exists and is older than the run (not a recycled PID)."""
    try:
        return psutil.Process(pid).create_time() <= started + 1.0
    except psutil.Error:
        return False


def finish_parent_run(info: dict, summary: "SweepSummary") -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=info["tracking_uri"])
    for path in summary.files:
        client.log_artifact(info["parent_run_id"], str(path))
    close_parent_run(info, "FAILED" if summary.failed else "FINISHED")


def close_parent_run(info: dict, status: str, reason: str = "") -> None:
    from mlflow.tracking import MlflowClient

    from ablate.tracking import REASON_TAG

    client = MlflowClient(tracking_uri=info["tracking_uri"])
    if reason:
        client.set_tag(info["parent_run_id"], REASON_TAG, reason)
    client.set_terminated(info["parent_run_id"], status=status)


def record_launch(sweep_dir: Path, info: dict, summary: "SweepSummary") -> None:
    """Append this launch (when, how long, what it did) to SWEEP_DIR/launches.jsonl."""
    from ablate.launcher import available_cores

    counts: dict = {}
    for row in summary.rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    planned: dict = {}
    for job in info.get("plan", []):
        planned[job["action"]] = planned.get(job["action"], 0) + 1
    record = {"sweep_id": info.get("sweep_id"), "started": info.get("started"), "ended": time.time(),
              "wall_s": time.time() - info["started"] if info.get("started") else None,
              "planned": planned, "statuses": counts, "host": socket.gethostname(), "cores": available_cores()}
    with open(sweep_dir / LAUNCHES_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")


def write_json(path: Path, obj) -> Path:
    return write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_bytes(path: Path, data: bytes) -> Path:
    """Atomic: readers (other processes, a relaunch) see the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
