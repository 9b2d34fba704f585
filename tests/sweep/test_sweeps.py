"""Sweeps: presets, the plan, the process launchers, progress, the summary, recorded studies, and
killing a sweep midway then launching it again."""

import copy
import json
import math
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from mlflow.tracking import MlflowClient

from ablate.child import Call, call_line
from ablate.config import CONF_DIR, PRECISION_NAMES, ConfigError, ProcessSettings, parse_process_settings
from ablate.run import progress
from ablate.sweep import plan as sweep_plan
from ablate.sweep.launch.process import resources
from ablate.sweep.summary import summarize
from support import ROOT, SMALL_DATA

TINY = [*SMALL_DATA, "train.eval_interval=5", "train.log_interval=5"]
TIMEOUT_S = 1800  # end-to-end sweeps on a 2-core machine shared with other work


def composed(overrides: list[str]):
    """The multirun config as Hydra composes it for `python -m ablate OVERRIDES`."""
    return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.fixture
def hydra_conf():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def grid(config) -> list[list[str]]:
    """Every job's overrides, as the grid sweeper (Hydra's BasicSweeper) expands them, in its order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()]
    arguments += list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    overrides = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def plan(config) -> list:
    """Every job composed, parsed, checked and hashed, as the grid sweeper's check of its batch does."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    return sweep_plan.assess(sweep_plan.compose(loader, config, grid(config)))


# -- presets ------------------------------------------------------------------------------------

GRIDS = {
    "scaling": {
        "model": {"nano", "micro", "tiny", "small", "medium"},
        "train.tokens": {"65536", "131072", "262144", "524288"},
    },
    "isoflop": {"model": {"nano", "micro", "tiny", "small"}, "train.flops": {3e11, 1e12, 3e12}},
    "data_size": {"data.train_tokens": {"16384", "65536", "262144", "1048576", "4194304"}},
    "attention": {"model": {"tiny", "small"}, "model.attention": {"manual", "sdpa"}},
    "precision": {
        "precision": set(PRECISION_NAMES),
        "train.seed": {"0", "1", "2"},  # paired seeds: each arm's difference gets its 95% interval
    },
}


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_each_preset_expands_to_its_grid(hydra_conf, name):
    jobs = grid(composed([f"+sweep={name}"]))
    axes = GRIDS[name]
    assert len(jobs) == math.prod(len(v) for v in axes.values())
    for key, values in axes.items():
        seen = {o.split("=", 1)[1] for job in jobs for o in job if o.split("=", 1)[0] == key}
        assert {float(v) for v in seen} == values if key == "train.flops" else seen == values, key
    cfg = composed([f"+sweep={name}"])
    assert cfg.hydra.launcher._target_.endswith("ProcessLauncher")  # parallel unless overridden


def test_a_command_line_axis_replaces_the_presets(hydra_conf):
    from omegaconf import open_dict

    cfg = composed(["+sweep=scaling"])
    with open_dict(cfg):  # what Hydra records for `+sweep=scaling train.tokens=1024,2048 model=nano,large`
        cfg.hydra.overrides.task = ["+sweep=scaling", "train.tokens=1024,2048", "model=nano,large"]
    jobs = grid(cfg)
    assert sorted(" ".join(o for o in job if not o.startswith("+")) for job in jobs) == sorted(
        f"model={m} train.tokens={t}" for m in ("nano", "large") for t in (1024, 2048)
    )


def test_a_command_line_launcher_replaces_the_presets(hydra_conf):
    cfg = composed(["+sweep=scaling", "hydra/launcher=sequential"])
    assert cfg.hydra.launcher.workers == 1


def test_isoflop_trains_every_model_to_its_budget(hydra_conf):
    cfg = composed(["+sweep=isoflop", *SMALL_DATA])
    HydraConfig.instance().set_config(cfg)
    jobs = plan(cfg)
    assert len(jobs) == 12
    for job in jobs:
        budget, per_step = job.cfg.train.flops, job.cost_flops / job.total_steps
        assert budget <= job.cost_flops < budget + per_step, job.label  # whole steps, rounded up
        assert job.total_steps >= 30, job.label  # past warm-up even for the largest model
    tokens = {j.cfg.model.name: j.total_steps for j in jobs if j.cfg.train.flops == 1e12}
    assert tokens["nano"] > tokens["micro"] > tokens["tiny"] > tokens["small"]


def test_a_job_this_machine_cannot_run_is_planned_unsupported_in_its_own_words(hydra_conf):
    """skip_unsupported: the plan's reason is the check's line alone; without it, the line names its job."""
    from omegaconf import open_dict

    for skip in ("true", "false"):
        task = ["+sweep=precision", "precision=fp32,fp8_rowwise", "train.seed=0", f"skip_unsupported={skip}"]
        cfg = composed([task[0], *SMALL_DATA])
        with open_dict(cfg):  # as Hydra records the command line's overrides
            cfg.hydra.overrides.task = [*task, *SMALL_DATA]
        HydraConfig.instance().set_config(cfg)
        if skip == "false":
            with pytest.raises(ConfigError, match=r"^sweep job #1 \(precision=fp8_rowwise .*\): precision=fp8_rowwise"):
                plan(cfg)
            continue
        jobs = {j.cfg.precision.name: j for j in plan(cfg)}
        assert (jobs["fp32"].action, jobs["fp8_rowwise"].action) == ("run", "unsupported")
        assert jobs["fp8_rowwise"].reason.startswith("precision=fp8_rowwise"), jobs["fp8_rowwise"].reason


def test_the_plan_keys_jobs_like_train_prepare(hydra_conf, tmp_path):
    from omegaconf import OmegaConf

    from ablate.run import train

    cfg = composed(["+sweep=attention", *SMALL_DATA, f"hydra.sweep.dir={tmp_path}"])
    HydraConfig.instance().set_config(cfg)
    jobs = plan(cfg)
    for job in jobs:
        prepared = train.prepare(job.cfg)
        assert job.config_hash == prepared.config_hash
        assert job.total_steps == prepared.total_steps
        assert job.job_dir == str(tmp_path / str(job.num))
    assert jobs[0].label == "model=tiny model.attention=manual"
    assert OmegaConf.select(cfg, "tracking.experiment") == "attention"


def _grid_sweep(tmp_path):
    """A two-job grid (train.seed=1,2), as Hydra composes its master config; (config, jobs' overrides)."""
    from omegaconf import open_dict

    base = ["model=nano", "train.steps=2", *SMALL_DATA, f"hydra.sweep.dir={tmp_path}"]
    cfg = composed(base)
    with open_dict(cfg):  # what Hydra records for `python -m ablate --multirun BASE train.seed=1,2`
        cfg.hydra.overrides.task = [*base, "train.seed=1,2"]
        cfg.tracking.backend = "none"
    HydraConfig.instance().set_config(cfg)
    return cfg, grid(cfg)


def test_a_job_runs_the_config_its_plan_composed_without_composing_it_again(hydra_conf, tmp_path):
    import cloudpickle
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import JobReturn
    from hydra.types import HydraContext
    from omegaconf import OmegaConf, open_dict

    from ablate.sweep.launch import process, worker
    from ablate.sweep.launch.job import JobPlan

    cfg, jobs = _grid_sweep(tmp_path)
    loader = GlobalHydra.instance().config_loader()
    planned = sweep_plan.compose(loader, cfg, jobs)[1].composed
    fresh = loader.load_sweep_config(copy.deepcopy(cfg), list(jobs[1]))
    assert OmegaConf.to_container(planned, resolve=False) == OmegaConf.to_container(fresh, resolve=False)
    assert planned.train.seed == 2
    with open_dict(planned):
        planned.train.seed = 777

    # The worker's job decodes the config it is sent and runs it: seed 777 proves nothing was composed.
    context = HydraContext(config_loader=loader, callbacks=Callbacks())
    spec = cloudpickle.loads(process.spec(context, lambda c: c.train.seed, cfg))
    # as the worker reads it
    wire = Call.decode(json.loads(call_line(1, "run", {"plan": JobPlan(planned)}))).args["plan"]
    ret: JobReturn = worker.run_one(spec, 1, list(jobs[1]), wire)
    assert ret.return_value == 777 and ret.hydra_cfg.hydra.job.num == 1
    assert worker.run_one(spec, 1, list(jobs[1])).return_value == 2  # no config sent: the job composes it


def test_the_grid_sweeper_plans_each_job_once_and_opens_the_sweep_with_its_plan(hydra_conf, tmp_path):
    """Hydra's BasicSweeper checks each batch before launching it (validate_batch_is_legal); the
    project's sweeper makes that check the plan: every job composed once, its plan in sweep.json,
    and its composition held by the sweep callback for the launcher, not composed again."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext

    from ablate.sweep.callback import SweepCallback
    from ablate.sweep.context import read_sweep_file
    from hydra_plugins.ablate_sweeper.planning_sweeper import PlanningSweeper

    cfg, jobs = _grid_sweep(tmp_path)
    loader = GlobalHydra.instance().config_loader()
    seen = []
    load = loader.load_configuration

    def counting(*args, **kwargs):
        seen.append(list(kwargs["overrides"]))
        return load(*args, **kwargs)

    loader.load_configuration = counting
    callbacks = Callbacks()
    sweep = SweepCallback()
    callbacks.callbacks.append(sweep)
    sweep.on_multirun_start(cfg)
    sweeper = PlanningSweeper()
    sweeper.config, sweeper.hydra_context = cfg, HydraContext(config_loader=loader, callbacks=callbacks)
    sweeper.validate_batch_is_legal(jobs)
    assert [o[-1] for o in seen] == ["train.seed=1", "train.seed=2"]  # each job composed once
    planned = read_sweep_file(tmp_path)["plan"]
    assert [(j["num"], j["action"], j["label"]) for j in planned] == [
        (0, "run", "train.seed=1"),
        (1, "run", "train.seed=2"),
    ]
    assert sweep.job_plan(1).composed.train.seed == 2 and sweep.job_plan(7) is None and len(seen) == 2
    sent = sweep.job_plan(1).run  # parsed and hashed too: the job is sent its RunConfig and its hash
    assert sent.cfg.train.seed == 2 and sent.hashes == (planned[1]["config_hash"],) and sent.device == "cpu"
    # a job that does not compose: one line naming the job, which the app says (exit 2)
    with pytest.raises(ConfigError, match=r"^sweep job #2 \(.* train\.nope=1\): unknown key train\.nope \(valid: "):
        sweeper.validate_batch_is_legal([[*jobs[0], "train.nope=1"]])


# -- launcher settings --------------------------------------------------------------------------


def test_launcher_is_found_by_hydras_plugin_discovery():
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    names = {f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(Launcher)}
    assert "hydra_plugins.ablate_launcher.process_launcher.ProcessLauncher" in names


@pytest.mark.parametrize(
    "workers, threads, jobs, cores, expected",
    [
        (None, None, 20, 2, (2, 1)),  # one run per core, one thread each
        (None, None, 1, 2, (1, 2)),  # a lone run gets every core
        (None, None, 3, 16, (3, 5)),  # workers x threads <= cores
        (1, None, 20, 2, (1, 2)),  # sequential
        (8, None, 8, 2, (8, 1)),  # asked for more than the cores: each still gets a thread
        (2, 4, 5, 2, (2, 4)),  # explicit threads win
    ],
)
def test_workers_and_threads_fit_the_cores(workers, threads, jobs, cores, expected):
    res = resources(ProcessSettings(workers, threads), jobs, cores)
    assert (res.workers, res.threads) == expected


def test_a_bad_launcher_setting_is_one_clear_line():
    with pytest.raises(ConfigError) as err:
        parse_process_settings({"workers": 0})
    assert str(err.value) == "hydra.launcher.workers=0 is invalid (valid: a whole number >= 1, or null for automatic)"


# -- progress -----------------------------------------------------------------------------------


def test_a_run_reports_its_progress_to_its_job_dir(tmp_path):
    path = tmp_path / "progress.json"
    bar = progress.RunProgress(total=100, start=40, enabled=False, label="nano/fp32", status_file=path)
    bar.update(50, 2.5, 1234.0)
    status = json.loads(path.read_text())
    assert (status["step"], status["start"], status["total"], status["loss"]) == (50, 40, 100, 2.5)
    bar.close()
    assert not path.exists()  # result.json says how it ended


def test_sweep_eta_weighs_runs_by_their_remaining_work(tmp_path):
    jobs = []
    for num, cost in enumerate((1.0, 3.0, 0.0, 2.0)):
        (tmp_path / str(num)).mkdir()
        jobs.append(progress.WatchedJob(num, tmp_path / str(num), cost, f"job{num}"))
    sp = progress.SweepProgress("t", jobs, enabled=False)
    sp.started = time.time() - 100.0
    (tmp_path / "0" / "result.json").write_text(json.dumps({"status": "finished", "final_val_loss": 2.0}))
    # job 1 resumed at 1/4 and is now halfway: half of its whole-run cost is left
    (tmp_path / "1" / "progress.json").write_text(
        json.dumps({"step": 50, "start": 25, "total": 100, "loss": 2.0, "tokens_per_s": 1.0, "label": "x"})
    )
    (tmp_path / "2" / "result.json").write_text(json.dumps({"status": "skipped"}))
    sp.poll()
    assert sp.counts() == (2, 4)
    done = 1.0 + 3.0 * (0.5 - 0.25)
    left = 3.0 * 0.5 + 2.0
    assert sp.eta_s() == pytest.approx(100.0 * left / done, rel=0.02)


def test_stale_files_from_an_earlier_launch_do_not_count(tmp_path):
    (tmp_path / "0").mkdir()
    old = tmp_path / "0" / "result.json"
    old.write_text(json.dumps({"status": "finished"}))
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    sp = progress.SweepProgress("t", [progress.WatchedJob(0, tmp_path / "0", 1.0, "a")], enabled=False)
    sp.poll()
    assert sp.counts() == (0, 1)


# -- summary ------------------------------------------------------------------------------------


def _fake_job(sweep_dir: Path, num: int, overrides: list[str], **result) -> None:
    """A job directory as Hydra and train.run leave it: overrides.yaml and result.json."""
    (sweep_dir / str(num) / ".hydra").mkdir(parents=True)
    (sweep_dir / str(num) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (sweep_dir / str(num) / "result.json").write_text(json.dumps({"status": "finished", "reason": "", **result}))


def test_summary_of_a_size_by_tokens_grid(tmp_path):
    models = {"nano": 59_904, "micro": 153_728, "tiny": 451_968}
    num = 0
    for name, params in models.items():
        for tokens in (65_536, 262_144):
            # a smooth stand-in surface, L = E + A/N^a + B/D^b, so the plots have something to show
            loss = 0.5 + 40 / params**0.3 + 60 / tokens**0.3
            _fake_job(
                tmp_path,
                num,
                [f"model={name}", f"train.tokens={tokens}", "+sweep=scaling"],
                model=name,
                precision="fp32",
                params=params,
                params_non_embedding=params - 2000,
                tokens=tokens,
                flops=6.0 * params * tokens,
                final_val_loss=loss,
                entropy_floor=0.5,
                train_s=10.0 * (num + 1),
                mlflow_run_id=f"r{num}",
            )
            num += 1
    summary = summarize(tmp_path, {"name": "scaling"})
    assert summary.failed == 0
    assert "| model=nano train.tokens=65536 | finished | 59,904 | 65,536 |" in summary.table
    assert "Final validation loss, model (rows) x train.tokens (columns)" in summary.table
    grid_rows = [ln for ln in summary.table.splitlines() if ln.startswith("| nano |")]
    assert len(grid_rows) == 1 and grid_rows[0].count("|") == 4  # nano: one row, two budgets
    assert (tmp_path / "final_loss.png").stat().st_size > 20_000
    assert not (tmp_path / "loss_vs_flops.png").exists()  # no MLflow store: no curves to draw
    lines = (tmp_path / "points.csv").read_text().splitlines()
    assert lines[0] == (
        "params,tokens,loss,flops,params_non_embedding,train_s,entropy_floor,run_id,bpb,seed,label,model,train.tokens"
    )
    assert len(lines) == 1 + 6
    assert lines[1].endswith(",nano,65536")  # the swept keys, for `ablate compare points=... arm=model`
    # what ablate fit reads back: the floor the runs share and each run's training time
    from ablate.scaling.points import Points

    points = Points.from_csv(tmp_path / "points.csv")
    assert points.entropy_floor == 0.5 and points.seconds.tolist() == [10.0 * (i + 1) for i in range(6)]


def test_summary_marks_a_job_without_result_as_missing(tmp_path):
    _fake_job(tmp_path, 0, ["train.seed=0"], params=1, tokens=1, final_val_loss=1.0)
    (tmp_path / "1" / ".hydra").mkdir(parents=True)
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["train.seed=1"]))
    summary = summarize(tmp_path, {"name": "x"})
    assert summary.failed == 1
    assert "| train.seed=1 | missing |" in summary.table


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_bad_job_in_the_grid_stops_the_sweep_before_anything_runs(cli, run_statuses, workdir):
    # The pre-check tries each value against the others' first: 50 with 2 heads passes, 50 with 4 does not.
    proc = cli(
        [
            "--multirun",
            "model=nano",
            "model.n_embd=48,50",
            "model.n_head=2,4",
            "train.steps=5",
            "train.progress=false",
            *SMALL_DATA,
        ],
        workdir,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: sweep job #3 (model=nano model.n_embd=50 model.n_head=4 ")
    assert lines[0].endswith("): model.n_embd=50 is not divisible by model.n_head=4 (valid: a multiple of 4, e.g. 48)")
    assert run_statuses(workdir / "mlflow.db") == []


@pytest.mark.slow
@pytest.mark.e2e
def test_a_study_runs_in_parallel_then_relaunches_as_skips(cli, tmp_path):
    """A recorded study end to end: `ablate study DIR --run` runs a 2 x 2 grid with the parallel
    launcher, the summary and README come out, and the same command again runs nothing. The README
    that --run wrote from the sweep's own summary is the one made again from the records alone."""
    study = tmp_path / "grid"
    study.mkdir()
    overrides = [
        "--multirun",
        "model=nano,micro",
        "train.steps=null",
        "train.tokens=10240,20480",
        "hydra/launcher=parallel",
        "hydra.launcher.workers=2",
        "tracking.experiment=grid",
        *TINY,
    ]
    (study / "study.yaml").write_text(
        yaml.safe_dump({"title": "A tiny grid", "question": "Does it work?", "overrides": overrides})
    )
    first = cli([str(study), "--run"], ROOT, command="study", timeout=TIMEOUT_S)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-3000:]
    assert "sweep model x train.tokens: 4 jobs: 4 to run, 0 to resume, 0 skipped (0 already finished)" in out
    assert "2 at a time, 1 thread(s) each" in out
    assert "sweep model x train.tokens: 4/4 done" in out  # the sweep's progress line (no terminal: one line per run)
    client = MlflowClient(f"sqlite:///{study / 'mlflow.db'}")
    exp = client.get_experiment_by_name("grid")
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in runs)
    assert client.search_runs(["0"]) == []  # nothing in the Default experiment
    sizes = {(r.data.params["model.name"], r.data.metrics["tokens"]) for r in children}
    assert sizes == {(m, t) for m in ("nano", "micro") for t in (10240.0, 20480.0)}
    for r in children:
        assert {"derived.params", "derived.params_non_embedding"} <= set(r.data.params)
        assert {"tokens", "flops", "val/loss", "final/val_loss"} <= set(r.data.metrics)
    sweep_dir = study / "sweep"
    logs = sorted(p.name for p in (sweep_dir / ".launcher").glob("*.log"))
    assert logs == ["0.log", "1.log", "2.log", "3.log", "worker.log"]  # the jobs', and their warm worker's
    for name in ("loss_vs_flops.png", "final_loss.png"):
        assert (sweep_dir / name).stat().st_size > 20_000, name
    for job in range(4):
        assert json.loads((sweep_dir / str(job) / "usage.json").read_text())["cpu_s"] > 0
    readme = (study / "README.md").read_text()
    assert "# A tiny grid" in readme and "![Validation loss against training FLOPs" in readme
    assert re.search(r"The job processes used [0-9.]+ CPU-minutes .*minutes on \d+ idle cores", readme)
    assert "| model=nano train.tokens=10240 | finished |" in readme
    parent = next(r for r in runs if r.data.tags.get("ablate.kind") == "sweep")
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"summary.md", "summary.json", "points.csv", "loss_vs_flops.png", "final_loss.png"} <= artifacts

    again = cli([str(study), "--run"], ROOT, command="study", timeout=TIMEOUT_S)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert "sweep model x train.tokens: 4 jobs: 0 to run, 0 to resume, 4 skipped (4 already finished)" in out
    runs = client.search_runs([exp.experiment_id])
    assert len([r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]) == 4  # nothing ran twice
    assert all(r.info.status == "FINISHED" for r in runs)
    assert len((sweep_dir / "launches.jsonl").read_text().splitlines()) == 2
    readme_before = (study / "README.md").read_text()
    (study / "README.md").unlink()
    refreshed = cli([str(study)], ROOT, command="study")
    assert refreshed.returncode == 0, refreshed.stderr[-2000:]
    assert (study / "README.md").read_text() == readme_before  # regenerated from the records alone


@pytest.mark.slow
@pytest.mark.e2e
def test_kill_a_parallel_sweep_midway_then_relaunch(cli, run_statuses, tmp_path):
    """SIGKILL the launcher while the long run trains and a short one has finished; launch the same
    sweep again: finished runs are skipped, interrupted ones resume into their MLflow runs, and
    every metric matches a sweep that was never interrupted."""
    # train/loss is logged every step: a mean over a log interval that a kill cuts in two is
    # averaged again from the resume step (train.py does not checkpoint the running sum).
    # The kill comes when the 20-step run has finished, which found the long run near step 50 on a
    # loaded 2-core machine: 300 steps leave it ~6x that margin, and each of the three sweeps
    # trains the long run (a third of them twice), so its length is most of the test's CPU.
    long = 300
    args = [
        "--multirun",
        "model=nano",
        f"train.steps={long},20,24",
        "train.checkpoint_interval=20",
        "train.log_interval=1",
        "train.eval_interval=5",
        "train.flush_interval_s=0.5",
        "hydra/launcher=parallel",
        "hydra.launcher.workers=2",
        "train.progress=false",
        *SMALL_DATA,
    ]
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    killed.mkdir(), reference.mkdir()
    proc = cli.start([*args, "hydra.sweep.dir=first"], killed)
    children = []
    try:
        _wait_until_interruptible(killed / "first", killed / ".ablate" / "state", proc)
        children = _launcher_children(proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    _wait_gone(children)  # the jobs die with their launcher (no orphan keeps writing to the run)
    before = {
        n: json.loads((killed / "first" / n / "result.json").read_text())
        for n in "012"
        if (killed / "first" / n / "result.json").exists()
    }
    assert before["0"]["status"] == "killed" and 0 < before["0"]["steps"] < long
    # MLflow, not result.json, says what finished: train.run closes the MLflow run last.
    finished = sorted(n for n, r in before.items() if _mlflow_status(killed, r) == "FINISHED")
    assert finished, "no short run had finished"

    again = cli([*args, "hydra.sweep.dir=second"], killed, timeout=TIMEOUT_S)
    assert again.returncode == 0, again.stderr[-3000:]
    counts = re.search(r"3 jobs: (\d+) to run, (\d+) to resume, (\d+) skipped \((\d+) already finished\)", again.stderr)
    assert counts and int(counts[3]) == int(counts[4]) == len(finished), again.stderr[-3000:]
    assert f"#0 train.steps={long}: resume from its checkpoint" in again.stderr
    after = {n: json.loads((killed / "second" / n / "result.json").read_text()) for n in "012"}
    assert after["0"]["status"] == "finished" and after["0"]["mlflow_run_id"] == before["0"]["mlflow_run_id"]
    assert sorted(n for n, r in after.items() if r["status"] == "skipped") == finished  # none ran twice
    assert sorted(run_statuses(killed / "mlflow.db")) == ["FINISHED"] * 4 + ["KILLED"]  # the killed sweep's parent

    assert cli([*args, "hydra.sweep.dir=only"], reference, timeout=TIMEOUT_S).returncode == 0
    mine, theirs = _histories(killed), _histories(reference)
    assert mine.keys() == theirs.keys() and len(mine) == 3
    for steps_budget, history in theirs.items():
        for key, points in history.items():
            got = mine[steps_budget][key]
            assert [s for s, _ in got] == [s for s, _ in points], (steps_budget, key)  # complete, no duplicates
            for (s, v1), (_, v2) in zip(got, points, strict=False):
                assert math.isclose(v1, v2, rel_tol=1e-5, abs_tol=1e-6), (steps_budget, key, s, v1, v2)


def _wait_until_interruptible(sweep_dir: Path, state_dir: Path, proc) -> None:
    """Until a short run has finished and the long one (job 0) has a checkpoint."""
    deadline = time.time() + TIMEOUT_S
    while True:
        assert proc.poll() is None and time.time() < deadline, "the sweep ended before it could be interrupted"
        assert not (sweep_dir / "0" / "result.json").exists(), "the long run finished before it could be interrupted"
        info = sweep_dir / "sweep.json"
        plan = json.loads(info.read_text()).get("plan") if info.exists() else None
        done = [_mlflow_status(sweep_dir.parent, json.loads(p.read_text())) for p in sweep_dir.glob("[12]/result.json")]
        if plan and "FINISHED" in done and (state_dir / plan[0]["config_hash"] / "checkpoint.pt").is_file():
            return
        time.sleep(0.5)


def _mlflow_status(cwd: Path, result: dict) -> str | None:
    run_id = result.get("mlflow_run_id")
    return MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}").get_run(run_id).info.status if run_id else None


def _launcher_children(pid: int) -> list[int]:
    import psutil

    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


def _wait_gone(pids: list[int], timeout: float = 120.0) -> None:
    import psutil

    deadline = time.time() + timeout
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        assert time.time() < deadline, f"job processes {pids} outlived their launcher"
        time.sleep(0.2)


def _histories(cwd: Path) -> dict:
    """{train.steps: {metric: [(step, value)]}} for every training run in cwd's store."""
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    out = {}
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id]):
            if run.data.tags.get("ablate.kind") == "sweep":
                continue
            out[run.data.params["train.steps"]] = {
                key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
                for key in ("train/loss", "val/loss", "flops", "final/val_loss")
            }
    return out
