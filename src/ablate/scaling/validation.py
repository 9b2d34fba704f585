"""Checks of a fit against what it did not see: the largest-compute runs held out and predicted, and
the fitted irreducible loss E beside a known entropy floor (the synthetic source's)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ablate.scaling.bootstrap import CI_LEVEL, Estimate
from ablate.scaling.chinchilla import Approach3Fit, fit_approach3
from ablate.scaling.frontier import loss_samples
from ablate.scaling.optimizer import HUBER_DELTA
from ablate.scaling.points import FitInputError, Points, check_positive
from ablate.scaling.predict import predict


@dataclass(frozen=True)
class HeldOutPoint:
    N: float
    D: float
    C: float
    actual: float
    predicted: Estimate
    rel_error: float  # (predicted - actual) / actual
    inside_ci: bool | None  # inside the fitted curve's 95% interval; None without a bootstrap
    run_ci95: tuple[float, float] | None = None  # 95% interval for one run's loss (see run_interval)
    inside_run_ci: bool | None = None


@dataclass(frozen=True)
class HeldOut:
    """Approach 3 refitted without the k largest-compute points, then asked to predict them."""

    k: int
    fit: Approach3Fit
    rows: tuple[HeldOutPoint, ...]

    @property
    def mean_abs_rel_error(self) -> float:
        return float(np.mean([abs(r.rel_error) for r in self.rows]))

    @property
    def coverage(self) -> float | None:
        inside = [r.inside_ci for r in self.rows if r.inside_ci is not None]
        return float(np.mean(inside)) if inside else None

    @property
    def run_coverage(self) -> float | None:
        inside = [r.inside_run_ci for r in self.rows if r.inside_run_ci is not None]
        return float(np.mean(inside)) if inside else None


def run_interval(fit: Approach3Fit, N: float, D: float, seed: int = 0) -> tuple[float, float] | None:
    """95% interval for the loss of one new run at (N, D): the fitted curve's uncertainty (its bootstrap
    laws) plus the scatter of single runs around the curve. Each bootstrap law's loss is multiplied by
    exp(-r), r drawn from the fit's log residuals, centred and scaled by sqrt(n / (n - 5)) for the 5
    fitted parameters (a residual-bootstrap prediction interval, Davison & Hinkley 1997, sec. 6.3.3).
    None without a bootstrap."""
    if fit.bootstrap is None:
        return None
    curve = loss_samples(fit, N, D)[:, 0]  # (R,)
    resid = fit.diagnostics.residuals
    n = resid.size
    modified = (resid - resid.mean()) * np.sqrt(n / max(n - 5, 1))
    draws = np.random.default_rng(seed).choice(modified, size=curve.size)
    lo, hi = np.percentile(curve * np.exp(-draws), [50 * (1 - CI_LEVEL), 50 * (1 + CI_LEVEL)])
    return float(lo), float(hi)


def held_out_validation(points: Points, k: int = 5, *, n_boot: int = 200, seed: int = 0,
                        delta: float = HUBER_DELTA, grid: np.ndarray | None = None) -> HeldOut:
    """Fit on all but the k points of largest C; compare predicted with actual loss at those k, against
    both the fitted curve's interval and the wider interval for one run (run_interval)."""
    if not 0 < k < len(points):
        raise FitInputError(f"held-out validation: k={k} must be between 1 and {len(points) - 1}")
    order = np.argsort(points.C, kind="stable")
    fit = fit_approach3(points.subset(np.sort(order[:-k])), n_boot=n_boot, seed=seed, delta=delta, grid=grid)
    rows = []
    for i in order[-k:][::-1]:
        pred = predict(fit, N=points.N[i], D=points.D[i]).loss
        inside = None if pred.ci95 is None else bool(pred.ci95[0] <= points.L[i] <= pred.ci95[1])
        run_ci = run_interval(fit, points.N[i], points.D[i], seed)
        inside_run = None if run_ci is None else bool(run_ci[0] <= points.L[i] <= run_ci[1])
        rows.append(HeldOutPoint(float(points.N[i]), float(points.D[i]), float(points.C[i]), float(points.L[i]),
                                 pred, (pred.value - points.L[i]) / points.L[i], inside, run_ci, inside_run))
    return HeldOut(k, fit, tuple(rows))


@dataclass(frozen=True)
class FloorComparison:
    """A known entropy floor (e.g. of a synthetic source) beside the fitted irreducible loss E."""

    floor: float
    fitted: Estimate
    difference: float  # fitted E - floor

    @property
    def floor_inside_ci(self) -> bool | None:
        ci = self.fitted.ci95
        return None if ci is None else bool(ci[0] <= self.floor <= ci[1])


def compare_floor(E: Estimate, floor: float) -> FloorComparison:
    check_positive("entropy_floor", [floor], "compare_floor")
    return FloorComparison(float(floor), E, E.value - float(floor))
