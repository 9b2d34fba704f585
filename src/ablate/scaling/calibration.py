"""Intervals that cover: a prediction's 95% interval accounts for the law being wrong, not only for
resampling the points.

The bootstrap (bootstrap.py) says how far the fitted curve moves when the points are resampled; it
does not say how far the law's form is from the truth, and that error grows the further a prediction
lies past the data. So a prediction's interval for the log loss of one new run combines, in quadrature,

    curve      the bootstrap's percentile interval of log L_hat at the target
    run        one run's scatter about the curve: run_sigma, the fit's RMS log residual corrected for
               the parameters fitted (sqrt(n / (n - p)))
    law        kappa * d: d decades of compute past the largest fitted run, kappa calibrated by
               leaving out the largest-compute runs

kappa comes from cuts inside the data: for each cut (CUT_FRACTIONS of the runs' log-C span) approach 3
is refitted on the runs below it and predicts those above; the least-squares drift of the log error
per decade past the cut, e = s * d, measures how fast this law's form goes wrong on these data. A wrong
exponent makes exactly such an error, linear in log C, which is why the term grows linearly with d.
kappa is the RMS of the K drifts, widened by t_{0.975, K} / z_{0.975}: with the spread of a new drift
estimated from K of them, Student's t and not the normal gives its 95% range. `reach` is the farthest
distance at which a held-out run was predicted: past it the term is extrapolated, and checks.py says so.

How well this covers is measured, not assumed: backtest.py fits below several cut points and counts
how often the interval holds the runs above (docs/fitting.md has the table).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ablate.scaling.points import FitInputError, Points

Z95 = 1.959963984540054  # the normal's 97.5% quantile
CUT_FRACTIONS = (0.4, 0.5, 0.6, 0.7, 0.8)

# Coarse starts for the refits below a cut, around Hoffmann's grid: 3 x 3 x 3 x 4 x 4 = 432, plus the
# full data's optimum (warm_grid); the refits need not search the whole grid again.
_COARSE = np.array(
    [
        (e, a, al, b, be)
        for al, be, e, a, b in itertools.product(
            (0.25, 0.5, 1.0), (0.25, 0.5, 1.0), (-1.0, 0.0, 0.5), (0, 5, 10, 20), (0, 5, 10, 20)
        )
    ],
    float,
)


def warm_grid(E: float, A: float, B: float, alpha: float, beta: float) -> np.ndarray:
    """Starts in Hoffmann's layout [e, a, alpha, b, beta]: the given law first, then a coarse grid."""
    return np.vstack([[math.log(max(E, 1e-12)), math.log(A), alpha, math.log(B), beta], _COARSE])


@dataclass(frozen=True)
class CalibrationCut:
    """One refit below a cut: fitted on runs with C <= C_cut, predicting the runs above it."""

    C_cut: float
    n_fit: int
    n_held: int
    reach: float  # decades past the largest fitted run of the farthest held-out run
    drift: float | None  # log error (actual - predicted) per decade past the cut; None: not refitted
    note: str = ""  # why it was not refitted

    def to_dict(self) -> dict:
        return {
            "C_cut": self.C_cut,
            "n_fit": self.n_fit,
            "n_held": self.n_held,
            "reach_decades": self.reach,
            "drift_per_decade": self.drift,
            "note": self.note,
        }


@dataclass(frozen=True)
class Calibration:
    """The terms a prediction's interval adds to the bootstrap's (module docstring)."""

    run_sigma: float  # sd of one run's log loss about the curve
    kappa: float | None  # sd of the law's log error per decade of compute past the data; None: no cut fitted
    reach: float | None  # farthest calibrated distance, decades of compute; None: no cut fitted
    cuts: tuple[CalibrationCut, ...] = ()

    @property
    def calibrated(self) -> bool:
        return self.kappa is not None

    def extra_sd(self, decades) -> np.ndarray:
        """sd of log loss beyond the curve's: sqrt(run_sigma^2 + (kappa d)^2), d = decades past the data."""
        d = np.maximum(np.asarray(decades, float), 0.0)
        kappa = self.kappa or 0.0
        return np.sqrt(self.run_sigma**2 + (kappa * d) ** 2)

    def to_dict(self) -> dict:
        return {
            "run_sigma": self.run_sigma,
            "kappa_per_decade": self.kappa,
            "reach_decades": self.reach,
            "method": "interval = curve (bootstrap) + run (run_sigma) + law (kappa x decades past the data), "
            "in quadrature on log L; kappa = RMS over the K cuts of the log error's drift per decade, "
            "times t(0.975, K) / z(0.975)",
            "cuts": [c.to_dict() for c in self.cuts],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        return cls(float(d["run_sigma"]), _opt(d.get("kappa_per_decade")), _opt(d.get("reach_decades")))


def _opt(x) -> float | None:
    return None if x is None else float(x)


def run_sigma(residuals: np.ndarray, n_params: int) -> float:
    """RMS log residual with the degrees of freedom the fit used: sqrt(sum r^2 / (n - p))."""
    n = residuals.size
    return float(np.sqrt(np.sum(residuals**2) / max(n - n_params, 1)))


def calibrate(
    points: Points,
    refit: Callable[[Points], object],
    sigma: float,
    fractions: tuple[float, ...] = CUT_FRACTIONS,
) -> Calibration:
    """kappa and reach from refits below cuts of the runs' log-C span. refit(points) returns a fit
    with .converged and .law.loss(N, D), or raises FitInputError when the runs below a cut cannot
    support one (that cut is skipped, with the reason)."""
    logC = np.log10(points.C)
    lo, hi = float(logC.min()), float(logC.max())
    cuts, seen = [], set()
    for f in fractions:
        below = logC <= lo + f * (hi - lo) + 1e-12
        n_fit = int(below.sum())
        if n_fit in seen or n_fit == len(points):
            continue
        seen.add(n_fit)
        held = np.flatnonzero(~below)
        C_cut = float(points.C[below].max()) if n_fit else float(10**lo)
        d = logC[held] - (float(logC[below].max()) if n_fit else lo)
        reach = float(d.max())
        try:
            fit = refit(points.subset(np.flatnonzero(below)))
        except FitInputError as exc:
            cuts.append(CalibrationCut(C_cut, n_fit, held.size, reach, None, str(exc)))
            continue
        if not fit.converged:
            cuts.append(CalibrationCut(C_cut, n_fit, held.size, reach, None, "the refit did not converge"))
            continue
        e = np.log(points.L[held]) - np.log(fit.law.loss(points.N[held], points.D[held]))
        cuts.append(CalibrationCut(C_cut, n_fit, held.size, reach, float(np.sum(e * d) / np.sum(d * d))))
    drifts = np.array([c.drift for c in cuts if c.drift is not None])
    if drifts.size == 0:
        return Calibration(sigma, None, None, tuple(cuts))
    reach = max(c.reach for c in cuts if c.drift is not None)
    kappa = float(np.sqrt(np.mean(drifts**2))) * small_sample_factor(drifts.size)
    return Calibration(sigma, kappa, reach, tuple(cuts))


def small_sample_factor(k: int) -> float:
    """t_{0.975, k} / z_{0.975}: a new draw's 95% range when its sd is estimated from k draws (mean 0)."""
    from scipy.special import stdtrit  # t's inverse CDF, without importing scipy.stats (about 1 s)

    return float(stdtrit(k, 0.975) / Z95)


def log_interval(
    center: np.ndarray, samples: np.ndarray | None, decades: np.ndarray, cal: Calibration
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of log L: center (g,), bootstrap samples of log L_hat (R, g) or None, decades (g,)
    past the data. Each side's half-width is the bootstrap's on that side and Z95 * extra_sd, added in
    quadrature. Returns (lo, hi), each (g,)."""
    center = np.asarray(center, float)
    low = high = np.zeros_like(center)
    if samples is not None and samples.shape[0]:
        q_lo, q_hi = np.nanpercentile(samples, [2.5, 97.5], axis=0)
        low, high = np.maximum(center - q_lo, 0.0), np.maximum(q_hi - center, 0.0)
    extra = Z95 * cal.extra_sd(decades)
    return center - np.hypot(low, extra), center + np.hypot(high, extra)
