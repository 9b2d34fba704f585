"""ablate.scaling.reports.export: the files a fit leaves behind, their documented structure (verdicts beside every
number), and how a fit that did not converge is shown."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ablate.scaling.analysis import APPROACH3, FitReport, _without_law, fit_all
from ablate.scaling.checks import approach3_facts, law_verdict, run_noise
from ablate.scaling.fitting.multistart import Tolerances
from ablate.scaling.laws.chinchilla import fit_approach3
from ablate.scaling.points import load_chinchilla
from ablate.scaling.predict import FitOptions
from ablate.scaling.reports.export import CSV_COLUMNS, export_fit
from ablate.scaling.reports.report import NOT_CONVERGED, summary_text
from ablate.scaling.verdict import LEVELS, NOT_DETERMINED

FAR_START = np.array([[0.0, 25.0, 0.0, 25.0, 0.0]])  # theta = [e, a, alpha, b, beta]: a corner of Hoffmann's grid
PLOTS = {"fit_curves.png", "frontier.png", "residuals.png", "isoflop.png"}
PARAMS = ("E", "A", "B", "alpha", "beta")


@pytest.fixture(scope="module")
def report(iso_flop, law_curves, coarse_grid) -> FitReport:
    return fit_all(
        iso_flop.with_floor(1.6),
        curves=law_curves,
        targets=[{"C": 1e23}, {"N": 1e8, "D": 2e9}, {"N": 1e15, "D": 1e9}],
        options=FitOptions(n_boot=20, grid=coarse_grid),
        held_out_k=3,
    )


@pytest.fixture(scope="module")
def exported(report, tmp_path_factory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("fit")
    return out, export_fit(report, out)


def strict_json(path: Path) -> dict:
    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_every_file_is_written_and_returned(exported):
    out, files = exported
    assert {f.name for f in files} == {"fit.json", "fit.md", "predictions.csv"} | PLOTS
    for f in files:
        assert f.parent == out and f.stat().st_size > 0
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_fit_json_has_the_documented_structure(exported, report):
    doc = strict_json(exported[0] / "fit.json")
    for key in (
        APPROACH3,
        "chinchilla_approach1",
        "chinchilla_approach2",
        "kaplan_N",
        "kaplan_D",
        "kaplan_C",
        "predictions",
        "held_out",
        "entropy_floor",
        "data",
    ):
        assert key in doc, key
    assert doc["schema"] == "ablate.fit/2" and doc["data"]["entropy_floor"] == 1.6
    a3 = doc[APPROACH3]
    assert a3["status"] == "converged" and a3["diagnostics"]["converged"] is True
    assert a3["verdict"] in LEVELS and isinstance(a3["reasons"], list)
    assert a3["variant"] == {"params": "total", "tie_exponents": False, "form": "additive"}
    assert a3["bounds"]["E"] == [1.6, pytest.approx(float(report.points.L.min()))]
    assert tuple(a3["params"]) == PARAMS
    for name in PARAMS:
        entry = a3["params"][name]
        lo, hi = entry["ci95"]
        assert lo <= entry["value"] <= hi
        assert entry["value"] == pytest.approx(getattr(report.approach3.law, name))
    assert a3["params"]["E"]["ci95"][0] >= 1.6  # the floor is a bound of the fit
    cal = a3["calibration"]
    assert cal["kappa_per_decade"] >= 0 and cal["reach_decades"] > 0 and len(cal["cuts"]) >= 3
    assert a3["run_noise"]["source"].startswith("default") and a3["thresholds"]["interval_factor_nd"] == 2.0
    rows = a3["frontier"]["at"]
    assert [row["C"] for row in rows] == [float(f"1e{k}") for k in range(18, 25)]  # to the farthest target, 6e24
    assert all(row["verdict"] in LEVELS for row in rows)
    assert a3["bootstrap"]["n_resamples"] == 20 and len(a3["bootstrap"]["samples"]) == 20
    assert len(a3["diagnostics"]["log_residuals"]) == 54 and doc["data"]["n_points"] == 54


def test_every_method_and_prediction_carries_a_verdict(exported, report):
    doc = strict_json(exported[0] / "fit.json")
    for key, fit in (("chinchilla_approach1", report.approach1), ("chinchilla_approach2", report.approach2)):
        assert doc[key]["N_opt"]["a"]["value"] == pytest.approx(fit.n_opt.exponent.value)
        assert doc[key]["verdict"] in LEVELS
    assert len(doc["chinchilla_approach2"]["budgets"]) == 6
    for var in ("N", "D", "C"):
        assert doc[f"kaplan_{var}"]["verdict"] in LEVELS
    optimal, inside, far = doc["predictions"]
    assert optimal["compute_optimal"] is True and optimal["orders_past_data"]["C"] == pytest.approx(2.0)
    assert inside["verdict"] != NOT_DETERMINED and inside["loss"]["ci95"][0] < inside["loss"]["value"]
    assert inside["loss"]["ci95"][0] >= 1.6  # never below the floor
    # 10^15 parameters on 10^9 tokens: far past the data; no number, the reasons, and the runs to make
    assert far["verdict"] == NOT_DETERMINED and far["loss"] is None
    assert "extrapolation" in {r["code"] for r in far["reasons"]} and len(far["runs_to_determine"]) == 3
    held = doc["held_out"]
    assert len(held["cuts"]) == 1 and held["cuts"][0]["n_held"] == 3 and len(held["runs"]) == 3
    assert held["mean_abs_rel_error"] == pytest.approx(report.held_out.mean_abs_rel_error)
    for run in held["runs"]:
        lo, hi = run["ci95"]
        assert run["inside_ci95"] == (lo <= run["actual"] <= hi) and run["verdict"] in LEVELS


def test_predictions_csv_is_the_frontier_grid_with_verdicts(exported, report):
    with (exported[0] / "predictions.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(report.frontier.C)
    for row in rows:
        assert row["verdict"] in LEVELS
        if row["verdict"] == NOT_DETERMINED:
            assert row["N_opt"] == row["loss"] == ""
            continue
        C, N, D, L, lo, hi = (float(row[k]) for k in ("C", "N_opt", "D_opt", "loss", "lo", "hi"))
        assert 6 * N * D == pytest.approx(C, rel=1e-4)
        assert 1.6 <= lo <= L <= hi
        assert float(row["tokens_per_param"]) == pytest.approx(D / N, rel=1e-4)


def test_fit_md_has_a_verdict_and_a_table_per_method(exported):
    md = (exported[0] / "fit.md").read_text()
    for heading in (
        "## Chinchilla approach 3",
        "### Interval calibration",
        "## Compute-optimal frontier",
        "## Predictions",
        "## Held-out validation",
        "## Entropy floor",
        "## Chinchilla approach 1",
        "## Chinchilla approach 2",
        "## Single-variable laws",
    ):
        assert heading in md, heading
    assert md.count("**Verdict: ") == 3  # approaches 3, 1 and 2; the single laws have a column
    assert "| alpha |" in md and NOT_CONVERGED not in md
    assert "Runs that would determine the prediction for N=1e+15" in md


@pytest.fixture(scope="module")
def unconverged_report(iso_flop) -> FitReport:
    points = iso_flop
    a3 = fit_approach3(points, n_boot=0, grid=FAR_START, tol=Tolerances(max_iter=2, polish_max_iter=2, n_polish=1))
    assert not a3.diagnostics.converged
    noise = run_noise(points.N, points.D, points.L)
    verdict = law_verdict(approach3_facts(a3), noise, FitOptions().thresholds)
    return FitReport(
        points,
        FitOptions(),
        noise,
        a3,
        None,
        None,
        None,
        {},
        None,
        (_without_law(points, {"C": 1e22}, verdict),),
        None,
        None,
        {APPROACH3: verdict},
    )


@pytest.fixture(scope="module")
def unconverged(unconverged_report, tmp_path_factory):
    out = tmp_path_factory.mktemp("unconverged")
    return out, export_fit(unconverged_report, out)


def test_a_fit_that_did_not_converge_shows_no_numbers_as_results(unconverged):
    out, files = unconverged
    doc = strict_json(out / "fit.json")
    a3 = doc[APPROACH3]
    assert a3["status"] == NOT_CONVERGED and a3["params"] is None and a3["exponents"] is None
    assert a3["verdict"] == NOT_DETERMINED and a3["reasons"][0]["code"] == "not_converged"
    assert a3["diagnostics"]["converged"] is False and a3["diagnostics"]["message"].startswith(NOT_CONVERGED)
    (prediction,) = doc["predictions"]
    assert prediction["loss"] is None and prediction["verdict"] == NOT_DETERMINED
    md = (out / "fit.md").read_text()
    assert f"## Chinchilla approach 3: {NOT_CONVERGED}" in md
    assert "| alpha |" not in md and "## Compute-optimal frontier" not in md
    lines = (out / "predictions.csv").read_text().splitlines()
    assert lines[0].startswith("# chinchilla_approach3 gives no predictions: DID NOT CONVERGE")
    assert lines[1:] == [",".join(CSV_COLUMNS)]
    assert {f.name for f in files} >= {"fit_curves.png", "frontier.png", "residuals.png"}


@pytest.mark.slow
def test_chinchilla_export_reads_epochs_numbers(tmp_path, chinchilla_csv):
    report = fit_all(load_chinchilla(chinchilla_csv), targets=[{"C": 5.76e23}], options=FitOptions(n_boot=100))
    export_fit(report, tmp_path)
    doc = strict_json(tmp_path / "fit.json")
    params = doc[APPROACH3]["params"]
    assert round(params["E"]["value"], 3) == 1.817 and round(params["alpha"]["value"], 4) == 0.3473
    assert doc[APPROACH3]["verdict"] == "trusted"
    (prediction,) = doc["predictions"]
    # 2.5 decades past Epoch's points: the law's 1.974 moved down by the public ladders' drift past
    # their data (calibration.PAST_DRIFT), the interval widened by its spread
    lo, hi = prediction["loss"]["ci95"]
    assert prediction["verdict"] == "trusted" and 1.75 < lo < prediction["loss"]["value"] < 1.97 < hi < 2.2
    md = (tmp_path / "fit.md").read_text()
    assert "| E | 1.817 |" in md


def test_the_terminal_summary_puts_each_verdict_on_one_line(report):
    text = summary_text(report)
    a3 = report.approach3
    first = text.splitlines()[0]
    assert first == report.verdicts[APPROACH3].line("Chinchilla approach 3", 3)
    if report.verdicts[APPROACH3].usable:
        assert f"  alpha            {a3.params['alpha'].value:.4g}" in text
    assert "held-out: refit without the 3 largest-compute runs" in text
    assert "entropy floor 1.6: E is fitted at or above it" in text
    assert any(line.startswith("Chinchilla approach 2: ") for line in text.splitlines())
    predictions = [line for line in text.splitlines() if line.startswith("prediction for ")]
    assert len(predictions) == 3
    assert predictions[2].startswith("prediction for N=1e+15, D=1e+09 (C=6e+24): not_determined: ")
    assert "runs that would determine it: N=" in predictions[2]


def test_the_terminal_summary_of_a_fit_that_did_not_converge_shows_no_numbers(unconverged_report):
    text = summary_text(unconverged_report)
    assert text.startswith("Chinchilla approach 3: not_determined: DID NOT CONVERGE: best start stopped after")
    law = unconverged_report.approach3.law
    assert "entropy floor" not in text
    assert f"{law.A:.4g}" not in text and f"{law.B:.4g}" not in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("prediction for")]
    assert "not_determined: approach 3 is not determined: DID NOT CONVERGE" in line


def test_fit_md_leads_with_the_decision_and_lists_each_reason_once_with_its_code(exported, report):
    md = (exported[0] / "fit.md").read_text()
    head = md.split("\n## ")[0].splitlines()
    assert head[0] == "# Scaling-law fit" and head[2].startswith(
        f"**Chinchilla approach 3: {report.verdicts[APPROACH3].level}.**"
    )
    assert all("Prediction for " in head[2] for _ in report.predictions)
    listed = [line for line in head[3:] if line.startswith("- ")]
    assert listed and len(listed) == len(set(listed)) and all("(`" in line for line in listed)
    # the predictions table names codes, not the reasons' text again
    table = md.split("## Predictions")[1].split("\n## ")[0]
    assert all(r.text not in table for p in report.predictions for r in p.verdict.reasons)


def test_tied_exponents_print_fixed_values_as_fixed(grid_points, coarse_grid):
    tied = fit_all(grid_points, options=FitOptions(n_boot=20, grid=coarse_grid, tie_exponents=True))
    text = summary_text(tied)
    assert "0.5 (fixed)" in text and "0.5 to 0.5" not in text and "tied to alpha" in text


def test_an_E_interval_over_almost_its_whole_range_is_said_in_words(grid_points, coarse_grid):
    from dataclasses import replace

    from ablate.scaling.fitting.bootstrap import Estimate
    from ablate.scaling.reports.report import parameter_ci

    fit = fit_approach3(grid_points, n_boot=0, grid=coarse_grid)
    wide = replace(fit, floor=0.0, upper=2.106)
    text = parameter_ci("E", Estimate(1.5, (1.539e-11, 2.1)), wide)
    assert "100% of its allowed range 0 to 2.106, not determined by the data" in text
    assert parameter_ci("E", Estimate(1.5, (1.4, 1.6)), wide) == "1.4 to 1.6"


def test_a_not_determined_held_out_prediction_prints_no_number():
    from ablate.scaling.backtest import HeldOutRun
    from ablate.scaling.reports.report import held_out_cells
    from ablate.scaling.verdict import Reason, Verdict

    nd = Verdict.of([Reason("law", NOT_DETERMINED, "approach 3 is not_determined")])
    run = HeldOutRun(0, 1e9, 2e10, 1.2e20, 2.3, 0.4, 2.345678, 2.1, 2.6, nd)
    cells = held_out_cells(run, "yes", "no")
    assert cells[0] == NOT_DETERMINED and not any(ch.isdigit() for c in cells for ch in c)
    ok = held_out_cells(HeldOutRun(0, 1e9, 2e10, 1.2e20, 2.3, 0.4, 2.345678, 2.1, 2.6, Verdict.of([])), "yes", "no")
    assert ok[0] == "2.346" and ok[3] == "yes"
