"""Runs spooled during a tracking outage (tracker.MLflowTracker.spool), delivered once the store is back.

Each spool file holds a run's undelivered metric points, its final status and its artifacts.
A file is removed only after everything in it reached the store, so syncing twice is safe.
"""

from __future__ import annotations

import json
from pathlib import Path

from ablate.tracking.tags import REASON_TAG, STEP_KEY
from ablate.tracking.tracker import MAX_METRICS_PER_BATCH, step_chunks


def sync_file(path: Path) -> int:
    """Deliver one spool file; returns the number of points sent."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    record = json.loads(path.read_text())
    client = MlflowClient(tracking_uri=record["uri"])
    run_id = record["run_id"]
    history = client.get_metric_history(run_id, STEP_KEY)
    last = max((m.step for m in history), default=-1)
    fresh = [m for m in record["metrics"] if m[2] > last]
    for chunk in step_chunks(fresh, MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=[Metric(k, v, ts, s) for k, v, s, ts in chunk])
    for artifact in record["artifacts"]:
        if Path(artifact).is_file():
            client.log_artifact(run_id, artifact)
    if record["reason"]:
        client.log_batch(run_id, tags=[RunTag(REASON_TAG, record["reason"])])
    client.set_terminated(run_id, status=record["status"])
    path.unlink()
    return len(fresh)
