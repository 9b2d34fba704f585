"""ablate.plan / ablate.planner: hand-computed FLOPs and bytes, the 70B case, budgets, the binding corner,
the MFU from MLflow, a fit's prediction, and the command line."""

from __future__ import annotations

import itertools
import json
import math
import time

import numpy as np
import pytest

from ablate.config import PRECISION_NAMES, ConfigError, PrecisionConfig, build, parse_plan
from ablate.model import accounting
from ablate.plan import hardware as plan_hardware
from ablate.plan import loss
from ablate.plan import make as plan_make
from ablate.plan import memory as plan_memory
from ablate.plan import mfu as plan_mfu
from ablate.plan import render as plan_render
from ablate.scaling.reports import fitfile
from support import CONF, ROOT, preset

GPT_1P5B_PARAMS = 48 * (12 * 1600**2 + 2 * 1600) + 1600 + 50257 * 1600 + 1024 * 1600  # 1,556,764,800
COARSE_GRID = np.array(list(itertools.product([0.0, 0.5], [0, 10, 20], [0.2, 0.8], [0, 10, 20], [0.2, 0.8])))


def compose_plan(overrides: list[str]) -> dict:
    """The tree `python -m ablate plan OVERRIDES` works on, composed from the real conf/plan.yaml."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="plan", overrides=["tracking_uri=", *overrides])
            return OmegaConf.to_container(cfg, resolve=True)
    finally:
        GlobalHydra.instance().clear()


def inputs(model="gpt_1p5b", precision="bf16_pure", hardware="h200", budget=None, data=None, **plan):
    budget = {"tokens": 1e11} if budget is None else budget
    overrides = [f"model={model}", f"precision={precision}", f"hardware={hardware}"]
    overrides += [f"budget.{k}={v}" for k, v in budget.items()]
    overrides += [f"data.{k}={v}" for k, v in (data or {}).items()]
    overrides += [f"{k}={v}" for k, v in plan.items()]
    return parse_plan(compose_plan(overrides))


def make(mfu=0.4, fit=None, **kwargs) -> plan_make.Plan:
    inp = inputs(**kwargs)
    hw = plan_hardware.planning_hardware(inp.hardware, inp.precision)
    return plan_make.make_plan(inp, hw, plan_mfu.MfuChoice(mfu, "override", f"mfu={mfu}"), fit)


# ---------------------------------------------------------------------------------------------
# Hand-computed values
# ---------------------------------------------------------------------------------------------


def test_1p5b_on_100b_tokens_is_9e20_flops_by_6nd():
    assert accounting.flops_6nd(1.5e9, 1e11) == pytest.approx(9e20)
    p = make()
    assert p.params == GPT_1P5B_PARAMS
    assert p.flops_6nd == pytest.approx(6 * GPT_1P5B_PARAMS * 1e11)  # 9.34e20 for this 1.557B shape
    # with attention: 6 (12 L d^2 + V d) + 12 L T d per token
    fpt = 6 * (12 * 48 * 1600**2 + 50257 * 1600) + 12 * 48 * 1024 * 1600
    assert p.flops == pytest.approx(fpt * 1e11)


def test_chinchilla_70b_on_1p4t_tokens_is_5p9e23_flops():
    assert accounting.flops_6nd(70e9, 1.4e12) == pytest.approx(5.9e23, rel=0.01)
    p = make(model="chinchilla_70b", hardware="h100", precision="bf16", budget={"tokens": 1.4e12})
    # the preset's 12 L d^2 + embeddings count is 64.7B (the paper rounds to 70B)
    assert p.params == 80 * (12 * 8192**2 + 2 * 8192) + 8192 + 32000 * 8192 + 2048 * 8192
    assert p.flops_6nd == pytest.approx(6 * p.params * 1.4e12)


def test_bf16_pure_is_12_bytes_per_param_and_18_gb_for_1p5b():
    p = make(precision="bf16_pure")
    m = p.memory.at_gpus
    assert p.memory.bytes_per_param == 12
    assert (m.weights, m.gradients, m.optimizer_states, m.master_weights) == (
        2 * p.params,
        2 * p.params,
        8 * p.params,
        0,
    )
    assert 12 * 1.5e9 == 18e9  # the round figure; this 1.557B shape needs 18.7 GB
    assert m.weights + m.gradients + m.optimizer_states == pytest.approx(18.7e9, rel=0.01)


def test_bf16_with_fp32_master_weights_is_16_bytes_per_param():
    assert make(precision="bf16").memory.bytes_per_param == 16


def test_memory_total_is_states_plus_the_larger_of_activations_and_optimizer_step():
    m = make(batch_size=8).memory.at_gpus
    states = m.weights + m.gradients + m.optimizer_states + m.master_weights
    assert m.buffers == 48 * 1024**2  # one (T, T) bool causal mask per layer
    assert m.total == states + m.buffers + max(m.activations + m.fsdp_buffers, m.optimizer_step)
    assert m.activations > m.activations_saved > 0


def test_time_and_cost_by_hand():
    p = make(mfu=0.5, gpus=8)
    assert p.gpus_used == 8
    # compute time, stretched by the all-reduce the step waits for (plan/comm.py; test_comm.py)
    assert p.communication.strategy == "ddp" and 1 < p.communication.slowdown < 1.1
    assert p.hours == pytest.approx(p.flops / (8 * 9.89e14 * 0.5) / 3600 * p.communication.slowdown)
    assert p.cost == pytest.approx(p.hours * 8 * 3.79)


def test_peak_key_agrees_with_hardware_peak_for():
    from ablate.perf.hardware import Hardware

    peaks = inputs(hardware="h100").hardware.peak_flops
    hw = Hardware(name="h100", device="cuda", peak_flops=peaks)
    for name in PRECISION_NAMES:
        prec = build(PrecisionConfig, preset("precision", name), "precision")
        assert peaks[prec.matmul_dtype] == hw.peak_for(prec)


# ---------------------------------------------------------------------------------------------
# Fitting on the GPUs
# ---------------------------------------------------------------------------------------------


def test_70b_does_not_fit_on_one_h100_and_says_how_many_it_needs():
    p = make(
        model="chinchilla_70b",
        hardware="h100",
        precision="bf16",
        budget={"tokens": 1.4e12},
        batch_size=1,
        activation_checkpointing=True,
    )
    assert not p.fits
    assert p.memory.at_gpus.total > 1e12  # 16 bytes x 64.7B params before activations
    n = p.gpus_needed
    assert n > 1 and p.gpus_used == n
    cfg, prec, usable = p.model, build(PrecisionConfig, preset("precision", "bf16"), "precision"), p.memory.usable
    assert plan_memory.memory_on(cfg, prec, 1, n, "cuda", True, usable).total <= usable
    assert plan_memory.memory_on(cfg, prec, 1, n - 1, "cuda", True, usable).total > usable
    assert p.binding.corner == "hardware" and p.binding.what == "memory" and p.binding.ratio > 10


def test_70b_at_default_settings_falls_back_to_checkpointing():
    p = make(model="chinchilla_70b", hardware="h100", precision="bf16", budget={"tokens": 1.4e12})
    assert p.memory.gpus_needed_as_configured is None  # 4 x 2048 tokens of activations exceed any share
    assert p.memory.fallback.activation_checkpointing and p.gpus_needed == p.memory.fallback.gpus_needed
    assert p.memory.needed.total <= p.memory.usable
    # recomputation: 4/3 of the time at the same MFU
    assert p.hours == pytest.approx(p.flops * 4 / 3 / (p.gpus_used * 9.89e14 * 0.4) / 3600 * p.communication.slowdown)
    assert p.communication.strategy == "fsdp"


def test_replicated_when_it_fits_sharded_when_it_does_not():
    small = make(gpus=8)
    assert not small.memory.at_gpus.sharded and small.gpus_needed == 1
    big = make(
        model="chinchilla_70b",
        hardware="h200",
        precision="bf16_pure",
        budget={"tokens": 1e12},
        gpus=64,
        batch_size=1,
        activation_checkpointing=True,
    )
    assert big.memory.at_gpus.sharded and big.fits


# ---------------------------------------------------------------------------------------------
# Budgets and the binding corner
# ---------------------------------------------------------------------------------------------


def test_a_flops_budget_smaller_than_the_run_binds_compute():
    p = make(budget={"tokens": 1e11, "flops": 5e20})
    assert p.binding.corner == "compute" and p.binding.ratio == pytest.approx(p.flops / 5e20)
    assert p.alternative.C == 5e20


def test_an_hours_budget_sets_the_tokens_and_time_binds_when_too_short():
    p = make(budget={"hours": 100}, gpus=8)
    assert p.tokens_from == "what budget.hours buys"
    assert p.hours == pytest.approx(100, rel=1e-6)
    short = make(budget={"tokens": 1e11, "hours": 10}, gpus=8)
    assert short.binding.corner == "hardware" and short.binding.what == "time"
    assert short.binding.ratio == pytest.approx(short.hours / 10)


def test_a_dollar_budget_buys_what_it_costs():
    p = make(budget={"dollars": 50_000})
    assert p.cost == pytest.approx(50_000, rel=1e-6)


def test_every_limit_a_budget_breaks_is_named_with_its_ratio():
    p = make(budget={"tokens": 1e11, "hours": 10}, gpus=8, data={"tokens_available": 5e10})
    broken = {c.what: c.ratio for c in p.broken}
    assert len(broken) >= 2 and list(broken.values()) == sorted(broken.values(), reverse=True)
    line = plan_render._binding(p)
    assert all(f"{what} binds" in line and f"{ratio:.3g}x" in line for what, ratio in broken.items())
    assert plan_render.plan_dict(p)["broken"] == list(broken)


def test_data_binds_when_compute_optimal_tokens_exceed_what_is_available():
    p = make(budget={"flops": 1e22}, data={"tokens_available": 5e10})
    assert p.alternative.D_opt > 5e10
    assert p.binding.corner == "data"
    assert p.binding.ratio == pytest.approx(max(p.tokens, p.alternative.D_opt) / 5e10)


def test_compute_optimal_without_a_fit_is_twenty_tokens_per_param():
    alt = loss.compute_optimal(5.88e23, None)
    assert alt.N_opt == pytest.approx(math.sqrt(5.88e23 / 120))  # 70B for Chinchilla's budget
    assert alt.tokens_per_param == pytest.approx(20)
    assert 6 * alt.N_opt * alt.D_opt == pytest.approx(5.88e23)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"budget": {"tokens": -1}}, "budget.tokens=-1"),
        ({"budget": {"flops": 1e21, "hours": 5}}, "conflict"),
        ({"budget": {}}, "no budget given"),
        ({"mfu": 1.5}, "mfu=1.5"),
        ({"model": "nano"}, "model.vocab_size is null"),
        ({"gpus": 0}, "gpus=0 must be positive"),
    ],
)
def test_bad_inputs_are_one_clear_line(kwargs, message):
    with pytest.raises(ConfigError) as err:
        inputs(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_precision_the_hardware_cannot_run_is_refused():
    inp = inputs(precision="fp8_tensorwise", hardware="a100")
    with pytest.raises(ConfigError, match="needs CUDA compute capability >= 8.9"):
        plan_hardware.planning_hardware(inp.hardware, inp.precision)


# ---------------------------------------------------------------------------------------------
# A scaling-law fit: prediction and interval
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fit_report():
    from ablate.scaling.analysis import fit_all
    from ablate.scaling.laws.chinchilla import ChinchillaLaw
    from ablate.scaling.points import Points
    from ablate.scaling.predict import FitOptions

    true = ChinchillaLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
    rng = np.random.default_rng(3)
    C = np.repeat(np.geomspace(1e17, 1e20, 5), 7)
    N = np.concatenate([true.n_opt(c) * np.geomspace(0.3, 3, 7) for c in np.geomspace(1e17, 1e20, 5)])
    D = C / (6 * N)
    points = Points(N, D, true.loss(N, D) * np.exp(rng.normal(0, 0.003, N.size)), C, entropy_floor=1.6)
    return fit_all(points, options=FitOptions(n_boot=40, grid=COARSE_GRID), single=(), approach2=False)


@pytest.fixture(scope="module")
def ladder_report():
    """This project's CPU ladder (12 runs, 3 sizes, far above the synthetic language's floor): a fit
    whose law, predictions and frontier at big-run scale are not determined."""
    from ablate.scaling.analysis import fit_all
    from ablate.scaling.points import Points
    from ablate.scaling.predict import FitOptions

    points = Points.from_csv(ROOT / "experiments" / "ladder" / "sweep" / "points.csv").with_floor(0.504)
    return fit_all(points, options=FitOptions(n_boot=100), single=(), approach2=False)


def write_fit(tmp_path, report, with_samples: bool = True, name: str = "fit.json"):
    from ablate.scaling.reports.export import fit_dict

    doc = fit_dict(report)  # as `python -m ablate fit` writes it: with the resamples
    if not with_samples:  # as written by hand, or cut down
        del doc["chinchilla_approach3"]["bootstrap"]["samples"]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_plans_loss_is_the_fits_own_prediction(tmp_path, fit_report):
    """The planner rebuilds the fit's predictor from fit.json: same number, interval and verdict."""
    from ablate.scaling.predict import predict

    fit = fitfile.load_fit(write_fit(tmp_path, fit_report))
    N, D = 1.5e9, 1e11
    ours = loss.predict_loss(fit, N, D)
    reference = predict(fit_report.predictor, N=N, D=D)
    assert ours.value == pytest.approx(reference.loss.value)
    assert (ours.lo, ours.hi) == pytest.approx(reference.loss.ci95, rel=1e-4)  # samples kept to 6 digits
    assert ours.verdict == reference.verdict and ours.lo >= 1.6
    assert "calibrated" in ours.interval


def test_without_bootstrap_samples_the_loss_says_its_interval_is_incomplete(tmp_path, fit_report):
    fit = fitfile.load_fit(write_fit(tmp_path, fit_report, with_samples=False))
    assert fit.predictor.samples.shape == (0, 5)
    ours = loss.predict_loss(fit, 1e9, 2e10)
    assert "bootstrap" in fit.predictor.verdict.codes() and ours.verdict.level == "wide"
    assert "fit.json has no bootstrap samples" in ours.verdict.because()


def test_compute_optimal_alternative_from_a_fit_by_hand(tmp_path, fit_report):
    fit = fitfile.load_fit(write_fit(tmp_path, fit_report))
    C = 1e20
    alt = loss.compute_optimal(C, fit)
    assert not alt.from_rule and alt.verdict.usable
    v = fit.values
    a, b = v["alpha"], v["beta"]
    G = (a * v["A"] / (b * v["B"])) ** (1 / (a + b))
    assert alt.N_opt == pytest.approx(G * (C / 6) ** (b / (a + b)))
    assert alt.D_opt == pytest.approx(C / (6 * alt.N_opt))
    assert alt.loss.value == pytest.approx(v["E"] + v["A"] / alt.N_opt**a + v["B"] / alt.D_opt**b)
    p = make(fit=fit)
    assert p.prediction is not None and p.alternative is not None


def test_what_the_budget_buys_against_the_compute_optimal_split(tmp_path, fit_report):
    """A 1.5B model on 1e11 tokens is far from the fit's compute-optimal split of the same compute: the
    plan says both losses and the compute at which the optimal split reaches this plan's loss, which
    is less than the plan's own and lies on the law's frontier."""
    fit = fitfile.load_fit(write_fit(tmp_path, fit_report))
    p = make(fit=fit, budget={"tokens": 3e12})
    b = p.purchase
    assert b.decided and b.loss == pytest.approx(p.prediction.value)
    assert b.optimal_loss == pytest.approx(p.alternative.loss.value) and b.optimal_loss < b.loss
    assert 0 < b.C_same < b.C == p.alternative.C
    law = fit.law()
    assert float(law.loss(law.n_opt(b.C_same), law.d_opt(b.C_same))) == pytest.approx(b.loss, rel=1e-6)
    row = dict(plan_render.summary_rows(p))["what it buys"]
    assert f"{b.optimal_loss:.3f}" in row and f"${p.cost * b.C_same / b.C:,.0f} instead of ${p.cost:,.0f}" in row
    assert row.endswith(f"both predictions {b.level}") and b.level in ("trusted", "wide")
    assert plan_render.plan_dict(p)["what_it_buys"]["compute_share"] == pytest.approx(b.C_same / b.C)


def test_a_not_determined_fit_falls_back_to_twenty_tokens_per_param(tmp_path, ladder_report):
    """The CPU ladder's fit for a 1.5B model on 1e11 tokens: no loss number, why, the runs that would
    settle it; the allocation is the 20-tokens-per-parameter rule, labelled as such; what the budget
    buys is not determined, and says why; no numpy warning."""
    import warnings

    fit = fitfile.load_fit(write_fit(tmp_path, ladder_report))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = make(fit=fit)
        table = plan_render.render_table(p)
    assert p.prediction.value is None and p.prediction.verdict.level == "not_determined"
    assert len(p.prediction.runs_to_determine) == 3
    alt = p.alternative
    assert alt.from_rule and alt.tokens_per_param == pytest.approx(20.0)
    assert alt.verdict.level == "not_determined" and alt.method.startswith("rule of thumb D = 20 N")
    assert 1 <= alt.tokens_per_param <= 10_000
    row = next(line for line in table.splitlines() if line.startswith("compute-optimal"))
    assert "rule of thumb D = 20 N (Hoffmann et al. 2022), because the fit's allocation" in row
    assert "runs that would settle it: N=" in row
    assert "predicted loss     not_determined: " in table
    # the suggested runs are priced on this hardware and said to be a step, not the whole way
    run = p.prediction.runs_to_determine[0]
    dollars = 3 * run.seconds / 3600 * p.hardware.price_per_hour
    assert f"each on one {p.hardware.name}, ${dollars:,.2g} for all 3" in row
    gap = math.log10(p.flops / run.C)
    assert gap > 1 and f"stay {gap:.1f} decades past them" in row
    assert "tokens available" not in row  # no data limit given: none said
    short = make(fit=fit, data={"tokens_available": 1e6})
    most = max(r.D for r in short.alternative.runs_to_determine)
    assert f"D up to {most / 1e6:,.0f}x the 1e+06 tokens available" in plan_render.render_table(short)
    doc = plan_render.plan_dict(p)
    assert doc["predicted_loss"]["value"] is None and doc["compute_optimal"]["from_rule"] is True
    assert "what it buys       not_determined: the loss this plan reaches is not_determined" in table
    assert doc["what_it_buys"]["C_same_loss"] is None


@pytest.mark.parametrize("C", [1e12, 1e15, 1e18, 1e21, 1e24])
def test_no_allocation_outside_1_to_10000_tokens_per_param_and_no_loss_below_the_floor(tmp_path, ladder_report, C):
    fit = fitfile.load_fit(write_fit(tmp_path, ladder_report))
    alt = loss.compute_optimal(C, fit)
    assert 1 <= alt.tokens_per_param <= 10_000
    assert alt.loss is None or alt.loss.lo >= 0.504
    for N, D in ((1e5, 1e7), (1.5e9, 1e11)):
        pred = loss.predict_loss(fit, N, D)
        assert pred.value is None or pred.lo >= 0.504


def test_a_fit_json_of_an_earlier_version_refuses_to_extrapolate(tmp_path, fit_report):
    from ablate.scaling.reports.export import fit_dict

    doc = fit_dict(fit_report)
    a3 = doc["chinchilla_approach3"]
    for key in ("verdict", "reasons", "calibration", "thresholds", "variant"):
        del a3[key]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    fit = fitfile.load_fit(str(path))
    assert fit.predictor.verdict.level == "wide" and "earlier version" in fit.predictor.verdict.because()
    far = loss.predict_loss(fit, 1e10, 1e12)
    assert far.value is None and "could not be calibrated" in far.verdict.because()


def test_a_fit_that_is_not_a_fit_is_refused(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"chinchilla_approach3": {"status": "DID NOT CONVERGE", "params": None}}))
    with pytest.raises(ConfigError, match="DID NOT CONVERGE"):
        fitfile.load_fit(str(path))
    with pytest.raises(ConfigError, match="cannot be read"):
        fitfile.load_fit(str(tmp_path / "missing.json"))


# ---------------------------------------------------------------------------------------------
# MFU from the user's own runs
# ---------------------------------------------------------------------------------------------


def record_run(client, experiment, hardware, precision, mfu, status="FINISHED", synchronized=True):
    run = client.create_run(experiment)
    for key, value in (("hardware.name", hardware), ("precision.name", precision), ("derived.device", "cuda")):
        client.log_param(run.info.run_id, key, value)
    client.log_metric(run.info.run_id, "final/mfu", mfu, timestamp=int(time.time() * 1000), step=0)
    if synchronized:  # timed between synchronizations (perf/clock.py), which records the warm-up
        client.log_metric(run.info.run_id, "final/warmup_steps", 1, timestamp=int(time.time() * 1000), step=0)
    client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


@pytest.mark.slow
def test_mfu_is_the_median_of_finished_runs_on_the_same_hardware_and_precision(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    one, two = client.create_experiment("one"), client.create_experiment("two")
    ids = [
        record_run(client, one, "h200", "bf16_pure", 0.31),
        record_run(client, two, "h200", "bf16_pure", 0.45),
        record_run(client, two, "h200", "bf16_pure", 0.38),
    ]
    record_run(client, one, "h200", "bf16_pure", 0.99, status="FAILED")
    record_run(client, two, "h200", "bf16_pure", 1.2763)  # an older ablate's impossible MFU: not a measurement
    record_run(client, one, "h200", "bf16", 0.10)
    record_run(client, one, "h100", "bf16_pure", 0.20)
    record_run(client, one, "h200", "bf16_pure", 0.038, synchronized=False)  # host time per step: not a measurement
    cfg = inputs(tracking_uri=uri).plan
    choice = plan_mfu.choose_mfu(cfg, "h200", "cuda", "bf16_pure")
    assert choice.source == "measured" and choice.value == pytest.approx(0.38)
    assert "1 older run(s) on an asynchronous device, timed without synchronization, left out" in choice.detail
    assert sorted(choice.run_ids) == sorted(ids)
    override = plan_mfu.choose_mfu(inputs(tracking_uri=uri, mfu=0.5).plan, "h200", "cuda", "bf16_pure")
    assert (override.value, override.source) == (0.5, "override")


def test_a_missing_store_gives_the_default_and_is_not_created(tmp_path):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    choice = plan_mfu.choose_mfu(inputs(tracking_uri=uri, default_mfu=0.35).plan, "h200", "cuda", "bf16_pure")
    assert (choice.value, choice.source) == (0.35, "default") and "no MLflow store" in choice.detail
    assert not (tmp_path / "none.db").exists()


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def run_plan(cli):
    """run_plan(args, cwd): `python -m ablate plan ARGS` in cwd."""
    return lambda args, cwd: cli(args, cwd, timeout=300, command="plan")


@pytest.mark.e2e
def test_command_line_writes_plan_json_md_and_prints_a_table(run_plan, tmp_path):
    out = tmp_path / "plans" / "xl"
    r = run_plan(
        [
            "model=gpt_1p5b",
            "precision=bf16_pure",
            "hardware=h200",
            "budget.tokens=1e11",
            "gpus=8",
            "data.tokens_available=3e11",
            f"out={out}",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "plan.json").read_text())
    for key in ("params", "tokens", "flops_6nd", "flops", "memory", "fits", "gpus_needed", "hours", "cost", "binding"):
        assert key in doc
    assert set(doc["memory"]) >= {"weights", "gradients", "optimizer_states", "master_weights", "activations", "total"}
    assert doc["memory"]["bytes_per_param"] == 12 and doc["fits"] and doc["gpus"] == 8
    assert doc["flops_6nd"] == pytest.approx(6 * GPT_1P5B_PARAMS * 1e11)
    assert doc["mfu_source"] == "default" and not (tmp_path / "mlflow.db").exists()
    assert (out / "plan.md").read_text().startswith("# Plan: gpt_1p5b on h200")
    assert "precision:\n  name: bf16_pure" in (out / "config.yaml").read_text()
    assert "optimizer states" in r.stdout and "binding" in r.stdout


@pytest.mark.e2e
def test_command_line_70b_on_h100(run_plan, tmp_path):
    r = run_plan(["model=chinchilla_70b", "hardware=h100", "budget.tokens=1.4e12"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "DOES NOT FIT on 1 h100" in r.stdout
    doc = json.loads((tmp_path / "plans" / "chinchilla_70b-h100" / "plan.json").read_text())
    assert doc["fits"] is False and doc["gpus_needed"] > 1 and doc["binding"] == "hardware"


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args, says",
    [
        (["budget.tokens=-5"], "budget.tokens=-5.0 must be positive"),
        (["hardware=tpu", "budget.tokens=1e11"], "hardware=tpu is not a known option"),
        (["budget.flops=1e21", "budget.dollars=100"], "conflict"),
    ],
)
def test_command_line_bad_input_is_one_line_and_writes_nothing(run_plan, tmp_path, args, says):
    r = run_plan([*args, f"out={tmp_path / 'p'}"], tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], r.stderr
    assert not (tmp_path / "p").exists() and not list(tmp_path.iterdir())


def test_a_gpu_plan_states_where_fp8_pays_on_that_gpu_or_that_it_was_not_measured(tmp_path, monkeypatch):
    from ablate.perf import fp8

    monkeypatch.setenv(fp8.RESULTS_ENV, str(tmp_path / "none.json"))
    row = dict(plan_render.summary_rows(make()))["fp8"]
    assert row == "fp8 crossover width on h200: not measured (benchmarks/bench_gpu.py on that GPU measures it)"
    rows = [{"width": w} for w in (768, 2048, 4096)]
    doc = {"device": {"gpu": "NVIDIA H200"}, "fp8": {"rows": rows, "crossover_width": {"fp8_rowwise": 2048}}}
    (tmp_path / "gpu.json").write_text(json.dumps(doc))
    monkeypatch.setenv(fp8.RESULTS_ENV, str(tmp_path / "gpu.json"))
    assert "fp8_rowwise from width 2048" in dict(plan_render.summary_rows(make()))["fp8"]
    assert "fp8" not in dict(plan_render.summary_rows(make(hardware="cpu", precision="fp32", model="gpt2_124m")))


# ---------------------------------------------------------------------------------------------
# A law of one vocabulary for a model of another (plan/vocabulary.py)
# ---------------------------------------------------------------------------------------------

DOCS_TOKENIZER = {"vocab_size": 2048, "data": "debian_docs", "tokenizer": "bpe", "bytes_per_token": 2.33}


def fit_with_tokenizer(tmp_path, report, tokenizer):
    import dataclasses

    points = dataclasses.replace(report.points, tokenizer=tokenizer)
    return fitfile.load_fit(write_fit(tmp_path, dataclasses.replace(report, points=points)))


def test_fit_json_records_the_vocabulary_its_runs_were_trained_on(tmp_path, fit_report):
    fit = fit_with_tokenizer(tmp_path, fit_report, DOCS_TOKENIZER)
    assert json.loads(open(fit.path).read())["data"]["tokenizer"] == DOCS_TOKENIZER
    assert fit.tokenizer == DOCS_TOKENIZER
    assert json.loads(open(write_fit(tmp_path, fit_report, name="plain.json")).read())["data"]["tokenizer"] is None


def test_the_runs_vocabulary_and_bytes_per_token_come_from_their_params_and_val_bpb():
    from types import SimpleNamespace

    from ablate.scaling.runs import _tokenizer

    def run(vocab, loss, bpb, data="debian_docs"):
        params = {"model.vocab_size": str(vocab), "data.name": data, "data.kind": "text", "data.tokenizer": "bpe"}
        params["derived.train_split_tokens"] = "16300000"
        return SimpleNamespace(data=SimpleNamespace(params=params, metrics={"val/loss": loss, "val/bpb": bpb}))

    # bpb = L / ln 2 / bytes per token: 3.2 nats per token at 2.33 bytes per token
    runs = [run(2048, 3.2, 3.2 / math.log(2) / 2.33), run(2048, 3.0, 3.0 / math.log(2) / 2.33)]
    assert _tokenizer(runs) == {**DOCS_TOKENIZER, "bytes_per_token": pytest.approx(2.33), "train_tokens": 16_300_000}
    assert _tokenizer([*runs, run(4096, 3.0, 1.0)]) is None  # runs of two vocabularies share no law
    no_bpb = [SimpleNamespace(data=SimpleNamespace(params=r.data.params, metrics={"val/loss": 3.0})) for r in runs]
    assert _tokenizer(no_bpb)["bytes_per_token"] is None


def test_a_plan_for_another_vocabulary_gives_the_laws_loss_in_bits_per_byte(tmp_path, fit_report):
    fit = fit_with_tokenizer(tmp_path, fit_report, DOCS_TOKENIZER)
    plan = make(fit=fit)  # gpt_1p5b: 50,257 tokens against the law's 2,048
    (line,) = [n for n in plan.notes if "vocabulary" in n]
    assert "fitted on a 2,048-token vocabulary (debian_docs, bpe), this model has 50,257" in line
    bpb = plan.prediction.value / math.log(2) / 2.33
    assert f"{bpb:.3f} bits per byte" in line
    assert line in plan_render.render_table(plan)


def test_a_plan_for_the_laws_own_vocabulary_says_nothing_of_it(tmp_path, fit_report):
    fit = fit_with_tokenizer(tmp_path, fit_report, {**DOCS_TOKENIZER, "vocab_size": 50257})
    assert not [n for n in make(fit=fit).notes if "vocabulary" in n]


def test_a_law_without_bytes_per_token_is_refused_for_another_vocabulary(tmp_path, fit_report):
    synthetic = {"vocab_size": 4000, "data": "synthetic", "tokenizer": "synthetic", "bytes_per_token": None}
    fit = fit_with_tokenizer(tmp_path, fit_report, synthetic)
    with pytest.raises(
        ConfigError, match=r"4,000-token vocabulary .* records no bytes per token.*valid: model.vocab_size=4000"
    ):
        make(fit=fit)
    bad = fit_with_tokenizer(tmp_path, fit_report, {**DOCS_TOKENIZER, "bytes_per_token": -1})
    with pytest.raises(ConfigError, match="data.tokenizer.bytes_per_token is -1"):
        make(fit=bad)


def test_runs_suggested_past_the_laws_training_split_are_warned_of(tmp_path, ladder_report):
    """The CPU ladder's law, not determined for a 1.5B model, suggests runs; where they need more
    tokens than its runs' training split held, the plan says they would repeat data."""
    split = {**DOCS_TOKENIZER, "vocab_size": 50257, "train_tokens": 1_000}
    p = make(fit=fit_with_tokenizer(tmp_path, ladder_report, split))
    suggested = [*p.prediction.runs_to_determine, *p.alternative.runs_to_determine]
    (note,) = [n for n in p.notes if "training split" in n]
    assert note.startswith(f"{len(suggested)} of the {len(suggested)} runs suggested to determine the law need up to")
    assert "more than the 1,000 of its runs' training split (debian_docs): they would repeat data" in note
    roomy = {**split, "train_tokens": int(10 * max(r.D for r in suggested))}
    assert not [n for n in make(fit=fit_with_tokenizer(tmp_path, ladder_report, roomy)).notes if "training split" in n]
