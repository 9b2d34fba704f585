"""`python -m ablate.sync [SPOOL_DIR]`: deliver runs spooled during a tracking outage.

Each spool file holds a run's undelivered metric points, its final status and its artifacts.
A file is removed only after everything in it reached the store, so syncing twice is safe.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ablate.tracking import REASON_TAG, step_chunks, MAX_METRICS_PER_BATCH


def sync_file(path: Path) -> int:
    """Deliver one spool file; returns the number of points sent."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    record = json.loads(path.read_text())
    client = MlflowClient(tracking_uri=record["uri"])
    run_id = record["run_id"]
    history = client.get_metric_history(run_id, "flops")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablate.sync", description=__doc__.splitlines()[0])
    parser.add_argument("spool_dir", nargs="?", default=".ablate/state/spool", type=Path)
    args = parser.parse_args(argv)
    files = sorted(args.spool_dir.glob("*.json")) if args.spool_dir.is_dir() else []
    if not files:
        print(f"nothing to sync in {args.spool_dir}", file=sys.stderr)
        return 0
    failed = 0
    for path in files:
        try:
            n = sync_file(path)
            print(f"synced {path.stem}: {n} metric points", file=sys.stderr)
        except Exception as exc:  # leave the file for the next attempt
            failed += 1
            print(f"error: could not sync {path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
