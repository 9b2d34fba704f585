"""The fitted irreducible loss E beside a known entropy floor (the synthetic source's). Held-out
checks of predictions are in backtest.py."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.points import check_positive


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
