"""Chinchilla approach 3: L(N, D) = E + A/N^alpha + B/D^beta fitted as Hoffmann et al. 2022 did
(sec. 3.3 and appendix D.2): Huber loss on log L, from their 4,500-start grid, best start kept.

Known bounds are part of the fit, not a check afterwards (optimizer.py): E lies between the data's
floor (its entropy rate when known, else 0) and the lowest loss any run reached, and alpha, beta > 0.
Variants that published fits use: alpha tied to beta (Muennighoff et al. 2023 fit one exponent), and N
as total or non-embedding parameters (points.py, Points.with_params)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ablate.scaling.bootstrap import DEFAULT_BOOT, Bootstrap, Estimate, estimate, fit_lse
from ablate.scaling.multistart import Diagnostics, Tolerances, hoffmann_grid
from ablate.scaling.optimizer import HUBER_DELTA, LseHuber
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN, FitInputError, Points, require_count, require_distinct


@dataclass(frozen=True)
class ChinchillaLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta  (Hoffmann et al. 2022, eq. 2)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    NAMES: ClassVar[tuple[str, ...]] = ("E", "A", "B", "alpha", "beta")

    def loss(self, N, D):
        return self.E + self.A / np.asarray(N, float) ** self.alpha + self.B / np.asarray(D, float) ** self.beta

    @property
    def a(self) -> float:
        """N_opt ∝ C^a with a = beta / (alpha + beta) (Hoffmann et al. 2022, eq. 4)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """D_opt ∝ C^b with b = alpha / (alpha + beta)."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def G(self) -> float:
        """G = (alpha A / (beta B))^(1/(alpha+beta)), so that N_opt = G (C/6)^a."""
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    def n_opt(self, C):
        """Compute-optimal parameters under C = 6ND: argmin_N L(N, C/(6N))."""
        return self.G * (np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN) ** self.a

    def d_opt(self, C):
        return np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN / self.n_opt(C)

    def as_array(self) -> np.ndarray:
        return np.array([self.E, self.A, self.B, self.alpha, self.beta])


@dataclass(frozen=True)
class Approach3Fit:
    """Chinchilla approach 3 (Hoffmann et al. 2022, sec. 3.3 and appendix D.2)."""

    law: ChinchillaLaw
    diagnostics: Diagnostics
    points: Points
    delta: float
    bootstrap: Bootstrap | None = None  # samples (R, 5) in NAMES order, beta = alpha when tied
    floor: float = 0.0  # E's lower bound: the data's known floor, else 0
    upper: float = float("inf")  # E's upper bound: the lowest loss in the points
    tied: bool = False  # alpha = beta was fitted (one exponent)

    @property
    def converged(self) -> bool:
        return self.diagnostics.converged

    def _samples(self, j: int) -> np.ndarray | None:
        return None if self.bootstrap is None else self.bootstrap.usable()[:, j]

    @property
    def params(self) -> dict[str, Estimate]:
        return {
            name: estimate(v, self._samples(j))
            for j, (name, v) in enumerate(zip(ChinchillaLaw.NAMES, self.law.as_array(), strict=False))
        }

    @property
    def exponents(self) -> dict[str, Estimate]:
        """a = beta/(alpha+beta) (N_opt ∝ C^a), b = alpha/(alpha+beta) (D_opt ∝ C^b)."""
        if self.bootstrap is None:
            return {"a": Estimate(self.law.a), "b": Estimate(self.law.b)}
        al, be = self._samples(3), self._samples(4)
        return {"a": estimate(self.law.a, be / (al + be)), "b": estimate(self.law.b, al / (al + be))}


def e_bounds(points: Points, floor: float | None, law_name: str) -> tuple[float, float]:
    """(F, U): E is fitted above the known floor F (0 when unknown) and below the lowest loss U."""
    upper = float(points.L.min())
    if floor is None:
        return 0.0, upper
    if not floor < upper:
        raise FitInputError(
            f"{law_name}: the entropy floor {floor:.4g} is not below the lowest loss in the data ({upper:.4g}); "
            "no run can reach below its data's floor (valid: entropy_floor below every loss, or unset)"
        )
    return float(floor), upper


def require_approach3(points: Points) -> None:
    """What approach 3 needs of its points (FitInputError otherwise): 6 runs, 3 distinct N and D."""
    law_name = "Chinchilla approach 3"
    require_count(len(points), 6, law_name)
    require_distinct(points.N, 3, "N (params)", law_name)
    require_distinct(points.D, 3, "D (tokens)", law_name)


def fit_approach3(
    points: Points,
    *,
    floor: float | None = None,
    tie_exponents: bool = False,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    delta: float = HUBER_DELTA,
    grid: np.ndarray | None = None,
    boot_grid_starts: int = 8,
    tol: Tolerances | None = None,
) -> Approach3Fit:
    """L(N, D) = E + A/N^alpha + B/D^beta by Hoffmann's procedure: minimise
    sum_i Huber_delta(log L_hat_i - log L_i) from every start of `grid` (default: the 4,500-start
    hoffmann_grid) and keep the best; then `n_boot` bootstrap refits. E is bounded by e_bounds
    (`floor`: the data's known lowest loss); tie_exponents fits one exponent alpha = beta."""
    tol = tol or Tolerances()
    law_name = "Chinchilla approach 3"
    require_approach3(points)
    F, U = e_bounds(points, floor, law_name)
    tie = (0, 0) if tie_exponents else (0, 1)
    loss = LseHuber(np.log(np.stack([points.N, points.D])), np.log(points.L), delta, F, U, tie)
    grid = hoffmann_grid() if grid is None else np.asarray(grid, float)
    theta, diagnostics, boot = fit_lse(loss, grid, n_boot, seed, boot_grid_starts, tol)
    if boot is not None and tie_exponents:  # one exponent column -> alpha and beta
        boot = replace(boot, samples=boot.samples[:, [0, 1, 2, 3, 3]])
    natural = loss.natural(theta)
    law = ChinchillaLaw(*natural[[0, 1, 2, 3, 3]] if tie_exponents else natural)
    return Approach3Fit(law, diagnostics, points, delta, boot, F, U, tie_exponents)
