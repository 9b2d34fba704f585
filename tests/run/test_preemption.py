"""Preemption inside the training loop: a signal becomes a checkpoint at the next step boundary;
then the run stops (and resumes later with nothing lost or duplicated), goes on (SIGTERM in a SLURM
job), or is handed to submitit's real signal handler, which requeues it or, once the time-outs are
used up, fails it. The same paths against a real cluster: tests/test_slurm_launcher.py."""

import math
import os
import signal

import pytest
import submitit
from mlflow.tracking import MlflowClient
from submitit.core.utils import DelayedSubmission, JobPaths
from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE

from ablate.run import checkpoint, preemption, train
from ablate.tracking.tags import REASON_TAG

STEPS = {"train.steps": 40, "train.checkpoint_interval": 1000}  # no periodic checkpoint before the end


def send_at(step_wanted: int, signum: int, also=None):
    """An eval hook that signals this very process at one evaluation (the loop runs in the main thread)."""

    def on_eval(step, val_loss, flops):
        if step == step_wanted:
            os.kill(os.getpid(), signum)
        if also:
            also(step)

    return on_eval


def history(uri: str, run_id: str) -> dict:
    client = MlflowClient(uri)
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        for key in ("train/loss", "val/loss", "flops")
    }


def assert_same_history(got: dict, want: dict) -> None:
    for key in want:
        assert [s for s, _ in got[key]] == [s for s, _ in want[key]], key  # complete, no duplicates
        for (s, a), (_, b) in zip(got[key], want[key], strict=False):
            assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6), (key, s, a, b)


@pytest.fixture(scope="module")
def reference(run_config, tmp_path_factory):
    """The same run, uninterrupted, in its own store."""
    tmp_path = tmp_path_factory.mktemp("reference")
    cfg = run_config(tmp_path, tracking="mlflow", **STEPS)
    result = train.run(cfg, tmp_path / "out")
    return history(cfg.tracking.uri, result.mlflow_run_id)


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM, signal.SIGCONT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_usr2_outside_slurm_checkpoints_stops_and_the_run_resumes_exactly(
    run_config, tmp_path, monkeypatch, reference, restore_signals
):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    cfg = run_config(tmp_path, tracking="mlflow", **STEPS)
    with pytest.raises(preemption.Requeued) as stopped:
        train.run(cfg, tmp_path / "first", on_eval=send_at(20, signal.SIGUSR2))
    assert stopped.value.code == 128 + signal.SIGUSR2
    client = MlflowClient(cfg.tracking.uri)
    (run,) = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
    assert run.info.status == "KILLED" and "SIGUSR2" in run.data.tags[REASON_TAG]
    (state_dir,) = (tmp_path / "state").iterdir()
    assert checkpoint.load(state_dir)["step"] == 20  # written at the signal, not at an interval
    assert [(e["signal"], e["step"], e["action"]) for e in preemption.read_events(tmp_path / "first")] == [
        ("SIGUSR2", 20, "stop")
    ]
    assert signal.getsignal(signal.SIGUSR2) is not preemption._on_signal  # handed back after the run

    resumed = train.run(cfg, tmp_path / "second")
    assert resumed.status == "finished" and resumed.mlflow_run_id == run.info.run_id
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED" and run.data.tags[train.RESUMED_TAG] == "20"
    assert_same_history(history(cfg.tracking.uri, run.info.run_id), reference)


def test_sigterm_in_a_slurm_job_checkpoints_marks_killed_and_trains_on(
    run_config, tmp_path, monkeypatch, reference, restore_signals
):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # what SLURM sets in every job
    cfg = run_config(tmp_path, tracking="mlflow", **STEPS)
    client = MlflowClient(cfg.tracking.uri)
    seen = {}

    def status_at_30(step):
        if step == 30:
            (run,) = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
            seen["status"] = run.info.status
            seen["checkpoint_step"] = checkpoint.load(next((tmp_path / "state").iterdir()))["step"]

    result = train.run(cfg, tmp_path / "out", on_eval=send_at(20, signal.SIGTERM, also=status_at_30))
    # SIGKILL may follow a SIGTERM within KillWait: by then the state is on disk and MLflow says
    # KILLED (resumable); here none came, so the run went on and finished.
    assert seen == {"status": "KILLED", "checkpoint_step": 20}
    assert result.status == "finished"
    assert client.get_run(result.mlflow_run_id).info.status == "FINISHED"
    assert [(e["signal"], e["step"], e["action"]) for e in preemption.read_events(tmp_path / "out")] == [
        ("SIGTERM", 20, "continue")
    ]
    assert_same_history(history(cfg.tracking.uri, result.mlflow_run_id), reference)


def submitit_job(tmp_path, monkeypatch, timeout_min: int, countdown: int):
    """A real submitit job environment (its local executor's) with submitit's own signal handlers
    installed, as `python -m submitit.core._submit` does before calling the job's function."""
    for key, value in {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "77",
        "SUBMITIT_LOCAL_GLOBALID": "0",
        "SUBMITIT_LOCAL_LOCALID": "0",
        "SUBMITIT_LOCAL_NTASKS": "1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    paths = JobPaths(tmp_path / "submitit", job_id="77", task_id=0)
    paths.folder.mkdir(parents=True)
    delayed = DelayedSubmission(print, "the job's function")
    delayed.set_timeout(timeout_min, countdown)
    delayed.dump(paths.submitted_pickle)
    submitit.JobEnvironment()._handle_signals(paths, delayed)
    return paths


def test_usr2_in_a_submitit_job_checkpoints_then_submitit_requeues(run_config, tmp_path, monkeypatch, restore_signals):
    # 60 min limit, signal after seconds: submitit calls this a preemption and requeues it.
    submitit_job(tmp_path, monkeypatch, timeout_min=60, countdown=1)
    cfg = run_config(tmp_path, tracking="mlflow", **STEPS)
    with pytest.raises(preemption.Requeued) as stopped:
        train.run(cfg, tmp_path / "out", on_eval=send_at(10, signal.SIGUSR2))
    assert stopped.value.code == LOCAL_REQUEUE_RETURN_CODE  # the code submitit's local controller restarts on
    assert checkpoint.load(next((tmp_path / "state").iterdir()))["step"] == 10
    client = MlflowClient(cfg.tracking.uri)
    (run,) = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
    assert run.info.status == "KILLED" and "requeued" in run.data.tags[REASON_TAG]


def test_a_timeout_with_no_requeue_left_fails_the_run(run_config, tmp_path, monkeypatch, restore_signals):
    # Below ~50 min of limit submitit counts every USR2 as a time-out; countdown 0: none left.
    submitit_job(tmp_path, monkeypatch, timeout_min=5, countdown=0)
    cfg = run_config(tmp_path, tracking="mlflow", **STEPS)
    with pytest.raises(submitit.core.utils.UncompletedJobError, match="timed-out too many times"):
        train.run(cfg, tmp_path / "out", on_eval=send_at(10, signal.SIGUSR2))
    client = MlflowClient(cfg.tracking.uri)
    (run,) = client.search_runs([client.get_experiment_by_name(cfg.tracking.experiment).experiment_id])
    assert run.info.status == "FAILED" and "timed-out too many times" in run.data.tags[REASON_TAG]
    # the last state is still on disk: train.retry_failed=true would start over, a raised limit could resume
    assert checkpoint.load(next((tmp_path / "state").iterdir()))["step"] == 10
