"""A real `mlflow server` dies during a sweep and stays down: the sweep ends on time, every job says
how it ended, the parent run's ending and the running job's points are spooled, `ablate sync`
delivers both, and the same command run again trains what the outage stopped, each step once."""

from __future__ import annotations

import json
import time

import pytest
from mlflow.tracking import MlflowClient

import reliability
from support import SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

SWEEP = [
    "--multirun",
    "model=nano",
    *SMALL_DATA,
    "train.progress=false",
    "train.steps=150",
    "train.log_interval=5",
    "train.eval_interval=50",
    "train.flush_interval_s=0.2",
    "train.seed=0,1,2",
    "hydra/launcher=sequential",
]
ENDS_WITHIN_S = 300  # after the outage: MLflow's own retries, unbounded, took over four minutes a request


def wait_for(condition, timeout: float, message: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc is None or proc.poll() is None, message
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def runs(uri: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def first_points(uri: str) -> bool:
    try:
        return any(MlflowClient(uri).get_metric_history(r.info.run_id, "train/loss") for r in runs(uri))
    except Exception:
        return False


def steps(uri: str, run_id: str) -> list[int]:
    return [m.step for m in MlflowClient(uri).get_metric_history(run_id, "train/loss")]


@pytest.mark.ledger("fault", "`mlflow server` stopped during a sweep's first run and down until the sweep ends")
def test_a_sweep_outlives_a_tracking_outage_and_a_relaunch_completes_it(cli, request, workdir, mlflow_server):
    server = mlflow_server(f"sqlite:///{workdir / 'store.db'}")
    args = [*SWEEP, f"tracking.uri={server.uri}", "hydra.sweep.dir=multirun/outage"]
    log = workdir / "sweep.log"
    proc = cli.start(args, workdir, stdout=log, stderr=log)
    try:
        wait_for(lambda: first_points(server.uri), 300, "no metric reached the server", proc)
        server.stop()
        stopped = time.monotonic()
        assert proc.wait(ENDS_WITHIN_S) == 1, log.read_text()[-3000:]  # two runs failed
        took = time.monotonic() - stopped
    finally:
        proc.kill()
    sweep_dir = workdir / "multirun" / "outage"
    results = {n: json.loads((sweep_dir / n / "result.json").read_text()) for n in ("0", "1", "2")}
    assert [results[n]["status"] for n in "012"] == ["finished", "failed", "failed"]
    assert all("MlflowException" in results[n]["reason"] for n in "12")  # said, not "missing"
    spool = workdir / ".ablate" / "state" / "spool"
    spooled = sorted(spool.glob("*.json"))
    parent_id = json.loads((sweep_dir / "sweep.json").read_text())["parent_run_id"]
    assert sorted(p.stem for p in spooled) == sorted([parent_id, results["0"]["mlflow_run_id"]])
    assert "could not close the sweep's parent run" in log.read_text()

    server.start()
    synced = cli([str(spool)], workdir, command="sync")
    assert synced.returncode == 0, synced.stderr
    assert not list(spool.glob("*.json"))
    by_id = {r.info.run_id: r for r in runs(server.uri)}
    assert by_id[parent_id].info.status == "FAILED"  # two of its runs failed
    assert "summary.md" in {a.path for a in MlflowClient(server.uri).list_artifacts(parent_id)}
    first = by_id[results["0"]["mlflow_run_id"]]
    assert first.info.status == "FINISHED" and steps(server.uri, first.info.run_id) == list(range(5, 151, 5))

    again = cli([*SWEEP, f"tracking.uri={server.uri}", "hydra.sweep.dir=multirun/again"], workdir, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    trained = [r for r in runs(server.uri) if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(r.data.params["train.seed"] for r in trained) == ["0", "1", "2"]  # seed 0 skipped, not again
    assert {r.info.status for r in runs(server.uri)} == {"FINISHED", "FAILED"}  # nothing RUNNING
    assert all(steps(server.uri, r.info.run_id) == list(range(5, 151, 5)) for r in trained)  # each step once
    reliability.record(
        request,
        f"the sweep ended {took:.0f} s after the outage, exit 1; result.json of every job (the two started "
        "during the outage failed, with the reason); the parent's ending and the first run's points spooled; "
        "sync exit 0: parent FAILED with its summary, first run FINISHED, 30 of 30 train/loss points; the same "
        "command again: the two runs trained, the first skipped, every run's 30 train/loss points each once, "
        "nothing RUNNING",
    )
