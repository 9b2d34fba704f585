"""ablate.scaling.laws.approach2 only where it applies: an iso-FLOP design is detected (or the points are
refused with why), and each budget's parabola is fitted near its minimum."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.scaling.analysis import fit_all
from ablate.scaling.laws.approach2 import fit_approach2
from ablate.scaling.laws.chinchilla import ChinchillaLaw
from ablate.scaling.points import FitInputError, Points
from ablate.scaling.predict import FitOptions
from ablate.scaling.reports.report import summary_text
from support import TRUE_LAW

LAW = ChinchillaLaw(**TRUE_LAW)
BUDGETS = np.geomspace(1e18, 1e21, 5)


def wide_arms(penalty: float) -> Points:
    """Each budget's sizes span N_opt/30 to 30 N_opt; the large runs more than a decade past the optimum
    (few tokens each: undertrained) lose `penalty` x (decades - 1)^2 more, which a parabola over the
    whole arm would follow."""
    N = np.concatenate([LAW.n_opt(C) * np.geomspace(1 / 30, 30, 13) for C in BUDGETS])
    C = np.repeat(BUDGETS, 13)
    D = C / (6 * N)
    far = np.maximum(np.log10(N / LAW.n_opt(C)) - 1, 0)
    return Points(N, D, LAW.loss(N, D) + penalty * far**2, C)


def test_the_parabola_near_each_minimum_ignores_far_off_runs():
    points = wide_arms(penalty=1.0)
    near = fit_approach2(points, window_decades=0.5, n_boot=50)
    whole = fit_approach2(points, window_decades=3.0, n_boot=0)
    np.testing.assert_allclose(near.N, LAW.n_opt(near.C), rtol=0.05)
    assert np.max(np.abs(np.log(whole.N / LAW.n_opt(whole.C)))) > 0.1  # the whole arm moves the optimum
    assert near.n_opt.exponent.value == pytest.approx(LAW.a, abs=0.02)
    for b in near.budgets:
        assert b.used.sum() < b.n_points  # only the window
        assert np.all(np.abs(np.log10(b.N[b.used] / b.N[np.argmin(b.L)])) <= 0.5 + 1e-9)
        lo, hi = b.N_opt_ci.ci95  # the minimum's uncertainty, from the bootstrap
        assert lo <= b.N_opt <= hi


def test_a_budget_whose_lowest_loss_ends_its_arm_is_not_used(iso_flop_design):
    points = iso_flop_design(BUDGETS, sizes=9)
    # shift the last budget's sizes so that all lie above its optimum: its minimum is the smallest size
    last = points.C == points.C.max()
    N = np.where(last, points.N * 8, points.N)
    D = points.C / (6 * N)
    shifted = Points(N, D, np.where(last, LAW.loss(N, D), points.L), points.C)
    fit = fit_approach2(shifted, n_boot=0)
    assert len(fit.C) == 4 and not fit.budgets[-1].usable
    assert "lowest loss at the arm's smallest size" in fit.budgets[-1].note
    assert any("does not bracket the optimum" in n for n in fit.notes)


def test_runs_that_are_not_an_iso_flop_design_are_refused_with_why(grid_points):
    with pytest.raises(FitInputError, match="not an iso-FLOP design: 0 budgets with 4\\+ sizes") as err:
        fit_approach2(grid_points, n_boot=0)
    assert err.value.code == "few_sizes" and "\n" not in str(err.value)


def test_fit_all_says_so_on_the_console_and_skips(grid_points, coarse_grid):
    report = fit_all(grid_points, options=FitOptions(n_boot=0, grid=coarse_grid), single=())
    assert report.approach2 is None and "chinchilla_approach2" in report.skipped
    (line,) = [ln for ln in summary_text(report).splitlines() if ln.startswith("Chinchilla approach 2: ")]
    assert line.startswith("Chinchilla approach 2: not_determined: not an iso-FLOP design")


def test_budgets_are_told_apart_by_a_stated_tolerance(iso_flop_design):
    """Runs of one budget agree in FLOPs within budget_tol_decades; two budgets 0.05 decades apart are
    two budgets, not one, at the default tolerance (0.02)."""
    points = iso_flop_design(np.array([1e19, 1e19 * 10**0.05, 1e20, 1e21]), sizes=7)
    assert len(fit_approach2(points, n_boot=0).C) == 4
    merged = fit_approach2(points, budget_tol_decades=0.06, n_boot=0)
    assert len(merged.C) == 3 and merged.budgets[0].n_points == 14  # the first two are one budget now
