"""Run tracking: MLflow through batched calls, or nothing.

Metrics are buffered in memory and sent with MlflowClient.log_batch (one call per flush, never
one per training step). The buffer travels inside each checkpoint, and on resume every step
at or below the last step already in MLflow is dropped, so a killed run neither loses nor
duplicates a metric point.

When the tracking server is unreachable, training goes on: undelivered points stay in the
buffer (and in checkpoints), delivery is retried with backoff, and a run that ends during the
outage leaves a spool file that `python -m ablate sync` delivers once the server is back.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import TrackingConfig
from ablate.faults import failpoint
from ablate.files import write_json
from ablate.tracking.dataset import dataset_input
from ablate.tracking.runstore import MAX_METRICS_PER_BATCH, ExistingRun, RunStore
from ablate.tracking.tags import DATA_TAG, REASON_TAG, STEP_KEY

MAX_BACKOFF_S = 60.0


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

    def flush(self, force: bool = False) -> bool:
        self.pending.clear()
        return True

    def log_artifacts(self, paths: list[Path]) -> None:
        pass

    def points_until(self, step: int) -> list:
        """Every point this run recorded at steps <= `step`, delivered or not: the history that a
        cooldown branch forked here inherits (run/branches.py)."""
        return [m for m in self.pending if m[2] <= step]

    def set_tags(self, tags: dict) -> None:
        pass

    def set_status(self, status: str) -> None:
        """The open run's status, while it goes on (KILLED: resumable should the job end now)."""

    def finish(self, status: str, reason: str = "", artifacts: list[Path] = ()) -> None:
        self.flush()


class MLflowTracker(Tracker):
    """Its MLflow calls go to a RunStore (runstore.py): through `agent` (tracking/agent.py), the
    agent the command started for this run, where it serves this store, else made here."""

    def __init__(
        self, cfg: TrackingConfig, experiment_id: str | None = None, spool_dir: Path | None = None, agent=None
    ):
        super().__init__()
        self.cfg = cfg
        self.spool_dir = spool_dir
        self.retry_at = 0.0
        self.backoff_s = 2.0
        self.outage: str | None = None
        through_agent = agent.store_for(cfg.uri, cfg.experiment) if agent and experiment_id is None else None
        self.store = through_agent or RunStore(cfg.uri, cfg.experiment, experiment_id)

    def find(self, config_hash: str) -> ExistingRun | None:
        found = self.store.find(config_hash)
        return ExistingRun(**found) if found else None

    def start(self, run_name: str, params: dict, tags: dict, resume_run_id: str | None = None) -> None:
        """Create the run (or reopen `resume_run_id`), with its params, its tokens as its dataset
        input where `tags` name them (tags.DATA_TAG), and the machine's system metrics from now on
        where tracking.system_metrics is set."""
        params = {k: str(v) for k, v in params.items()}
        if resume_run_id:
            self.run_id = resume_run_id
            self.store.update_status(resume_run_id, "RUNNING")
            self.last_logged_step = self.store.last_step(resume_run_id, STEP_KEY)
            self.store.log_tags(resume_run_id, {REASON_TAG: ""})
            self.store.log_missing_params(resume_run_id, params)
        else:
            self.run_id = self.store.create_run(run_name, {k: str(v) for k, v in tags.items()})
            self.store.log_params(self.run_id, params)
        if tags.get(DATA_TAG):
            self.store.log_dataset(self.run_id, dataset_input(str(tags[DATA_TAG]), params))
        if self.cfg.system_metrics:
            self.store.start_system_metrics(self.run_id, bool(resume_run_id))

    def flush(self, force: bool = False) -> bool:
        """Send buffered points; False (points kept) when the store cannot be reached."""
        if not force and time.time() < self.retry_at:
            return False
        self.pending = [m for m in self.pending if m[2] > self.last_logged_step]
        try:
            for chunk in step_chunks(self.pending, MAX_METRICS_PER_BATCH):
                self.store.log_metrics(self.run_id, chunk)
                self.last_logged_step = chunk[-1][2]
                failpoint("tracking.flush")  # a kill here leaves some chunks delivered, some not
        except Exception as exc:  # any failure to deliver is an outage: keep the points, retry later
            self.pending = [m for m in self.pending if m[2] > self.last_logged_step]
            self._outage(exc)
            return False
        if self.outage:
            print(f"tracking: {self.cfg.uri} is reachable again; buffered points delivered", file=sys.stderr)
        self.outage, self.backoff_s, self.retry_at = None, 2.0, 0.0
        self.pending.clear()
        return True

    def _outage(self, exc: Exception) -> None:
        if self.outage is None:
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            print(
                f"tracking: cannot reach {self.cfg.uri} ({first}); training goes on, metrics are buffered",
                file=sys.stderr,
            )
        self.outage = f"{type(exc).__name__}: {exc}"
        self.retry_at = time.time() + self.backoff_s
        self.backoff_s = min(MAX_BACKOFF_S, self.backoff_s * 2)

    def log_artifacts(self, paths: list[Path]) -> None:
        for p in paths:
            self.store.log_artifact(self.run_id, str(p))

    def points_until(self, step: int) -> list:
        """Delivered points from the store (steps <= the last delivered one), then the buffered rest.
        During an outage the delivered part cannot be read: the branch inherits the buffer only."""
        delivered_to = min(step, self.last_logged_step)
        points = []
        if delivered_to >= 0:
            try:
                points = [tuple(m) for m in self.store.metric_points(self.run_id, delivered_to)]
            except Exception as exc:
                print(
                    f"tracking: a fork inherits only the unsent metrics ({type(exc).__name__}: {exc})", file=sys.stderr
                )
        return points + [m for m in self.pending if delivered_to < m[2] <= step]

    def set_tags(self, tags: dict) -> None:
        self.store.log_tags(self.run_id, {k: str(v) for k, v in tags.items()})

    def set_status(self, status: str) -> None:
        if self.run_id:
            self.store.update_status(self.run_id, status)

    def finish(self, status: str, reason: str = "", artifacts: list[Path] = ()) -> None:
        """Deliver what is buffered and close the run; during an outage, spool it instead."""
        try:
            if self.cfg.system_metrics:  # its last points, and no sampling after the run
                self.store.stop_system_metrics(self.run_id)
            if not self.flush(force=True):
                raise ConnectionError(self.outage)
            self.log_artifacts(list(artifacts))
            if reason:
                self.set_tags({REASON_TAG: reason})
            self.store.set_terminated(self.run_id, status)
        except Exception as exc:
            path = self.spool(status, reason, artifacts)
            print(
                f"tracking: could not close run {self.run_id} ({type(exc).__name__}); {len(self.pending)} points "
                f"spooled to {path}; run `python -m ablate sync` when the store is back",
                file=sys.stderr,
            )

    def spool(self, status: str, reason: str, artifacts) -> Path:
        directory = self.spool_dir or Path(".ablate") / "spool"
        return spool_ending(
            directory, self.cfg.uri, self.run_id, status, reason, artifacts, self.pending, self.last_logged_step
        )


def spool_ending(
    directory: Path, uri: str, run_id: str, status: str, reason: str, artifacts, metrics=(), last_logged_step=-1
) -> Path:
    """A run's ending that its store did not take (an outage): DIRECTORY/<run_id>.json with its
    undelivered metric points, delivered by spool.sync_file (`ablate sync`) with its artifacts,
    reason and status. A training run's, or a sweep's parent run's (no points)."""
    record = {
        "uri": uri,
        "run_id": run_id,
        "status": status,
        "reason": reason,
        "last_logged_step": last_logged_step,
        "metrics": [list(m) for m in metrics],
        "artifacts": [str(a) for a in artifacts],
        # the folder the artifacts are in, which `ablate sync` checks them against (spool.checked)
        "run_dir": _common_folder(artifacts),
    }
    return write_json(Path(directory) / f"{run_id}.json", record)


def _common_folder(artifacts) -> str | None:
    """The run's folder of its artifacts (result.json, .hydra/config.yaml: the folder that holds
    .hydra), or None without artifacts."""
    paths = [Path(a).resolve() for a in artifacts]
    if not paths:
        return None
    common = Path(os.path.commonpath(paths))
    common = common.parent if common.is_file() else common
    return str(common.parent if common.name == ".hydra" else common)


def make_tracker(
    cfg: TrackingConfig, experiment_id: str | None = None, spool_dir: Path | None = None, agent=None
) -> Tracker:
    """`agent`: the tracking agent the command started for this run (tracking/agent.py), or None."""
    return MLflowTracker(cfg, experiment_id, spool_dir, agent) if cfg.backend == "mlflow" else Tracker()


def step_chunks(points: list, limit: int):
    """Batches of at most `limit` points in step order, never splitting one step's points, so
    that 'every step <= last delivered step is in the store' stays true after a partial failure."""
    points = sorted(points, key=lambda m: m[2])
    chunk: list = []
    i = 0
    while i < len(points):
        j = i
        while j < len(points) and points[j][2] == points[i][2]:
            j += 1
        if chunk and len(chunk) + (j - i) > limit:
            yield chunk
            chunk = []
        chunk.extend(points[i:j])
        i = j
    if chunk:
        yield chunk
