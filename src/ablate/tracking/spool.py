"""Runs spooled during a tracking outage (tracker.MLflowTracker.spool), delivered once the store is back.

Each spool file holds a run's undelivered metric points, its final status and its artifacts.
A file is removed only after everything in it reached the store, so syncing twice is safe.
"""

from __future__ import annotations

import json
from pathlib import Path

from ablate.tracking.runstore import MAX_METRICS_PER_BATCH, RunStore
from ablate.tracking.tags import REASON_TAG, STEP_KEY
from ablate.tracking.tracker import step_chunks


class SpoolError(ValueError):
    """A file in the spool folder that is not a spool record (torn, garbage, another tool's)."""


RECORD_KEYS = ("uri", "run_id", "status", "reason", "metrics", "artifacts")


def read_record(path: Path) -> dict:
    """A spool file's record; SpoolError, one line naming the file, when it is not one."""
    try:
        record = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise SpoolError(f"{path} is not a spool record ({type(exc).__name__})") from None
    missing = [k for k in RECORD_KEYS if not isinstance(record, dict) or k not in record]
    if missing:
        raise SpoolError(f"{path} is not a spool record (no {', '.join(missing)})")
    return record


def sync_file(path: Path) -> int:
    """Deliver one spool file; returns the number of points sent."""
    record = read_record(path)
    store = RunStore(record["uri"])
    run_id = record["run_id"]
    last = store.last_step(run_id, STEP_KEY)
    fresh = [m for m in record["metrics"] if m[2] > last]
    for chunk in step_chunks(fresh, MAX_METRICS_PER_BATCH):
        store.log_metrics(run_id, chunk)
    for artifact in record["artifacts"]:
        if Path(artifact).is_file():
            store.log_artifact(run_id, artifact)
    if record["reason"]:
        store.log_tags(run_id, {REASON_TAG: record["reason"]})
    store.set_terminated(run_id, record["status"])
    path.unlink()
    return len(fresh)
