"""Every law recorded in experiments/ (each study's fit/fit.json, fit_additive/fit.json) reads back as
`ablate predict fit=` and `ablate plan fit=` read it, and gives losses where its runs are: a study
whose target is predicted from its own fit.json cannot hold one its commands refuse (the joint law
of experiments/text_ladder_long has N_c 4.0e14, which a bound meant for A and B once refused)."""

import json
from pathlib import Path

import pytest

from ablate.scaling import load_fit

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
FITS = sorted(EXPERIMENTS.glob("*/*/fit.json"))


def test_the_recorded_fits_are_here():
    assert len(FITS) >= 9 and EXPERIMENTS / "text_ladder_long" / "fit" / "fit.json" in FITS


@pytest.mark.parametrize("path", FITS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_a_recorded_fit_reads_back_and_gives_losses_where_its_runs_are(path):
    fit = load_fit(str(path))
    data = json.loads(path.read_text())["data"]
    # the law at the largest size and token count its runs reached: near the lowest loss they reached
    loss = float(fit.law().loss(data["N"]["max"], data["D"]["max"]))
    assert 0.8 * data["L"]["min"] < loss < data["L"]["max"], (path, loss, data["L"])
