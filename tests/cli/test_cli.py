"""The command line as a user runs it: bad input fails in one line; a tiny sweep end to end."""

import json

import pytest
from mlflow.tracking import MlflowClient

import reliability
from ablate.config import PRECISION_NAMES
from ablate.tracking.tags import CONFIG_HASH_TAG
from support import SMALL_DATA

pytestmark = pytest.mark.e2e

BAD = [
    (["model=doesnotexist"], ["model=doesnotexist", "valid:", "micro"]),
    (["model.n_embd=100", "model.n_head=3"], ["model.n_embd=100", "model.n_head=3"]),
    (["optim.lr=-0.001"], ["optim.lr=-0.001", "positive"]),
    (["model.block_size=300000"], ["model.block_size=300000", "longer than"]),
    (["hardware=tpu"], ["hardware=tpu", "valid:", "h100"]),
    (["hardware=h100"], ["hardware=h100", "cuda", "valid here"]),
    (["precision=fp8_tensorwise"], ["precision=fp8_tensorwise", "cuda"]),
    (["model.widht=3"], ["unknown key model.widht", "n_embd"]),
    (["train.steps=ten"], ["train.steps='ten'", "integer"]),
    (["+sweep=precision", "model=nope"], ["model=nope", "valid:"]),
]


@pytest.mark.parametrize("args, words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_clear_line(cli, run_statuses, workdir, args, words):
    proc = cli([*args, *SMALL_DATA, "train.progress=false"], workdir)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0]
    assert "RUNNING" not in run_statuses(workdir / "mlflow.db")


def test_a_sweeps_precheck_composes_each_group_choice_and_leaves_plain_values_to_the_run(monkeypatch, workdir):
    """`ablate submit` and Hydra's print-only flags check a sweep before a driver (or nothing) runs
    it: a typo in a group's choice fails in one line; a plain key's values are composed once per
    job by the sweep itself (its plan, or each trial), so the pre-check does not compose them."""
    from ablate.cli import common

    monkeypatch.chdir(workdir)
    seen = []
    compose = common._compose
    monkeypatch.setattr(
        common, "_compose", lambda name, ov, config_dir=None: seen.append(list(ov)) or compose(name, ov, config_dir)
    )

    def swept(keys):
        return [[o for o in trial if o.split("=")[0] in keys] for trial in seen]

    for sweeper in ([], ["hydra/sweeper=basic"]):
        seen.clear()
        common.precheck([*SMALL_DATA, *sweeper, "model=nano,micro", "train.seed=1,2,3"], "config", multirun=True)
        assert swept({"model", "train.seed"}) == [["model=nano", "train.seed=1"], ["model=micro", "train.seed=1"]]
    seen.clear()
    common.precheck([*SMALL_DATA, "+sweep=lr", "train.seed=1,2"], "config", multirun=True)
    assert swept({"train.seed"}) == [["train.seed=1"]]
    with pytest.raises(SystemExit):
        common.precheck([*SMALL_DATA, "model=nano,nope", "train.seed=1,2"], "config", multirun=True)


def test_a_token_budget_on_the_command_line_replaces_the_default_steps(cli, workdir):
    proc = cli(
        [
            "model=nano",
            "train.tokens=3000",
            "train.eval_interval=1",
            "tracking=none",
            *SMALL_DATA,
            "train.progress=false",
        ],
        workdir,
    )
    assert proc.returncode == 0, proc.stderr
    (result,) = workdir.glob("outputs/*/*/result.json")
    assert json.loads(result.read_text())["tokens"] == 3 * 16 * 64  # ceil(3000 / 1024 tokens per step)
    both = cli(["train.tokens=3000", "train.steps=5", *SMALL_DATA], workdir)
    assert both.returncode == 2 and "exactly one training budget is needed" in both.stderr


@pytest.mark.ledger("fault", "`ablate model=nano model.n_layer=3` (a preset with a size of its own), tracked")
def test_a_preset_with_a_size_of_its_own_is_recorded_under_the_name_of_what_it_trains(request, cli, workdir):
    """Not as nano, whose preset has 2 layers: result.json, the MLflow run's name and its params name
    nano.n_layer_3; model.preset names the preset, whose name the config hash reads."""
    args = ["model=nano", "model.n_layer=3", "train.steps=2", "train.eval_interval=2", "train.eval_batches=1"]
    proc = cli([*args, f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}", *SMALL_DATA, "train.progress=false"], workdir)
    assert proc.returncode == 0, proc.stderr
    (found,) = workdir.glob("outputs/*/*/result.json")
    result = json.loads(found.read_text())
    (run,) = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}").search_runs(["0", "1"])
    assert result["model"] == "nano.n_layer_3" and result["mlflow_run_id"] == run.info.run_id
    assert run.info.run_name == f"nano.n_layer_3-fp32-{result['config_hash'][:6]}"
    assert (run.data.params["model.name"], run.data.params["model.preset"]) == ("nano.n_layer_3", "nano")
    assert run.data.params["model.n_layer"] == "3" and run.data.tags[CONFIG_HASH_TAG] == result["config_hash"]
    reliability.record(
        request,
        f"exit 0; result.json model nano.n_layer_3; MLflow run {run.info.run_name}, params model.name=nano.n_layer_3 "
        "model.preset=nano model.n_layer=3, its config hash tag result.json's",
    )


@pytest.mark.slow
def test_precision_sweep_end_to_end(cli, workdir):
    """The demo's sweep: every policy on 3 seeds, each difference against fp32's run of the same seed
    and each arm's 95% interval over the seeds, in summary.json and on the console."""
    proc = cli(
        [
            "+sweep=precision",
            "model=nano",
            "train.steps=20",
            "train.eval_interval=10",
            "train.progress=false",
            *SMALL_DATA,
        ],
        workdir,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("precision")
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if "precision.name" in r.data.params]
    parents = [r for r in runs if r.data.tags.get("ablate.kind") == "sweep"]
    assert sorted((r.data.params["precision.name"], r.data.params["train.seed"]) for r in children) == sorted(
        (p, str(s))
        for p in PRECISION_NAMES
        if p not in ("fp8_tensorwise", "fp8_rowwise")  # the GPU's fp8 recipes: unsupported on a CPU
        for s in range(3)
    )
    assert all(r.info.status == "FINISHED" for r in runs)
    assert len(parents) == 1
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children)
    for r in children:
        assert len(client.get_metric_history(r.info.run_id, "val/loss")) == 2
    (sweep_dir,) = (workdir / "multirun").glob("*/*")
    summary = json.loads((sweep_dir / "summary.json").read_text())
    by_label = {row["label"]: row for row in summary["runs"]}
    assert by_label["precision=fp8_tensorwise train.seed=0"]["status"] == "unsupported"
    assert by_label["precision=fp32 train.seed=1"]["speedup"] == 1.0
    bf16 = [by_label[f"precision=bf16 train.seed={s}"] for s in range(3)]
    assert all(r["val_loss_delta"] is not None and r["val_loss_delta_n"] == 3 for r in bf16)
    lo, hi = bf16[0]["val_loss_delta_ci95"]
    assert lo <= bf16[0]["val_loss_delta_mean"] <= hi
    assert all(isinstance(r["speedup_comparable"], bool) for r in bf16)
    assert (sweep_dir / "loss_vs_flops.png").stat().st_size > 10_000
    assert "| precision=bf16 train.seed=2 | finished |" in proc.stderr
    assert "| precision=bf16 | 3 |" in proc.stderr and "- Against precision=fp32: " in proc.stderr
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"summary.md", "summary.json", "loss_vs_flops.png"} <= artifacts


@pytest.mark.slow
def test_a_diverging_run_fails_the_sweep_but_not_the_others(cli, run_statuses, workdir):
    proc = cli(
        [
            "--multirun",
            "model=nano",
            "optim.lr=0.003,100",
            "optim.warmup_steps=0",
            "optim.grad_clip=0",
            "train.steps=10",
            "train.eval_interval=5",
            "train.progress=false",
            *SMALL_DATA,
        ],
        workdir,
    )
    assert proc.returncode == 1
    statuses = sorted(run_statuses(workdir / "mlflow.db"))
    assert statuses == ["FAILED", "FAILED", "FINISHED"]  # the diverged run and the sweep's parent
    assert "| optim.lr=100 | failed |" in proc.stderr


def test_a_sweep_starts_its_warm_worker_exactly_when_hydra_sets_up_a_process_launcher(monkeypatch, workdir):
    """Decided from the composed config, when Hydra builds the launcher, for every sweep preset with
    and without a launcher given: the worker preloads the store the config tracks into, or none
    without tracking, and belongs to the sweep callback (which closes it at the sweep's end)."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext

    from ablate.cli import common
    from ablate.config import CONF_DIR
    from ablate.sweep import callback
    from hydra_plugins.ablate_launcher.process_launcher import ProcessLauncher

    monkeypatch.chdir(workdir)
    monkeypatch.setattr(callback.Pool, "start", lambda pool: pool)  # what it would start, not started
    cases = [[f"+sweep={p.stem}"] for p in sorted((CONF_DIR / "sweep").glob("*.yaml"))]
    cases += [[*cases[0], f"hydra/launcher={name}"] for name in ("basic", "sequential", "parallel")]
    cases += [["train.seed=1"], ["train.seed=1", "hydra/launcher=parallel"]]
    stores = {
        "": f"sqlite:///{workdir}/mlflow.db",
        "tracking=none": None,
        "tracking.uri=http://h:5000": "http://h:5000",
    }
    launchers = set()
    for args in cases:
        for extra, store in stores.items():
            cfg = common._compose("config", [*args, *filter(None, [extra])])
            HydraConfig.instance().set_config(cfg)
            sweep = callback.SweepCallback()
            callbacks = Callbacks()
            callbacks.callbacks.append(sweep)
            context = HydraContext(config_loader=None, callbacks=callbacks)
            launcher = Plugins.instance().instantiate_launcher(hydra_context=context, task_function=None, config=cfg)
            process = isinstance(launcher, ProcessLauncher)
            launchers.add(process)
            worker = sweep._pool.mlflow_uri if sweep._pool else "no worker"
            assert worker == (store if process else "no worker"), (args, extra)
    assert launchers == {True, False} and len(cases) >= 10
