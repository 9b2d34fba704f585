"""A real `mlflow server` stops mid-run: training goes on and no metric point is lost."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

import reliability
from support import SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

CPU = "system/cpu_utilization_percentage"  # a system metric MLflow's monitor samples
AGENT = "ablate.tracking.agent:serve"  # the agent's request to the child entry point (ablate/child.py)
ARGS = [
    "model=nano",
    "train.steps=300",
    "train.log_interval=5",
    "train.eval_interval=100",
    "train.flush_interval_s=0.2",
    "train.checkpoint_interval=1000",
    "train.progress=false",
    *SMALL_DATA,
]


def wait_for(condition, timeout: float, message: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, message
        time.sleep(0.2)


def points(uri: str, key: str = "train/loss") -> list[int]:
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    return run, sorted(m.step for m in client.get_metric_history(run.info.run_id, key))


def start_training(cli, workdir: Path, uri: str):
    """The run as a user starts it, `python -m ablate` in a fresh interpreter (the test stops and
    continues it), so that its MLflow calls go through its tracking agent, as a user's do."""
    log = workdir / "train.log"
    return cli.start([*ARGS, f"tracking.uri={uri}"], workdir, stdout=log, stderr=log, fresh=True), log


def through_its_agent(proc) -> bool:
    """The run's tracking agent (tracking/agent.py) is among its child processes."""
    children = psutil.Process(proc.pid).children(recursive=True)
    return any(AGENT in " ".join(c.cmdline()) for c in children if c.is_running())


@pytest.mark.ledger("fault", "`mlflow server` stopped mid-run, started again while the run goes on")
def test_outage_mid_run_is_bridged_by_the_buffer(cli, request, workdir, mlflow_server):
    server = mlflow_server(f"sqlite:///{workdir / 'store.db'}")
    proc, log = start_training(cli, workdir, server.uri)
    try:
        wait_for(lambda: _has_points(server.uri), 300, "no metric reached the server")
        assert through_its_agent(proc), "the run's MLflow calls do not go through its tracking agent"
        # The trainer is frozen while the server stops and again while it restarts, so the run
        # cannot end during the outage however long a restart takes (that case is the spool test).
        os.kill(proc.pid, signal.SIGSTOP)
        server.stop()
        os.kill(proc.pid, signal.SIGCONT)
        wait_for(lambda: "cannot reach" in log.read_text(), 300, "the trainer never noticed the outage")
        os.kill(proc.pid, signal.SIGSTOP)
        assert proc.poll() is None, "training must go on during the outage"
        server.start()
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(600) == 0, log.read_text()[-2000:]
        run, steps = points(server.uri)
        assert run.info.status == "FINISHED"
        assert steps == list(range(5, 301, 5))
        assert "reachable again" in log.read_text()
        reliability.record(
            request,
            f"`python -m ablate`, its MLflow calls through its tracking agent; training went on; exit 0; "
            f"train/loss at every 5th step, {len(steps)} of 60, after the restart; "
            "run FINISHED; 'reachable again' said",
        )
    finally:
        proc.kill()


@pytest.mark.ledger("fault", "`mlflow server` stopped mid-run and down when the run ends, then `python -m ablate sync`")
def test_run_ending_during_an_outage_is_spooled_then_synced(cli, request, workdir, mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")  # samples before the outage
    server = mlflow_server(f"sqlite:///{workdir / 'store.db'}")
    proc, log = start_training(cli, workdir, server.uri)
    try:
        wait_for(lambda: _has_points(server.uri), 300, "no metric reached the server")
        assert through_its_agent(proc), "the run's MLflow calls do not go through its tracking agent"
        # The trainer is frozen until the server is down: its agent's monitor still samples, and its
        # first sample (0.2 s, then a get_run and a log_batch over HTTP) can reach the server after
        # the first train/loss point on a loaded machine; nor can the run end before the outage.
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: _has_points(server.uri, CPU), 300, "no system metrics sample reached the server")
        server.stop()
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(600) == 0, log.read_text()[-2000:]
        spooled = list((workdir / ".ablate" / "state" / "spool").glob("*.json"))
        assert len(spooled) == 1 and "python -m ablate sync" in log.read_text()
        server.start()
        synced = cli([], workdir, command="sync")
        assert synced.returncode == 0, synced.stderr
        run, steps = points(server.uri)
        assert run.info.status == "FINISHED"
        assert steps == list(range(5, 301, 5))
        assert not list((workdir / ".ablate" / "state" / "spool").glob("*.json"))
        assert "result.json" in {a.path for a in MlflowClient(server.uri).list_artifacts(run.info.run_id)}
        _, sampled = points(server.uri, CPU)
        assert sampled, "the system metrics sampled before the outage are kept"
        reliability.record(
            request,
            "`python -m ablate`, through its tracking agent: exit 0; one spool file; "
            f"sync exit 0: {len(steps)} of 60 train/loss points, result.json, run FINISHED; "
            f"spool emptied; {len(sampled)} system metrics samples from before the outage",
        )
    finally:
        proc.kill()


def _has_points(uri: str, key: str = "train/loss") -> bool:
    try:
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("ablate")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        return bool(runs) and bool(client.get_metric_history(runs[0].info.run_id, key))
    except Exception:
        return False
