"""Run tracking: MLflow through batched calls, or nothing.

Metrics are buffered in memory and sent with MlflowClient.log_batch (one call per flush, never
one per training step). The buffer travels inside each checkpoint, and on resume every step
at or below the last step already in MLflow is dropped, so a killed run neither loses nor
duplicates a metric point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import TrackingConfig

MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000
CONFIG_HASH_TAG = "ablate.config_hash"
SWEEP_TAG = "ablate.sweep_id"
REASON_TAG = "ablate.status_reason"
STEP_KEY = "flops"  # present in every record; its last step is the last step MLflow has


@dataclass
class ExistingRun:
    run_id: str
    status: str  # RUNNING, FINISHED, FAILED, KILLED
    reason: str = ""


@dataclass
class Tracker:
    """No-op tracker (tracking=none); MLflowTracker overrides the I/O."""

    run_id: str | None = None
    pending: list = field(default_factory=list)  # [(key, value, step, timestamp_ms)]
    last_logged_step: int = -1

    def find(self, config_hash: str) -> ExistingRun | None:
        return None

    def start(self, run_name: str, params: dict, tags: dict, resume_run_id: str | None = None) -> None:
        pass

    def record(self, step: int, metrics: dict) -> None:
        now = int(time.time() * 1000)
        self.pending.extend((k, float(v), int(step), now) for k, v in metrics.items() if v is not None)

    def flush(self) -> None:
        self.pending.clear()

    def log_artifacts(self, paths: list[Path]) -> None:
        pass

    def set_tags(self, tags: dict) -> None:
        pass

    def finish(self, status: str, reason: str = "") -> None:
        self.flush()


class MLflowTracker(Tracker):
    def __init__(self, cfg: TrackingConfig, experiment_id: str | None = None):
        super().__init__()
        from mlflow.tracking import MlflowClient

        self.cfg = cfg
        self.client = MlflowClient(tracking_uri=cfg.uri)
        self.experiment_id = experiment_id or ensure_experiment(cfg.uri, cfg.experiment)

    def find(self, config_hash: str) -> ExistingRun | None:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{CONFIG_HASH_TAG}` = '{config_hash}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not runs:
            return None
        r = runs[0]
        return ExistingRun(r.info.run_id, r.info.status, r.data.tags.get(REASON_TAG, ""))

    def start(self, run_name: str, params: dict, tags: dict, resume_run_id: str | None = None) -> None:
        from mlflow.entities import Param, RunTag

        if resume_run_id:
            self.run_id = resume_run_id
            self.client.update_run(resume_run_id, status="RUNNING")
            self.last_logged_step = self._last_step()
            self.client.log_batch(resume_run_id, tags=[RunTag(REASON_TAG, "")])
            return
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={k: str(v) for k, v in tags.items()})
        self.run_id = run.info.run_id
        items = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])

    def _last_step(self) -> int:
        history = self.client.get_metric_history(self.run_id, STEP_KEY)
        return max((m.step for m in history), default=-1)

    def flush(self) -> None:
        from mlflow.entities import Metric

        fresh = [m for m in self.pending if m[2] > self.last_logged_step]
        for i in range(0, len(fresh), MAX_METRICS_PER_BATCH):
            chunk = fresh[i : i + MAX_METRICS_PER_BATCH]
            self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, s) for k, v, s, ts in chunk])
        if fresh:
            self.last_logged_step = max(m[2] for m in fresh)
        self.pending.clear()

    def log_artifacts(self, paths: list[Path]) -> None:
        for p in paths:
            self.client.log_artifact(self.run_id, str(p))

    def set_tags(self, tags: dict) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def finish(self, status: str, reason: str = "") -> None:
        try:
            self.flush()
        finally:
            if reason:
                self.set_tags({REASON_TAG: reason})
            self.client.set_terminated(self.run_id, status=status)


def make_tracker(cfg: TrackingConfig, experiment_id: str | None = None) -> Tracker:
    return MLflowTracker(cfg, experiment_id) if cfg.backend == "mlflow" else Tracker()


def ensure_experiment(uri: str, name: str) -> str:
    """Create the store and the experiment once (callers fan out only after this returns).

    A sqlite store keeps its artifacts beside the database file, not in the current directory.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = Path(uri[len("sqlite:///") :]).parent.joinpath("mlartifacts").as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id
