"""`ablate predict`: a fit's prediction written before its run is trained, the run's outcome
recorded after it, through the real command line (a fit of a known law, a real tiny run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import SMALL_DATA, law_points_csv, one_line_error

TARGET = ["model=nano", "train.steps=6", "tracking=none", *SMALL_DATA]


@pytest.fixture(scope="module")
def fitted(cli, tmp_path_factory) -> Path:
    """fit.json of a known law over the sizes and budgets around a nano run, 1% noise."""
    cwd = tmp_path_factory.mktemp("predict")
    (cwd / "points.csv").write_text(law_points_csv(seed=0))
    result = cli(["points=points.csv", "n_boot=20", "held_out=0", "out=fit"], cwd, command="fit")
    assert result.returncode == 0, result.stdout + result.stderr
    return cwd


def test_a_prediction_is_written_before_its_run_and_the_outcome_after(cli, fitted):
    cwd = fitted
    made = cli(["fit=fit/fit.json", "out=first.json", *TARGET], cwd, command="predict")
    assert made.returncode == 0, made.stdout + made.stderr
    doc = json.loads((cwd / "first.json").read_text())
    target = doc["target"]
    assert doc["schema"] == "ablate.prediction/1" and target["overrides"] == TARGET
    assert target["tokens"] == 6 * 16 * 64 and target["params_counted"] == "total"
    assert doc["fit"] == "fit/fit.json" and len(doc["fit_sha256"]) == 64
    assert doc["data"]["kind"] == "synthetic" and doc["data"]["fingerprint"]
    assert doc["actual"] is None and doc["trained_at"] is None
    if doc["predicted"] is not None:  # a verdict that lets a number be printed gives its interval
        lo, hi = doc["interval95"]
        assert lo < doc["predicted"] < hi
    before = {k: v for k, v in doc.items() if not k.startswith(("actual", "trained"))}

    trained = cli([*TARGET, "hydra.run.dir=target"], cwd)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    result = json.loads((cwd / "target" / "result.json").read_text())
    assert result["config_hash"] == target["config_hash"]
    assert result["params"] == target["params"] and result["flops"] == pytest.approx(target["flops"])

    recorded = cli(["--outcome", "target", "out=first.json"], cwd, command="predict")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    after = json.loads((cwd / "first.json").read_text())
    assert {k: v for k, v in after.items() if not k.startswith(("actual", "trained"))} == before
    assert after["actual"] == result["final_val_loss"] and after["actual_bpb"] == result["final_val_bpb"]
    assert after["trained_at"] >= after["made_at"]
    assert "| `model=nano" in recorded.stdout  # the table: predicted against actual

    again = cli(["--outcome", "target", "out=first.json"], cwd, command="predict")
    assert again.returncode == 0 and json.loads((cwd / "first.json").read_text()) == after


def test_a_made_prediction_is_never_rewritten(cli, fitted):
    cwd = fitted
    assert cli(["fit=fit/fit.json", "out=kept.json", *TARGET], cwd, command="predict").returncode == 0
    first = (cwd / "kept.json").read_bytes()
    other = cli(["fit=fit/fit.json", "out=kept.json", "model=micro", *TARGET[1:]], cwd, command="predict")
    assert "already holds a prediction made at" in one_line_error(other)
    assert (cwd / "kept.json").read_bytes() == first
    assert not list(cwd.glob(".kept.json.*"))  # no draft left behind


def test_an_outcome_from_another_run_is_refused(cli, fitted):
    cwd = fitted
    assert cli(["fit=fit/fit.json", "out=mine.json", *TARGET], cwd, command="predict").returncode == 0
    other = cli(["model=nano", "train.steps=5", "tracking=none", *SMALL_DATA, "hydra.run.dir=other"], cwd)
    assert other.returncode == 0, other.stdout + other.stderr
    refused = cli(["--outcome", "other", "out=mine.json"], cwd, command="predict")
    assert "is not the predicted run's" in one_line_error(refused)
    assert json.loads((cwd / "mine.json").read_text())["actual"] is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["out=x.json", "model=nano"], "fit= is missing"),
        (["fit=fit/fit.json", "model=nano"], "out= is missing"),
        (["fit=nothere.json", "out=x.json", "model=nano"], "fit=nothere.json cannot be read"),
        (["fit=fit/fit.json", "out=x.json", "model=nosuch"], "model=nosuch"),
        (["--outcome", "nowhere", "out=first.json"], "nowhere has no result.json"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli, fitted, args, says):
    cwd = fitted
    assert says in one_line_error(cli(args, cwd, command="predict"))
    assert not (cwd / "x.json").exists()


def test_an_outside_target_gets_the_verdict_and_interval_a_run_config_would(cli, fitted):
    """target.N and target.D name a run outside this project: the prediction is the fit's own at that
    (N, D), as ablate.scaling.predict gives it, with no run config behind it."""
    from ablate.scaling import load_fit
    from ablate.scaling.predict import predict

    cwd = fitted
    made = cli(["fit=fit/fit.json", "out=outside.json", "target.N=4e5", "target.tokens=2e5"], cwd, command="predict")
    assert made.returncode == 0, made.stdout + made.stderr
    doc = json.loads((cwd / "outside.json").read_text())
    expected = predict(load_fit(str(cwd / "fit" / "fit.json")).predictor, N=4e5, D=2e5)
    assert doc["target"]["params"] == 4e5 and doc["target"]["tokens"] == 2e5
    assert doc["target"]["flops"] == pytest.approx(6 * 4e5 * 2e5) and doc["target"]["config_hash"] is None
    assert doc["verdict"] == expected.verdict.level and doc["reasons"] == [r.text for r in expected.verdict.reasons]
    if expected.loss is not None:
        assert doc["predicted"] == pytest.approx(expected.loss.value)
        assert doc["interval95"] == pytest.approx(list(expected.loss.ci95))
    assert "target.N=4e5 target.tokens=2e5" in made.stdout
    assert (cwd / "outside.png").read_bytes().startswith(b"\x89PNG")  # the target drawn on the law

    budget = cli(["fit=fit/fit.json", "out=budget.json", "target.flops=1e12"], cwd, command="predict")
    assert budget.returncode == 0, budget.stdout + budget.stderr
    assert json.loads((cwd / "budget.json").read_text())["target"]["compute_optimal"] is True


def test_an_outside_outcome_is_scored_against_the_prediction_made_before_it(cli, fitted):
    cwd = fitted
    args = ["fit=fit/fit.json", "out=scored.json", "target.N=2e5", "target.D=1e5"]
    assert cli(args, cwd, command="predict").returncode == 0
    made = json.loads((cwd / "scored.json").read_text())
    assert made["predicted"] is not None, made["reasons"]
    actual = made["predicted"] * 1.01
    scored = cli(["--outcome", f"loss={actual}", "tokens=1e5", "params=2e5", "out=scored.json"], cwd, command="predict")
    assert scored.returncode == 0, scored.stdout + scored.stderr
    doc = json.loads((cwd / "scored.json").read_text())
    assert {k: v for k, v in doc.items() if not k.startswith("actual")} == {
        k: v for k, v in made.items() if not k.startswith("actual")
    }
    lo, hi = made["interval95"]
    assert doc["actual"] == actual and doc["actual_score"]["error"] == pytest.approx(0.01)
    assert doc["actual_score"]["inside"] == (lo <= actual <= hi) and doc["actual_score"]["verdict"] == made["verdict"]
    assert doc["actual_source"].startswith("outside: loss=") and doc["actual_scored_at"] >= doc["made_at"]
    assert "+1.00%" in scored.stdout

    # from a CSV: the row whose params and tokens are the target's
    assert (
        cli(["fit=fit/fit.json", "out=csv.json", "target.N=2e5", "target.D=1e5"], cwd, command="predict").returncode
        == 0
    )
    (cwd / "outside.csv").write_text("params,tokens,loss\n1e5,1e5,9.9\n200000,100000,3.5\n")
    from_csv = cli(["--outcome", "outside.csv", "out=csv.json"], cwd, command="predict")
    assert from_csv.returncode == 0, from_csv.stdout + from_csv.stderr
    doc = json.loads((cwd / "csv.json").read_text())
    assert doc["actual"] == 3.5 and doc["actual_source"] == "outside: outside.csv, line 3"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fit=fit/fit.json", "out=x.json", "target.N=2e5"], "is not a target"),
        (["fit=fit/fit.json", "out=x.json", "target.N=2e5", "target.params=3e5"], "names N a second time"),
        (["fit=fit/fit.json", "out=x.json", "target.N=2e5", "target.D=-1"], "target.D=-1 is not a positive number"),
        (["fit=fit/fit.json", "out=x.json", "target.N=2e5", "target.D=1e5", "model=nano"], "beside target.*"),
        (["fit=fit/fit.json", "out=x.json", "target.size=2e5"], "target.size is not a target key"),
    ],
)
def test_a_bad_outside_target_is_one_line_and_writes_nothing(cli, fitted, args, says):
    assert says in one_line_error(cli(args, fitted, command="predict"))
    assert not (fitted / "x.json").exists()


def test_an_outside_outcome_that_is_not_the_target_is_refused(cli, fitted):
    cwd = fitted
    assert (
        cli(["fit=fit/fit.json", "out=other.json", "target.N=2e5", "target.D=1e5"], cwd, command="predict").returncode
        == 0
    )
    wrong = cli(["--outcome", "loss=3.4", "tokens=2e5", "out=other.json"], cwd, command="predict")
    assert "the outcome's tokens=200000 is not the predicted target's 100000" in one_line_error(wrong)
    no_loss = cli(["--outcome", "tokens=1e5", "out=other.json"], cwd, command="predict")
    assert "has no loss=" in one_line_error(no_loss)
    assert json.loads((cwd / "other.json").read_text())["actual"] is None
