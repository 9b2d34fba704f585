"""kill -9 of a sweep's job processes at each moment of a run's life (faults.failpoint): the sweep
ends with every run and its parent FINISHED, FAILED or KILLED, none RUNNING, and the same command
run again completes every run, each step logged once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import reliability
from ablate.faults import ENV
from support import SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

STEPS, LOG_EVERY = 24, 2
SWEEP = [
    "--multirun",
    "model=nano",
    *SMALL_DATA,
    "train.progress=false",
    f"train.steps={STEPS}",
    f"train.log_interval={LOG_EVERY}",
    "train.eval_interval=12",
    "train.checkpoint_interval=8",
    "train.flush_interval_s=0.3",
    "train.seed=0,1",
    "hydra/launcher=parallel",
    "hydra.launcher.workers=2",
    "hydra.launcher.threads_per_job=1",
]
# Each moment of a run's life in its job's process, the kill at it (both jobs reach it).
MOMENTS = {
    "run.started": "its MLflow run created, its watchdog not yet started",
    "tracking.flush@2": "part of a metrics batch delivered",
    "checkpoint.write@2": "half of a checkpoint written",
    "run.ending": "result.json and the last checkpoint written, the MLflow run still open",
}


def statuses(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return sorted(row[0] for row in con.execute("SELECT status FROM runs"))


@pytest.mark.ledger("fault", "SIGKILL of a parallel sweep's two jobs at `{point}`, then the same command again")
@pytest.mark.parametrize("point", list(MOMENTS))
def test_jobs_killed_at_each_moment_leave_nothing_running_and_a_relaunch_completes_them(cli, request, tmp_path, point):
    killed = cli(SWEEP, tmp_path, env={ENV: point}, timeout=900)
    assert killed.returncode == 1, killed.stderr[-3000:]  # both rows failed: killed by SIGKILL
    assert "killed by SIGKILL" in killed.stderr
    after_kill = statuses(tmp_path / "mlflow.db")
    assert "RUNNING" not in after_kill, after_kill
    again = cli(SWEEP, tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    trained = [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(r.data.params["train.seed"] for r in trained) == ["0", "1"]  # resumed, not run twice
    assert {r.info.status for r in trained} == {"FINISHED"}
    for r in trained:
        assert [m.step for m in client.get_metric_history(r.info.run_id, "train/loss")] == list(
            range(LOG_EVERY, STEPS + 1, LOG_EVERY)
        )
    assert "RUNNING" not in statuses(tmp_path / "mlflow.db")
    reliability.record(
        request,
        f"killed at {MOMENTS[point]}: exit 1, both rows 'killed by SIGKILL'; runs after the kill: "
        f"{', '.join(after_kill)} (none RUNNING); the same command: exit 0, both runs FINISHED in their first "
        f"MLflow runs, {STEPS // LOG_EVERY} of {STEPS // LOG_EVERY} train/loss steps each, each once",
    )
