"""`python -m ablate fit` and `ablate backtest` through the real command line: Epoch's Chinchilla CSV,
this project's CPU ladder, data no law can be trusted on (one verdict line each, no warnings), a small
real sweep read back from MLflow, and each kind of bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ablate.scaling.laws.chinchilla import ChinchillaLaw
from support import DATA, ROOT, SMALL_DATA, TRUE_LAW, one_line_error

CHINCHILLA = DATA / "chinchilla.csv"
HEADER = "params,tokens,loss\n"
PLOTS = {"fit_curves.png", "frontier.png", "residuals.png"}


@pytest.fixture(scope="session")
def fit(cli):
    """fit(args, cwd): `python -m ablate fit ARGS` in cwd."""

    def run(args: list[str], cwd: Path, timeout: float = 900):
        return cli(args, cwd, timeout=timeout, command="fit")

    return run


# --- points=FILE.csv --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chinchilla_run(fit, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("chinchilla")
    result = fit([f"points={CHINCHILLA}", "n_boot=20", "target.C=5.76e23"], cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return cwd, result


def test_chinchilla_csv_reproduces_epochs_fit_through_the_command_line(chinchilla_run):
    cwd, result = chinchilla_run
    out = cwd / "exports" / exported(CHINCHILLA)  # the default: exports/<the CSV's path>
    doc = json.loads((out / "fit.json").read_text())
    params = doc["chinchilla_approach3"]["params"]
    # Besiroglu et al. 2024, Hoffmann's procedure on the 240 points: E 1.817, alpha 0.3473, beta 0.3672
    assert round(params["E"]["value"], 3) == 1.817
    assert round(params["alpha"]["value"], 4) == 0.3473 and round(params["beta"]["value"], 4) == 0.3672
    assert doc["data"]["n_points"] == 240 and doc["chinchilla_approach3"]["bootstrap"]["n_resamples"] == 20
    (cut,) = doc["held_out"]["cuts"]
    assert cut["n_held"] == 1 and len(doc["held_out"]["runs"]) == 1
    assert {"fit.json", "fit.md", "predictions.csv"} | PLOTS <= {p.name for p in out.iterdir()}
    assert not list(out.glob(".fit-*"))  # the staging folder is gone
    assert "5 highest-loss rows of 245 dropped" in result.stderr


def test_the_printed_table_matches_fit_json(chinchilla_run):
    cwd, result = chinchilla_run
    doc = json.loads((cwd / "exports" / exported(CHINCHILLA) / "fit.json").read_text())
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.startswith("  ")}
    for name in ("E", "A", "B", "alpha", "beta"):
        est = doc["chinchilla_approach3"]["params"][name]
        assert float(rows[name][1]) == pytest.approx(est["value"], rel=1e-3)
        assert float(rows[name][2]) == pytest.approx(est["ci95"][0], rel=1e-3)
    assert result.stdout.startswith("Chinchilla approach 3: trusted\n")
    assert "(converged; 20 of 20 bootstrap resamples converged)" in result.stdout
    prediction = next(line for line in result.stdout.splitlines() if line.startswith("prediction for C=5.76e+23"))
    (p,) = doc["predictions"]
    assert f"loss {p['loss']['value']:.4g} (95% interval {p['loss']['ci95'][0]:.4g} to " in prediction
    assert prediction.endswith(f", {p['verdict']}")
    assert "held-out: refit without the largest-compute run" in result.stdout
    assert not (cwd / "mlflow.db").exists()  # a CSV fit leaves MLflow alone


# --- this project's CPU ladder, and data no law can be trusted on ----------------------------------

LADDER = ROOT / "experiments" / "ladder" / "sweep" / "points.csv"


def exported(points: Path) -> str:
    """The default export folder's name for a CSV outside the command's folder: its path from the root,
    folders joined by '-' (config.fit.source_name)."""
    return "-".join(points.with_suffix("").parts[1:])


def no_warnings(result) -> None:
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.e2e
def test_the_ladders_big_run_prediction_is_above_the_floor_or_not_determined(fit, cli, tmp_path):
    """The ladder's points.csv carries the synthetic language's floor (0.504): the 1.5e9 x 1e11 target
    prints not_determined with its reasons and the runs that would settle it, or a loss at or above
    the floor; the planner with that fit prints no allocation outside 1 to 10,000 tokens per parameter."""
    result = fit([f"points={LADDER}", "n_boot=100", "target.N=1.5e9", "target.D=1e11", "out=ladder"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    no_warnings(result)
    doc = json.loads((tmp_path / "ladder" / "fit.json").read_text())
    assert doc["data"]["entropy_floor"] == pytest.approx(0.504, abs=1e-3)
    assert doc["chinchilla_approach3"]["params"]["E"]["value"] >= doc["data"]["entropy_floor"]
    (p,) = doc["predictions"]
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("prediction for N=1.5e+09"))
    if p["verdict"] == "not_determined":
        assert p["loss"] is None and ": not_determined: " in line and "runs that would determine it: N=" in line
    else:
        assert p["loss"]["ci95"][0] >= doc["data"]["entropy_floor"]
    plan = cli(
        ["model=gpt_1p5b", "precision=bf16_pure", "hardware=h200", "budget.tokens=1e11", "fit=ladder/fit.json"],
        tmp_path,
        timeout=300,
        command="plan",
    )
    assert plan.returncode == 0, plan.stderr
    no_warnings(plan)
    alt = json.loads((tmp_path / "plans" / "gpt_1p5b-h200" / "plan.json").read_text())["compute_optimal"]
    assert 1 <= alt["tokens_per_param"] <= 10_000
    loss = json.loads((tmp_path / "plans" / "gpt_1p5b-h200" / "plan.json").read_text())["predicted_loss"]
    assert loss["value"] is None or loss["lo"] >= 0.504


def grid_csv(loss) -> str:
    """params,tokens,loss for 5 sizes x 5 token counts, loss(N, D, rng)."""
    rng = np.random.default_rng(0)
    N, D = (g.ravel() for g in np.meshgrid(np.geomspace(1e6, 1e8, 5), np.geomspace(1e8, 1e10, 5)))
    return HEADER + "".join(f"{n:g},{d:g},{v:.6g}\n" for n, d, v in zip(N, D, loss(N, D, rng), strict=True))


UNTRUSTWORTHY = {
    "noise": grid_csv(lambda N, D, rng: 3.0 * np.exp(rng.normal(0, 0.05, N.size))),
    "flat": grid_csv(lambda N, D, rng: 2.5 * np.exp(rng.normal(0, 0.001, N.size))),
    "one_size": HEADER + "".join(f"1e6,{d:g},{3 - i / 10}\n" for i, d in enumerate(np.geomspace(1e8, 1e10, 7))),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(UNTRUSTWORTHY))
def test_data_no_law_can_be_trusted_on_gets_one_verdict_line_each(fit, tmp_path, case):
    (tmp_path / "p.csv").write_text(UNTRUSTWORTHY[case])
    result = fit(["points=p.csv", "n_boot=50", "held_out=0", "target.C=1e20"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    no_warnings(result)
    doc = json.loads((tmp_path / "exports" / "p" / "fit.json").read_text())
    verdict = doc["chinchilla_approach3"]["verdict"]
    assert verdict != "trusted"
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("Chinchilla approach 3: ")]
    assert line.startswith(f"Chinchilla approach 3: {verdict}: ")
    for key in ("kaplan_N", "kaplan_D", "kaplan_C"):
        title = f"L({key.removeprefix('kaplan_')}): "
        assert len([ln for ln in result.stdout.splitlines() if ln.startswith(title)]) == 1, key
    (prediction,) = doc["predictions"]
    assert prediction["verdict"] == "not_determined" and prediction["loss"] is None
    if case == "one_size":
        assert line.startswith("Chinchilla approach 3: not_determined: all points at one N (params)")


def short_runs_csv() -> str:
    """params,tokens,loss: TRUE_LAW at 5 sizes x 5 to 80 tokens per parameter, 0.3% noise, and three of
    the 5-token runs 4%, 9% and 16% above the law."""
    law = ChinchillaLaw(**TRUE_LAW)
    N, tpp = (g.ravel() for g in np.meshgrid(np.geomspace(1e7, 1e9, 5), [5, 10, 20, 40, 80]))
    D = N * tpp
    L = law.loss(N, D) * np.exp(np.random.default_rng(0).normal(0, 0.003, N.size))
    L[[0, 2, 4]] *= [1.04, 1.09, 1.16]  # rows 0, 2, 4: the 5-token runs at 1e7, 1e8, 1e9 parameters
    return HEADER + "".join(f"{n:g},{d:g},{v:.6g}\n" for n, d, v in zip(N, D, L, strict=True))


@pytest.mark.e2e
def test_runs_that_break_the_law_get_a_refit_without_them_on_the_console(fit, tmp_path):
    (tmp_path / "p.csv").write_text(short_runs_csv())
    result = fit(["points=p.csv", "n_boot=40", "held_out=0", "noise=0.005"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    no_warnings(result)
    a3 = json.loads((tmp_path / "exports" / "p" / "fit.json").read_text())["chinchilla_approach3"]
    assert a3["verdict"] != "trusted" and a3["without_outliers"]["verdict"] == "trusted"
    assert sorted(r["N"] for r in a3["without_outliers"]["runs"]) == [1e7, 1e8, 1e9]
    lines = result.stdout.splitlines()
    (at,) = [i for i, ln in enumerate(lines) if ln.startswith("  suggestion, not applied: without N=1e+09, D=5e+09 ")]
    assert lines[at - 1].startswith(f"Chinchilla approach 3: {a3['verdict']}: ")
    assert lines[at].endswith(": trusted") and lines[at + 1].startswith("    refitted law: E ")


@pytest.mark.e2e
def test_variants_are_chosen_by_option_and_recorded(fit, tmp_path):
    """alpha tied to beta, and N as non-embedding parameters (the ladder's points.csv has both counts)."""
    result = fit([f"points={LADDER}", "n_boot=0", "held_out=0", "params=non_embedding", "tie_exponents=true"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads((tmp_path / "exports" / exported(LADDER) / "fit.json").read_text())
    a3 = doc["chinchilla_approach3"]
    assert (
        a3["variant"] == {"params": "non_embedding", "tie_exponents": True, "form": "additive"}
        and doc["data"]["params"] == "non_embedding"
    )
    assert a3["law"].endswith(", alpha = beta") and a3["exponents"] is not None
    assert a3["params"]["alpha"]["value"] == a3["params"]["beta"]["value"]
    ladder = np.loadtxt(LADDER, delimiter=",", skiprows=1, usecols=(4,))
    assert doc["data"]["N"]["max"] == pytest.approx(ladder.max())  # the non-embedding column


@pytest.mark.e2e
def test_backtest_prints_its_table_and_writes_it(cli, tmp_path):
    points = ROOT / "experiments" / "scaling" / "sweep" / "points.csv"
    result = cli(
        [f"points={points}", "n_boot=20", "cuts=[0.5,0.75]"],
        tmp_path,
        timeout=900,
        command="backtest",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    no_warnings(result)
    out = tmp_path / "exports" / exported(points) / "backtest"
    doc = json.loads((out / "backtest.json").read_text())
    assert len(doc["cuts"]) == 2 and doc["by_distance"] and len(doc["runs"]) == sum(c["n_held"] for c in doc["cuts"])
    assert result.stdout.startswith(f"# Backtest of {points}: 20 runs, cuts [0.5, 0.75]")
    assert "| decades of compute past the largest fitted run |" in (out / "backtest.md").read_text()
    assert (out / "backtest.png").read_bytes().startswith(b"\x89PNG")
    bad = cli(["points=x.csv", "cuts=[1.5]"], tmp_path, command="backtest")
    assert bad.returncode == 2 and "cuts=[1.5] is invalid" in bad.stderr
    scaling = ROOT / "experiments" / "scaling" / "sweep" / "points.csv"
    high = cli([f"points={scaling}", "entropy_floor=5"], tmp_path, command="backtest")
    assert high.returncode == 2
    assert "the entropy floor 5 is not below the lowest loss in the data (1.427)" in high.stderr


# --- bad input --------------------------------------------------------------------------------

SIZES = "1e6,1e8,3.0\n2e6,2e8,2.8\n4e6,4e8,2.6\n8e6,8e8,2.5\n1.6e7,1.6e9,2.4\n3.2e7,3.2e9,2.35\n"
BAD_CSV = {
    "too_few": (
        HEADER + "1e6,1e8,3.0\n2e6,2e8,2.8\n4e6,4e8,2.6\n",
        "Chinchilla approach 3: 3 points, needs at least 6",
    ),
    "nan": (
        HEADER + SIZES + "6.4e7,6.4e9,nan\n",
        "column 'loss' row 6 (line 8) is nan; every value must be finite and > 0",
    ),
    "negative": (HEADER + SIZES.replace("4e6,", "-4e6,"), "column 'params' row 2 (line 4) is -4000000.0"),
    "no_tokens_column": (
        "params,loss\n1e6,3.0\n",
        "missing column(s) tokens; valid columns: params, tokens, loss, flops",
    ),
    "not_a_number": (HEADER + SIZES + "6.4e7,6.4e9,abc\n", "column 'loss' row 6 (line 8) is 'abc', not a number"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSV))
def test_bad_csv_is_one_line(fit, tmp_path, case):
    text, expected = BAD_CSV[case]
    (tmp_path / "p.csv").write_text(text)
    line = one_line_error(fit(["points=p.csv", "n_boot=0", "held_out=0"], tmp_path))
    assert expected in line, line
    assert not (tmp_path / "exports").exists()


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], "experiment and points: neither given (valid: experiment=NAME"),
        (["experiment=x", "points=p.csv"], "experiment and points: both given"),
        (["points=absent.csv"], "absent.csv: no such file"),
        (["points=p.csv", "target.N=1e9"], "target.N=1e+09 is not a target (valid: target.N and target.D, or target.C"),
        (["points=p.csv", "target.C=-1"], "target.C=-1 must be positive"),
        (
            ["points=p.csv", "held_out=3"],
            "held_out=3 leaves 3 of 6 points; approach 3 needs at least 6 (valid: 0 to 0)",
        ),
        (
            ["points=p.csv", "nboot=10"],
            "unknown key nboot (valid: approach2, entropy_floor, experiment, form, held_out, interval, n_boot",
        ),
        (
            ["points=p.csv", "params=embedding"],
            "params=embedding is not a parameter count (valid: total, non_embedding)",
        ),
        (
            ["points=p.csv", "entropy_floor=2.5"],
            "the entropy floor 2.5 is not below the lowest loss in the data (2.35)",
        ),
        (["points=p.csv", "noise=2"], "noise=2 is not a run-to-run spread"),
        (["points=p.csv", "approach2.window_decades=0"], "approach2.window_decades=0.0 must be positive"),
        (["experiment=scaling"], "no MLflow store at"),
    ],
)
def test_bad_arguments_are_one_line(fit, tmp_path, args, expected):
    (tmp_path / "p.csv").write_text(HEADER + SIZES)
    line = one_line_error(fit(args, tmp_path))
    assert expected in line, line
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "exports").exists()


def test_an_experiment_that_does_not_exist_lists_those_that_do(fit, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    for name in ("scaling", "precision"):
        client.create_experiment(name)
    line = one_line_error(fit(["experiment=scalling", f"tracking.uri={uri}"], tmp_path))
    assert line == f"error: experiment=scalling does not exist in {uri} (valid: Default, precision, scaling)"
    empty = one_line_error(fit(["experiment=precision", f"tracking.uri={uri}"], tmp_path))
    assert "experiment=precision has no FINISHED training runs to fit (it has no runs)" in empty


# --- experiment=NAME, from a real sweep ---------------------------------------------------------

# 3 sizes x 3 budgets (approach 3 needs 3 of each), each run a few seconds: 4 sequences per step,
# evaluated every 5 steps on 2 batches.
TINY_RUN = [
    "train.batch_size=4",
    "train.eval_interval=5",
    "train.eval_batches=2",
    "train.log_interval=5",
    "train.progress=false",
    *SMALL_DATA,
]
GRID = ["--multirun", "model=nano,micro,tiny", "train.steps=10,20,40", *TINY_RUN]


@pytest.fixture(scope="module")
def sweep_dir(cli, tmp_path_factory):
    """A 3 x 3 grid of real training runs in one experiment, plus one run that diverges (FAILED)."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = cli(GRID, cwd, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    diverged = cli(
        ["model=nano", "train.steps=10", "optim.lr=1e4", "optim.warmup_steps=0", "optim.grad_clip=0", *TINY_RUN],
        cwd,
        timeout=600,
    )
    assert diverged.returncode == 1, diverged.stderr[-2000:]
    return cwd


@pytest.mark.slow
@pytest.mark.e2e
def test_fit_of_a_real_sweep_from_mlflow(fit, run_statuses, sweep_dir):
    from mlflow.tracking import MlflowClient

    result = fit(["experiment=ablate", "n_boot=20"], sweep_dir)
    out = sweep_dir / "exports" / "ablate"  # the default: exports/<experiment>
    doc = json.loads((out / "fit.json").read_text())
    assert (
        "9 FINISHED training runs, 9 training curves; skipped 1 run FAILED, not FINISHED; "
        "1 sweep parent run (tag ablate.kind=sweep)" in result.stderr
    ), result.stderr
    client = MlflowClient(f"sqlite:///{sweep_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    training = [r for r in runs if not r.data.tags.get("ablate.kind") and r.info.status == "FINISHED"]
    # the points are the runs' final figures: N = derived.params, D = tokens, C = flops, L = final/val_loss
    assert doc["data"]["n_points"] == 9 and doc["data"]["distinct_N"] == 3
    finals = sorted(r.data.metrics["final/val_loss"] for r in training)
    assert [doc["data"]["L"]["min"], doc["data"]["L"]["max"]] == pytest.approx([finals[0], finals[-1]])
    assert doc["data"]["C"]["max"] == pytest.approx(max(r.data.metrics["flops"] for r in training))
    assert doc["data"]["N"]["max"] == pytest.approx(max(float(r.data.params["derived.params"]) for r in training))
    assert len(doc["chinchilla_approach1"]["optima"]) > 10  # from the val/loss-against-flops histories
    (fit_run,) = [r for r in runs if r.data.tags.get("ablate.kind") == "fit"]
    artifacts = {a.path for a in client.list_artifacts(fit_run.info.run_id)}
    assert {"fit.json", "fit.md", "predictions.csv"} | PLOTS <= artifacts
    assert f"MLflow: run {fit_run.info.run_id} (tag ablate.kind=fit) in experiment ablate" in result.stdout
    a3 = doc["chinchilla_approach3"]
    # Nine tiny runs may or may not pin down five parameters; either way the command says which, and
    # a fit that did not converge shows no numbers.
    if a3["status"] == "converged":
        assert result.returncode == 0, result.stdout + result.stderr
        assert fit_run.info.status == "FINISHED" and fit_run.data.tags["ablate.fit_status"] == "converged"
        assert fit_run.data.metrics["approach3/E"] == pytest.approx(a3["params"]["E"]["value"])
        floor = float(training[0].data.params["derived.entropy_floor"])
        assert doc["entropy_floor"]["floor"] == pytest.approx(floor)
        assert fit_run.data.tags["ablate.fit_verdict"] == a3["verdict"]
        assert result.stdout.startswith(f"Chinchilla approach 3: {a3['verdict']}")
    else:
        assert result.returncode == 1
        assert fit_run.info.status == "FAILED" and fit_run.data.tags["ablate.fit_status"] == "DID NOT CONVERGE"
        assert "approach3/E" not in fit_run.data.metrics and a3["params"] is None
        assert result.stdout.startswith("Chinchilla approach 3: not_determined: DID NOT CONVERGE")

    again = fit(["experiment=ablate", "n_boot=0", "held_out=0", "out=second"], sweep_dir)
    assert "1 earlier fit run (tag ablate.kind=fit)" in again.stderr  # a fit is never a point of the next
    assert json.loads((sweep_dir / "second" / "fit.json").read_text())["data"]["n_points"] == 9
    assert "RUNNING" not in run_statuses(sweep_dir / "mlflow.db")
