"""`python -m ablate jobs [SWEEP_DIR]`: a sweep's SLURM jobs, their states, and how their runs ended.

    python -m ablate jobs                       # the newest sweep under ./multirun
    python -m ablate jobs multirun/2026-11-29/16-46-33
    python -m ablate jobs SWEEP_DIR --json      # the same as data
    python -m ablate jobs SWEEP_DIR --wait      # until every job has ended; exit 1 if any run failed

It reads SWEEP_DIR/jobs.json (written by hydra/launcher=slurm) and driver.json (written by
`python -m ablate submit`), asks SLURM for each job's state (squeue while it is queued or
running, sacct after: `requeued` counts its REQUEUED records), and reads each run's result.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ablate.oneline import fail
from ablate.sweep import JOBS_FILE

DRIVER_FILE = "driver.json"
ACTIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
    "PREEMPTED",
    "SIGNALING",
    "STAGE_OUT",
    "RESV_DEL_HOLD",
}
RUN_FAILED = {"failed", "killed", "missing"}


@dataclass
class JobRow:
    num: int | None  # None for the driver
    job_id: str
    state: str  # SLURM's, e.g. PENDING RUNNING COMPLETED FAILED CANCELLED TIMEOUT OUT_OF_MEMORY
    exit_code: str
    requeues: int
    run_status: str  # from result.json: finished failed skipped unsupported killed, or "-"
    reason: str
    mlflow_run_id: str | None
    label: str
    log: str


JOB_KEYS = ("num", "job_id", "run_dir", "overrides", "log")  # each job of jobs.json, as the launcher writes it


def check_records(sweep_dir: Path) -> None:
    """jobs.json and driver.json, where present, are what the SLURM launcher and `ablate submit`
    write: a garbage or hand-edited one is one line, not an empty table or a traceback."""
    jobs, driver = _read(sweep_dir / JOBS_FILE), _read(sweep_dir / DRIVER_FILE)
    if (sweep_dir / JOBS_FILE).exists() and not _is_jobs_record(jobs):
        _refuse(sweep_dir / JOBS_FILE, "the jobs of each array: arrays, each with cluster and jobs")
    if (sweep_dir / DRIVER_FILE).exists() and not (isinstance(driver, dict) and {"job_id", "log"} <= driver.keys()):
        _refuse(sweep_dir / DRIVER_FILE, "the driver job that `ablate submit` submitted: job_id and log")


def _is_jobs_record(doc) -> bool:
    arrays = doc.get("arrays") if isinstance(doc, dict) else None
    return isinstance(arrays, list) and all(
        isinstance(a, dict)
        and "cluster" in a
        and isinstance(a.get("jobs"), list)
        and all(isinstance(j, dict) and set(JOB_KEYS) <= j.keys() for j in a["jobs"])
        for a in arrays
    )


def _refuse(path: Path, holds: str) -> None:
    fail(f"{path} is not a record of this sweep (not JSON, or not the keys written there) (valid: a file of {holds})")


def sweep_rows(sweep_dir: Path) -> list[JobRow]:
    driver = _read(sweep_dir / DRIVER_FILE)
    record = _read(sweep_dir / JOBS_FILE) or {"arrays": []}
    jobs = [j | {"cluster": a["cluster"]} for a in record["arrays"] for j in a["jobs"]]
    slurm_ids = [j["job_id"] for j in jobs if j["cluster"] == "slurm"] + ([driver["job_id"]] if driver else [])
    states = slurm_states(slurm_ids)
    rows = []
    if driver:
        state, code, requeues = states.get(driver["job_id"], ("UNKNOWN", "-", 0))
        summary = _read(sweep_dir / "summary.json")
        failed = [r for r in (summary or {}).get("runs", []) if r.get("status") in RUN_FAILED]
        status = "-" if summary is None else ("failed" if failed else "finished")
        rows.append(
            JobRow(
                None,
                driver["job_id"],
                state,
                code,
                requeues,
                status,
                f"{len(failed)} run(s) failed" if failed else "",
                None,
                "driver",
                driver["log"],
            )
        )
    common = set.intersection(*(set(j["overrides"]) for j in jobs)) if len(jobs) > 1 else set()
    for j in jobs:
        state, code, requeues = states.get(j["job_id"], ("-", "-", 0)) if j["cluster"] == "slurm" else ("local", "-", 0)
        run_dir = sweep_dir / j["run_dir"]
        result = _read(run_dir / "result.json") or {}
        rows.append(
            JobRow(
                j["num"],
                j["job_id"],
                state,
                code,
                requeues,
                result.get("status", "-"),
                result.get("reason", ""),
                result.get("mlflow_run_id"),
                " ".join(o for o in j["overrides"] if o not in common) or str(j["num"]),
                j["log"],
            )
        )
    return rows


def slurm_states(job_ids: list[str]) -> dict[str, tuple[str, str, int]]:
    """{job id: (state, exit code, times requeued)}: squeue for live jobs, sacct for the rest."""
    if not job_ids:
        return {}
    arrays = sorted({j.split("_")[0] for j in job_ids})
    out: dict[str, tuple[str, str, int]] = {}
    requeues: dict[str, int] = {}
    rows = _lines(["sacct", "-n", "-P", "-X", "-D", "-j", ",".join(arrays), "-o", "JobID,State,ExitCode"])
    for line in rows:
        job, state, code = (line.split("|") + ["", ""])[:3]
        state = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0" -> CANCELLED
        if state == "REQUEUED":
            requeues[job] = requeues.get(job, 0) + 1
        out[job] = (state, code, 0)
    for line in _lines(["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i|%T"]):
        job, state = (line.split("|") + [""])[:2]
        out[job] = (state, out.get(job, ("", "-", 0))[1], 0)
    return {j: (s, c, requeues.get(j, 0)) for j, (s, c, _) in out.items()}


def _lines(cmd: list[str]) -> list[str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln for ln in done.stdout.splitlines() if ln.strip()] if done.returncode == 0 else []


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def latest_sweep(root: Path = Path("multirun")) -> Path | None:
    found = [p.parent for name in (JOBS_FILE, DRIVER_FILE) for p in root.glob(f"*/*/{name}")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def format_rows(rows: list[JobRow], sweep_dir: Path) -> str:
    head = f"{'job':>4}  {'slurm id':<12} {'state':<13} {'exit':<6} {'requeued':>8}  {'run':<11} overrides"
    lines = [f"sweep {sweep_dir}", head]
    for r in rows:
        num = "drv" if r.num is None else str(r.num)
        lines.append(
            f"{num:>4}  {r.job_id:<12} {r.state:<13} {r.exit_code:<6} {r.requeues:>8}  {r.run_status:<11} {r.label}"
        )
    for r in rows:
        if r.run_status in RUN_FAILED or r.state not in ACTIVE | {"COMPLETED", "-", "local"}:
            lines.append(f"  {r.job_id}: {r.state} {r.reason} (log: {sweep_dir / r.log})")
    return "\n".join(lines)


def active(rows: list[JobRow]) -> bool:
    return any(r.state in ACTIVE for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ablate jobs",
        description=__doc__.splitlines()[0],
        epilog="example:\n  ablate jobs multirun/2026-01-31/12-00-00 --wait",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep_dir", nargs="?", type=Path, help="a sweep dir (default: the newest under ./multirun)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--wait", action="store_true", help="poll until every job has ended; exit 1 if a run failed")
    parser.add_argument("--poll-s", type=float, default=10.0, help="seconds between polls with --wait")
    args = parser.parse_args(argv)
    sweep_dir = args.sweep_dir or latest_sweep()
    if sweep_dir is None or not ((sweep_dir / JOBS_FILE).exists() or (sweep_dir / DRIVER_FILE).exists()):
        fail(
            f"sweep dir {sweep_dir or './multirun/*/*'} has no {JOBS_FILE} or {DRIVER_FILE} "
            "(valid: a sweep launched with hydra/launcher=slurm or submitted with python -m ablate submit)"
        )
    check_records(sweep_dir)
    rows = sweep_rows(sweep_dir)
    while args.wait and (active(rows) or _driver_starting(sweep_dir, rows)):
        time.sleep(args.poll_s)
        rows = sweep_rows(sweep_dir)
    print(json.dumps([asdict(r) for r in rows], indent=2) if args.json else format_rows(rows, sweep_dir))
    failed = any(r.run_status in RUN_FAILED or r.state not in ACTIVE | {"COMPLETED", "-", "local"} for r in rows)
    return 1 if args.wait and failed else 0


def _driver_starting(sweep_dir: Path, rows: list[JobRow], grace_s: float = 300.0) -> bool:
    """A driver submitted moments ago that accounting does not list yet (sacct lags behind sbatch)."""
    driver = _read(sweep_dir / DRIVER_FILE) or {}
    recent = time.time() - driver.get("submitted_at", 0) < grace_s
    return recent and any(r.num is None and r.state == "UNKNOWN" for r in rows)


if __name__ == "__main__":
    sys.exit(main())
