"""ablate.fit_export: the files a fit leaves behind, their documented structure, and how a fit that
did not converge is shown."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from ablate.fit_export import CSV_COLUMNS, NOT_CONVERGED, export_fit, summary_text
from ablate.scaling.chinchilla import ChinchillaLaw, fit_approach3
from ablate.scaling.frontier import frontier
from ablate.scaling.multistart import Tolerances
from ablate.scaling.points import Points, RunCurve, load_chinchilla
from ablate.scaling.predict import predict
from ablate.scaling.report import FitReport, fit_all
from ablate.scaling.validation import compare_floor

TRUE = ChinchillaLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
COARSE_GRID = np.array(list(itertools.product([0.0, 0.5], [0, 10, 20], [0.2, 0.8], [0, 10, 20], [0.2, 0.8])))
FAR_START = np.array([[0.0, 25.0, 0.0, 25.0, 0.0]])  # theta = [e, a, alpha, b, beta]: a corner of Hoffmann's grid
PLOTS = {"fit_curves.png", "frontier.png", "residuals.png", "isoflop.png"}
PARAMS = ("E", "A", "B", "alpha", "beta")


def iso_flop_points() -> Points:
    """6 iso-FLOP budgets x 9 sizes from TRUE with 0.3% noise: every method has something to fit."""
    rng = np.random.default_rng(5)
    budgets = np.geomspace(1e18, 1e21, 6)
    N = np.concatenate([TRUE.n_opt(C) * np.geomspace(0.25, 4, 9) for C in budgets])
    C = np.repeat(budgets, 9)
    D = C / (6 * N)
    return Points(N, D, TRUE.loss(N, D) * np.exp(rng.normal(0, 0.003, N.size)), C)


def curves() -> list[RunCurve]:
    tokens = np.geomspace(1e8, 1e11, 40)
    return [RunCurve(n, 6 * n * tokens, tokens, TRUE.loss(n, tokens)) for n in np.geomspace(1e7, 1e10, 10)]


@pytest.fixture(scope="module")
def report() -> FitReport:
    return fit_all(iso_flop_points(), curves=curves(), targets=[{"C": 1e23}, {"N": 1e8, "D": 2e9}],
                   entropy_floor=1.69, held_out_k=3, n_boot=20, grid=COARSE_GRID)


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
    for key in ("chinchilla_approach3", "chinchilla_approach1", "chinchilla_approach2", "kaplan_N", "kaplan_D",
                "kaplan_C", "predictions", "held_out", "entropy_floor", "data"):
        assert key in doc, key
    a3 = doc["chinchilla_approach3"]
    assert a3["status"] == "converged" and a3["diagnostics"]["converged"] is True
    assert tuple(a3["params"]) == PARAMS
    for name in PARAMS:
        entry = a3["params"][name]
        assert set(entry) == {"value", "ci95"}
        lo, hi = entry["ci95"]
        assert lo <= entry["value"] <= hi
        assert entry["value"] == pytest.approx(getattr(report.approach3.law, name))
    assert set(a3["exponents"]) == {"a", "b"}
    assert a3["exponents"]["a"]["value"] == pytest.approx(report.approach3.law.a)
    assert a3["frontier"]["G"] == pytest.approx(report.approach3.law.G)
    assert [row["C"] for row in a3["frontier"]["at"]] == [1e18, 1e19, 1e20, 1e21, 1e22, 1e23]
    assert a3["bootstrap"]["n_resamples"] == 20
    assert len(a3["diagnostics"]["log_residuals"]) == 54
    assert doc["data"]["n_points"] == 54


def test_fit_json_other_methods(exported, report):
    doc = strict_json(exported[0] / "fit.json")
    for key, fit in (("chinchilla_approach1", report.approach1), ("chinchilla_approach2", report.approach2)):
        assert doc[key]["N_opt"]["a"]["value"] == pytest.approx(fit.n_opt.exponent.value)
        assert doc[key]["D_opt"]["b"]["value"] == pytest.approx(fit.d_opt.exponent.value)
    assert len(doc["chinchilla_approach2"]["budgets"]) == 6
    assert set(doc["kaplan_C"]["params"]) == {"E", "A", "alpha"}
    first, second = doc["predictions"]
    assert first["compute_optimal"] is True and "in C" in first["warning"]
    assert first["orders_past_data"]["C"] == pytest.approx(2.0)
    assert second["warning"] is None and second["loss"]["ci95"][0] < second["loss"]["value"]
    floor = doc["entropy_floor"]
    assert floor["difference"] == pytest.approx(floor["fitted_E"]["value"] - 1.69)
    held = doc["held_out"]
    assert held["k"] == 3 and len(held["points"]) == 3
    assert held["mean_abs_rel_error"] == pytest.approx(report.held_out.mean_abs_rel_error)
    for point in held["points"]:  # the one-run interval holds the curve's and the runs' scatter around it
        (lo, hi), curve = point["run_ci95"], point["predicted"]["ci95"]
        assert lo < curve[0] < curve[1] < hi
        assert point["inside_run_ci95"] == (point["run_ci95"][0] <= point["actual"] <= point["run_ci95"][1])
    assert held["run_coverage_ci95"] == pytest.approx(report.held_out.run_coverage)


def test_predictions_csv_is_the_frontier_grid(exported, report):
    with (exported[0] / "predictions.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(report.frontier.C)
    for row in rows:
        C, N, D, L, lo, hi = (float(row[k]) for k in ("C", "N_opt", "D_opt", "loss", "lo", "hi"))
        assert 6 * N * D == pytest.approx(C, rel=1e-4)
        assert lo <= L <= hi
        assert float(row["tokens_per_param"]) == pytest.approx(D / N, rel=1e-4)


def test_fit_md_has_a_table_per_method(exported):
    md = (exported[0] / "fit.md").read_text()
    for heading in ("## Chinchilla approach 3", "## Compute-optimal frontier", "## Predictions",
                    "## Held-out validation", "## Entropy floor", "## Chinchilla approach 1",
                    "## Chinchilla approach 2", "## Single-variable laws"):
        assert heading in md, heading
    assert "| alpha |" in md and NOT_CONVERGED not in md
    assert "extrapolating past the fitted data" in md


@pytest.fixture(scope="module")
def unconverged_report() -> FitReport:
    points = iso_flop_points()
    a3 = fit_approach3(points, n_boot=0, grid=FAR_START, tol=Tolerances(max_iter=2, polish_max_iter=2, n_polish=1))
    assert not a3.diagnostics.converged
    return FitReport(points, a3, None, None, {}, frontier(a3, np.geomspace(1e18, 1e22, 10)),
                     (predict(a3, C=1e22),), None, compare_floor(a3.params["E"], 1.69), {})


@pytest.fixture(scope="module")
def unconverged(unconverged_report, tmp_path_factory):
    out = tmp_path_factory.mktemp("unconverged")
    return out, export_fit(unconverged_report, out)


def test_a_fit_that_did_not_converge_shows_no_numbers_as_results(unconverged):
    out, files = unconverged
    doc = strict_json(out / "fit.json")
    a3 = doc["chinchilla_approach3"]
    assert a3["status"] == NOT_CONVERGED and a3["params"] is None and a3["exponents"] is None
    assert a3["diagnostics"]["converged"] is False and a3["diagnostics"]["message"].startswith(NOT_CONVERGED)
    assert doc["predictions"] == NOT_CONVERGED and doc["entropy_floor"] == NOT_CONVERGED
    md = (out / "fit.md").read_text()
    assert f"## Chinchilla approach 3: {NOT_CONVERGED}" in md
    assert "| alpha |" not in md and "## Compute-optimal frontier" not in md
    lines = (out / "predictions.csv").read_text().splitlines()
    assert lines[0].startswith(f"# {NOT_CONVERGED}") and lines[1:] == [",".join(CSV_COLUMNS)]
    assert {f.name for f in files} >= {"fit_curves.png", "frontier.png", "residuals.png"}


@pytest.mark.slow
def test_chinchilla_export_reads_epochs_numbers(tmp_path):
    data = Path(__file__).resolve().parent / "data" / "chinchilla.csv"
    report = fit_all(load_chinchilla(data), targets=[{"C": 5.76e23}], n_boot=100)
    export_fit(report, tmp_path)
    params = strict_json(tmp_path / "fit.json")["chinchilla_approach3"]["params"]
    assert round(params["E"]["value"], 3) == 1.817 and round(params["alpha"]["value"], 4) == 0.3473
    assert "chinchilla_approach2" in report.skipped
    md = (tmp_path / "fit.md").read_text()
    assert "| E | 1.817 |" in md and "Not run on these data" in md


def test_the_terminal_summary_reads_like_fit_json(report):
    text = summary_text(report)
    a3 = report.approach3
    assert text.startswith("Chinchilla approach 3: L(N, D) = E + A / N^alpha + B / D^beta (converged; 20 of 20")
    assert f"  alpha            {a3.params['alpha'].value:.4g}" in text
    assert "held-out: refit without the 3 largest-compute points, then predicted them" in text
    assert "entropy floor 1.69: fitted E" in text and "approach2: N_opt ~ C^" in text
    assert "prediction for C=1e+23 at its compute-optimal N=" in text and "orders of magnitude" in text


def test_the_terminal_summary_of_a_fit_that_did_not_converge_shows_no_numbers(unconverged_report):
    text = summary_text(unconverged_report)
    assert text.startswith("Chinchilla approach 3: DID NOT CONVERGE: best start stopped after")
    law = unconverged_report.approach3.law
    assert "prediction" not in text and "entropy floor" not in text and f"{law.E:.4g}" not in text
