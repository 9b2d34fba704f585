"""A run's tokens as its MLflow dataset input (tracking/dataset.py, RunStore.log_dataset): the data's
name, its fingerprint as the digest, and where the tokens came from."""

from __future__ import annotations

import json
import threading

import pytest
from mlflow.tracking import MlflowClient

from ablate.config import TrackingConfig
from ablate.tracking.dataset import dataset_input
from ablate.tracking.runstore import RunStore
from ablate.tracking.tags import DATA_TAG
from ablate.tracking.tracker import MLflowTracker


def test_prepared_tokens_come_from_their_folder(tmp_path):
    params = {"data.kind": "tokens", "data.dir": str(tmp_path / "prepared"), "data.train_bin": ""}
    found = dataset_input("debian_docs 0123456789abcdef debian-reference=2.1", params)
    assert found == {"name": "debian_docs", "digest": "0123456789abcdef", "source": str(tmp_path / "prepared")}


def test_generated_tokens_come_from_their_config_and_text_names_its_packages():
    synthetic = dataset_input("synthetic abc", {"data.kind": "synthetic", "data.seed": 3, "model.n_embd": 8})
    assert synthetic["source"] == {"kind": "synthetic", "seed": "3"}
    text = dataset_input("docs fff pkg=1.0", {"data.kind": "text", "data.paths": "['stdlib']"})
    assert text["source"] == {"kind": "text", "paths": "['stdlib']", "packages": "pkg=1.0"}


def test_data_without_a_fingerprint_leaves_the_digest_to_mlflow_and_a_tag_naming_nothing_fails():
    assert dataset_input("text pkg=1.0", {"data.kind": "text"})["digest"] is None
    with pytest.raises(ValueError, match="names no data"):
        dataset_input("  ", {})


def test_a_tracked_run_lists_its_tokens_as_its_one_training_input(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = TrackingConfig(uri=uri, experiment="data", system_metrics=False)
    params = {"data.kind": "synthetic", "data.seed": 0}
    tracker = MLflowTracker(cfg)
    tracker.start("r", params, {DATA_TAG: "synthetic 5d41402abc4b2a76b9719d91"})
    tracker.finish("FINISHED")
    MLflowTracker(cfg).start("r", params, {DATA_TAG: "synthetic 5d41402abc4b2a76b9719d91"}, tracker.run_id)
    (logged,) = MlflowClient(uri).get_run(tracker.run_id).inputs.dataset_inputs  # the resume added none
    assert logged.dataset.name == "synthetic" and logged.dataset.digest == "5d41402abc4b2a76b9719d91"
    assert logged.dataset.source_type == "code"
    assert json.loads(logged.dataset.source) == {"tags": {"kind": "synthetic", "seed": "0"}}
    assert {t.key: t.value for t in logged.tags} == {"mlflow.data.context": "training"}


def test_prepared_tokens_are_a_local_source(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MLflowTracker(TrackingConfig(uri=uri, experiment="data", system_metrics=False))
    tracker.start("r", {"data.kind": "tokens", "data.dir": str(tmp_path)}, {DATA_TAG: "prepared 0123"})
    tracker.finish("FINISHED")
    (logged,) = MlflowClient(uri).get_run(tracker.run_id).inputs.dataset_inputs
    assert logged.dataset.source_type == "local" and json.loads(logged.dataset.source) == {"uri": str(tmp_path)}


@pytest.mark.parametrize("through", ["sqlite", pytest.param("server", marks=pytest.mark.slow)])
def test_runs_logging_the_same_tokens_at_once_each_list_them(tmp_path, request, through):
    """A sweep's jobs train on the same tokens and log them together: MLflow's store finds the dataset
    absent for each, and all inserts but the first break the datasets table's unique key. Each run
    still lists the one dataset, in a sqlite store and through a tracking server."""
    uri = (
        request.getfixturevalue("mlflow_server")().uri if through == "server" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    )
    run_ids = [RunStore(uri, "data").create_run(f"r{i}", {}) for i in range(8)]
    together = threading.Barrier(len(run_ids))
    failures = []

    def log(run_id: str) -> None:
        store = RunStore(uri, "data")
        together.wait()
        try:
            store.log_dataset(run_id, {"name": "synthetic", "digest": "5d41402a", "source": {"kind": "synthetic"}})
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=log, args=(r,)) for r in run_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    client = MlflowClient(uri)
    logged = [[d.dataset.digest for d in client.get_run(r).inputs.dataset_inputs] for r in run_ids]
    assert logged == [["5d41402a"]] * len(run_ids)
