"""A run with a list budget: one constant-rate trunk and a cooldown branch per budget (run/branches.py).
Each branch must be the very run a plain wsd run of its budget is: same weights, losses and history."""

from __future__ import annotations

import math

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.config import ConfigError
from ablate.run import branches, checkpoint, train
from ablate.run.prepare import prepare
from ablate.scaling.runs import read_experiment
from ablate.tracking.tags import FORK_TAG, KIND_TAG, TRUNK_KIND

WSD = {"optim.schedule": "wsd", "optim.warmup_steps": 4, "train.eval_interval": 10, "train.log_interval": 3}


def family(run_config, tmp_path, steps: list[int] | None, tracking: str = "none", **kw) -> branches.Family:
    return branches.prepare_family(run_config(tmp_path, tracking=tracking, **{**WSD, "train.steps": steps, **kw}))


def weights(state_dir, prepared) -> dict:
    return checkpoint.load(state_dir / prepared.config_hash)["model"]


def test_each_branch_is_the_plain_wsd_run_of_its_budget(tmp_path, run_config):
    fam = family(run_config, tmp_path / "fam", [40, 20, 30])
    assert fam.budgets == (20, 30, 40) and fam.forks == (16, 24, 32) and fam.trunk.total_steps == 32
    assert fam.cost_steps == 32 + 4 + 6 + 8 < 20 + 30 + 40  # per-budget runs train every step again
    result = branches.run_family(fam, tmp_path / "out")
    assert result.trunk.kind == "trunk" and result.trunk.steps == 32 and result.trunk.status == "finished"
    for i, steps in enumerate((20, 30, 40)):
        alone = run_config(tmp_path / f"alone{steps}", **{**WSD, "train.steps": steps})
        solo = train.run(alone, tmp_path / f"alone{steps}" / "out")
        branch = result.branches[i]
        assert branch.kind == "branch" and branch.fork_step == fam.forks[i] and branch.status == "finished"
        assert branch.config_hash == solo.config_hash  # the same run, so skips and resumes carry over
        assert (branch.steps, branch.tokens, branch.flops) == (solo.steps, solo.tokens, solo.flops)  # from step 0
        assert branch.final_val_loss == solo.final_val_loss and branch.final_train_loss == solo.final_train_loss
        mine, theirs = (
            weights(tmp_path / "fam" / "state", fam.branches[i]),
            weights(tmp_path / f"alone{steps}" / "state", prepare(alone)),
        )
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
        assert branch.train_s > 0 and branch.train_cpu_s > 0


def test_a_named_family_names_each_branch_by_its_budget_and_the_trunk_as_such(tmp_path, run_config):
    named = family(run_config, tmp_path, [20, 40], **{"tracking.run_name": "model=nano train.steps=[20,40]"})
    assert [b.cfg.tracking.run_name for b in named.branches] == [
        "model=nano train.steps=20",
        "model=nano train.steps=40",
    ]
    assert named.trunk.cfg.tracking.run_name == "model=nano train.steps=trunk"
    other = family(run_config, tmp_path, [20, 40], **{"tracking.run_name": "mine"})
    assert [b.cfg.tracking.run_name for b in other.branches] == ["mine train.steps=20", "mine train.steps=40"]
    assert family(run_config, tmp_path, [20, 40]).trunk.cfg.tracking.run_name is None  # unnamed: train.run names it


def test_a_list_budget_needs_the_wsd_schedule(tmp_path, run_config):
    with pytest.raises(ConfigError) as err:
        run_config(tmp_path, **{"train.tokens": [65536, 131072], "train.steps": None})
    assert str(err.value) == (
        "train.tokens=[65536, 131072] is a list of budgets, which needs optim.schedule=wsd, not cosine "
        "(valid: optim.schedule=wsd, or one run per budget as a sweep: train.tokens=65536,131072)"
    )


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        (
            [20, 20],
            "train.steps=[20, 20] is invalid (valid: one budget, or a list of distinct budgets such as [1e6,2e6])",
        ),
        ([20, -5], "train.steps[1]=-5 must be positive (valid: > 0)"),
        ([20, 2.5], "train.steps[1]=2.5 is not an integer (valid: a whole number such as 100 or 1e6)"),
    ],
)
def test_bad_budget_lists_fail_in_one_line(tmp_path, run_config, budget, message):
    with pytest.raises(ConfigError) as err:
        run_config(tmp_path, **{**WSD, "train.steps": budget})
    assert str(err.value) == message


def test_budgets_that_round_to_the_same_steps_are_refused(tmp_path, run_config):
    with pytest.raises(ConfigError) as err:  # 16 x 64 = 1024 tokens a step
        family(run_config, tmp_path, None, **{"train.steps": None, "train.tokens": [10240, 10000]})
    assert "budgets 10000 and 10240 are both 10 steps of 1024 tokens" in str(err.value)


def test_a_diverged_trunk_fails_its_branches_without_training_them(tmp_path, run_config):
    fam = family(run_config, tmp_path, [20, 40], **{"optim.lr": 100.0, "optim.grad_clip": 0.0, "optim.warmup_steps": 0})
    result = branches.run_family(fam, tmp_path / "out")
    assert result.trunk.status == "failed" and result.failed
    for b in result.branches:
        assert b.status == "failed" and b.reason.startswith("its trunk failed before the fork at step")
        assert b.steps == 0


@pytest.mark.slow
def test_trunk_and_branches_are_finished_mlflow_runs_that_resume_and_skip_like_any_run(
    tmp_path, run_config, run_statuses
):
    """3 budgets: 4 FINISHED runs, the branches children of the trunk, in parallel processes; a fit
    reads the branches as its points; a relaunch trains nothing; a branch killed before its own
    first checkpoint resumes from its fork into the same MLflow run."""
    fam = family(run_config, tmp_path, [20, 30, 40], tracking="mlflow")
    result = branches.run_family(fam, tmp_path / "out", workers=2)
    assert run_statuses(tmp_path / "mlflow.db") == ["FINISHED"] * 4
    client = MlflowClient(fam.trunk.cfg.tracking.uri)
    trunk = client.get_run(result.trunk.mlflow_run_id)
    assert trunk.data.tags[KIND_TAG] == TRUNK_KIND
    for b, fork, steps in zip(result.branches, fam.forks, (20, 30, 40), strict=True):
        run = client.get_run(b.mlflow_run_id)
        assert run.data.tags["mlflow.parentRunId"] == trunk.info.run_id and run.data.tags[FORK_TAG] == str(fork)
        assert run.data.metrics["tokens"] == steps * 16 * 64 and run.data.metrics["flops"] == b.flops
        history = client.get_metric_history(b.mlflow_run_id, "val/loss")
        assert [m.step for m in history][:1] == [10]  # the trunk's evaluations before the fork are its own
    experiment = read_experiment(fam.trunk.cfg.tracking.uri, "ablate")
    assert sorted(experiment.points.D) == [20 * 1024, 30 * 1024, 40 * 1024]
    assert "trunk runs (tag ablate.kind=trunk)" in " ".join(experiment.skipped)

    again = branches.run_family(
        family(run_config, tmp_path, [20, 30, 40], tracking="mlflow"), tmp_path / "again", workers=2
    )
    assert [b.status for b in again.branches] == ["skipped"] * 3 and again.trunk.status == "skipped"
    assert len(run_statuses(tmp_path / "mlflow.db")) == 4

    middle = result.branches[1]  # killed before its first checkpoint of its own
    client.set_terminated(middle.mlflow_run_id, status="KILLED")
    checkpoint_dir = tmp_path / "state" / middle.config_hash
    for f in checkpoint_dir.iterdir():
        f.unlink()
    resumed = branches.run_family(family(run_config, tmp_path, [20, 30, 40], tracking="mlflow"), tmp_path / "resumed")
    assert resumed.branches[1].mlflow_run_id == middle.mlflow_run_id
    assert resumed.branches[1].final_val_loss == middle.final_val_loss
    assert [b.status for b in resumed.branches] == ["skipped", "finished", "skipped"]
    assert run_statuses(tmp_path / "mlflow.db") == ["FINISHED"] * 4
    steps = [m.step for m in client.get_metric_history(middle.mlflow_run_id, "train/loss")]
    assert steps == sorted(set(steps))  # nothing logged twice


@pytest.mark.slow
def test_a_sweep_of_list_budgets_summarizes_trunks_and_branches(tmp_path, cli, run_statuses):
    args = [
        "+sweep=scaling",
        "model=nano,micro",
        "train.tokens=[16384,32768]",
        "optim.schedule=wsd",
        "optim.warmup_steps=4",
        "data.n_words=500",
        "data.train_tokens=200000",
        "data.val_tokens=20000",
        "train.eval_interval=5",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"state_dir={tmp_path / 'state'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    done = cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert run_statuses(tmp_path / "mlflow.db").count("FINISHED") == 1 + 2 * 3  # the sweep, 2 trunks, 4 branches
    points = (tmp_path / "sweep" / "points.csv").read_text().splitlines()
    assert len(points) == 1 + 4 and not any("trunk" in line for line in points)
    summary = (tmp_path / "sweep" / "summary.md").read_text()
    assert "| model=nano (trunk) | finished |" in summary and "| nano | " in summary  # the pivot of branches
    assert all(math.isfinite(float(line.split(",")[2])) for line in points[1:])
    again = cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 jobs: 0 to run, 0 to resume, 2 skipped (2 already finished)" in again.stderr
