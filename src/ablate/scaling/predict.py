"""Loss at a target (N, D), or at the compute-optimal allocation of a budget C, with its bootstrap
interval and a warning that says how many orders of magnitude past the fitted data it lies."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ablate.scaling.bootstrap import Estimate, estimate
from ablate.scaling.chinchilla import Approach3Fit
from ablate.scaling.frontier import frontier, loss_samples
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN, FitInputError, check_positive


@dataclass(frozen=True)
class Prediction:
    """Loss predicted at a target (N, D), or at the compute-optimal allocation of a budget C."""

    N: Estimate
    D: Estimate
    C: float
    loss: Estimate
    compute_optimal: bool
    orders_past_data: dict[str, float]  # decades outside the fitted data's range, per N, D, C (0 inside)
    warning: str | None

    def to_dict(self) -> dict:
        return {"N": self.N.to_dict(), "D": self.D.to_dict(), "C": self.C, "loss": self.loss.to_dict(),
                "compute_optimal": self.compute_optimal, "orders_past_data": self.orders_past_data,
                "warning": self.warning}


def _orders_past(x: float, data: np.ndarray) -> float:
    return float(max(0.0, math.log10(x / data.max()), math.log10(data.min() / x)))


def extrapolation_warning(orders: dict[str, float]) -> str | None:
    if max(orders.values()) <= 0:
        return None
    parts = [f"{v:.1f} in {k}" for k, v in orders.items()]
    return f"extrapolating past the fitted data by {', '.join(parts[:-1])} and {parts[-1]} orders of magnitude"


def predict(fit: Approach3Fit, *, N: float | None = None, D: float | None = None, C: float | None = None) -> Prediction:
    """Give (N, D), or C alone (compute-optimal allocation), or C with one of N, D (the other = C/(6x))."""
    given = {k for k, v in (("N", N), ("D", D), ("C", C)) if v is not None}
    if given == {"C"}:
        return _predict_optimal(fit, float(C))
    if len(given) != 2:
        raise FitInputError(f"predict: give N and D, or C alone, or C with N or D; got {sorted(given) or 'nothing'}")
    N = float(N) if N is not None else float(C) / (FLOPS_PER_PARAM_TOKEN * float(D))
    D = float(D) if D is not None else float(C) / (FLOPS_PER_PARAM_TOKEN * N)
    for name, v in (("N", N), ("D", D)):
        check_positive(name, [v], "predict")
    C = FLOPS_PER_PARAM_TOKEN * N * D if C is None else float(C)
    loss = estimate(float(fit.law.loss(N, D)), loss_samples(fit, N, D)[:, 0] if fit.bootstrap is not None else None)
    return _prediction(fit, Estimate(N), Estimate(D), C, loss, False)


def _predict_optimal(fit: Approach3Fit, C: float) -> Prediction:
    check_positive("C", [C], "predict")
    f = frontier(fit, [C])

    def at(value, lo, hi) -> Estimate:
        return Estimate(float(value[0]), None if fit.bootstrap is None else (float(lo[0]), float(hi[0])))

    return _prediction(fit, at(f.N_opt, f.N_lo, f.N_hi), at(f.D_opt, f.D_lo, f.D_hi), C,
                       at(f.loss, f.loss_lo, f.loss_hi), True)


def _prediction(fit, N: Estimate, D: Estimate, C: float, loss: Estimate, optimal: bool) -> Prediction:
    p = fit.points
    orders = {"N": _orders_past(N.value, p.N), "D": _orders_past(D.value, p.D), "C": _orders_past(C, p.C)}
    return Prediction(N, D, C, loss, optimal, orders, extrapolation_warning(orders))
