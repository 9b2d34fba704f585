"""Chinchilla approach 3: L(N, D) = E + A/N^alpha + B/D^beta fitted as Hoffmann et al. 2022 did
(sec. 3.3 and appendix D.2): Huber loss on log L, from their 4,500-start grid, best start kept.

Known bounds are part of the fit, not a check afterwards (optimizer.py): E lies between the data's
floor (its entropy rate when known, else 0) and the lowest loss any run reached, and alpha, beta > 0.
Variants that published fits use: alpha tied to beta (Muennighoff et al. 2023 fit one exponent), and N
as total or non-embedding parameters (points.py, Points.with_params). `form=joint` fits Kaplan et al.
2020's joint form instead (joint.py) by the same procedure: every other part (the bootstrap, the
calibration, the verdicts, fit.json, the planner) takes either law through FORMS."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ablate.scaling.fitting.bootstrap import DEFAULT_BOOT, Bootstrap, Estimate, estimate, fit_lse
from ablate.scaling.fitting.multistart import Diagnostics, Tolerances, hoffmann_grid
from ablate.scaling.fitting.optimizer import HUBER_DELTA, LseHuber
from ablate.scaling.laws.joint import JointLseHuber, KaplanLaw, joint_grid
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
    FORM: ClassVar[str] = "additive"
    FORMULA: ClassVar[str] = "L(N, D) = E + A / N^alpha + B / D^beta"
    SOURCE: ClassVar[str] = "Hoffmann et al. 2022, approach 3"
    EXPONENTS: ClassVar[str] = (
        "a = beta/(alpha+beta) is the exponent of N_opt(C); b = alpha/(alpha+beta) that of D_opt(C)"
    )
    FRONTIER: ClassVar[str] = "N_opt = G (C/6)^a, D_opt = (C/6) / N_opt, G = (alpha A / (beta B))^(1/(alpha+beta))"
    # Coarse starts for refits near a known optimum (calibration.warm_grid), around Hoffmann's grid in
    # his layout [e, a, alpha, b, beta]: 3 x 3 x 3 x 4 x 4 = 432; the refits need not search it all again.
    COARSE: ClassVar[np.ndarray] = np.array(
        [
            (e, a, al, b, be)
            for al, be, e, a, b in itertools.product(
                (0.25, 0.5, 1.0), (0.25, 0.5, 1.0), (-1.0, 0.0, 0.5), (0, 5, 10, 20), (0, 5, 10, 20)
            )
        ],
        float,
    )

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

    def start(self) -> np.ndarray:
        """This law as one start in Hoffmann's layout [e, a, alpha, b, beta]."""
        return np.array([np.log(max(self.E, 1e-12)), np.log(self.A), self.alpha, np.log(self.B), self.beta])

    # Vectorised over bootstrap laws: samples (R, 5) in NAMES order. A resample of few points can fit
    # exponents so large that a law overflows far from its data; that sample's value is inf, which the
    # percentile interval takes as it is, so numpy need not warn.

    @staticmethod
    def sample_loss(samples: np.ndarray, N, D) -> np.ndarray:
        """L(N, D) under each law of samples (R, 5): (R, g) for N, D broadcastable to (g,) or (R, g)."""
        E, A, B, al, be = samples.T[:, :, None] if samples.size else np.empty((5, 0, 1))
        with np.errstate(over="ignore", invalid="ignore"):
            return E + A / np.asarray(N, float) ** al + B / np.asarray(D, float) ** be

    @staticmethod
    def sample_n_opt(samples: np.ndarray, C) -> np.ndarray:
        """N_opt(C) = G (C/6)^(beta/(alpha+beta)) under each law of samples (R, 5): (R, g)."""
        E, A, B, al, be = samples.T[:, :, None] if samples.size else np.empty((5, 0, 1))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            G = (al * A / (be * B)) ** (1 / (al + be))
            return G * (np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN) ** (be / (al + be))


Law = ChinchillaLaw | KaplanLaw
# form= -> the law's class: "additive" Hoffmann et al. 2022 eq. 2, "joint" Kaplan et al. 2020 eq. 1.5
FORMS: dict[str, type[ChinchillaLaw] | type[KaplanLaw]] = {"additive": ChinchillaLaw, "joint": KaplanLaw}


def law_text(law: Law, tied: bool = False) -> str:
    """The law's formula as printed: 'L(N, D) = E + A / N^alpha + B / D^beta, alpha = beta'."""
    return law.FORMULA + (", alpha = beta" if tied else "")


@dataclass(frozen=True)
class Approach3Fit:
    """Chinchilla approach 3 (Hoffmann et al. 2022, sec. 3.3 and appendix D.2)."""

    law: Law
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
            for j, (name, v) in enumerate(zip(self.law.NAMES, self.law.as_array(), strict=False))
        }

    @property
    def form(self) -> str:
        return self.law.FORM

    @property
    def exponent_names(self) -> tuple[str, ...]:
        """The law's free exponents: alpha alone when tied."""
        return self.law.NAMES[3:4] if self.tied else self.law.NAMES[3:]

    @property
    def n_params(self) -> int:
        return 4 if self.tied else 5

    @property
    def exponents(self) -> dict[str, Estimate]:
        """a = beta/(alpha+beta) (N_opt ∝ C^a), b = alpha/(alpha+beta) (D_opt ∝ C^b); the joint form's
        a = alpha_D/(alpha_N+alpha_D) and b from the same two columns (joint.py)."""
        if self.bootstrap is None:
            return {"a": Estimate(self.law.a), "b": Estimate(self.law.b)}
        samples = self.bootstrap.usable()
        al, be = samples[:, 3], samples[:, 4]
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
    form: str = "additive",
) -> Approach3Fit:
    """L(N, D) = E + A/N^alpha + B/D^beta by Hoffmann's procedure: minimise
    sum_i Huber_delta(log L_hat_i - log L_i) from every start of `grid` (default: the 4,500-start
    hoffmann_grid) and keep the best; then `n_boot` bootstrap refits. E is bounded by e_bounds
    (`floor`: the data's known lowest loss); tie_exponents fits one exponent alpha = beta. form="joint"
    fits Kaplan's joint form (joint.py) from its own grid instead (default joint.joint_grid)."""
    tol = tol or Tolerances()
    law_name = "Chinchilla approach 3"
    require_approach3(points)
    F, U = e_bounds(points, floor, law_name)
    log_x, log_loss = np.log(np.stack([points.N, points.D])), np.log(points.L)
    if form == "joint":
        if tie_exponents:
            raise FitInputError(
                "tie_exponents=true fits the additive form only (valid: form=additive, or tie_exponents=false)"
            )
        loss: LseHuber = JointLseHuber(log_x, log_loss, delta, F, U)
        default_grid = joint_grid
    elif form == "additive":
        loss = LseHuber(log_x, log_loss, delta, F, U, (0, 0) if tie_exponents else (0, 1))
        default_grid = hoffmann_grid
    else:
        raise FitInputError(f"form={form} is not a law's form (valid: {', '.join(FORMS)})")
    grid = default_grid() if grid is None else np.asarray(grid, float)
    theta, diagnostics, boot = fit_lse(loss, grid, n_boot, seed, boot_grid_starts, tol)
    if boot is not None and tie_exponents:  # one exponent column -> alpha and beta
        boot = replace(boot, samples=boot.samples[:, [0, 1, 2, 3, 3]])
    natural = loss.natural(theta)
    law = FORMS[form](*natural[[0, 1, 2, 3, 3]] if tie_exponents else natural)
    return Approach3Fit(law, diagnostics, points, delta, boot, F, U, tie_exponents)
