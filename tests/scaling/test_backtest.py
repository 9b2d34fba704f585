"""ablate.scaling.calibration and backtest: intervals that hold the held-out truth when the fit extrapolates,
measured by fitting below cut points in compute and predicting above them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ablate.scaling.backtest import backtest, held_out
from ablate.scaling.calibration import HULL, Calibration, calibrate, log_interval
from ablate.scaling.laws.chinchilla import ChinchillaLaw, fit_approach3
from ablate.scaling.points import FitInputError, Points, load_chinchilla
from ablate.scaling.predict import FitOptions, fit_predictor
from ablate.scaling.reports.report import backtest_markdown
from ablate.scaling.verdict import LEVELS


def drifting(seed: int = 3, noise: float = 0.005) -> Points:
    """A law the Chinchilla form does not have: L = 1.5 + 60 / (N D)^0.1, one product term where the
    form has a sum, so a fit below a cut misjudges the runs above it by more the further they lie."""
    rng = np.random.default_rng(seed)
    N, D = (g.ravel() for g in np.meshgrid(np.geomspace(1e7, 1e10, 10), np.geomspace(1e9, 1e12, 10)))
    return Points(N, D, (1.5 + 60 / (N * D) ** 0.1) * np.exp(rng.normal(0, noise, N.size)))


def test_log_interval_adds_curve_run_and_law_in_quadrature():
    cal = Calibration(run_sigma=0.01, kappa=0.02, reach=1.0, method=HULL)
    center = np.log(np.array([2.0, 2.0]))
    samples = center + np.array([[-0.03, -0.03], [0.0, 0.0], [0.03, 0.03]]).repeat(40, axis=0)
    value, lo, hi = log_interval(center, samples, np.array([0.0, 2.0]), cal)
    np.testing.assert_allclose(value, center)
    boot = 0.03  # the samples' 2.5% and 97.5% percentiles sit 0.03 from the centre
    for j, d in enumerate((0.0, 2.0)):
        half = np.hypot(boot, 1.959963984540054 * np.hypot(0.01, 0.02 * d))
        assert center[j] - lo[j] == pytest.approx(half) and hi[j] - center[j] == pytest.approx(half)
    _, lo0, hi0 = log_interval(center, None, np.zeros(2), Calibration(0.0, None, None))
    np.testing.assert_allclose([lo0, hi0], [center, center])


def test_calibration_measures_how_fast_the_form_goes_wrong(coarse_grid, grid_points):
    """kappa is the RMS over cuts of the log error's drift per decade: near 0 for data from the law
    itself, well above it for a law whose exponent drifts."""

    def refit(points):
        return fit_approach3(points, n_boot=0, grid=coarse_grid)

    clean = calibrate(grid_points, refit, 0.005)
    wrong = calibrate(drifting(), refit, 0.005)
    assert clean.calibrated and wrong.calibrated
    assert clean.kappa < 0.01 < wrong.kappa
    assert len(wrong.cuts) == 5 and all(c.drift is not None for c in wrong.cuts)
    assert wrong.reach == max(c.reach for c in wrong.cuts) > 1.5
    assert all(c.n_fit + c.n_held == 100 for c in wrong.cuts)


def test_a_cut_that_cannot_be_fitted_is_kept_with_its_reason(coarse_grid, grid_points):
    def refuse(points):
        raise FitInputError("Chinchilla approach 3: 3 points, needs at least 6")

    cal = calibrate(grid_points, refuse, 0.01)
    assert not cal.calibrated and cal.kappa is None and cal.reach is None
    assert all(c.note.endswith("needs at least 6") and c.drift is None for c in cal.cuts)


def test_the_calibrated_interval_covers_a_misspecified_law_the_bootstrap_misses(coarse_grid):
    """The failure the issue saw on a public data set: the curve's interval held few of the largest runs.
    Fit on the 60 lowest-compute runs of the drifting law and predict the 40 above. Within half a decade
    every held-out run is inside; further out the product law's error where N and D are both large grows
    2.4 times faster than the drift any cut inside the data shows (0.035 against 0.015 per decade), which
    no calibration from inside the data can see: the interval is then sharp for the drift it measured,
    and the law's verdict is `wide`, not `trusted`."""
    points = drifting()
    order = np.argsort(points.C)
    below, above = points.subset(order[:60]), order[60:]
    forecast = fit_predictor(below, FitOptions(n_boot=50, grid=coarse_grid))
    pred = forecast.predictor
    curve_only = replace(pred, calibration=Calibration(0.0, 0.0, pred.calibration.reach))
    near = above[pred.decades_past(points.C[above]) <= 0.5]

    def coverage(p, idx):
        _, lo, hi = p.loss_band(points.N[idx], points.D[idx], points.C[idx])
        return float(np.mean((lo <= points.L[idx]) & (points.L[idx] <= hi)))

    assert coverage(curve_only, above) < 0.3
    assert coverage(pred, above) >= 2 * coverage(curve_only, above)
    assert near.size >= 10 and coverage(pred, near) == 1.0
    assert pred.calibration.kappa > 0.01 and not pred.verdict.trusted


def test_kappa_counts_only_the_drift_the_refits_own_uncertainty_does_not_explain():
    """Drifts no larger than their own sd give the floor; drifts that share a direction give about their
    mean, as both mu and kappa; drifts of both signs well beyond their sd give about their RMS, and mu
    their mean."""
    from ablate.scaling.calibration import shared_drift

    sd = np.full(5, 0.01)
    assert shared_drift(np.array([0.005, -0.008, 0.01, -0.002, 0.004]), sd**2, floor=0.002)[1] == 0.002
    mu, kappa = shared_drift(np.full(5, -0.05), sd**2)
    assert mu == pytest.approx(-0.05, rel=0.02) and kappa == pytest.approx(0.05, rel=0.02)
    mu, kappa = shared_drift(np.array([0.1, -0.1, 0.1, -0.1, 0.1]), sd**2)
    assert mu == pytest.approx(0.02, abs=0.005) and kappa == pytest.approx(0.1, rel=0.05)


def test_the_drift_is_read_against_what_other_ladders_showed():
    """One cut fitted on few runs, its drift -0.1 per decade give or take 0.18 (Marin's comma ladder's
    lowest calibrated fit): the prediction barely moves (s under 2%) and the law's error per decade is
    about the public ladders' P, not 0.1. Five cuts that agree on -0.03 within 0.004 move it by nearly
    all of that, and their spread, 0 among themselves, is still pooled with P as one more cut. A drift
    many standard errors from 0 stands, however far past P."""
    from ablate.scaling.calibration import PRIOR_CUTS, PRIOR_DRIFT, posterior_drift

    def P_share(se: float) -> float:
        return PRIOR_DRIFT**2 / (PRIOR_DRIFT**2 + se**2)

    one = posterior_drift(np.array([-0.1]), np.array([0.18**2]))
    assert one.share < 0.02 and one.share * abs(one.mu) < 0.002
    assert PRIOR_DRIFT * 0.7 < one.kappa < PRIOR_DRIFT * 1.3
    five = posterior_drift(np.full(5, -0.03), np.full(5, 0.004**2) * 5)
    assert five.share > 0.95 and five.share * five.mu == pytest.approx(-0.03, abs=0.002)
    tau_pooled = PRIOR_DRIFT * np.sqrt(PRIOR_CUTS / (PRIOR_CUTS + 5))
    assert five.kappa == pytest.approx(np.sqrt((five.share * five.mu) ** 2 + tau_pooled**2), rel=0.05)
    # a law far off its runs (this project's scaling study): -0.2 to -0.5 per decade, each give or take
    # 0.09; against P alone a fifth of it would stand, but it lies 8 standard errors from 0 and stands
    far = posterior_drift(np.array([-0.21, -0.29, -0.39, -0.43, -0.51]), np.full(5, 0.09**2))
    assert P_share(far.se) < 0.3 and far.share > 0.95


def test_an_interval_read_back_from_before_the_prior_reaches_the_whole_drift():
    """fit.json files written before the drift was read against other ladders' (no drift_prior) give the
    intervals they gave then: the drift's side reaches mu d; read against the prior, s mu d."""
    center = np.log(np.full(1, 3.0))
    d = np.array([1.0])
    before = Calibration(0.01, 0.04, 2.0, drift=-0.04, drift_share=0.5)
    now = replace(before, drift_prior=0.02)
    value, lo_before, hi_before = log_interval(center, None, d, before)
    value_now, lo_now, hi_now = log_interval(center, None, d, now)
    np.testing.assert_allclose([value[0], value_now[0]], center[0] - 0.02)
    np.testing.assert_allclose(lo_now - lo_before, 0.02)
    np.testing.assert_allclose(hi_now, hi_before)


def test_the_drift_the_public_ladders_cuts_did_not_show_moves_every_prediction_past_the_data():
    """A ladder whose cuts show no drift of their own is still moved by what the public ladders drifted
    past their data beyond their cuts' drift (PAST_DRIFT per decade): nothing at the data, PAST_DRIFT d
    at d decades, inside the interval, whose lower end reaches that far; a fit.json from before it (no
    drift_offset) gives the interval it gave then."""
    from ablate.scaling.calibration import ADAPTIVE, PAST_DRIFT, PAST_DRIFT_SD, PRIOR_DRIFT

    assert PAST_DRIFT < 0 < PAST_DRIFT_SD
    center = np.log(np.full(2, 3.0))
    d = np.array([0.0, 1.3])
    before = Calibration(0.01, 0.03, 2.0, drift=0.0, method=ADAPTIVE, drift_prior=PRIOR_DRIFT)
    now = replace(before, drift_offset=PAST_DRIFT)
    value_before, lo_before, hi_before = log_interval(center, None, d, before)
    value, lo, hi = log_interval(center, None, d, now)
    np.testing.assert_allclose(value_before, center)
    np.testing.assert_allclose(value, center + PAST_DRIFT * d)
    np.testing.assert_allclose(lo - lo_before, PAST_DRIFT * d)
    np.testing.assert_allclose(hi, hi_before)
    assert np.all((lo <= value) & (value <= hi))
    read_back = Calibration.from_dict({k: v for k, v in now.to_dict().items() if k != "drift_offset_per_decade"})
    assert read_back.drift_offset == 0.0 and Calibration.from_dict(now.to_dict()).drift_offset == PAST_DRIFT


def test_a_fit_carries_the_past_drift_it_was_given(coarse_grid, grid_points):
    """The past drift is an option of the fit (the backtest passes the values learned without the ladder
    it tests): its mean moves the prediction, its sd widens the interval from NEAR_DECADES on (nearer,
    the ladder's own held-out runs measured the error), and HULL takes none of it."""
    from ablate.scaling.calibration import ADAPTIVE, NEAR_DECADES

    fit = fit_predictor(grid_points, FitOptions(n_boot=20, grid=coarse_grid, past_drift=(-0.03, 0.05)))
    cal = fit.predictor.calibration
    assert cal.method == ADAPTIVE and (cal.drift_offset, cal.drift_offset_sd) == (-0.03, 0.05)
    none = fit_predictor(grid_points, FitOptions(n_boot=20, grid=coarse_grid, past_drift=(0.0, 0.0)))
    plain = none.predictor.calibration
    assert (plain.drift_offset, plain.drift_offset_sd) == (0.0, 0.0)
    d = np.array([0.0, NEAR_DECADES, 1.5])
    extra = cal.extra_sd(d) ** 2 - replace(cal, drift_offset_sd=0.0).extra_sd(d) ** 2
    np.testing.assert_allclose(extra, [0.0, 0.0, 0.05**2], atol=1e-12)
    np.testing.assert_allclose(
        cal.moved(d) - plain.moved(d), -0.03 * d + (cal.drift_share * cal.drift - plain.drift_share * plain.drift) * d
    )
    hull = fit_predictor(grid_points, FitOptions(n_boot=20, grid=coarse_grid, interval=HULL))
    assert hull.predictor.calibration.drift_offset == 0.0 and not np.any(hull.predictor.calibration.moved(d))


def test_the_interval_reaches_further_on_the_side_the_cuts_drifted_to():
    """A law whose refits below every cut predicted the runs above too high (mu < 0) may go on doing so:
    the interval's lower end moves down by mu d, its upper end stays where an interval about the law puts
    it, and at the data (d = 0) nothing moves."""
    center = np.log(np.full(2, 3.0))
    d = np.array([0.0, 1.5])
    about_law = log_interval(center, None, d, Calibration(0.01, 0.04, 1.0, method=HULL))[1:]
    drifting_down = log_interval(center, None, d, Calibration(0.01, 0.04, 1.0, drift=-0.04, method=HULL))[1:]
    np.testing.assert_allclose(drifting_down[1], about_law[1])
    np.testing.assert_allclose(drifting_down[0], about_law[0] - np.array([0.0, 0.06]))
    drifting_up = log_interval(center, None, d, Calibration(0.01, 0.04, 1.0, drift=0.04, method=HULL))[1:]
    np.testing.assert_allclose(drifting_up[0], about_law[0])
    assert drifting_up[1][1] == pytest.approx(about_law[1][1] + 0.06)


def law_ladder(noise: float, misfit: float, seed: int) -> Points:
    """A ladder like the published ones: 10 sizes from 2e7 to 2e9 parameters, each at 5 to 120 tokens per
    parameter (80 runs over 5.7 decades of compute), from Hoffmann et al.'s law, times a known misfit
    exp(misfit u^2 / 10) (u decades of compute above the smallest run: a curvature the form cannot
    follow) and known log-normal noise."""
    law = ChinchillaLaw(1.69, 406.4, 410.7, 0.34, 0.28)
    rng = np.random.default_rng(seed)
    N, R = (g.ravel() for g in np.meshgrid(np.geomspace(2e7, 2e9, 10), np.array([5, 8, 12, 20, 30, 50, 80, 120.0])))
    D = N * R
    u = np.log10(N * D / (N * D).min())
    return Points(N, D, law.loss(N, D) * np.exp(misfit * u**2 / 10 + rng.normal(0, noise, N.size)))


@pytest.mark.slow
@pytest.mark.parametrize(("noise", "misfit", "seed", "sharpest"), [(0.01, 0.0, 2, 4.0), (0.003, 0.05, 4, 4.5)])
def test_intervals_on_a_known_law_cover_and_are_sharp(coarse_grid, noise, misfit, seed, sharpest):
    """Issue 26's targets on laws with known noise and misfit: at least 90% of the held-out runs inside
    their interval at every distance up to 1.5 decades, and within 1.5 decades a median half-width at most
    4 times the median absolute error (a calibrated normal interval is 2.9 times). On the law with 0.3%
    noise, whose cuts agree on their drift to a few thousandths per decade, the public ladders' spread
    of drifts (calibration.PRIOR_DRIFT, pooled as one cut) makes it 4.2 times: the price of the prior
    on a ladder that would not need it."""
    bt = backtest(law_ladder(noise, misfit, seed), FitOptions(n_boot=50, grid=coarse_grid))
    near = [b for b in bt.bins() if b.hi <= 1.5]
    assert len(near) == 3 and all(b.n >= 30 for b in near)
    for b in near:
        assert b.coverage >= 0.9, b
        assert b.printed_coverage >= 0.9, b
    assert 2.0 <= bt.sharpness(1.5) <= sharpest


def test_backtest_reports_coverage_error_and_width_by_distance(coarse_grid):
    # a curvature ten times the known-law test's: the law's error past each cut grows faster than
    # linearly, faster than any drift measured inside the data
    seen = []
    bt = backtest(
        law_ladder(0.003, 0.3, 4),
        FitOptions(n_boot=30, grid=coarse_grid),
        progress=lambda label, i, total: seen.append((i, total)),
    )
    assert len(bt.cuts) == 5 and all(c.law is not None for c in bt.cuts)
    # `ablate backtest`'s bar: each cut's fit as it starts, then the end
    assert seen == [(i, 5) for i in range(6)]
    assert len(bt.runs) == sum(c.n_held for c in bt.cuts)
    bins = bt.bins()
    assert bins[0].lo == 0.0 and sum(b.n for b in bins) == len(bt.runs)
    for b in bins:
        assert 0 <= b.coverage <= 1 and sum(b.levels.values()) == b.n and set(b.levels) == set(LEVELS)
        assert (b.printed_coverage is None) == (b.printed == 0)
        assert b.printed == 0 or b.printed_median_width > 0
    # the backtest is what says so, in its decision and with its code
    assert all(c.drift is not None for c in bt.cuts if c.kappa is not None)
    assert bt.printed_coverage < 0.9 and "under_covers" in {f.code for f in bt.findings()}
    assert bt.decision().startswith("The 95% intervals under-cover")
    doc = bt.to_dict()
    assert doc["by_distance"][0]["n"] == bins[0].n and len(doc["runs"]) == len(bt.runs)
    assert all(b.median_half_width > 0 and b.sharpness > 0 for b in bins)
    md = backtest_markdown(bt, "curved law")
    assert md.startswith("# curved law\n\n**") and "| 0 to 0.5 |" in md
    assert bt.decision() in md and all(f"(`{f.code}`)" in md for f in bt.findings())


def test_held_out_is_one_cut_below_the_k_largest_runs(coarse_grid, grid_points):
    h = held_out(grid_points, 3, FitOptions(n_boot=20, grid=coarse_grid))
    (cut,) = h.cuts
    assert cut.n_held == 3 and cut.n_fit == len(grid_points) - 3
    assert sorted(r.C for r in h.runs) == pytest.approx(np.sort(grid_points.C)[-3:])
    assert h.mean_abs_rel_error < 0.02 and all(r.lo <= r.predicted <= r.hi for r in h.runs)
    with pytest.raises(FitInputError, match="k=0 must be between 1"):
        held_out(grid_points, 0, FitOptions())


@pytest.mark.parametrize("cuts", [(0.0,), (1.0,), (0.5, 1.2)])
def test_cut_points_are_fractions_of_the_compute_span(grid_points, cuts):
    with pytest.raises(FitInputError, match="not a fraction of the compute span"):
        backtest(grid_points, FitOptions(), cuts)


@pytest.mark.slow
def test_chinchilla_backtest_covers_at_least_90_percent_at_every_distance(chinchilla_csv):
    """The issue's target, on Epoch's 240 points with the default options (docs/fitting.md has the table)."""
    bt = backtest(load_chinchilla(chinchilla_csv), FitOptions(n_boot=200))
    bins = bt.bins()
    assert len(bins) >= 4 and max(b.hi for b in bins if np.isfinite(b.hi)) >= 2.0
    for b in bins:
        assert b.coverage >= 0.9, b
        # printed coverage is judged where at least 20 predictions are printed: an exact 95% interval misses
        # one of 7 (86%) three times in ten
        assert b.printed < 20 or b.printed_coverage >= 0.9, b
    near = bins[0]
    assert near.printed_median_width < 0.05  # within half a decade the interval is a few percent wide
    assert bt.sharpness(1.5) <= 4.0  # and no wider than the errors need (issue 26)
    assert "too_wide" not in {f.code for f in bt.findings()}
