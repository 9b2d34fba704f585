"""Optuna search: search space, pruning inside a job, shared storage, relaunch, exports, dashboard."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from ablate.config import ConfigError, SearchConfig, parse_search
from ablate.run import train
from ablate.search import report as search_report
from ablate.search import space, trial
from ablate.search import storage as study_storage
from ablate.search.storage import Drivers
from ablate.search.trial import PruningHook
from support import SMALL_DATA

CATALOGUE = {
    "optim": {
        "lr": "tag(log, interval(1e-4, 3e-2))",
        "warmup_steps": "range(0, 101, 10)",
        "weight_decay": "interval(0.0, 0.3)",
    },
    "train": {"batch_size": "choice(8, 16, 32)"},
}


def study_config(tmp_path: Path, **kw) -> SearchConfig:
    cfg = parse_search(
        {
            "study_name": "t",
            "params": CATALOGUE,
            "search": ["optim.lr"],
            "pruners": {"median": {"n_startup_trials": 2, "n_warmup_steps": 0}},
            **kw,
        }
    )
    return cfg.resolved(str(tmp_path))


# -- configuration --------------------------------------------------------------------------
def test_search_space_comes_from_the_catalogue_and_the_command_line(tmp_path):
    cfg = study_config(tmp_path, search=["optim.lr", "optim.warmup_steps", "train.batch_size"])
    dims, fixed = space.search_space(cfg, ["+sweep=lr", "model=nano", "optim.weight_decay=0.05,0.1"])
    assert dims["optim.lr"] == FloatDistribution(1e-4, 3e-2, log=True)
    assert dims["optim.warmup_steps"] == IntDistribution(0, 100, step=10)
    assert dims["train.batch_size"] == CategoricalDistribution([8, 16, 32])
    assert dims["optim.weight_decay"] == CategoricalDistribution([0.05, 0.1])  # a sweep on the command line joins
    assert fixed == ["+sweep=lr", "model=nano"]
    assert space.trial_overrides({"optim.lr": 0.00123, "train.compile": False}) == [
        "optim.lr=0.00123",
        "train.compile=false",
    ]


def test_default_storage_is_a_journal_file_in_the_study_dir(tmp_path):
    cfg = study_config(tmp_path)
    assert cfg.storage == str(tmp_path / "studies" / "t" / "journal.log")
    assert study_config(tmp_path, storage="postgresql://u@h/db").storage == "postgresql://u@h/db"


@pytest.mark.parametrize(
    "tree, message",
    [
        (
            {"pruner": "median", "pruners": {"median": {"n_startup": 3}}},
            "unknown key hydra.sweeper.pruners.median.n_startup "
            "(valid: interval_steps, n_min_trials, n_startup_trials, n_warmup_steps)",
        ),
        (
            {"pruner": "asha"},
            "hydra.sweeper.pruner='asha' is invalid (valid: median, percentile, hyperband, successive_halving, none)",
        ),
        (
            {"params": CATALOGUE, "search": ["optim.beta1"]},
            "hydra.sweeper.search has 'optim.beta1', not in hydra.sweeper.params "
            "(valid: optim.lr, optim.warmup_steps, optim.weight_decay, train.batch_size)",
        ),
        ({"n_trials": 0}, "hydra.sweeper.n_trials=0 must be positive (valid: > 0)"),
    ],
)
def test_bad_settings_fail_in_one_line(tree, message):
    with pytest.raises(ConfigError) as err:
        parse_search(tree)
    assert str(err.value) == message


def test_outcomes_of_each_kind_of_job_result():
    value_of = {"r1": 2.5}.get
    assert (
        trial.outcome({"status": "finished", "final_val_loss": 2.4, "steps": 40, "mlflow_run_id": "r"}, value_of).state
        == "COMPLETE"
    )
    pruned = trial.outcome({"status": "pruned", "reason": "optuna trial 3: ...", "steps": 10}, value_of)
    assert (pruned.state, pruned.steps) == ("PRUNED", 10)
    reused = trial.outcome({"status": "skipped", "reason": "already finished (...)", "mlflow_run_id": "r1"}, value_of)
    assert (reused.state, reused.value, reused.reused) == ("COMPLETE", 2.5, True)
    assert trial.outcome({"status": "failed", "reason": "loss became nan"}, value_of).state == "FAIL"
    assert trial.outcome({"status": "finished", "final_val_loss": None}, value_of).state == "FAIL"
    assert trial.outcome(None, value_of).reason == "the job wrote no result.json"


# -- a trial inside its job -----------------------------------------------------------------
@pytest.mark.slow
def test_a_trial_is_pruned_inside_its_run_on_the_reported_val_loss(run_config, tmp_path):
    cfg = study_config(tmp_path)
    study = study_storage.open_study(cfg)
    space = {"optim.lr": FloatDistribution(1e-5, 1e-1, log=True)}

    def run_trial(lr: float, name: str):
        study.enqueue_trial({"optim.lr": lr})
        trial = study.ask(space)
        hook = PruningHook(cfg, trial.number)  # as the job rebuilds it from storage, by number
        run_cfg = run_config(tmp_path / name, **{"optim.lr": lr, "train.steps": 20, "train.eval_interval": 5})
        result = train.run(run_cfg, tmp_path / name / "out", on_eval=hook)
        from ablate.search.driver import Tracking, tell

        out = tell(study, cfg, trial, result.to_dict(), Tracking({}, study, cfg))
        return result, out

    for i, lr in enumerate((3e-3, 1e-2)):  # the median pruner's two start-up trials run to the end
        result, out = run_trial(lr, f"good{i}")
        assert result.status == "finished" and out.state == "COMPLETE"
    result, out = run_trial(1e-5, "bad")  # far too small a learning rate: worse than the median at once
    assert result.status == "pruned" and result.steps == 5
    assert out.state == "PRUNED" and "optuna trial 2" in result.reason
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    assert sorted(trials[0].intermediate_values) == [5, 10, 15, 20]
    assert trials[2].user_attrs["steps"] == 5


def _hammer(storage: str, worker: int, n: int) -> None:
    """One worker process: ask, report 4 steps, ask the pruner, tell; n times."""
    cfg = SearchConfig(study_name="shared", storage=storage, pruner="median", seed=worker)
    study = study_storage.open_study(cfg)
    for _i in range(n):
        trial = study.ask({"x": FloatDistribution(0.0, 1.0)})
        for step in range(1, 5):
            trial.report(trial.params["x"] + 1.0 / step, step)
            trial.should_prune()
        study.tell(trial, trial.params["x"])


def test_two_worker_processes_share_one_journal_study(tmp_path):
    storage = str(tmp_path / "journal.log")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(storage, w, 8)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]  # no storage error in either worker
    study = study_storage.open_study(SearchConfig(study_name="shared", storage=storage))
    trials = study.get_trials()
    assert len(trials) == 16 and sorted(t.number for t in trials) == list(range(16))
    assert all(t.state == TrialState.COMPLETE and sorted(t.intermediate_values) == [1, 2, 3, 4] for t in trials)


def test_a_trial_whose_driver_died_is_failed_and_its_parameters_queued_again(tmp_path):
    cfg = study_config(tmp_path)
    storage = study_storage.open_storage(cfg.storage)
    study = study_storage.open_study(cfg, storage=storage)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = Drivers(study, cfg.stale_after_s)
    mine.beat()
    other = Drivers(study, cfg.stale_after_s)
    other.id = f"{socket.gethostname()}:{dead.pid}:0"
    orphan, live = (
        study.ask({"optim.lr": FloatDistribution(1e-4, 1e-2, log=True)}),
        study.ask({"optim.lr": FloatDistribution(1e-4, 1e-2, log=True)}),
    )
    orphan.set_user_attr("driver", other.id)
    live.set_user_attr("driver", mine.id)
    assert [t.number for t in mine.orphans()] == [orphan.number]
    assert study_storage.give_back(study, study_storage.reopen(study, storage, mine.orphans()[0]), "its driver stopped")
    trials = study.get_trials()
    assert trials[orphan.number].state == TrialState.FAIL and trials[orphan.number].user_attrs["retried_as_new_trial"]
    assert trials[-1].state == TrialState.WAITING and trials[-1].system_attrs["fixed_params"] == orphan.params
    assert study_storage.counted(study) == (0, 1)  # the given-back trial does not count; the live one runs
    again = study.ask({"optim.lr": FloatDistribution(1e-4, 1e-2, log=True)})
    assert again.params == orphan.params  # the next ask runs the same parameters


# -- exports --------------------------------------------------------------------------------
def test_best_parameters_export_as_a_config_a_later_run_composes(tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ablate.config import CONF_DIR

    cfg = study_config(tmp_path, search=["optim.lr", "train.batch_size"])
    study = study_storage.open_study(cfg)
    dims, _ = space.search_space(cfg, [])
    for value in (2.9, 2.7, 2.8, 3.1):
        trial = study.ask(dims)
        trial.report(value + 0.3, 10)
        study.tell(trial, value)
    pruned = study.ask(dims)
    pruned.report(3.5, 10)
    study.tell(pruned, state=TrialState.PRUNED)
    files = search_report.export(study, cfg)
    best = study.best_trial
    study_dir = tmp_path / "studies" / "t"
    assert {p.name for p in files} >= {
        "trials.json",
        "study.md",
        "best.args",
        "t.yaml",
        "history.png",
        "intermediate.png",
        "importance.png",
    }
    for png in ("history.png", "intermediate.png", "importance.png"):
        assert (study_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((study_dir / "trials.json").read_text())
    assert data["summary"]["best"]["number"] == best.number and data["summary"]["counts"] == {
        "COMPLETE": 4,
        "PRUNED": 1,
    }
    assert (study_dir / "best.args").read_text().split() == space.trial_overrides(best.params)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        composed = compose("config", overrides=[f"hydra.searchpath=[file://{tmp_path / 'studies'}]", "+best=t"])
    GlobalHydra.instance().clear()
    assert composed.optim.lr == best.params["optim.lr"]
    assert composed.train.batch_size == best.params["train.batch_size"]


# -- end to end, through the command line ----------------------------------------------------
ARGS = [
    "+sweep=lr",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.n_jobs=2",
    "train.steps=40",
    "train.eval_interval=10",
    "train.checkpoint_interval=10",
    "train.progress=false",
    "model.block_size=32",
    *SMALL_DATA,
]


def _study(cwd: Path):
    return optuna.load_study(
        study_name="lr", storage=study_storage.open_storage(str(cwd / "studies" / "lr" / "journal.log"))
    )


@pytest.mark.slow
@pytest.mark.e2e
def test_stopping_the_driver_and_launching_again_continues_the_study(cli, run_statuses, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ablate", *ARGS],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 400
    while not list((tmp_path / ".ablate" / "state").glob("*/checkpoint.pt")):
        assert proc.poll() is None and time.time() < deadline, (
            proc.stderr.read() if proc.poll() is not None else "timeout"
        )
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # stopped in its first trial
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "RUNNING" not in run_statuses(tmp_path / "mlflow.db")  # nothing left RUNNING
    stopped = _study(tmp_path).get_trials()
    assert stopped[0].state == TrialState.FAIL and stopped[0].user_attrs["retried_as_new_trial"]
    assert any(t.state == TrialState.WAITING and t.system_attrs["fixed_params"] == stopped[0].params for t in stopped)

    again = cli(ARGS, tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert again.returncode == 0, again.stderr[-3000:]
    trials = _study(tmp_path).get_trials()
    counted = [t for t in trials if not t.user_attrs.get("retried_as_new_trial")]
    assert len(counted) == 3 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in counted)
    retry = next(t for t in counted if t.params == stopped[0].params)
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["steps"] == 40

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("lr").experiment_id])
    study_run = next(r for r in runs if r.data.tags.get("ablate.kind") == "study")
    assert study_run.info.status == "FINISHED"
    assert {a.path for a in client.list_artifacts(study_run.info.run_id)} >= {
        "trials.json",
        "best.args",
        "lr.yaml",
        "history.png",
    }
    sweeps = {r.info.run_id: r for r in runs if r.data.tags.get("ablate.kind") == "sweep"}
    assert len(sweeps) == 2 and all(r.data.tags["mlflow.parentRunId"] == study_run.info.run_id for r in sweeps.values())
    trial_runs = [r for r in runs if "optuna.trial" in r.data.tags]
    assert {r.data.tags["optuna.state"] for r in trial_runs} <= {"COMPLETE", "PRUNED"}
    assert all(r.data.tags["mlflow.parentRunId"] in sweeps for r in trial_runs)
    resumed = client.get_run(retry.user_attrs["mlflow_run_id"])  # the stopped run, resumed from its checkpoint
    assert [m.step for m in client.get_metric_history(resumed.info.run_id, "val/loss")] == [10, 20, 30, 40]


@pytest.mark.slow
@pytest.mark.e2e
def test_two_parallel_job_processes_report_to_one_study(cli, tmp_path):
    args = [
        *ARGS,
        "hydra.sweeper.n_trials=2",
        "hydra/launcher=parallel",
        "hydra.launcher.workers=2",
        "hydra.launcher.threads_per_job=1",
    ]
    proc = cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = "".join(p.read_text() for p in tmp_path.glob("multirun/*/*/.launcher/*.log"))
    assert "Traceback" not in logs
    trials = _study(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert all(sorted(t.intermediate_values) == [10, 20, 30, 40] for t in trials)
    assert {t.user_attrs["schedule"] for t in trials} == {"asynchronous"}  # the process launcher has slots
    (launch,) = json.loads((tmp_path / "studies" / "lr" / "trials.json").read_text())["summary"]["launches"]
    assert 0 < launch["busy_share"] <= 1


@pytest.mark.slow
def test_the_dashboard_command_serves_the_study_on_localhost(tmp_path):
    cfg = study_config(tmp_path)
    study = study_storage.open_study(cfg)
    study.tell(study.ask({"optim.lr": FloatDistribution(1e-4, 1e-2, log=True)}), 2.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dashboard = Path(sys.executable).with_name("optuna-dashboard")
    proc = subprocess.Popen(
        [str(dashboard), "--host", "127.0.0.1", "--port", str(port), cfg.storage],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline, body = time.time() + 120, None
        while body is None:
            assert proc.poll() is None and time.time() < deadline, "the dashboard did not start"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.5)
        assert [s["study_name"] for s in body["study_summaries"]] == ["t"]
    finally:
        proc.terminate()
        proc.wait(30)
