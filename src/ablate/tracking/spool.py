"""Runs spooled during a tracking outage (tracker.MLflowTracker.spool), delivered once the store is back.

Each spool file holds a run's undelivered metric points, its final status and its artifacts.
A file is removed only after everything in it reached the store, so syncing twice is safe.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from ablate.files import read_json_object, read_regular
from ablate.redact import HIDDEN, redact
from ablate.tracking.runstore import MAX_METRICS_PER_BATCH, RunStore
from ablate.tracking.tags import REASON_TAG, STEP_KEY
from ablate.tracking.tracker import step_chunks


class SpoolError(ValueError):
    """A file in the spool folder that is not a spool record (torn, garbage, another tool's)."""


RECORD_KEYS = ("uri", "run_id", "status", "reason", "metrics", "artifacts")


def read_record(path: Path) -> dict:
    """A spool file's record; SpoolError, one line naming the file, when it is not one."""
    try:
        record = json.loads(read_regular(path, 64 << 20))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested past the parser
        raise SpoolError(f"{path} is not a spool record ({type(exc).__name__})") from None
    missing = [k for k in RECORD_KEYS if not isinstance(record, dict) or k not in record]
    if missing:
        raise SpoolError(f"{path} is not a spool record (no {', '.join(missing)})")
    return record


@contextmanager
def one_sync(spool_dir: Path) -> Iterator[None]:
    """One `ablate sync` at a time over a spool folder (flock on SPOOL_DIR/.sync.lock): a second
    waits for the first, then finds only what the first left."""
    fd = os.open(Path(spool_dir) / ".sync.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def checked(record: dict, path: Path) -> dict:
    """A record checked against the run it names before anything is sent (a spool file planted in
    the folder must not upload any file to any store): its artifacts are regular files inside its
    run's folder (`run_dir`: a run's folder with .hydra/config.yaml, or a sweep's with sweep.json),
    and its store is the one that folder's run used. SpoolError (one line) otherwise."""
    artifacts = [str(a) for a in record["artifacts"]]
    run_dir = record.get("run_dir")
    if artifacts and not run_dir:
        raise SpoolError(f"{path} names artifacts but not its run's folder (run_dir); not delivered")
    if run_dir:
        root = Path(run_dir).resolve()
        config = root / ".hydra" / "config.yaml"
        sweep = root / "sweep.json"
        if not (config.is_file() or sweep.is_file()):
            raise SpoolError(f"{path}: its run_dir {run_dir} is not a run's or a sweep's folder; not delivered")
        for artifact in artifacts:
            target = Path(artifact)
            if target.is_symlink() or not target.resolve().is_relative_to(root):
                raise SpoolError(f"{path}: artifact {artifact} is outside its run's folder {run_dir}; not delivered")
        used = _store_used(config, sweep)
        if used is not None and redact(used) != redact(record["uri"]):
            raise SpoolError(
                f"{path}: its store {redact(record['uri'])} is not the one its run used ({redact(used)}); not delivered"
            )
    return record


def _store_used(config: Path, sweep: Path) -> str | None:
    """The tracking URI a run's folder says its run used: the sweep's record, or the run's config."""
    if sweep.is_file():
        used = read_json_object(sweep).get("tracking_uri")
        return used if isinstance(used, str) else None
    try:
        import yaml

        doc = yaml.safe_load(read_regular(config, 1 << 20))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    used = (doc.get("tracking") or {}).get("uri") if isinstance(doc, dict) else None
    return used if isinstance(used, str) else None


def with_credentials(uri: str) -> str:
    """A URI whose password a record keeps hidden (redact.py), with the password MLflow takes from
    MLFLOW_TRACKING_PASSWORD: the user and host from the record, the secret from the environment."""
    if f":{HIDDEN}@" not in uri:
        return uri
    secret = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if not secret:
        raise SpoolError(
            f"{uri}: the store's password is not recorded (valid: set MLFLOW_TRACKING_PASSWORD for `ablate sync`)"
        )
    return uri.replace(f":{HIDDEN}@", f":{quote(secret, safe='')}@", 1)


def sync_file(path: Path) -> int:
    """Deliver one spool file; returns the number of points sent."""
    record = checked(read_record(path), path)
    store = RunStore(with_credentials(record["uri"]))
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
