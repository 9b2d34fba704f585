"""Eight runs at once against one MLflow store: a fresh sqlite file, and a real `mlflow server`.

Both races seen on these machines (ecosystem-facts.md) hit exactly this: processes creating a
fresh sqlite schema together ("duplicate column name"), and processes creating the same experiment
together on a server (runs landing in experiment 0). The sweep creates the store, the experiment
and the parent run once, before the parallel launcher starts its 8 processes.
"""

import socket
import subprocess
import sys
import time

import pytest
import requests
from mlflow.tracking import MlflowClient

from conftest import SMALL_DATA, cli

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

# Generous: on a 2-core machine shared with other work, 8 processes starting torch at once are slow.
TIMEOUT_S = 1800
RUNS = 8
STEPS, LOG_EVERY, EVAL_EVERY = 40, 5, 10
ARGS = ["--multirun", "model=nano", f"train.seed={','.join(map(str, range(RUNS)))}", f"train.steps={STEPS}",
        f"train.log_interval={LOG_EVERY}", f"train.eval_interval={EVAL_EVERY}", "train.flush_interval_s=0.2",
        "train.progress=false", "hydra/launcher=parallel", f"hydra.launcher.workers={RUNS}",
        "tracking.experiment=concurrent", *SMALL_DATA]


def check_store(uri: str, out: str) -> None:
    """8 FINISHED runs in the sweep's experiment, each with every metric point, none elsewhere."""
    assert f"{RUNS} at a time" in out
    client = MlflowClient(uri)
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    runs = client.search_runs([experiments["concurrent"]])
    children = [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(int(r.data.params["train.seed"]) for r in children) == list(range(RUNS))
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == RUNS + 1
    for name, experiment_id in experiments.items():
        if name != "concurrent":
            assert client.search_runs([experiment_id]) == [], f"runs landed in experiment {name!r}"
    logged = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    evals = list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    for run in children:
        for key, steps in (("train/loss", logged), ("flops", logged), ("tokens", logged), ("val/loss", evals),
                           ("final/val_loss", [STEPS])):
            history = client.get_metric_history(run.info.run_id, key)
            assert sorted(m.step for m in history) == steps, (run.data.params["train.seed"], key)


def test_eight_concurrent_runs_on_a_fresh_sqlite_store(workdir):
    proc = cli(ARGS, workdir, timeout=TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "duplicate column" not in out
    check_store(f"sqlite:///{workdir / 'mlflow.db'}", out)


def test_eight_concurrent_runs_against_a_tracking_server(workdir):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{workdir / 'server.db'}",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=open(workdir / "server.log", "wb"),
    )
    try:
        uri = f"http://127.0.0.1:{port}"
        wait_healthy(uri, server, workdir / "server.log")
        proc = cli([*ARGS, f"tracking.uri={uri}"], workdir, timeout=TIMEOUT_S)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        check_store(uri, out)
    finally:
        stop(server)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(uri: str, server: subprocess.Popen, log, timeout: float = 600.0) -> None:
    """Until the server answers /health (its start-up imports take a while on a loaded machine)."""
    deadline = time.time() + timeout
    while True:
        assert server.poll() is None, f"mlflow server exited: {log.read_text()[-2000:]}"
        try:
            if requests.get(f"{uri}/health", timeout=5).ok:
                return
        except requests.RequestException:
            pass
        assert time.time() < deadline, f"mlflow server not healthy after {timeout:.0f} s: {log.read_text()[-2000:]}"
        time.sleep(0.5)


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
