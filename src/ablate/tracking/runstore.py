"""A run's MLflow calls, on plain data: the one place where a run's records become MLflow entities.

Metric points are (key, value, step, timestamp_ms) tuples; params and tags are dicts of strings.
`RunStore` makes the calls in this process. tracking/agent.py serves the same methods from a
process of its own, so that a run started in a fresh interpreter does not wait for MLflow's
imports (about 2 s of CPU) and a store's opening (about 1 s) before it can train.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ablate.tracking.store import bound_http_retries, ensure_experiment, quiet_store_logs
from ablate.tracking.system_metrics import SystemMetrics
from ablate.tracking.tags import CONFIG_HASH_TAG, OWNER_TAG, REASON_TAG, SYSTEM_METRICS_PREFIX

MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000
# The methods a store serves (what tracking/agent.py forwards).
CALLS = (
    "find",
    "create_run",
    "update_status",
    "log_params",
    "log_missing_params",
    "log_metrics",
    "log_tags",
    "last_step",
    "metric_points",
    "log_artifact",
    "log_dataset",
    "start_system_metrics",
    "stop_system_metrics",
    "set_terminated",
)
DATASET_CONTEXT = "training"  # what a run's dataset input was used for (MLflow's mlflow.data.context tag)


@dataclass
class ExistingRun:
    run_id: str
    status: str  # RUNNING, FINISHED, FAILED, KILLED
    reason: str = ""
    owner: str = ""  # OWNER_TAG: the process that last wrote it


def existing_run(run) -> ExistingRun:
    """An MLflow Run as the decision rule sees it."""
    tags = run.data.tags
    return ExistingRun(run.info.run_id, run.info.status, tags.get(REASON_TAG, ""), tags.get(OWNER_TAG, ""))


class RunStore:
    """MLflow's client for one store and, given `experiment` (its name), that experiment, created
    if it does not exist yet (store.ensure_experiment). Without one, only calls on a known run."""

    def __init__(self, uri: str, experiment: str | None = None, experiment_id: str | None = None):
        from mlflow.tracking import MlflowClient

        bound_http_retries(uri)
        quiet_store_logs()
        # The experiment first: a new sqlite store is made there, a copy of an empty one (store.py),
        # where a client opening it first would run MLflow's ~60 schema migrations (2 s).
        self.experiment_id = experiment_id or (ensure_experiment(uri, experiment) if experiment else None)
        self.client = MlflowClient(tracking_uri=uri)
        self.system_metrics = SystemMetrics(uri)

    def find(self, config_hash: str) -> dict | None:
        """The latest run recorded under `config_hash`: run_id, status, reason, owner; None if none."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{CONFIG_HASH_TAG}` = '{config_hash}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return dataclasses.asdict(existing_run(runs[0])) if runs else None

    def create_run(self, run_name: str, tags: dict) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={k: str(v) for k, v in tags.items()})
        return run.info.run_id

    def update_status(self, run_id: str, status: str) -> None:
        """RUNNING again (a resume), or KILLED while the run goes on (a SLURM job's SIGTERM)."""
        self.client.update_run(run_id, status=status)

    def log_params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])

    def log_missing_params(self, run_id: str, params: dict) -> None:
        """The params a resumed run lacks: a kill between create_run and log_params leaves a run with
        none, and MLflow refuses to change a param that is there."""
        have = self.client.get_run(run_id).data.params
        missing = {k: v for k, v in params.items() if k not in have}
        if missing:
            self.log_params(run_id, missing)

    def log_metrics(self, run_id: str, points: list) -> None:
        """At most MAX_METRICS_PER_BATCH (key, value, step, timestamp_ms) points, in one call."""
        from mlflow.entities import Metric

        self.client.log_batch(run_id, metrics=[Metric(k, v, ts, s) for k, v, s, ts in points])

    def log_tags(self, run_id: str, tags: dict) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def last_step(self, run_id: str, key: str) -> int:
        """The last step at which `key` was recorded; -1 if never."""
        return max((m.step for m in self.client.get_metric_history(run_id, key)), default=-1)

    def metric_points(self, run_id: str, until_step: int) -> list:
        """Every point of every metric of the run at steps <= until_step."""
        points = []
        # System metrics are the machine's at their own sampling steps (system_metrics.py), not
        # training steps: not part of the history a branch inherits.
        for key in self.client.get_run(run_id).data.metrics:
            if key.startswith(SYSTEM_METRICS_PREFIX):
                continue
            history = self.client.get_metric_history(run_id, key)
            points += [(key, m.value, m.step, m.timestamp) for m in history if m.step <= until_step]
        return points

    def log_artifact(self, run_id: str, path: str) -> None:
        self.client.log_artifact(run_id, path)

    def log_dataset(self, run_id: str, dataset: dict) -> None:
        """The run's tokens as its dataset input: `dataset` from tracking/dataset.py, its source a
        path (MLflow's local artifact source) or a dict (its code source). Logging it again, as a
        resumed run does, adds nothing: MLflow keeps one input per dataset."""
        from mlflow.data.code_dataset_source import CodeDatasetSource
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.sources import LocalArtifactDatasetSource
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.exceptions import MlflowException
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        source = dataset["source"]
        source = LocalArtifactDatasetSource(source) if isinstance(source, str) else CodeDatasetSource(source)
        meta = MetaDataset(source, name=dataset["name"], digest=dataset["digest"])
        # the entity mlflow.log_input logs for a Dataset, here for a run that is not the active one
        entity = DatasetInput(meta._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, DATASET_CONTEXT)])
        try:
            self.client.log_inputs(run_id, datasets=[entity])
        except MlflowException:
            # MLflow's store looks the dataset up by (experiment, name, digest) and inserts it when it
            # finds none, in two steps: the runs of a sweep logging the same tokens at once can all
            # find none, and all but the first insert then fail on the datasets table's unique key
            # (tests/tracking/test_dataset.py). The first one's row is there now: this try only links
            # the run to it. Any other failure fails again.
            self.client.log_inputs(run_id, datasets=[entity])

    def start_system_metrics(self, run_id: str, resumed: bool) -> None:
        self.system_metrics.start(run_id, resumed)

    def stop_system_metrics(self, run_id: str) -> None:
        self.system_metrics.stop(run_id)

    def set_terminated(self, run_id: str, status: str) -> None:
        self.system_metrics.stop(run_id)  # its last points first: a terminated run takes no more
        self.client.set_terminated(run_id, status=status)
