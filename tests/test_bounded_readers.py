"""Readers bounded and typed before use: a fit.json nested past the parser, a law's numbers past
any fit, a config number that is not one, a backtest with nothing to predict. Each case is a ledger
row: the real command line, exit 2 and one line, no traceback, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reliability
from bad_inputs import FIT_DATA, FIT_LAW, fit_json

pytestmark = [pytest.mark.reliability]

PLAN = ["model=gpt_1p5b", "budget.tokens=1e11", "out=p"]


def _deep(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


# case -> (how the input is made in a folder, the command and its arguments with INPUT, words of the line)
CASES = {
    "a fit.json nested 200,000 deep, then `ablate plan fit=`": (_deep, "plan", [*PLAN, "fit=INPUT"], "nested deeper"),
    "a fit.json with alpha 1e-300, then `ablate plan fit=`": (
        lambda p: fit_json(p, {**FIT_LAW, "alpha": 1e-300}),
        "plan",
        [*PLAN, "fit=INPUT"],
        "no power law",
    ),
    "a fit.json with E = 1e308, then `ablate plan fit=`": (
        lambda p: fit_json(p, {**FIT_LAW, "E": 1e308}),
        "plan",
        [*PLAN, "fit=INPUT"],
        "E <= 50",
    ),
    "a fit.json with A = 1e300, then `ablate plan fit=`": (
        lambda p: fit_json(p, {**FIT_LAW, "A": 1e300}),
        "plan",
        [*PLAN, "fit=INPUT"],
        "A <= 1e+12",
    ),
    "`ablate +hardware.peak_flops.fp32=abc`": (None, None, ["+hardware.peak_flops.fp32=abc"], "is not a number"),
    "`ablate +hardware.peak_flops.bf16=[1,2]`": (None, None, ["+hardware.peak_flops.bf16=[1,2]"], "is not a number"),
    "a one-row points CSV, then `ablate backtest`": (
        lambda p: p.write_text("params,tokens,loss\n1e6,1e8,3.5\n"),
        "backtest",
        ["points=INPUT", "out=b"],
        "no run above any cut",
    ),
    "runs all at one compute, then `ablate backtest`": (
        lambda p: p.write_text("params,tokens,loss\n1e6,1e8,3.5\n1e6,1e8,3.4\n1e6,1e8,3.6\n"),
        "backtest",
        ["points=INPUT", "out=b"],
        "no run above any cut",
    ),
}


@pytest.mark.ledger("bad_input", "{name}")
@pytest.mark.parametrize("name", list(CASES))
def test_a_reader_refuses_what_is_out_of_its_bounds(cli, request, tmp_path, name):
    make, command, args, words = CASES[name]
    inputs, cwd = tmp_path / "inputs", tmp_path / "cwd"
    inputs.mkdir(), cwd.mkdir()
    if make is not None:
        make(inputs / "input")
    proc = cli([a.replace("INPUT", str(inputs / "input")) for a in args], cwd, command=command, process=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert words in lines[0] and "Traceback" not in proc.stdout + proc.stderr, lines
    assert sorted(p.name for p in cwd.iterdir()) == []
    reliability.record(request, f"exit 2: {lines[0][:170]}; nothing created")


def test_the_law_of_the_cases_is_a_fit_plan_takes(cli, tmp_path):
    """The cases above differ from a fit.json plan reads by one number each."""
    fit_json(tmp_path / "fit.json")
    assert json.loads((tmp_path / "fit.json").read_text())["data"] == FIT_DATA
    proc = cli([*PLAN, f"fit={tmp_path / 'fit.json'}"], tmp_path, command="plan")
    assert proc.returncode == 0, proc.stderr[-2000:]
