"""The compute-optimal frontier N_opt(C), D_opt(C): as power laws k C^a fitted to the optima that
approaches 1 and 2 find, and in closed form from approach 3's law (the Frontier table, built by
predict.frontier, and the bootstrap laws' losses and optima that its bands come from)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ablate.scaling.fitting.bootstrap import Estimate, estimate

if TYPE_CHECKING:
    from ablate.scaling.laws.approach2 import IsoFlopBudget


@dataclass(frozen=True)
class PowerLaw:
    """y = k x^exponent, fitted by least squares on log y (Hoffmann et al. 2022, approaches 1 and 2)."""

    k: Estimate
    exponent: Estimate

    def __call__(self, x):
        return self.k.value * np.asarray(x, float) ** self.exponent.value


def _ols(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares y = c + s x per row of (R, g) arrays over the masked entries -> c (R,), s (R,);
    NaN for a row with fewer than 2 entries (a resample that left no optimum to fit)."""
    m = mask.astype(float)
    n = np.maximum(m.sum(1), 1)
    xm = (m * x).sum(1) / n
    ym = (m * np.where(mask, y, 0)).sum(1) / n
    dx = np.where(mask, x - xm[:, None], 0)
    var = (dx * dx).sum(1)
    slope = np.where(var > 0, (dx * np.where(mask, y - ym[:, None], 0)).sum(1) / np.where(var > 0, var, 1), np.nan)
    return ym - slope * xm, slope


def fit_power_law(C: np.ndarray, Y: np.ndarray, C_boot=None, Y_boot=None, mask_boot=None) -> PowerLaw:
    """Y = k C^exponent by least squares on logs (C, Y (g,)); bootstrap rows (R, g) give the intervals."""
    c, s = _ols(np.log(C)[None], np.log(Y)[None], np.ones((1, len(C)), bool))
    if C_boot is None:
        return PowerLaw(Estimate(float(np.exp(c[0]))), Estimate(float(s[0])))
    cb, sb = _ols(np.log(C_boot), np.log(np.where(mask_boot, Y_boot, 1.0)), mask_boot)
    return PowerLaw(estimate(float(np.exp(c[0])), np.exp(cb)), estimate(float(s[0]), sb))


@dataclass(frozen=True)
class FrontierFit:
    """N_opt(C) = k C^a and D_opt(C) = k' C^b from per-compute optima (Hoffmann et al. 2022, approaches 1, 2)."""

    method: str  # 'approach1' or 'approach2'
    n_opt: PowerLaw
    d_opt: PowerLaw
    C: np.ndarray  # (g,) compute values of the optima
    N: np.ndarray  # (g,) N_opt found at each
    D: np.ndarray  # (g,)
    L: np.ndarray  # (g,) the loss there
    n_boot: int
    notes: tuple[str, ...] = ()
    budgets: tuple[IsoFlopBudget, ...] = ()  # approach 2 only


@dataclass(frozen=True)
class Frontier:
    """Compute-optimal allocation from approach 3 on a grid of C (predict.frontier). Arrays (g,); the
    bands are 95% intervals (N, D: bootstrap; loss: calibrated, calibration.py), NaN without them;
    levels (g,) the verdict at each C (verdict.py)."""

    C: np.ndarray
    N_opt: np.ndarray
    D_opt: np.ndarray
    loss: np.ndarray
    N_lo: np.ndarray
    N_hi: np.ndarray
    D_lo: np.ndarray
    D_hi: np.ndarray
    loss_lo: np.ndarray
    loss_hi: np.ndarray
    levels: tuple[str, ...] = ()

    @property
    def tokens_per_param(self) -> np.ndarray:
        return self.D_opt / self.N_opt
