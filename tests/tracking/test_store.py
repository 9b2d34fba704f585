"""A new sqlite store is a copy of an empty one made once per MLflow version (tracking/store.py): the
same schema MLflow makes, the Default experiment's artifacts beside the database, and a store made by
MLflow itself where the cache cannot be written."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND


def schema(db: Path) -> tuple[list, list]:
    """The tables' and indexes' SQL, and the alembic revision, of a sqlite store. Each statement is
    compared as the set of its lines: MLflow's migrations write a table's constraints in set order,
    which differs from one process to the next."""
    with closing(sqlite3.connect(db)) as con:
        rows = con.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")
        sql = sorted(sorted(line.strip().rstrip(",") for line in r[0].splitlines()) for r in rows)
        revision = con.execute("SELECT version_num FROM alembic_version").fetchall()
    return sql, revision


def default_location(db: Path) -> str:
    with closing(sqlite3.connect(db)) as con:
        return con.execute("SELECT artifact_location FROM experiments WHERE experiment_id = 0").fetchone()[0]


def test_a_new_store_is_a_copy_of_the_cached_empty_store_with_mlflows_own_schema(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    direct = tmp_path / "direct.db"
    MlflowClient(f"sqlite:///{direct}").search_experiments()

    first = tmp_path / "a" / "mlflow.db"
    first.parent.mkdir()
    eid = ensure_experiment(f"sqlite:///{first}", "runs")
    template = tmp_path / "cache" / "mlflow-stores" / f"empty-{mlflow.__version__}.db"
    assert template.is_file()
    made = template.stat().st_mtime_ns

    second = tmp_path / "b" / "mlflow.db"
    second.parent.mkdir()
    ensure_experiment(f"sqlite:///{second}", "runs")
    assert template.stat().st_mtime_ns == made  # copied, not made again

    for db in (first, second):
        assert schema(db) == schema(direct)
        assert default_location(db) == db.parent.joinpath("mlartifacts", "0").as_uri()
    assert not list(first.parent.glob(".*.tmp"))
    client = MlflowClient(f"sqlite:///{first}")
    experiment = client.get_experiment(eid)
    assert experiment.name == "runs" and experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    run = client.create_run(eid)
    client.log_metric(run.info.run_id, "val/loss", 1.5, step=3)
    assert client.get_metric_history(run.info.run_id, "val/loss")[0].value == 1.5


def test_without_a_writable_cache_mlflow_makes_the_store(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be\n")
    monkeypatch.setenv("ABLATE_CACHE", str(blocker))
    db = tmp_path / "mlflow.db"
    eid = ensure_experiment(f"sqlite:///{db}", "runs")
    assert MlflowClient(f"sqlite:///{db}").get_experiment(eid).name == "runs"
    assert blocker.read_text().startswith("a file")


def test_a_run_killed_before_its_params_gets_them_when_it_resumes(tmp_path):
    """A kill between create_run and log_params leaves a run with tags and no params; the resume logs
    the missing ones and leaves those already there, which MLflow refuses to change."""
    from ablate.config import TrackingConfig
    from ablate.tracking.runstore import RunStore
    from ablate.tracking.tracker import MLflowTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = RunStore(uri, "resume")
    bare = store.create_run("killed early", {"ablate.config_hash": "abc"})
    partial = store.create_run("killed midway", {"ablate.config_hash": "def"})
    store.log_params(partial, {"train.steps": "60"})
    for run_id in (bare, partial):
        tracker = MLflowTracker(TrackingConfig(uri=uri, experiment="resume"))
        tracker.start("again", {"train.steps": 60, "model.name": "nano"}, {}, resume_run_id=run_id)
        assert MlflowClient(uri).get_run(run_id).data.params == {"train.steps": "60", "model.name": "nano"}
