"""A run's MLflow calls made by a process beside it (tracking/agent.py): the same records as a
RunStore in the run's own process, failures that look like an unreachable store, signals meant for
the run ignored, and a fresh `python -m ablate` run that never imports MLflow itself."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
from mlflow.tracking import MlflowClient

from ablate.config import TrackingConfig
from ablate.tracking import agent
from ablate.tracking.tags import CONFIG_HASH_TAG, REASON_TAG, STEP_KEY
from ablate.tracking.tracker import MLflowTracker
from support import SMALL_DATA


@pytest.fixture
def served(tmp_path):
    """An agent for a new sqlite store in tmp_path, its experiment opened; closed afterwards."""
    process = agent.Agent()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    process.use(uri)
    process.open("served")
    yield process, uri
    process.close()


def test_the_agent_makes_a_runs_calls_and_the_store_holds_them(served, tmp_path):
    process, uri = served
    store = agent.AgentStore(process)
    assert store.find("abc") is None
    run_id = store.create_run("r", {CONFIG_HASH_TAG: "abc"})
    store.log_params(run_id, {"model.n_embd": "32", "long": "x" * 7000})
    store.log_metrics(
        run_id, [("train/loss", 2.5, 1, 1000), ("train/loss", math.nan, 2, 2000), (STEP_KEY, 2.0, 2, 2000)]
    )
    store.log_tags(run_id, {REASON_TAG: "diverged"})
    (tmp_path / "result.json").write_text("{}")
    store.log_artifact(run_id, str(tmp_path / "result.json"))
    store.set_terminated(run_id, "FAILED")
    assert store.find("abc") == {"run_id": run_id, "status": "FAILED", "reason": "diverged", "owner": ""}
    assert store.last_step(run_id, STEP_KEY) == 2
    points = sorted(tuple(p) for p in store.metric_points(run_id, 1))
    assert points == [("train/loss", 2.5, 1, 1000)]

    run = MlflowClient(uri).get_run(run_id)  # what the store holds, read without the agent
    assert run.info.status == "FAILED" and run.data.tags[REASON_TAG] == "diverged"
    assert run.data.params["model.n_embd"] == "32" and len(run.data.params["long"]) == 6000
    history = MlflowClient(uri).get_metric_history(run_id, "train/loss")
    assert [m.step for m in history] == [1, 2] and math.isnan(history[1].value)
    assert [a.path for a in MlflowClient(uri).list_artifacts(run_id)] == ["result.json"]
    process.close()
    assert process.proc.returncode == 0


def test_a_store_that_cannot_open_fails_the_first_call_in_one_line(tmp_path):
    process = agent.Agent()
    try:
        process.use(f"sqlite:///{tmp_path / 'no-such-dir' / 'mlflow.db'}")
        process.open("x")
        with pytest.raises(agent.StoreError, match="no-such-dir"):
            process.call("find", "abc")
        with pytest.raises(agent.StoreError, match="not open"):
            process.call("find", "abc")  # the store never opened: later calls say so
    finally:
        process.close()


def test_the_agent_ignores_the_signals_meant_for_the_run(served):
    process, _ = served
    store = agent.AgentStore(process)
    assert store.find("abc") is None  # serving: its handlers are set (it starts in a session of its own)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        os.kill(process.proc.pid, signum)
    assert store.find("abc") is None and process.alive()


def test_a_dead_agent_is_an_outage_the_tracker_buffers_then_spools(served, tmp_path):
    process, uri = served
    tracker = MLflowTracker(TrackingConfig(uri=uri, experiment="served"), spool_dir=tmp_path / "spool")
    tracker.store = agent.AgentStore(process)
    tracker.start("r", {"a": 1}, {})
    tracker.record(1, {"train/loss": 2.0})
    assert tracker.flush(force=True)
    process.proc.kill()
    process.proc.wait()
    tracker.record(2, {"train/loss": 1.5})
    assert not tracker.flush(force=True) and [m[2] for m in tracker.pending] == [2]
    tracker.finish("FINISHED")
    spooled = json.loads((tmp_path / "spool" / f"{tracker.run_id}.json").read_text())
    assert [m[2] for m in spooled["metrics"]] == [2] and spooled["status"] == "FINISHED"
    with pytest.raises(agent.AgentGone):
        process.call("find", "abc")


def test_no_agent_where_mlflow_is_imported_already():
    # this test process has imported MLflow: a RunStore here costs nothing to start
    assert agent.start("sqlite:////tmp/x.db") is None


def test_an_agent_serves_only_its_own_store_experiment_and_process(served):
    process, uri = served
    assert isinstance(process.store_for(uri, "served"), agent.AgentStore)
    assert process.store_for("sqlite:////tmp/other.db", "served") is None
    assert process.store_for(uri, "another experiment") is None
    process.owner = -1  # as in a child forked from the process that started it
    assert process.store_for(uri, "served") is None
    process.close()  # only its owner closes it
    assert process.alive()
    process.owner = os.getpid()


@pytest.mark.e2e
def test_a_fresh_run_records_everything_without_importing_mlflow_itself(tmp_path):
    """`python -m ablate` in a new interpreter: the run's own process never imports MLflow, and
    MLflow holds the run, finished, with its params, metrics and result.json."""
    db = tmp_path / "mlflow.db"
    args = ["model=nano", "train.steps=6", "train.log_interval=2", "train.progress=false", *SMALL_DATA]
    args += [f"tracking.uri=sqlite:///{db}", f"state_dir={tmp_path / 'state'}", f"hydra.run.dir={tmp_path / 'run'}"]
    script = textwrap.dedent(
        f"""
        import sys
        from ablate.cli.main import main
        try:
            main({args!r})
        finally:
            print("MLFLOW_IMPORTED" if "mlflow" in sys.modules else "MLFLOW_NOT_IMPORTED")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "MLFLOW_NOT_IMPORTED"
    client = MlflowClient(f"sqlite:///{db}")
    (run,) = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["model.name"] == "nano"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [2, 4, 6]
    assert "result.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert agents_in(tmp_path) == []  # closed with the run


def agents_in(cwd) -> list[int]:
    """Live tracking agents started from `cwd`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        if "ablate.tracking.agent" in " ".join(proc.info["cmdline"] or []) and proc.info["cwd"] == str(cwd):
            found.append(proc.pid)
    return found


@pytest.mark.e2e
def test_a_run_that_fails_its_checks_leaves_no_agent_and_no_store(tmp_path):
    db = tmp_path / "mlflow.db"
    args = ["model=nano", "optim.lr=-1", f"tracking.uri=sqlite:///{db}", f"state_dir={tmp_path / 'state'}"]
    done = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: optim.lr=-1"), done.stderr
    assert not db.exists() and agents_in(tmp_path) == []
