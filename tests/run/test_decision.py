"""One rule decides whether a launch trains, resumes or skips a run (run/decision.py): the run applies
it, and a sweep's plan announces it. Here: the rule itself over every MLflow status and reason, and
the run and the plan agreeing on real stores."""

import itertools
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ablate.run import checkpoint, train
from ablate.run.decision import BUSY, RESUME, RUN, SKIP, decide
from ablate.run.prepare import prepare
from ablate.sweep.plan import PlannedJob, decide_all
from ablate.tracking.runstore import ExistingRun
from ablate.tracking.tags import CONFIG_HASH_TAG, REASON_TAG, RESUMED_TAG

STATUSES = [
    None,
    ("RUNNING", ""),
    ("FINISHED", ""),
    ("FAILED", "Diverged: loss became nan at step 7"),
    ("KILLED", "KeyboardInterrupt: signal SIGTERM"),
    ("KILLED", "pruned: optuna trial 3: val loss 2.9 at step 10"),
]
CHECKPOINTS = [None, checkpoint.CheckpointMeta(10, "run-a", "h"), checkpoint.CheckpointMeta(10, "", "h")]


@pytest.mark.parametrize(
    "status, state, rerun, retry_failed, store",
    list(itertools.product(STATUSES, CHECKPOINTS, (False, True), (False, True), ("sqlite:///s.db", None))),
)
def test_the_rule_over_every_status_reason_checkpoint_and_flag(status, state, rerun, retry_failed, store):
    existing = ExistingRun("run-a", *status) if status else None
    d = decide(existing, state, rerun, retry_failed, store)
    name, reason = status or (None, "")
    pruned = name == "KILLED" and reason.startswith("pruned")
    if name == "FINISHED" or pruned:
        assert d.action == (RUN if rerun else SKIP)
        assert not d.from_checkpoint and d.resume_run_id is None  # a rerun starts from step 0 in a new run
    elif name == "FAILED":
        assert d.action == (RUN if retry_failed else SKIP)
        assert not d.from_checkpoint and d.resume_run_id is None
    elif name in ("RUNNING", "KILLED"):
        assert d.action == RESUME and d.resume_run_id == "run-a" and d.from_checkpoint == (state is not None)
    elif state is None or (store and state.mlflow_run_id):  # no run; a checkpoint of a run the store lacks
        assert d.action == RUN and not d.from_checkpoint
        assert (store in d.reason) if state is not None else d.reason == ""
    else:
        assert d.action == RESUME and d.from_checkpoint and d.resume_run_id is None
    assert d.action != SKIP or d.reason  # a skip always says why
    assert d.finished_before == (d.action == SKIP and name == "FINISHED")


@pytest.mark.parametrize("status", STATUSES)
def test_a_run_another_launch_is_training_is_busy_whatever_its_history(status):
    existing = ExistingRun("run-a", *status) if status else None
    d = decide(existing, CHECKPOINTS[1], True, True, "sqlite:///s.db", busy="pid 7 on vm since 12:00")
    assert d.action == BUSY and d.reason == "being trained by pid 7 on vm since 12:00"
    assert not d.from_checkpoint


def _recorded(run_config, tmp_path, status: str, reason: str, with_checkpoint: bool):
    """A store holding one run of `cfg` ended as (status, reason), optionally with its checkpoint."""
    cfg = run_config(tmp_path, tracking="mlflow")
    p = prepare(cfg)
    client = MlflowClient(cfg.tracking.uri)
    experiment = client.create_experiment(cfg.tracking.experiment)
    run = client.create_run(experiment, tags={CONFIG_HASH_TAG: p.config_hash, REASON_TAG: reason})
    client.set_terminated(run.info.run_id, status=status)
    if with_checkpoint:  # a real checkpoint of this config at step 10, as the interrupted run left it
        stop_at_10 = run_config(tmp_path / "ckpt", **{"train.steps": 10, "train.checkpoint_interval": 10})
        train.run(stop_at_10, tmp_path / "ckpt-out")
        (src,) = (tmp_path / "ckpt" / "state").iterdir()
        state = checkpoint.load(src)
        state.update(mlflow_run_id=run.info.run_id, config_hash=p.config_hash)
        checkpoint.save(state, cfg_state_dir(cfg, p))
    return cfg, p, run.info.run_id


def cfg_state_dir(cfg, p) -> Path:
    return Path(cfg.state_dir) / p.config_hash


@pytest.mark.slow
@pytest.mark.parametrize(
    "status, reason, with_checkpoint",
    [
        ("FINISHED", "", False),
        ("FAILED", "Diverged: loss became nan", False),
        ("KILLED", "pruned: optuna trial 0: val loss 3.1 at step 10 (median pruner)", False),
        ("KILLED", "KeyboardInterrupt: ", True),
        ("RUNNING", "", False),
    ],
)
def test_the_sweep_plan_announces_what_the_run_then_does(run_config, tmp_path, status, reason, with_checkpoint):
    cfg, p, run_id = _recorded(run_config, tmp_path, status, reason, with_checkpoint)
    job = PlannedJob(0, [], str(tmp_path / "job"), config_hash=p.config_hash, cfg=cfg)
    decide_all([job])
    result = train.run(cfg, tmp_path / "out", prepared=p)
    client = MlflowClient(cfg.tracking.uri)
    if job.action == SKIP:
        assert result.status == "skipped" and result.mlflow_run_id == run_id
    elif job.action == RESUME:
        assert result.status == "finished" and result.mlflow_run_id == run_id
        resumed_from = client.get_run(run_id).data.tags.get(RESUMED_TAG)
        assert resumed_from == ("10" if with_checkpoint else None)
    else:
        assert result.status == "finished" and result.mlflow_run_id != run_id
    expected = {"FINISHED": SKIP, "FAILED": SKIP, "RUNNING": RESUME}.get(
        status, SKIP if reason.startswith("pruned") else RESUME
    )
    assert job.action == expected
