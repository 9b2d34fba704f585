"""ablate.scaling.laws.joint: Kaplan et al. 2020's joint form L = E + [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D,
fitted by approach 3's procedure (form=joint), exported to fit.json and predicted from by the planner."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from ablate.config import ConfigError
from ablate.config.fit import FitSourceConfig
from ablate.scaling.analysis import APPROACH3, fit_all
from ablate.scaling.laws.chinchilla import FORMS, ChinchillaLaw, fit_approach3
from ablate.scaling.laws.joint import JointLseHuber, KaplanLaw, joint_grid
from ablate.scaling.points import FitInputError, Points
from ablate.scaling.predict import FitOptions, fit_predictor, predict
from ablate.scaling.reports.export import export_fit
from ablate.scaling.reports.fitfile import load_fit
from ablate.scaling.reports.report import summary_text

TRUE = KaplanLaw(E=2.0, N_c=2e4, D_c=5e5, alpha_N=0.5, alpha_D=0.4)
SIZES = np.geomspace(1e4, 1e6, 5)
BUDGETS = np.geomspace(2.5e5, 1e7, 6)
# starts in Hoffmann's layout [e, a, alpha, b, beta] for the additive form
COARSE_ADDITIVE = np.array(list(itertools.product((-1.0, 0.5), (0, 5, 10), (0.3, 1), (0, 5, 10), (0.3, 1))))


def ladder(law, noise: float = 0.004, seed: int = 0) -> Points:
    """Every size at every budget (a ladder like experiments/text_ladder_long), log-normal noise."""
    N, D = (a.ravel() for a in np.meshgrid(SIZES, BUDGETS))
    rng = np.random.default_rng(seed)
    return Points(N, D, law.loss(N, D) * np.exp(rng.normal(0, noise, N.size)))


@pytest.fixture(scope="module")
def joint_points() -> Points:
    return ladder(TRUE)


@pytest.fixture(scope="module")
def joint_report(joint_points):
    return fit_all(
        joint_points,
        targets=[{"N": 3e6, "D": 3e7}],
        options=FitOptions(n_boot=40, form="joint", grid=KaplanLaw.COARSE),
        held_out_k=2,
    )


def test_gradient_matches_finite_differences(joint_points):
    loss = JointLseHuber(np.log(np.stack([joint_points.N, joint_points.D])), np.log(joint_points.L))
    theta = np.array([[0.3, 9.0, 13.0, -0.7, -0.9], [-0.5, 10.5, 13.5, -0.5, -1.0]])  # [e, n_c, d_c, p_N, p_D]
    _, grad = loss.value_and_grad(theta, None, np.float64)
    eps = 1e-6
    for j in range(theta.shape[1]):
        step = np.zeros(theta.shape[1])
        step[j] = eps
        up, _ = loss.value_and_grad(theta + step, None, np.float64)
        down, _ = loss.value_and_grad(theta - step, None, np.float64)
        np.testing.assert_allclose(grad[:, j], (up - down) / (2 * eps), rtol=1e-5, atol=1e-10)


def test_closed_form_optimum_is_the_minimum_along_the_iso_flop_line():
    for C in (1e12, 1e16, 1e20):
        N = np.geomspace(1e2, 1e12, 400_001)
        best = N[np.argmin(TRUE.loss(N, C / (6 * N)))]
        assert TRUE.n_opt(C) == pytest.approx(best, rel=1e-3)
        assert TRUE.n_opt(C) * TRUE.d_opt(C) * 6 == pytest.approx(C)


def test_bootstrap_rows_give_the_laws_own_losses_and_optima():
    rows = np.array([TRUE.as_array(), KaplanLaw(1.0, 1e5, 1e6, 0.3, 0.6).as_array()])
    N, D = np.array([1e5, 1e7]), np.array([1e6, 1e9])
    got = KaplanLaw.sample_loss(rows, N, D)
    assert got[0] == pytest.approx(TRUE.loss(N, D))
    assert got[1] == pytest.approx(KaplanLaw(*rows[1]).loss(N, D))
    assert KaplanLaw.sample_n_opt(rows, 1e18)[0, 0] == pytest.approx(TRUE.n_opt(1e18))


def test_fit_recovers_the_law_that_drew_the_points(joint_points):
    """From the full grid of starts, as `ablate fit form=joint` fits."""
    fit = fit_approach3(joint_points, n_boot=40, form="joint")
    assert fit.converged and fit.form == "joint"
    for name, true in zip(KaplanLaw.NAMES, TRUE.as_array(), strict=True):
        est = fit.params[name]
        assert est.value == pytest.approx(true, rel=0.25), name
        assert est.ci95[0] <= true <= est.ci95[1], name
    assert fit.exponents["a"].value == pytest.approx(TRUE.a, abs=0.03)
    assert fit.diagnostics.rms_residual < 0.006  # the draws' own noise, 0.004


def test_additive_form_misses_the_interaction_the_joint_form_describes(joint_points):
    """The point of the joint form: on data where N and D interact, the additive law leaves a residual
    several times the noise, and its verdict says the form does not describe the runs."""
    joint = fit_predictor(joint_points, FitOptions(n_boot=0, form="joint", grid=KaplanLaw.COARSE))
    additive = fit_predictor(joint_points, FitOptions(n_boot=0))
    assert joint.fit.diagnostics.rms_residual < 0.006
    assert additive.fit.diagnostics.rms_residual > 2 * joint.fit.diagnostics.rms_residual
    assert isinstance(additive.fit.law, ChinchillaLaw) and isinstance(joint.fit.law, KaplanLaw)


def test_joint_form_refuses_tied_exponents_and_unknown_forms(joint_points):
    with pytest.raises(FitInputError, match="tie_exponents=true fits the additive form only"):
        fit_approach3(joint_points, n_boot=0, tie_exponents=True, form="joint")
    with pytest.raises(FitInputError, match=r"form=kaplan is not a law's form \(valid: additive, joint\)"):
        fit_approach3(joint_points, n_boot=0, form="kaplan")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"form": "kaplan"}, r"form=kaplan is not a law's form \(valid: additive, joint\)"),
        ({"form": "joint", "tie_exponents": True}, "the joint form has no alpha and beta to tie"),
    ],
)
def test_config_refuses_a_form_that_is_not_one(overrides, message):
    with pytest.raises(ConfigError, match=message):
        FitSourceConfig(points="p.csv", **overrides).validate()


def test_prediction_holds_a_bigger_run_of_the_same_law(joint_report):
    """Fitted to the ladder, the joint law's calibrated interval holds the true loss of a run with
    3x the largest size and 3x the largest budget (9x the compute)."""
    pred = predict(joint_report.predictor, N=3e6, D=3e7)
    assert pred.loss is not None
    lo, hi = pred.loss.ci95
    assert lo < float(TRUE.loss(3e6, 3e7)) < hi
    assert pred.loss.value == pytest.approx(float(TRUE.loss(3e6, 3e7)), rel=0.03)


def test_fit_json_records_the_form_and_the_planner_predicts_what_the_fit_did(joint_report, tmp_path):
    export_fit(joint_report, tmp_path)
    doc = json.loads((tmp_path / "fit.json").read_text())
    a3 = doc["chinchilla_approach3"]
    assert a3["variant"]["form"] == "joint"
    assert a3["law"] == KaplanLaw.FORMULA
    assert set(a3["params"]) == set(KaplanLaw.NAMES)
    assert a3["bootstrap"]["sample_columns"] == list(KaplanLaw.NAMES)
    assert "N_c" in (tmp_path / "fit.md").read_text()
    fit = load_fit(str(tmp_path / "fit.json"))
    assert fit.form == "joint" and isinstance(fit.law(), KaplanLaw)
    ours, theirs = predict(fit.predictor, N=3e6, D=3e7), predict(joint_report.predictor, N=3e6, D=3e7)
    assert ours.loss.value == pytest.approx(theirs.loss.value, rel=1e-5)
    assert ours.loss.ci95 == pytest.approx(theirs.loss.ci95, rel=1e-3)
    assert ours.verdict.level == theirs.verdict.level
    assert predict(fit.predictor, C=1e16).N.value == pytest.approx(float(fit.law().n_opt(1e16)))


def test_fit_json_with_an_unknown_form_is_refused(joint_report, tmp_path):
    export_fit(joint_report, tmp_path)
    path = tmp_path / "fit.json"
    doc = json.loads(path.read_text())
    doc["chinchilla_approach3"]["variant"]["form"] = "quadratic"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="variant.form is 'quadratic' \\(valid: additive, joint\\)"):
        load_fit(str(path))


def test_report_names_the_form(joint_report):
    assert joint_report.approach3.law.FORMULA == KaplanLaw.FORMULA
    assert joint_report.verdicts[APPROACH3].usable


def test_grid_covers_both_exponent_orders_and_every_form_has_a_law():
    grid = joint_grid()
    assert grid.shape == (6125, 5)
    assert set(FORMS) == {"additive", "joint"}
    assert {(a, b) for a, b in grid[:, [2, 4]]} >= {(0.1, 2.0), (2.0, 0.1)}


def test_runs_that_break_the_additive_law_are_shown_in_the_joint_form_too(joint_points, tmp_path):
    """The additive law's verdict names a residual the form misses; the fit then shows the same runs in
    the joint form, as a suggestion (console, fit.md, fit.json's other_form), and predicts with neither
    changed."""
    report = fit_all(joint_points, options=FitOptions(n_boot=20, grid=COARSE_ADDITIVE))
    assert report.verdicts[APPROACH3].reasons and report.approach3.form == "additive"
    other = report.other_form
    assert other is not None and other.form == "joint" and other.fit.converged
    assert other.rms < report.approach3.diagnostics.rms_residual / 2
    export_fit(report, tmp_path)
    doc = json.loads((tmp_path / "fit.json").read_text())["chinchilla_approach3"]
    assert doc["other_form"]["form"] == "joint" and doc["other_form"]["applied"] is False
    assert doc["other_form"]["rms_log_residual"] == pytest.approx(other.rms)
    assert doc["variant"]["form"] == "additive"
    assert "### The other form" in (tmp_path / "fit.md").read_text()
    assert any("form=joint" in line for line in summary_text(report).splitlines())


def test_a_law_that_describes_its_runs_is_not_refitted_in_the_other_form(iso_flop, coarse_grid):
    report = fit_all(iso_flop, options=FitOptions(n_boot=20, grid=coarse_grid))
    assert report.verdicts[APPROACH3].usable and report.other_form is None
