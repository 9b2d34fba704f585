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
