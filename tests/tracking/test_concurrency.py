"""Eight runs at once against one MLflow store: a fresh sqlite file, and a real `mlflow server`.

Both races seen on these machines (ecosystem-facts.md) hit exactly this: processes creating a
fresh sqlite schema together ("duplicate column name"), and processes creating the same experiment
together on a server (runs landing in experiment 0). The sweep creates the store, the experiment
and the parent run once, before the parallel launcher starts its 8 processes.
"""

import pytest
from mlflow.tracking import MlflowClient

from support import SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.load]

# Generous: on a 2-core machine shared with other work, 8 processes starting torch at once are slow.
TIMEOUT_S = 1800
RUNS = 8
STEPS, LOG_EVERY, EVAL_EVERY = 40, 5, 10
ARGS = [
    "--multirun",
    "model=nano",
    f"train.seed={','.join(map(str, range(RUNS)))}",
    f"train.steps={STEPS}",
    f"train.log_interval={LOG_EVERY}",
    f"train.eval_interval={EVAL_EVERY}",
    "train.flush_interval_s=0.2",
    "train.progress=false",
    "hydra/launcher=parallel",
    f"hydra.launcher.workers={RUNS}",
    "tracking.experiment=concurrent",
    *SMALL_DATA,
]


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
        for key, steps in (
            ("train/loss", logged),
            ("flops", logged),
            ("tokens", logged),
            ("val/loss", evals),
            ("final/val_loss", [STEPS]),
        ):
            history = client.get_metric_history(run.info.run_id, key)
            assert sorted(m.step for m in history) == steps, (run.data.params["train.seed"], key)


def test_eight_concurrent_runs_on_a_fresh_sqlite_store(cli, workdir):
    proc = cli(ARGS, workdir, timeout=TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "duplicate column" not in out
    check_store(f"sqlite:///{workdir / 'mlflow.db'}", out)


def test_eight_concurrent_runs_against_a_tracking_server(cli, workdir, mlflow_server):
    server = mlflow_server()
    proc = cli([*ARGS, f"tracking.uri={server.uri}"], workdir, timeout=TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    check_store(server.uri, out)
