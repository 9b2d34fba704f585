"""Paired compute multipliers: arms trained on the same cells, seeds and data order, compared run against run.

Two arms that share a run's size, tokens D, data config and seed share most of its noise (the
initialisation, the batches, the evaluation set), so the difference of their losses is far more
precise than either arm's law: a paired design (Student 1908; Efron & Tibshirani 1993, sec. 6.9).
A run's size is its parameter count N, or, where the runs name it (a model preset), that name: an
architecture arm changes N (rotary positions drop the position table, one key/value head shrinks
qkv) without changing which model of the ladder the run is. For each such pair of runs i, the
baseline's at compute C_i and the arm's at C_a,i (equal unless the arm changes the FLOPs per token),

    d_i = log L_a,i - log L_b,i                                  the arm's log-loss offset
    log m_i = log C_b(L_b(C_i) e^{d_i}) - log C_a,i              the compute the baseline needs
            = (1 / alpha_b) log[(L_b(C_i) - E_b) / (L_b(C_i) e^{d_i} - E_b)] - log(C_a,i / C_i)
            ~ d_i / s_b(C_i) - log(C_a,i / C_i),   s_b(C) = d log L_b / d log C = -alpha_b (L_b(C) - E_b) / L_b(C)

with the baseline's law L_b(C) = E_b + A_b / C^alpha_b (multiplier.py): the offset converted to
compute through the baseline's local slope d log C / d log L = 1 / s_b (the last line, first order
in d_i; the exact form above it is what is computed, so that large offsets are not biased).

The pairs of one model instance (one size, data config and seed: the budgets of a ladder share its
initialisation and data order, and under WSD its trunk) are not independent; instances are. So each
instance u gives one mean y_u of its log m_i and, where it has two computes or more, one slope b_u
of log m_i on log C_i; over the n instances

    log m (headline) = mean_u y_u,        95% interval  +- t_{0.975, n-1} sd(y_u) / sqrt(n)
    k (m ~ C^k)      = mean_u b_u,        95% interval  +- t_{0.975, n-1} sd(b_u) / sqrt(n)
                       (one compute per instance: the least-squares slope of y_u on their mean
                        log C, its interval with n - 2 degrees of freedom)
    log m(C)         = mean_u y_u + k (log C - log C_c),   sd^2 = sd_y^2 / n + (log C - log C_c)^2 sd_k^2

C_c the geometric mean of the instances' compute: Student's t intervals, which hold their 95% with
as few as 3 instances, where a percentile bootstrap of 3 units cannot (its interval is at most the
units' range). The baseline's law is uncertain too, and its error is common to every instance (a
slope too steep at large C tilts every instance's line alike), so the same estimates are made with
each of the law's bootstrap samples r, and their spread is added to the pairs' in quadrature:

    half-width = t sqrt(se_pairs^2 + sd_r^2),   sd_r = (q_97.5 - q_2.5) / (2 z_0.975) over the samples
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.scaling.fitting.bootstrap import CI_LEVEL, Estimate
from ablate.scaling.points import Points

MIN_UNITS = 3  # independent model instances: with 2, t's one degree of freedom leaves x12.7 its sd


@dataclass(frozen=True)
class PairedRuns:
    """The runs two arms share: arrays (n,) over pairs of runs, `unit` the model instance of each
    (its N, data config and seed: the pairs resampled together)."""

    C: np.ndarray
    d: np.ndarray  # log L_arm - log L_baseline
    unit: np.ndarray  # int, 0..n_units-1
    # log(C_arm / C_baseline) of each pair: 0 where the arm trains at the baseline's FLOPs per token
    log_compute_ratio: np.ndarray | None = None

    @property
    def n_units(self) -> int:
        return int(self.unit.max()) + 1 if self.unit.size else 0

    def __len__(self) -> int:
        return len(self.d)


@dataclass(frozen=True)
class PairedFit:
    """The instances' mean log multiplier and trend, with Student's t intervals (module docstring)."""

    runs: PairedRuns
    mean: float  # mean_u y_u
    se_mean: float  # sd(y_u) / sqrt(n)
    k: float
    se_k: float
    dof_k: int
    dof_mean: int
    C_c: float
    law_sd: np.ndarray  # (3,) the law samples' sd of (mean, k, mean + k) in log m: the line's spread
    offset: Estimate  # mean_u of the instances' mean log-loss offset d, its t interval
    scatter: float  # sd of the instances' mean log m, each moved to C_c along the trend

    @property
    def n_units(self) -> int:
        return self.runs.n_units

    def value(self, C) -> np.ndarray:
        return np.exp(self.mean + self.k * np.log(np.asarray(C, float) / self.C_c))

    def band(self, C) -> tuple[np.ndarray, np.ndarray]:
        """The 95% interval of m at each C."""
        x = np.log(np.atleast_1d(np.asarray(C, float)) / self.C_c)
        centre = self.mean + self.k * x
        half = _t(min(self.dof_mean, self.dof_k)) * np.sqrt(self.se_mean**2 + (x * self.se_k) ** 2 + self._law_var(x))
        return np.exp(centre - half), np.exp(centre + half)

    def _law_var(self, x: np.ndarray) -> np.ndarray:
        """The law's variance of mean + k x, from the sds of mean, k and mean + k (x = 0, inf, 1)."""
        s_m, s_k, s_1 = self.law_sd
        cov = 0.5 * (s_1**2 - s_m**2 - s_k**2)
        return s_m**2 + 2 * x * cov + (x * s_k) ** 2

    def at(self, C: float) -> Estimate:
        lo, hi = self.band([C])
        return Estimate(float(self.value([C])[0]), (float(lo[0]), float(hi[0])))

    def headline(self) -> Estimate:
        half = _t(self.dof_mean) * math.hypot(self.se_mean, self.law_sd[0])
        return Estimate(math.exp(self.mean), (math.exp(self.mean - half), math.exp(self.mean + half)))

    def exponent(self) -> Estimate:
        half = _t(self.dof_k) * math.hypot(self.se_k, self.law_sd[1])
        return Estimate(self.k, (self.k - half, self.k + half))


def _t(dof: int) -> float:
    return float(stats.t.ppf(0.5 * (1 + CI_LEVEL), dof)) if dof >= 1 else math.inf


def run_keys(
    points: Points, config: Sequence | None = None, seeds: Sequence | None = None, sizes: Sequence | None = None
) -> list[tuple]:
    """Each run's pairing key (size, D, config, seed): the size its model's name where `sizes` gives
    one (a preset such as micro), else N to 6 significant digits; D to 6 significant digits; `config`
    what else sets the run (its data config, other swept keys; hashable, None: nothing); `seeds` its
    seed (None: not recorded). The key without D is the run's model instance."""
    n = len(points)
    config = [None] * n if config is None else list(config)
    seeds = [None] * n if seeds is None else list(seeds)
    sizes = [None] * n if sizes is None else list(sizes)
    return [
        (size if size else float(f"{N:.6g}"), float(f"{D:.6g}"), c, s)
        for N, D, c, s, size in zip(points.N, points.D, config, seeds, sizes, strict=True)
    ]


def pair_runs(arm: Points, arm_keys: list[tuple], base: Points, base_keys: list[tuple]) -> PairedRuns:
    """The pairs of runs with equal keys (run_keys). Runs of one arm with the same key (reruns of one
    config and seed) are one run: their mean log loss."""
    a, b = _mean_by_key(arm, arm_keys), _mean_by_key(base, base_keys)
    shared = sorted(set(a) & set(b), key=repr)
    units: dict = {}
    C, d, unit, ratio = [], [], [], []
    for key in shared:
        unit.append(units.setdefault((key[0], *key[2:]), len(units)))  # the key without D
        C.append(b[key][0])
        d.append(a[key][1] - b[key][1])
        ratio.append(math.log(a[key][0] / b[key][0]))
    return PairedRuns(np.array(C, float), np.array(d, float), np.array(unit, int), np.array(ratio, float))


def _mean_by_key(points: Points, keys: list[tuple]) -> dict:
    """{key: (compute, mean log loss)} over the runs with that key."""
    groups: dict = {}
    for C, L, key in zip(points.C, points.L, keys, strict=True):
        groups.setdefault(key, []).append((float(C), math.log(float(L))))
    return {k: (v[0][0], float(np.mean([x[1] for x in v]))) for k, v in groups.items()}


def log_multipliers(runs: PairedRuns, theta: np.ndarray) -> np.ndarray:
    """log m_i for law parameters theta (3,) or (R, 3) of the baseline: (n,) or (R, n); inf where the
    arm's loss, carried to the baseline's law, lies at or below the baseline's E (no compute matches)."""
    t = np.atleast_2d(theta)
    E, A, alpha = (t[:, j : j + 1] for j in range(3))
    C = runs.C[None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        L_b = E + A * C**-alpha
        gap = L_b * np.exp(runs.d[None]) - E
        out = np.where(gap > 0, (np.log(L_b - E) - np.log(gap)) / alpha, np.inf)
    if runs.log_compute_ratio is not None:
        out = out - runs.log_compute_ratio[None]
    return out[0] if np.ndim(theta) == 1 else out


def fit_paired(runs: PairedRuns, theta: np.ndarray, law_samples: np.ndarray) -> PairedFit | None:
    """The paired fit over at least 2 instances, or None where some pair's loss no baseline compute
    matches (log m_i infinite)."""
    y = log_multipliers(runs, theta)
    if not np.all(np.isfinite(y)) or runs.n_units < 2:
        return None
    n = runs.n_units
    x_u = _unit_means(np.log(runs.C), runs.unit)
    mean, k, se_mean, se_k, within = _estimates(runs, y)
    dof_k = dof_mean = n - 1 if within else n - 2
    offset = mean_interval(_unit_means(runs.d, runs.unit))
    law_sd = _law_sd(runs, law_samples)
    scatter = se_mean * math.sqrt(n)
    C_c = float(np.exp(x_u.mean()))
    return PairedFit(runs, mean, se_mean, k, se_k, dof_k, dof_mean, C_c, law_sd, offset, scatter)


def mean_interval(values: Sequence[float] | np.ndarray) -> Estimate:
    """The mean of independent paired differences (one per seed or model instance) with Student's t
    95% interval, mean +- t_{0.975, n-1} sd / sqrt(n); no interval with fewer than 2 values."""
    v = np.asarray(values, float)
    mean = float(v.mean())
    if len(v) < 2:
        return Estimate(mean)
    half = _t(len(v) - 1) * _se(v)
    return Estimate(mean, (mean - half, mean + half))


def _estimates(runs: PairedRuns, y: np.ndarray) -> tuple[float, float, float, float, bool]:
    """(mean, k, se of the mean, se of k, whether k is within instances) from the pairs' log m."""
    n = runs.n_units
    x_u, y_u = _unit_means(np.log(runs.C), runs.unit), _unit_means(y, runs.unit)
    slopes = _unit_slopes(np.log(runs.C), y, runs.unit)
    if np.all(np.isfinite(slopes)):
        # k within instances; each instance's mean moved to C_c along it, so that instances measured
        # at different computes differ only by their own offsets
        k, se_k = float(slopes.mean()), _se(slopes)
        level = y_u - k * (x_u - x_u.mean())
        return float(y_u.mean()), k, _se(level), se_k, True
    k, se_k = _ols_slope(x_u, y_u)  # one compute per instance: the line across instances
    level = y_u - k * (x_u - x_u.mean())
    se_mean = float(np.sqrt((level - level.mean()) @ (level - level.mean()) / max(n - 2, 1) / n))
    return float(y_u.mean()), k, se_mean, se_k, False


def _law_sd(runs: PairedRuns, law_samples: np.ndarray) -> np.ndarray:
    """The robust sd over the law's samples of (mean, k, mean + k): (q_97.5 - q_2.5) / (2 z_0.975)."""
    rows = []
    for theta in law_samples:
        y = log_multipliers(runs, theta)
        if np.all(np.isfinite(y)):
            mean, k = _estimates(runs, y)[:2]
            rows.append((mean, k, mean + k))
    if len(rows) < 2:
        return np.zeros(3)
    lo, hi = np.percentile(np.array(rows), [50 * (1 - CI_LEVEL), 50 * (1 + CI_LEVEL)], axis=0)
    return (hi - lo) / (2 * stats.norm.ppf(0.5 * (1 + CI_LEVEL)))


def _se(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def _unit_means(values: np.ndarray, unit: np.ndarray) -> np.ndarray:
    return np.bincount(unit, weights=values) / np.bincount(unit)


def _unit_slopes(x: np.ndarray, y: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Each instance's least-squares slope of y on x; nan where its x do not vary."""
    out = np.full(int(unit.max()) + 1, np.nan)
    for u in range(len(out)):
        xs, ys = x[unit == u], y[unit == u]
        sxx = float(((xs - xs.mean()) ** 2).sum())
        if sxx > 1e-12:
            out[u] = float(((xs - xs.mean()) * (ys - ys.mean())).sum() / sxx)
    return out


def _ols_slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Slope and its standard error (n - 2 degrees of freedom); inf error with 2 points or one x."""
    sxx = float(((x - x.mean()) ** 2).sum())
    if len(x) < 3 or sxx <= 1e-12:
        return 0.0, math.inf
    k = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - k * (x - x.mean())
    return k, float(math.sqrt(resid @ resid / (len(x) - 2) / sxx))
