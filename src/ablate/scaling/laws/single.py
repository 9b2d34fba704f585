"""Single-variable laws L(x) = E + A/x^alpha (Kaplan et al. 2020's power laws with an irreducible
term) for x = N, non-embedding N, D, or C over the envelope of best loss per compute."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ablate.scaling.fitting.bootstrap import DEFAULT_BOOT, Bootstrap, Estimate, estimate, fit_lse
from ablate.scaling.fitting.multistart import Diagnostics, Tolerances, single_law_grid
from ablate.scaling.fitting.optimizer import HUBER_DELTA, LseHuber
from ablate.scaling.laws.chinchilla import e_bounds
from ablate.scaling.points import Points, require_count, require_distinct


@dataclass(frozen=True)
class SaturatingPowerLaw:
    """L(x) = E + A / x^alpha: Kaplan et al. 2020's power laws with an irreducible term E."""

    E: float
    A: float
    alpha: float

    NAMES: ClassVar[tuple[str, ...]] = ("E", "A", "alpha")

    def loss(self, x):
        return self.E + self.A / np.asarray(x, float) ** self.alpha


@dataclass(frozen=True)
class SingleLawFit:
    """L(x) = E + A/x^alpha fitted on the points that `variable` selects (see fit_single_law)."""

    variable: str  # 'N', 'N_non_embedding', 'D' or 'C'
    law: SaturatingPowerLaw
    x: np.ndarray  # (m,) the points the law was fitted to
    L: np.ndarray  # (m,)
    diagnostics: Diagnostics
    bootstrap: Bootstrap | None = None
    floor: float = 0.0  # E's lower bound: the data's known floor, else 0
    upper: float = float("inf")  # E's upper bound: the lowest loss among the points used

    @property
    def params(self) -> dict[str, Estimate]:
        samples = None if self.bootstrap is None else self.bootstrap.usable()
        return {
            n: estimate(v, None if samples is None else samples[:, j])
            for j, (n, v) in enumerate(
                zip(SaturatingPowerLaw.NAMES, (self.law.E, self.law.A, self.law.alpha), strict=False)
            )
        }


def best_per_value(x: np.ndarray, L: np.ndarray, rtol: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Lowest loss among points whose x agree within rtol (e.g. the best run of each model size)."""
    order = np.argsort(x)
    xs, Ls = x[order], L[order]
    group = np.concatenate([[0], np.cumsum(np.diff(np.log(xs)) > np.log1p(rtol))])
    keep = [np.flatnonzero(group == g)[np.argmin(Ls[group == g])] for g in np.unique(group)]
    return xs[keep], Ls[keep]


def compute_envelope(C: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Indices, by increasing C, of points whose loss is below every point of lower compute:
    the best loss reachable with a given compute (Kaplan et al. 2020, fig. 1 left)."""
    order = np.argsort(C, kind="stable")
    running = np.minimum.accumulate(L[order])
    first = np.concatenate([[True], running[1:] < running[:-1]])
    return order[first]


def fit_single_law(
    points: Points,
    variable: str = "N",
    *,
    floor: float | None = None,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    delta: float = HUBER_DELTA,
    tol: Tolerances | None = None,
) -> SingleLawFit:
    """Kaplan-style L(x) = E + A/x^alpha with Hoffmann's robust loss (Huber on log L), from the
    single_law_grid starts. x = N or D: the best loss per distinct value (closest to converged);
    x = C: the compute envelope (best loss reached with at most that compute). E lies between `floor`
    (the data's known lowest loss; 0 when None) and the lowest loss used; alpha > 0."""
    tol = tol or Tolerances()
    law_name = f"L({variable}) power law"
    x_all = points.variable(variable)
    if variable == "C":
        idx = compute_envelope(x_all, points.L)
        x, L = x_all[idx], points.L[idx]
    else:
        x, L = best_per_value(x_all, points.L)
    require_distinct(x_all, 4, variable, law_name)
    require_count(len(x), 4, law_name + " (after taking the best loss per value)")
    F, U = e_bounds(Points(x, np.ones_like(x), L), floor, law_name)
    loss = LseHuber(np.log(x)[None], np.log(L), delta, F, U)
    theta, diagnostics, boot = fit_lse(loss, single_law_grid(), n_boot, seed, 8, tol)
    return SingleLawFit(variable, SaturatingPowerLaw(*loss.natural(theta)), x, L, diagnostics, boot, F, U)
