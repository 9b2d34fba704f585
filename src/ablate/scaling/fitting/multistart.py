"""Best of many starts (Hoffmann et al. 2022's 4,500-start grid): every start in float32, the best few
polished in float64, and a verdict on whether the result may be used."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ablate.scaling.fitting.optimizer import BatchResult, LseHuber, batched_objective, bfgs


def hoffmann_grid() -> np.ndarray:
    """Hoffmann et al. 2022's 4,500 starts: alpha, beta in {0, 0.5, .., 2}, e in {-1, -0.5, .., 1},
    a, b in {0, 5, .., 25}. Shape (4500, 5) in their layout [e, a, alpha, b, beta] (LseHuber.starts)."""
    half = np.arange(0, 2.01, 0.5)
    axis = {
        "alpha": half,
        "beta": half,
        "e": np.arange(-1, 1.01, 0.5),
        "a": np.arange(0, 26, 5.0),
        "b": np.arange(0, 26, 5.0),
    }
    return np.array([(e, a, al, b, be) for al, be, e, a, b in itertools.product(*axis.values())])


def single_law_grid() -> np.ndarray:
    """Starts for L(x) = E + A/x^alpha: alpha in {0, .1, .25, .5, 1, 1.5, 2} (small values for L(C)),
    e in {-1, .., 1}, a in {0, 5, .., 25}. Shape (210, 3) in Hoffmann's layout [e, a, alpha]."""
    return np.array(
        [
            (e, a, al)
            for al, e, a in itertools.product(
                [0, 0.1, 0.25, 0.5, 1, 1.5, 2], np.arange(-1, 1.01, 0.5), np.arange(0, 26, 5.0)
            )
        ]
    )


@dataclass(frozen=True)
class Diagnostics:
    """How the optimiser ended. `converged` False means the numbers must not be used."""

    converged: bool
    objective: float
    grad_norm: float  # max |d objective / d theta| at the returned theta
    n_iter: int
    n_starts: int
    n_starts_converged: int  # starts whose first (float32) stage met the tolerance
    n_starts_at_best: int  # starts whose first stage ended within SAME_BASIN_RTOL of the best objective
    residuals: np.ndarray  # (n,) log L_hat - log L at the returned theta
    message: str

    @property
    def rms_residual(self) -> float:
        return float(np.sqrt(np.mean(self.residuals**2)))

    def to_dict(self) -> dict:
        return {
            "converged": self.converged,
            "objective": self.objective,
            "grad_norm": self.grad_norm,
            "n_iter": self.n_iter,
            "n_starts": self.n_starts,
            "n_starts_converged": self.n_starts_converged,
            "n_starts_at_best": self.n_starts_at_best,
            "rms_log_residual": self.rms_residual,
            "max_abs_log_residual": float(np.abs(self.residuals).max()),
            "message": self.message,
            "log_residuals": self.residuals.tolist(),
        }


@dataclass(frozen=True)
class Solution:
    theta: np.ndarray  # (k,)
    diagnostics: Diagnostics
    stage1: BatchResult  # every start after the float32 stage


@dataclass(frozen=True)
class Tolerances:
    """Stage 1 (float32, every start) finds the basins; stage 2 (float64, the best few) goes on to
    max |grad| <= polish_gtol, because the valley in (A, B, alpha, beta) is so flat that scipy's default
    stop leaves A off in the third figure. A fit counts as converged when stage 2 met its tolerance or
    ended with max |grad| <= accept_gtol (scipy L-BFGS-B's pgtol)."""

    max_iter: int = 300
    gtol: float = 1e-5
    ftol: float = 1e-7
    polish_max_iter: int = 1000
    polish_gtol: float = 1e-10
    polish_ftol: float = 0.0
    accept_gtol: float = 1e-5
    n_polish: int = 8

    def accepted(self, batch: BatchResult) -> np.ndarray:
        finite = np.isfinite(batch.f) & np.isfinite(batch.theta).all(1)
        return finite & (batch.converged | (np.abs(batch.grad).max(1) <= self.accept_gtol))


SAME_BASIN_RTOL = 1e-3  # stage 1 stops at ftol, so its objectives sit a little above the polished optimum


def same_basin(f: np.ndarray, f_best: float) -> np.ndarray:
    return f <= f_best + SAME_BASIN_RTOL * abs(f_best) + 1e-12


def multistart(loss: LseHuber, starts: np.ndarray, tol: Tolerances, pool: ThreadPoolExecutor) -> Solution:
    """Every start (theta rows, LseHuber.starts) in float32, then the n_polish best in float64; keep the
    best (Hoffmann's 'keep best')."""
    stage1 = bfgs(
        batched_objective(loss, None, np.float32, pool), starts, max_iter=tol.max_iter, gtol=tol.gtol, ftol=tol.ftol
    )
    order = np.argsort(np.where(np.isfinite(stage1.f), stage1.f, np.inf))[: tol.n_polish]
    polished = bfgs(
        batched_objective(loss, None, np.float64, pool),
        stage1.theta[order],
        max_iter=tol.polish_max_iter,
        gtol=tol.polish_gtol,
        ftol=tol.polish_ftol,
    )
    best = int(np.nanargmin(np.where(np.isfinite(polished.f), polished.f, np.nan)))
    theta = polished.theta[best]
    f_best = float(polished.f[best])
    at_best = int(same_basin(stage1.f, stage1.f[order[best]]).sum())
    grad_norm = float(np.abs(polished.grad[best]).max())
    n_iter = int(stage1.n_iter[order[best]] + polished.n_iter[best])
    converged, message = _convergence(loss, theta, bool(tol.accepted(polished)[best]), n_iter, grad_norm, tol)
    diag = Diagnostics(
        converged,
        f_best,
        grad_norm,
        n_iter,
        len(starts),
        int(stage1.converged.sum()),
        at_best,
        loss.residuals(theta),
        message,
    )
    return Solution(theta, diag, stage1)


def _convergence(
    loss: LseHuber,
    theta: np.ndarray,
    accepted: bool,
    n_iter: int,
    grad_norm: float,
    tol: Tolerances,
    min_share: float = 1e-4,
) -> tuple[bool, str]:
    """Converged, or why not. A term A x^-alpha below min_share of the loss at every point is a flat
    plateau where the gradient vanishes (e.g. A = 1, alpha = 0.8 for N ~ 1e9), not an optimum."""
    if not accepted:
        return False, (
            f"DID NOT CONVERGE: best start stopped after {n_iter} iterations "
            f"with max |gradient| {grad_norm:.3g} (tolerance {tol.accept_gtol:g})"
        )
    peak = loss.shares(theta)[1:].max(1)
    if (peak < min_share).any():
        j = int(np.argmin(peak))
        return False, (
            f"DID NOT CONVERGE: stopped on a plateau where term {j + 1} (A x^-alpha) is at most "
            f"{peak[j]:.1g} of the loss at every point"
        )
    return True, "converged"
