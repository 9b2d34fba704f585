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


def sync_file(path: Path) -> int:
    """Deliver one spool file; returns the number of points sent."""
    record = json.loads(path.read_text())
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
