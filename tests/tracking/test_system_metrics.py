"""MLflow's system metrics on a tracked run (tracking/system_metrics.py): sampled while it runs, in the
run's own process and in the tracking agent's, none with tracking.system_metrics=false, and never
part of the history a branch inherits."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

from ablate.config import ConfigError, TrackingConfig
from ablate.provenance import config_hash
from ablate.tracking import agent
from ablate.tracking.spool import sync_file
from ablate.tracking.tags import SYSTEM_METRICS_PREFIX
from ablate.tracking.tracker import MLflowTracker
from support import run_config

CPU = "system/cpu_utilization_percentage"


@pytest.fixture(autouse=True)
def fast_sampling(monkeypatch):
    """MLflow's own setting, read by the monitor (and inherited by an agent started after it)."""
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.1")


def tracked_run(tracker: MLflowTracker, samples: int = 2) -> str:
    """A run closed once the store holds `samples` of its CPU points (none asked: after 0.6 s)."""
    tracker.start("r", {"a": 1}, {})
    tracker.record(1, {"flops": 1.0})
    if samples:
        sampled(tracker.cfg.uri, tracker.run_id, samples)
    else:
        time.sleep(0.6)
    tracker.finish("FINISHED")
    return tracker.run_id


def sampled(uri: str, run_id: str, at_least: int, timeout: float = 300.0) -> None:
    """Until the store holds `at_least` CPU points of the run. Each sample costs the monitor a get_run
    and a log_batch besides its 0.1 s interval: on a loaded machine fewer than 2 fitted in 0.6 s."""
    deadline = time.monotonic() + timeout
    while len(MlflowClient(uri).get_metric_history(run_id, CPU)) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} CPU samples of run {run_id} in {timeout:.0f} s"
        time.sleep(0.1)


def system_keys(uri: str, run_id: str) -> list[str]:
    return sorted(k for k in MlflowClient(uri).get_run(run_id).data.metrics if k.startswith(SYSTEM_METRICS_PREFIX))


@pytest.mark.parametrize("on", [True, False])
def test_a_run_has_system_metrics_when_on_and_none_when_off(tmp_path, on):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracked_run(MLflowTracker(TrackingConfig(uri=uri, experiment="sys", system_metrics=on)), 2 if on else 0)
    keys = system_keys(uri, run_id)
    if on:
        assert CPU in keys and "system/system_memory_usage_megabytes" in keys
        history = MlflowClient(uri).get_metric_history(run_id, CPU)
        assert [m.step for m in history] == list(range(len(history))) and len(history) >= 2
    else:
        assert keys == []
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"


def test_the_agent_samples_the_machine_for_the_run_and_stops_when_it_ends(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    process = agent.Agent()
    try:
        process.use(uri)
        tracker = MLflowTracker(TrackingConfig(uri=uri, experiment="sys"), agent=process)
        assert isinstance(tracker.store, agent.AgentStore)
        run_id = tracked_run(tracker)
        ended = len(MlflowClient(uri).get_metric_history(run_id, CPU))
        time.sleep(0.5)
        assert ended >= 2 and len(MlflowClient(uri).get_metric_history(run_id, CPU)) == ended
    finally:
        process.close()
    assert process.proc.returncode == 0


def test_a_resumed_run_continues_its_system_metrics_steps(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = TrackingConfig(uri=uri, experiment="sys")
    run_id = tracked_run(MLflowTracker(cfg))
    first = [m.step for m in MlflowClient(uri).get_metric_history(run_id, CPU)]
    resumed = MLflowTracker(cfg)
    resumed.start("r", {"a": 1}, {}, resume_run_id=run_id)
    sampled(uri, run_id, len(first) + 1)
    resumed.finish("FINISHED")
    steps = [m.step for m in MlflowClient(uri).get_metric_history(run_id, CPU)]
    assert steps[: len(first)] == first and steps == list(range(len(steps))) and len(steps) > len(first)


def test_a_branch_inherits_the_runs_metrics_but_not_the_machines(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MLflowTracker(TrackingConfig(uri=uri, experiment="sys"))
    tracker.start("r", {"a": 1}, {})
    tracker.record(5, {"flops": 5.0})
    sampled(uri, tracker.run_id, 1)
    assert tracker.flush(force=True) and system_keys(uri, tracker.run_id)
    assert [m[0] for m in tracker.points_until(5)] == ["flops"]
    tracker.finish("FINISHED")


def test_a_store_gone_mid_run_still_gets_every_point_and_keeps_the_system_metrics_sampled_before(tmp_path):
    """The agent is the store as the run sees it: killed, every call fails like an unreachable store.
    The run's points are spooled and synced; the system metrics it sampled until then stay."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    process = agent.Agent()
    process.use(uri)
    tracker = MLflowTracker(TrackingConfig(uri=uri, experiment="sys"), spool_dir=tmp_path / "spool", agent=process)
    tracker.start("r", {"a": 1}, {})
    tracker.record(1, {"flops": 1.0})
    sampled(uri, tracker.run_id, 1)
    assert tracker.flush(force=True)
    process.proc.kill()
    process.proc.wait()
    tracker.record(2, {"flops": 2.0})
    tracker.finish("FINISHED")
    (spooled,) = (tmp_path / "spool").glob("*.json")
    assert sync_file(spooled) == 1
    client = MlflowClient(uri)
    assert [m.step for m in client.get_metric_history(tracker.run_id, "flops")] == [1, 2]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert client.get_metric_history(tracker.run_id, CPU)
    process.close()


def test_the_switch_leaves_the_config_hash_alone_and_takes_only_a_boolean(tmp_path):
    on, off = (run_config(tmp_path, "mlflow", **{"tracking.system_metrics": v}) for v in (True, False))
    assert on.tracking.system_metrics and not off.tracking.system_metrics
    assert config_hash(on) == config_hash(off)
    with pytest.raises(ConfigError, match="tracking.system_metrics='sometimes' is not a boolean"):
        run_config(tmp_path, "mlflow", **{"tracking.system_metrics": "sometimes"})
