"""`python -m ablate.fit` through the real command line: Epoch's Chinchilla CSV, a small real sweep
read back from MLflow, and each kind of bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, SMALL_DATA, cli, run_statuses

CHINCHILLA = ROOT / "tests" / "data" / "chinchilla.csv"
PLOTS = {"fit_curves.png", "frontier.png", "residuals.png"}


def fit(args: list[str], cwd: Path, timeout: float = 900):
    return cli(args, cwd, timeout=timeout, module="ablate.fit")


def one_line_error(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# --- points=FILE.csv --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chinchilla_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("chinchilla")
    result = fit([f"points={CHINCHILLA}", "n_boot=20", "target.C=5.76e23"], cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return cwd, result


def test_chinchilla_csv_reproduces_epochs_fit_through_the_command_line(chinchilla_run):
    cwd, result = chinchilla_run
    out = cwd / "exports" / "chinchilla"  # the default: exports/<the CSV's name>
    doc = json.loads((out / "fit.json").read_text())
    params = doc["chinchilla_approach3"]["params"]
    # Besiroglu et al. 2024, Hoffmann's procedure on the 240 points: E 1.817, alpha 0.3473, beta 0.3672
    assert round(params["E"]["value"], 3) == 1.817
    assert round(params["alpha"]["value"], 4) == 0.3473 and round(params["beta"]["value"], 4) == 0.3672
    assert doc["data"]["n_points"] == 240 and doc["chinchilla_approach3"]["bootstrap"]["n_resamples"] == 20
    assert doc["held_out"]["k"] == 1 and len(doc["held_out"]["points"]) == 1
    assert {"fit.json", "fit.md", "predictions.csv"} | PLOTS <= {p.name for p in out.iterdir()}
    assert not list(out.glob(".fit-*"))  # the staging folder is gone
    assert "5 highest-loss rows of 245 dropped" in result.stderr


def test_the_printed_table_matches_fit_json(chinchilla_run):
    cwd, result = chinchilla_run
    doc = json.loads((cwd / "exports" / "chinchilla" / "fit.json").read_text())
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.startswith("  ")}
    for name in ("E", "A", "B", "alpha", "beta"):
        est = doc["chinchilla_approach3"]["params"][name]
        assert float(rows[name][1]) == pytest.approx(est["value"], rel=1e-3)
        assert float(rows[name][2]) == pytest.approx(est["ci95"][0], rel=1e-3)
    assert "(converged; 20 of 20 bootstrap resamples converged)" in result.stdout
    prediction = next(line for line in result.stdout.splitlines() if line.startswith("prediction for C=5.76e+23"))
    assert "1.6 in C orders of magnitude" in prediction
    assert "held-out: refit without the largest-compute point" in result.stdout
    assert not (cwd / "mlflow.db").exists()  # a CSV fit leaves MLflow alone


# --- bad input --------------------------------------------------------------------------------

HEADER = "params,tokens,loss\n"
SIZES = "1e6,1e8,3.0\n2e6,2e8,2.8\n4e6,4e8,2.6\n8e6,8e8,2.5\n1.6e7,1.6e9,2.4\n3.2e7,3.2e9,2.35\n"
BAD_CSV = {
    "too_few": (HEADER + "1e6,1e8,3.0\n2e6,2e8,2.8\n4e6,4e8,2.6\n",
                "Chinchilla approach 3: 3 points, needs at least 6"),
    "one_size": (HEADER + "".join(f"1e6,{d:g},{3 - i / 10}\n" for i, d in enumerate(np.geomspace(1e8, 1e10, 7))),
                 r"all points at one N (params) (1e+06); needs at least 3 distinct values"),
    "nan": (HEADER + SIZES + "6.4e7,6.4e9,nan\n",
            "column 'loss' row 6 (line 8) is nan; every value must be finite and > 0"),
    "negative": (HEADER + SIZES.replace("4e6,", "-4e6,"), "column 'params' row 2 (line 4) is -4000000.0"),
    "no_tokens_column": ("params,loss\n1e6,3.0\n",
                         "missing column(s) tokens; valid columns: params, tokens, loss, flops"),
    "not_a_number": (HEADER + SIZES + "6.4e7,6.4e9,abc\n", "column 'loss' row 6 (line 8) is 'abc', not a number"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSV))
def test_bad_csv_is_one_line(tmp_path, case):
    text, expected = BAD_CSV[case]
    (tmp_path / "p.csv").write_text(text)
    line = one_line_error(fit(["points=p.csv", "n_boot=0", "held_out=0"], tmp_path))
    assert expected in line, line
    assert not (tmp_path / "exports").exists()


@pytest.mark.parametrize("args,expected", [
    ([], "experiment and points: neither given (valid: experiment=NAME"),
    (["experiment=x", "points=p.csv"], "experiment and points: both given"),
    (["points=absent.csv"], "absent.csv: no such file"),
    (["points=p.csv", "target.N=1e9"], "target.N=1e+09 is not a target (valid: target.N and target.D, or target.C"),
    (["points=p.csv", "target.C=-1"], "target.C=-1 must be positive"),
    (["points=p.csv", "held_out=3"], "held_out=3 leaves 3 of 6 points; approach 3 needs at least 6 (valid: 0 to 0)"),
    (["points=p.csv", "nboot=10"], "unknown key nboot (valid: entropy_floor, experiment, held_out, n_boot, out"),
    (["experiment=scaling"], "no MLflow store at"),
])
def test_bad_arguments_are_one_line(tmp_path, args, expected):
    (tmp_path / "p.csv").write_text(HEADER + SIZES)
    line = one_line_error(fit(args, tmp_path))
    assert expected in line, line
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "exports").exists()


def test_an_experiment_that_does_not_exist_lists_those_that_do(tmp_path):
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
TINY_RUN = ["train.batch_size=4", "train.eval_interval=5", "train.eval_batches=2", "train.log_interval=5",
            "train.progress=false", *SMALL_DATA]
GRID = ["--multirun", "model=nano,micro,tiny", "train.steps=10,20,40", *TINY_RUN]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A 3 x 3 grid of real training runs in one experiment, plus one run that diverges (FAILED)."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = cli(GRID, cwd, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    diverged = cli(["model=nano", "train.steps=10", "optim.lr=1e4", "optim.warmup_steps=0", "optim.grad_clip=0",
                    *TINY_RUN], cwd, timeout=600)
    assert diverged.returncode == 1, diverged.stderr[-2000:]
    return cwd


@pytest.mark.slow
@pytest.mark.e2e
def test_fit_of_a_real_sweep_from_mlflow(sweep_dir):
    from mlflow.tracking import MlflowClient

    result = fit(["experiment=ablate", "n_boot=50"], sweep_dir)
    out = sweep_dir / "exports" / "ablate"  # the default: exports/<experiment>
    doc = json.loads((out / "fit.json").read_text())
    assert ("9 FINISHED training runs, 9 training curves; skipped 1 run FAILED, not FINISHED; "
            "1 sweep parent run (tag ablate.kind=sweep)" in result.stderr), result.stderr
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
        assert "(converged; " in result.stdout
    else:
        assert result.returncode == 1
        assert fit_run.info.status == "FAILED" and fit_run.data.tags["ablate.fit_status"] == "DID NOT CONVERGE"
        assert "approach3/E" not in fit_run.data.metrics and a3["params"] is None
        assert result.stdout.startswith("Chinchilla approach 3: DID NOT CONVERGE")

    again = fit(["experiment=ablate", "n_boot=0", "held_out=0", "out=second"], sweep_dir)
    assert "1 earlier fit run (tag ablate.kind=fit)" in again.stderr  # a fit is never a point of the next
    assert json.loads((sweep_dir / "second" / "fit.json").read_text())["data"]["n_points"] == 9
    assert "RUNNING" not in run_statuses(sweep_dir / "mlflow.db")
