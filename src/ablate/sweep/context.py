"""What a job of a sweep knows about its sweep: SWEEP_DIR/sweep.json, written once by the launching
process before any job starts (sweep/callback.py), read by every job whatever process or node it runs in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ablate.files import read_json_object

SWEEP_FILE = "sweep.json"
LAUNCHES_FILE = "launches.jsonl"  # one line per launch into this sweep dir (a relaunch appends)
PROGRESS_FILE = "progress.json"
USAGE_FILE = "usage.json"  # written by the process launchers: a job's CPU time


@dataclass
class JobContext:
    in_sweep: bool = False
    sweep_id: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    threads: int | None = None
    label: str = ""  # the overrides that set this job apart from the sweep's others (sweep/plan.py)


def job_context(hc) -> JobContext:
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return JobContext()
    info = read_sweep_file(Path(hc.sweep.dir))
    plan = {str(j.get("num")): j.get("label", "") for j in info.get("plan") or []}
    return JobContext(
        in_sweep=True,
        sweep_id=info.get("sweep_id"),
        experiment_id=info.get("experiment_id"),
        parent_run_id=info.get("parent_run_id"),
        threads=info.get("threads_per_job"),
        label=plan.get(str(hc.job.num), ""),
    )


def read_sweep_file(sweep_dir: Path) -> dict:
    return read_json_object(sweep_dir / SWEEP_FILE)
