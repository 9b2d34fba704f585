"""ablate.scaling against published fits (Epoch's replication of Chinchilla) and against synthetic data
drawn from known laws."""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from ablate.scaling.fitting.bootstrap import Estimate, resample_counts
from ablate.scaling.fitting.multistart import Tolerances, hoffmann_grid
from ablate.scaling.laws.approach1 import fit_approach1
from ablate.scaling.laws.approach2 import fit_approach2
from ablate.scaling.laws.chinchilla import ChinchillaLaw, fit_approach3
from ablate.scaling.laws.single import compute_envelope, fit_single_law
from ablate.scaling.points import FitInputError, Points, RunCurve, load_chinchilla
from ablate.scaling.predict import FitOptions, fit_predictor, frontier, predict
from ablate.scaling.validation import compare_floor

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "chinchilla.csv"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "chinchilla" / "svg_extracted_data.csv"

# Besiroglu et al. 2024 (Epoch): Hoffmann's procedure on the 240 points, and their bootstrap intervals.
EPOCH_HOFFMANN = {"E": 1.817, "A": 477.8, "B": 2143.9, "alpha": 0.3473, "beta": 0.3672}
EPOCH_CI = {"E": (1.769, 1.871), "A": (285, 744), "B": (1042, 5810), "alpha": (0.317, 0.373), "beta": (0.331, 0.415)}
# Hoffmann et al. 2022's rounded approach-3 law, used to draw synthetic data.
TRUE = ChinchillaLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
# 72 starts around the right region: enough for the synthetic data, quick enough for a fast test.
COARSE_GRID = np.array(list(itertools.product([0.0, 0.5], [0, 10, 20], [0.2, 0.8], [0, 10, 20], [0.2, 0.8])))


def sig3(x: float) -> float:
    return float(f"{x:.3g}")


@pytest.fixture(scope="module")
def chinchilla() -> Points:
    return load_chinchilla(DATA)


@pytest.fixture(scope="module")
def chinchilla_forecast(chinchilla):
    """The full 4,500-start fit plus 100 bootstrap resamples (the slow test runs 1,000), its verdict
    and its calibrated predictor."""
    return fit_predictor(chinchilla, FitOptions(n_boot=100, seed=0))


@pytest.fixture(scope="module")
def chinchilla_fit(chinchilla_forecast):
    return chinchilla_forecast.fit


@pytest.fixture(scope="module")
def synthetic() -> Points:
    """12 sizes x 10 token budgets from TRUE, with 0.5% multiplicative noise."""
    rng = np.random.default_rng(1)
    N, D = (g.ravel() for g in np.meshgrid(np.geomspace(1e7, 1e10, 12), np.geomspace(1e9, 1e12, 10)))
    return Points(N, D, TRUE.loss(N, D) * np.exp(rng.normal(0, 0.005, N.size)))


ISO_FLOP_BUDGETS = tuple(np.geomspace(1e18, 1e21, 6))


def iso_flop_points(budgets=ISO_FLOP_BUDGETS, noise=1e-3, seed=2) -> Points:
    """9 sizes per budget from N_opt/4 to 4 N_opt of TRUE, D = C/(6N)."""
    rng = np.random.default_rng(seed)
    N = np.concatenate([TRUE.n_opt(C) * np.geomspace(0.25, 4, 9) for C in budgets])
    C = np.repeat(budgets, 9)
    D = C / (6 * N)
    return Points(N, D, TRUE.loss(N, D) * np.exp(rng.normal(0, noise, N.size)), C)


CURVE_SIZES = tuple(np.geomspace(1e7, 1e10, 16))


def training_curves(sizes=CURVE_SIZES) -> list[RunCurve]:
    tokens = np.geomspace(1e8, 1e12, 80)
    return [RunCurve(n, 6 * n * tokens, tokens, TRUE.loss(n, tokens), run_id=f"n{i}") for i, n in enumerate(sizes)]


# --- data --------------------------------------------------------------------------------------


def test_repo_copy_of_chinchilla_csv_matches_shared():
    if not SHARED.is_file():
        pytest.skip("shared/ is not beside this clone")
    assert DATA.read_bytes() == SHARED.read_bytes()


def test_load_chinchilla_drops_the_five_highest_losses(chinchilla):
    with DATA.open() as fh:
        raw = np.array([float(row["loss"]) for row in csv.DictReader(fh)])
    assert len(raw) == 245 and len(chinchilla) == 240
    assert chinchilla.L.max() < np.sort(raw)[-5]
    np.testing.assert_allclose(chinchilla.C, 6 * chinchilla.N * chinchilla.D)


def test_points_from_csv_defaults_flops_to_6ND_and_reads_optional_columns(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("params,tokens,loss,run_id\n1e6,2e7,3.1,a\n2e6,2e7,2.9,b\n")
    p = Points.from_csv(path)
    np.testing.assert_allclose(p.C, [1.2e14, 2.4e14])
    assert p.run_ids == ("a", "b")
    path.write_text("params,tokens,loss,flops\n1e6,2e7,3.1,5e14\n")
    assert Points.from_csv(path).C[0] == 5e14
    # ablate.sweep_summary leaves optional columns empty when a run did not record them
    path.write_text("params,tokens,loss,flops,params_non_embedding,run_id,label\n1e6,2e7,3.1,,,,fp32\n")
    p = Points.from_csv(path)
    assert p.C[0] == pytest.approx(1.2e14) and p.N_non_embedding is None


def test_compute_envelope_keeps_only_new_best_losses():
    C = np.array([1.0, 2, 3, 4, 5])
    L = np.array([5.0, 6, 4, 4.5, 3])
    assert compute_envelope(C, L).tolist() == [0, 2, 4]


# --- approach 3 on Chinchilla ------------------------------------------------------------------


def test_approach3_reproduces_epochs_hoffmann_row_to_3_significant_figures(chinchilla_fit):
    law = chinchilla_fit.law
    for name, ref in EPOCH_HOFFMANN.items():
        got = getattr(law, name)
        assert sig3(got) == sig3(ref), (name, got, ref)
        assert abs(got / ref - 1) < 1e-3, (name, got, ref)


def test_approach3_diagnostics_say_converged(chinchilla_fit):
    d = chinchilla_fit.diagnostics
    assert d.converged and d.message == "converged"
    assert d.n_starts == 4500 and d.n_starts_at_best >= 10
    assert d.grad_norm < 1e-5
    assert d.residuals.shape == (240,) and d.rms_residual < 0.01


def test_bootstrap_intervals_overlap_epochs(chinchilla_fit):
    boot = chinchilla_fit.bootstrap
    assert boot.n_resamples == 100 and boot.converged.mean() >= 0.98
    for name, (lo, hi) in EPOCH_CI.items():
        est = chinchilla_fit.params[name]
        assert est.ci95[0] < est.value < est.ci95[1]
        assert est.ci95[0] < hi and lo < est.ci95[1], (name, est.ci95, (lo, hi))
    a = chinchilla_fit.exponents["a"]
    assert a.ci95[0] < 0.5139 < a.ci95[1]
    assert chinchilla_fit.exponents["b"].value == pytest.approx(1 - a.value)


@pytest.mark.slow
def test_bootstrap_1000_resamples_matches_epochs_intervals(chinchilla):
    fit = fit_approach3(chinchilla, n_boot=1000, seed=0)
    assert fit.bootstrap.converged.mean() >= 0.99
    for name, (lo, hi) in EPOCH_CI.items():
        ci = fit.params[name].ci95
        assert ci[0] < hi and lo < ci[1], (name, ci, (lo, hi))
        # Same width to within a factor 2 (theirs: 4,000 resamples of a Huber-likelihood MLE).
        assert 0.5 < (ci[1] - ci[0]) / (hi - lo) < 2, (name, ci, (lo, hi))


def _full_grid_refit(points: Points, counts: np.ndarray) -> ChinchillaLaw:
    return fit_approach3(points.subset(np.repeat(np.arange(len(points)), counts)), n_boot=0).law


@pytest.mark.parametrize(
    "j",
    [
        0,
        pytest.param(1, marks=pytest.mark.slow),
        pytest.param(2, marks=pytest.mark.slow),
        pytest.param(3, marks=pytest.mark.slow),
        pytest.param(4, marks=pytest.mark.slow),
    ],
)
def test_warm_started_bootstrap_finds_the_full_grid_optimum(chinchilla, chinchilla_fit, j):
    """Each resample is started from the full-data optimum and 8 grid starts, not all 4,500: check that
    this lands where Hoffmann's full grid lands on the same resample."""
    counts = resample_counts(len(chinchilla), 100, seed=0)[j]
    full = _full_grid_refit(chinchilla, counts)
    np.testing.assert_allclose(chinchilla_fit.bootstrap.samples[j], full.as_array(), rtol=2e-3)


@pytest.mark.slow
def test_scipy_lbfgsb_from_grid_starts_finds_no_better_optimum(chinchilla, chinchilla_fit):
    """Hoffmann's optimiser itself (scipy L-BFGS-B) from 200 of the grid's starts."""
    from scipy.optimize import minimize

    from ablate.scaling.fitting.optimizer import LseHuber

    loss = LseHuber(np.log(np.stack([chinchilla.N, chinchilla.D])), np.log(chinchilla.L))

    def fun(theta):
        f, g = loss.value_and_grad(theta[None], None, np.float64)
        return f[0], g[0]

    starts = loss.starts(hoffmann_grid())
    picks = np.random.default_rng(0).choice(len(starts), 200, replace=False)
    best = min((minimize(fun, starts[i], jac=True, method="L-BFGS-B") for i in picks), key=lambda r: r.fun)
    assert best.fun >= chinchilla_fit.diagnostics.objective - 1e-12
    for name in EPOCH_HOFFMANN:
        assert sig3(getattr(ChinchillaLaw(*loss.natural(best.x)), name)) == sig3(getattr(chinchilla_fit.law, name))


# --- frontier, prediction, held-out, floor ---------------------------------------------------


def test_frontier_with_epochs_fit_gives_72B_params_and_18_tokens_per_param():
    law = ChinchillaLaw(**EPOCH_HOFFMANN)
    C = 5.76e23
    assert law.n_opt(C) == pytest.approx(72e9, rel=0.03)
    assert law.d_opt(C) / law.n_opt(C) == pytest.approx(18, abs=0.5)
    assert 6 * law.n_opt(C) * law.d_opt(C) == pytest.approx(C)
    N = np.geomspace(1e10, 1e12, 20001)
    assert N[np.argmin(law.loss(N, C / (6 * N)))] == pytest.approx(law.n_opt(C), rel=1e-3)


def test_frontier_band_contains_the_point_estimate(chinchilla_forecast):
    f = frontier(chinchilla_forecast.predictor, np.geomspace(1e19, 1e24, 6))
    assert np.all(f.N_lo < f.N_opt) and np.all(f.N_opt < f.N_hi)
    assert np.all(f.loss_lo < f.loss) and np.all(f.loss < f.loss_hi)
    np.testing.assert_allclose(f.tokens_per_param, f.D_opt / f.N_opt)
    assert f.tokens_per_param[-1] < f.tokens_per_param[0]  # beta > alpha: D/N falls with C
    assert f.levels[:4] == ("trusted",) * 4  # 1e19 to 1e22: inside the data or within its calibrated reach


def test_chinchillas_own_prediction_is_trusted_with_a_calibrated_interval(chinchilla, chinchilla_forecast):
    """Chinchilla itself (C = 5.76e23, 1.6 decades past these runs): trusted, its interval wider than
    the bootstrap's alone by the law's error calibrated on held-out runs."""
    pred = chinchilla_forecast.predictor
    p = predict(pred, C=5.76e23)
    assert p.compute_optimal and p.verdict.level == "trusted"
    assert p.orders_past_data["C"] == pytest.approx(math.log10(5.76e23 / chinchilla.C.max()))
    assert p.orders_past_data["N"] == pytest.approx(math.log10(p.N.value / chinchilla.N.max()))
    assert p.N.value == pytest.approx(72e9, rel=0.03) and p.N.ci95[0] < p.N.value < p.N.ci95[1]
    lo, hi = p.loss.ci95
    assert lo < p.loss.value < hi
    boot = np.percentile(_boot_losses(pred, p.N.value, p.D.value), [2.5, 97.5])
    assert lo < boot[0] and boot[1] < hi
    assert 0.02 < np.log(hi / lo) < 0.2


def _boot_losses(pred, N, D):
    E, A, B, al, be = pred.samples.T
    return E + A / N**al + B / D**be


def test_prediction_inside_the_data_is_trusted(chinchilla, chinchilla_forecast):
    pred = chinchilla_forecast.predictor
    i = int(np.argsort(chinchilla.C)[120])
    p = predict(pred, N=chinchilla.N[i], D=chinchilla.D[i])
    assert p.verdict.level == "trusted" and max(p.orders_past_data.values()) == 0
    assert p.loss.value == pytest.approx(chinchilla.L[i], rel=0.03)
    assert predict(pred, N=chinchilla.N[i], C=chinchilla.C[i]).D.value == pytest.approx(chinchilla.D[i])


@pytest.mark.parametrize("kwargs", [{}, {"N": 1e9}, {"D": 1e10}])
def test_prediction_needs_a_valid_target(chinchilla_forecast, kwargs):
    with pytest.raises(FitInputError, match="give N and D"):
        predict(chinchilla_forecast.predictor, **kwargs)


def test_entropy_floor_comparison():
    inside = compare_floor(Estimate(1.80, (1.70, 1.90)), 1.75)
    assert inside.difference == pytest.approx(0.05) and inside.floor_inside_ci is True
    assert compare_floor(Estimate(1.80, (1.78, 1.82)), 1.69).floor_inside_ci is False
    assert compare_floor(Estimate(1.80), 1.69).floor_inside_ci is None


# --- recovery of known laws -------------------------------------------------------------------


def test_approach3_recovers_a_known_law_from_noisy_data(synthetic):
    fit = fit_approach3(synthetic, n_boot=50, grid=COARSE_GRID)
    assert fit.diagnostics.converged
    assert fit.law.E == pytest.approx(TRUE.E, rel=0.01)
    assert fit.law.alpha == pytest.approx(TRUE.alpha, abs=0.01)
    assert fit.law.beta == pytest.approx(TRUE.beta, abs=0.015)
    assert fit.exponents["a"].value == pytest.approx(TRUE.a, abs=0.01)
    lo, hi = fit.params["E"].ci95
    assert lo < TRUE.E < hi


def test_data_without_a_floor_put_E_at_its_lower_bound(synthetic):
    N, D = synthetic.N, synthetic.D
    no_floor = Points(N, D, TRUE.A / N**TRUE.alpha + TRUE.B / D**TRUE.beta)
    fit = fit_approach3(no_floor, n_boot=0, grid=COARSE_GRID)
    assert fit.diagnostics.converged and fit.law.E < 1e-4 * no_floor.L.min()
    assert fit.law.alpha == pytest.approx(TRUE.alpha, rel=1e-3)


def test_E_stays_between_the_known_floor_and_the_lowest_loss(synthetic):
    """Bounds are used in the fit, not checked afterwards: a floor above the true E pins E there, and
    E never rises above the lowest loss a run reached."""
    fit = fit_approach3(synthetic, n_boot=20, grid=COARSE_GRID, floor=1.75)
    assert fit.floor == 1.75 and fit.law.E == pytest.approx(1.75, abs=1e-3)
    assert fit.params["E"].ci95[0] >= 1.75
    low_top = Points(synthetic.N, synthetic.D, np.minimum(synthetic.L, 1.9))  # a loss that saturates
    capped = fit_approach3(low_top, n_boot=0, grid=COARSE_GRID)
    assert capped.law.E < low_top.L.min() == capped.upper


def test_exponents_stay_positive_on_noise():
    rng = np.random.default_rng(7)
    N, D = (g.ravel() for g in np.meshgrid(np.geomspace(1e6, 1e8, 5), np.geomspace(1e8, 1e10, 5)))
    fit = fit_approach3(Points(N, D, 3 * np.exp(rng.normal(0, 0.05, N.size))), n_boot=20, grid=COARSE_GRID)
    assert fit.law.alpha > 0 and fit.law.beta > 0
    assert (fit.bootstrap.samples[:, 3:] > 0).all() and fit.law.E < fit.points.L.min()


def test_alpha_tied_to_beta_fits_one_exponent(synthetic):
    tied = Points(synthetic.N, synthetic.D, ChinchillaLaw(1.69, 406.4, 410.7, 0.3, 0.3).loss(synthetic.N, synthetic.D))
    fit = fit_approach3(tied, n_boot=10, grid=COARSE_GRID, tie_exponents=True)
    assert fit.tied and fit.law.alpha == fit.law.beta == pytest.approx(0.3, abs=1e-3)
    assert fit.law.E == pytest.approx(1.69, rel=1e-3)
    np.testing.assert_array_equal(fit.bootstrap.samples[:, 3], fit.bootstrap.samples[:, 4])


def test_a_floor_above_the_lowest_loss_is_refused(synthetic):
    _one_line_error(
        lambda: fit_approach3(synthetic, n_boot=0, floor=5.0), "entropy floor 5 is not below the lowest loss"
    )


def test_coarse_grid_agrees_with_hoffmanns_grid_on_synthetic_data(synthetic):
    a = fit_approach3(synthetic, n_boot=0, grid=COARSE_GRID)
    b = fit_approach3(synthetic, n_boot=0)
    np.testing.assert_allclose(a.law.as_array(), b.law.as_array(), rtol=1e-4)


def test_single_law_in_N_recovers_E_and_alpha():
    rng = np.random.default_rng(3)
    N = np.geomspace(1e6, 1e10, 20)
    L = (1.5 + 300 / N**0.3) * np.exp(rng.normal(0, 0.003, N.size))
    fit = fit_single_law(Points(N, np.full(N.size, 1e12), L), "N", n_boot=50)
    assert fit.diagnostics.converged
    assert fit.law.E == pytest.approx(1.5, rel=0.01) and fit.law.alpha == pytest.approx(0.3, abs=0.01)
    assert fit.params["alpha"].ci95[0] < 0.3 < fit.params["alpha"].ci95[1]


def test_single_law_in_N_uses_the_best_loss_per_size():
    N = np.repeat(np.geomspace(1e6, 1e9, 5), 2)
    L = 2 + 100 / N**0.3 + np.tile([0.0, 0.5], 5)
    fit = fit_single_law(Points(N, np.full(N.size, 1e12), L), "N", n_boot=0)
    assert len(fit.x) == 5 and np.allclose(fit.L, 2 + 100 / fit.x**0.3)


def test_single_law_in_C_follows_the_compute_optimal_loss(synthetic):
    fit = fit_single_law(synthetic, "C", n_boot=0)
    C = np.geomspace(fit.x.min(), fit.x.max(), 20)
    optimal = TRUE.loss(TRUE.n_opt(C), TRUE.d_opt(C))
    assert np.max(np.abs(fit.law.loss(C) / optimal - 1)) < 0.01


def test_single_law_in_D_recovers_alpha():
    D = np.geomspace(1e8, 1e12, 15)
    fit = fit_single_law(Points(np.full(D.size, 1e12), D, 1.2 + 500 / D**0.28), "D", n_boot=0)
    assert fit.law.alpha == pytest.approx(0.28, abs=1e-3) and fit.law.E == pytest.approx(1.2, rel=1e-3)


def test_approach1_recovers_the_optimal_exponent():
    fit = fit_approach1(training_curves(), n_boot=200)
    assert fit.n_opt.exponent.value == pytest.approx(TRUE.a, abs=0.01)
    assert fit.d_opt.exponent.value == pytest.approx(TRUE.b, abs=0.01)
    lo, hi = fit.n_opt.exponent.ci95
    assert lo < TRUE.a < hi
    assert np.all(np.isin(fit.N, [c.N for c in training_curves()]))


def test_approach2_recovers_each_budgets_optimum_and_the_exponent():
    fit = fit_approach2(iso_flop_points(), n_boot=200)
    np.testing.assert_allclose(fit.N, TRUE.n_opt(fit.C), rtol=0.05)
    assert fit.n_opt.exponent.value == pytest.approx(TRUE.a, abs=0.01)
    assert fit.d_opt.exponent.value == pytest.approx(TRUE.b, abs=0.01)
    assert fit.n_opt.exponent.ci95[0] < fit.n_opt.exponent.value < fit.n_opt.exponent.ci95[1]
    assert len(fit.budgets) == 6 and not fit.notes


# --- convergence reporting --------------------------------------------------------------------


def test_a_fit_stopped_early_says_it_did_not_converge(synthetic):
    far = np.array([[0.0, 25.0, 0.0, 25.0, 0.0]])  # theta = [e, a, alpha, b, beta]
    fit = fit_approach3(synthetic, n_boot=0, grid=far, tol=Tolerances(max_iter=2, polish_max_iter=2, n_polish=1))
    assert fit.diagnostics.converged is False
    assert fit.diagnostics.message.startswith("DID NOT CONVERGE: best start stopped after 4 iterations")
    assert fit.diagnostics.grad_norm > 1e-5


def test_a_plateau_with_a_vanished_term_is_not_called_converged(synthetic):
    """From A = B = 1, alpha = beta = 0.8 both power-law terms are below 1e-5 of the loss: the gradient is
    below scipy's default tolerance there, so with scipy's stopping rule the optimiser stops at once."""
    plateau = np.array([[1.0, 0.0, 0.8, 0.0, 0.8]])
    fit = fit_approach3(synthetic, n_boot=0, grid=plateau, tol=Tolerances(polish_gtol=1e-5, polish_ftol=2.2e-9))
    assert fit.diagnostics.grad_norm < 1e-5
    assert fit.diagnostics.converged is False and "plateau" in fit.diagnostics.message


# --- bad input: one line, naming what to change -----------------------------------------------


def _one_line_error(fn, match: str) -> str:
    with pytest.raises(FitInputError, match=match) as info:
        fn()
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def test_too_few_points_says_how_many_are_needed():
    p = Points([1e6, 2e6, 4e6], [1e8, 1e8, 1e8], [3.0, 2.9, 2.8])
    _one_line_error(lambda: fit_approach3(p, n_boot=0), "3 points, needs at least 6")
    _one_line_error(lambda: fit_single_law(p, "N", n_boot=0), "needs at least 4")


def test_all_points_at_one_size_is_refused():
    p = Points(np.full(8, 1e6), np.geomspace(1e7, 1e9, 8), np.linspace(3, 2.5, 8))
    _one_line_error(lambda: fit_approach3(p, n_boot=0), r"all points at one N \(params\)")
    _one_line_error(lambda: fit_single_law(p, "N", n_boot=0), "all points at one N")


@pytest.mark.parametrize(
    "column,row,value", [("params", 1, -2.0), ("tokens", 0, 0.0), ("loss", 2, float("nan")), ("loss", 1, float("inf"))]
)
def test_non_positive_or_nan_values_name_column_and_row(column, row, value):
    cols = {"params": [1e6, 2e6, 4e6], "tokens": [1e8, 1e8, 1e8], "loss": [3.0, 2.9, 2.8]}
    cols[column][row] = value
    _one_line_error(lambda: Points(cols["params"], cols["tokens"], cols["loss"]), f"column '{column}' row {row}")


def test_csv_errors_name_the_line(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("params,tokens,loss\n1e6,1e8,3.0\n2e6,1e8,-1\n")
    _one_line_error(lambda: Points.from_csv(path), r"column 'loss' row 1 \(line 3\)")
    path.write_text("params,tokens,loss\n1e6,1e8,abc\n")
    _one_line_error(lambda: Points.from_csv(path), r"'abc', not a number")
    path.write_text("params,tokens,loss\n")
    _one_line_error(lambda: Points.from_csv(path), "no data rows")
    path.write_text("params,tokens,loss,flops\n1e6,1e8,3.0,6e14\n2e6,1e8,2.9,\n")
    _one_line_error(lambda: Points.from_csv(path), r"column 'flops' row 1 \(line 3\) is ''")
    _one_line_error(lambda: Points.from_csv(tmp_path / "absent.csv"), "no such file")


def test_missing_columns_are_named_with_the_valid_ones(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("params,loss\n1e6,3.0\n")
    msg = _one_line_error(lambda: Points.from_csv(path), "missing column")
    assert "tokens" in msg and "valid columns: params, tokens, loss, flops" in msg
    msg = _one_line_error(lambda: Points.from_csv(DATA), "missing column")
    assert "load_chinchilla" in msg
    _one_line_error(lambda: load_chinchilla(path), "'Model Size', 'Training FLOP'")


def test_mismatched_lengths_and_unknown_variables_are_refused(synthetic):
    _one_line_error(lambda: Points([1e6, 2e6], [1e8], [3.0, 2.9]), "differ in length")
    _one_line_error(lambda: fit_single_law(synthetic, "T", n_boot=0), "valid: N, N_non_embedding, D, C")
    _one_line_error(lambda: fit_single_law(synthetic, "N_non_embedding", n_boot=0), "no params_non_embedding")


def test_bad_training_curves_are_refused():
    tokens = np.geomspace(1e8, 1e10, 5)
    one = [RunCurve(1e7, 6e7 * tokens, tokens, np.linspace(4, 3, 5))]
    _one_line_error(lambda: fit_approach1(one, n_boot=0), "1 training curves, needs at least 2")
    _one_line_error(lambda: RunCurve(1e7, 6e7 * tokens[::-1], tokens, np.linspace(4, 3, 5)), "increase strictly")
    far = one + [RunCurve(1e9, 1e30 * tokens, tokens, np.linspace(4, 3, 5))]
    _one_line_error(lambda: fit_approach1(far, n_boot=0), "overlap")


def test_approach2_refuses_data_without_iso_flop_budgets(synthetic):
    """A grid of sizes x token budgets is not an iso-FLOP design, whatever FLOP values happen to agree."""
    _one_line_error(lambda: fit_approach2(synthetic, n_boot=0), "not an iso-FLOP design: 0 budgets")
