"""Uncertainty by the bootstrap: an Estimate is a value with its 95% percentile interval; fit_lse is
the whole procedure of approach 3 and the single-variable laws (best of many starts, then refits on
resamples of the points, each warm-started near the full-data optimum)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ablate.scaling.fitting.multistart import Diagnostics, Solution, Tolerances, multistart, same_basin
from ablate.scaling.fitting.optimizer import LseHuber, batched_objective, bfgs, n_threads

DEFAULT_BOOT = 1000
CI_LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap percentile interval (None without a bootstrap)."""

    value: float
    ci95: tuple[float, float] | None = None

    def to_dict(self) -> dict:
        return {"value": self.value, "ci95": None if self.ci95 is None else list(self.ci95)}


def estimate(value: float, samples: np.ndarray | None) -> Estimate:
    if samples is None:
        return Estimate(float(value))
    ok = samples[np.isfinite(samples)]
    if ok.size == 0:
        return Estimate(float(value))
    lo, hi = np.percentile(ok, [50 * (1 - CI_LEVEL), 50 * (1 + CI_LEVEL)])
    return Estimate(float(value), (float(lo), float(hi)))


def percentile_band(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Percentile band over axis 0 of (R, g) samples; NaN without samples."""
    if samples.shape[0] == 0:
        nan = np.full(samples.shape[1:], np.nan)
        return nan, nan
    lo, hi = np.nanpercentile(samples, [50 * (1 - CI_LEVEL), 50 * (1 + CI_LEVEL)], axis=0)
    return lo, hi


@dataclass(frozen=True)
class Bootstrap:
    """Refits on n resamples (with replacement) of the points. samples (n, k) in natural parameters."""

    samples: np.ndarray
    converged: np.ndarray  # (n,) bool
    seed: int
    n_grid_starts: int

    @property
    def n_resamples(self) -> int:
        return len(self.samples)

    def usable(self) -> np.ndarray:
        return self.samples[self.converged]

    def to_dict(self) -> dict:
        return {
            "n_resamples": self.n_resamples,
            "n_converged": int(self.converged.sum()),
            "seed": self.seed,
            "n_grid_starts": self.n_grid_starts,
            "interval": "percentile",
            "level": CI_LEVEL,
        }


def resample_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) counts of each point in each resample drawn with replacement; resample j of a
    bootstrap with this seed is points.subset(np.repeat(np.arange(n), counts[j]))."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    return np.stack([np.bincount(row, minlength=n) for row in idx])


def _bootstrap_thetas(
    loss: LseHuber,
    solution: Solution,
    counts: np.ndarray,
    grid: np.ndarray,
    n_grid_starts: int,
    seed: int,
    tol: Tolerances,
    pool: ThreadPoolExecutor,
):
    """Each resample starts from the full-data optimum plus n_grid_starts grid starts that reached the
    full-data optimum (seeded choice); stage 1 in float32, then its best start polished in float64.
    counts (R, n) from resample_counts. Returns thetas (R, k) and converged (R,)."""
    R = len(counts)
    starts = _warm_starts(solution, grid, n_grid_starts, seed)  # (K, k)
    K = len(starts)
    owner = np.repeat(np.arange(R), K)
    stage1 = bfgs(
        batched_objective(loss, counts.astype(np.float32)[owner], np.float32, pool),
        np.tile(starts, (R, 1)),
        max_iter=tol.max_iter,
        gtol=tol.gtol,
        ftol=tol.ftol,
    )
    f = np.where(np.isfinite(stage1.f), stage1.f, np.inf).reshape(R, K)
    best = np.arange(R) * K + f.argmin(1)
    polished = bfgs(
        batched_objective(loss, counts.astype(np.float64), np.float64, pool),
        stage1.theta[best],
        max_iter=tol.polish_max_iter,
        gtol=tol.polish_gtol,
        ftol=tol.polish_ftol,
    )
    return polished.theta, tol.accepted(polished)


def _warm_starts(solution: Solution, grid: np.ndarray, n_grid_starts: int, seed: int) -> np.ndarray:
    f = solution.stage1.f
    good = np.flatnonzero(same_basin(f, solution.diagnostics.objective))
    pool_idx = good if len(good) >= n_grid_starts else np.arange(len(grid))
    chosen = np.random.default_rng(seed).choice(pool_idx, size=min(n_grid_starts, len(pool_idx)), replace=False)
    return np.vstack([solution.theta[None], grid[np.sort(chosen)]])


def fit_lse(
    loss: LseHuber, grid: np.ndarray, n_boot: int, seed: int, boot_grid_starts: int, tol: Tolerances
) -> tuple[np.ndarray, Diagnostics, Bootstrap | None]:
    """Multi-start fit from `grid` (Hoffmann's layout, LseHuber.starts), then the bootstrap (natural
    parameters) when n_boot > 0. Returns theta, not natural parameters. Starts that wander off to
    overflow are expected (dropped as non-finite): numpy's warnings about them are not shown."""
    starts = loss.starts(grid)
    with ThreadPoolExecutor(n_threads()) as pool, np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        solution = multistart(loss, starts, tol, pool)
        if n_boot <= 0:
            return solution.theta, solution.diagnostics, None
        thetas, ok = _bootstrap_thetas(
            loss, solution, resample_counts(loss.log_loss.size, n_boot, seed), starts, boot_grid_starts, seed, tol, pool
        )
    return solution.theta, solution.diagnostics, Bootstrap(loss.natural(thetas), ok, seed, boot_grid_starts)
