"""Verdicts: may a fitted law, a prediction or a compute-optimal allocation be used, and if not, why.

One small type for all three, so that every caller (the fit's console and files, the planner, a
command built on the fit) decides what to print by the same rule:

    trusted          the number is printed as it is, with its interval
    wide             the number is printed, with its interval and the reasons it is wide
    not_determined   the word `not_determined` and the reasons are printed instead of a number

A Verdict is its level and the Reasons behind it; each Reason has a stable `code` (REASON_CODES) that
programs may test, the level it alone calls for, and one clause for people. The level is the worst of
the reasons' levels (trusted when there is none), so a prediction of a `wide` law is at best `wide`.
The checks that produce reasons live in checks.py; this module imports nothing from the package.

    >>> v = Verdict.of([Reason("extrapolation", WIDE, "1.6 decades of compute past the largest run")])
    >>> v.level, v.usable, v.line("prediction")
    ('wide', True, 'prediction: wide: 1.6 decades of compute past the largest run')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Level = Literal["trusted", "wide", "not_determined"]
TRUSTED: Level = "trusted"
WIDE: Level = "wide"
NOT_DETERMINED: Level = "not_determined"
LEVELS: tuple[Level, ...] = (TRUSTED, WIDE, NOT_DETERMINED)  # from best to worst

# code -> what it means (docs/fitting.md lists the thresholds, checks.Thresholds holds them)
REASON_CODES = {
    "not_converged": "the optimiser did not reach a minimum",
    "few_points": "fewer points than the law has parameters to spare",
    "few_sizes": "too few distinct model sizes or token counts",
    "narrow_span": "the sizes, tokens or FLOPs span too few decades",
    "flat_loss": "the loss does not change beyond the run-to-run noise",
    "at_bound": "a parameter sits at one of its bounds (E at the floor or at the lowest loss, an exponent at 0)",
    "not_identified": "a parameter's 95% interval spans more than the stated factor",
    "bootstrap": "too few bootstrap refits converged, or none were drawn",
    "residual_size": "the residuals are large against the run-to-run noise",
    "residual_trend": "the residuals drift systematically with compute, size or tokens",
    "extrapolation": "the target lies further past the data than the interval was calibrated for",
    "backtest": "the fit's own backtest (refits leaving the largest runs out) under-covers at the target's distance",
    "interval_width": "the 95% interval spans more than the stated factor",
    "allocation": "the compute-optimal tokens per parameter fall outside the plausible range",
    "law": "the law it comes from is not determined",
    "unmatched": "an arm reaches a loss below the baseline's fitted E: no baseline compute matches it (multiplier.py)",
}


@dataclass(frozen=True)
class Reason:
    """One check's finding: `code` from REASON_CODES, the level it calls for, a clause for people."""

    code: str
    level: Level
    text: str

    def __post_init__(self) -> None:
        if self.code not in REASON_CODES:
            raise ValueError(f"unknown reason code {self.code!r} (valid: {', '.join(REASON_CODES)})")
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r} (valid: {', '.join(LEVELS)})")

    def to_dict(self) -> dict:
        return {"code": self.code, "level": self.level, "text": self.text}

    @classmethod
    def from_dict(cls, d: dict) -> Reason:
        return cls(str(d["code"]), d["level"], str(d["text"]))


@dataclass(frozen=True)
class Verdict:
    """The level (the worst of the reasons', trusted without any) and the reasons, worst first.
    Build it with Verdict.of; a level that its reasons do not call for is refused."""

    level: Level
    reasons: tuple[Reason, ...] = ()

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r} (valid: {', '.join(LEVELS)})")
        called_for = _worst(r.level for r in self.reasons)
        if self.level != called_for:
            raise ValueError(f"verdict {self.level!r} but its reasons call for {called_for!r}")

    @classmethod
    def of(cls, reasons: Iterable[Reason]) -> Verdict:
        """The verdict the reasons call for; duplicates (same code and text) are kept once."""
        unique = tuple(dict.fromkeys(reasons))
        ordered = tuple(sorted(unique, key=lambda r: -LEVELS.index(r.level)))
        return cls(_worst(r.level for r in ordered), ordered)

    @classmethod
    def worst(cls, *verdicts: Verdict) -> Verdict:
        """All the reasons of several verdicts, as one verdict (e.g. a law's and its prediction's)."""
        return cls.of(r for v in verdicts for r in v.reasons)

    @property
    def trusted(self) -> bool:
        return self.level == TRUSTED

    @property
    def usable(self) -> bool:
        """Whether a number may be printed at all (trusted or wide)."""
        return self.level != NOT_DETERMINED

    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def because(self, limit: int | None = None) -> str:
        """The reasons as one clause list, worst first: 'reason; reason' (empty when trusted); with
        `limit`, at most that many, then how many more there are."""
        shown = self.reasons if limit is None else self.reasons[:limit]
        more = len(self.reasons) - len(shown)
        return "; ".join(r.text for r in shown) + (f" (and {more} more)" if more else "")

    def line(self, what: str, limit: int | None = None) -> str:
        """One console line: 'WHAT: LEVEL' or 'WHAT: LEVEL: reason; reason'."""
        return f"{what}: {self.level}" + (f": {self.because(limit)}" if self.reasons else "")

    def to_dict(self) -> dict:
        return {"verdict": self.level, "reasons": [r.to_dict() for r in self.reasons]}

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        """Read back what to_dict wrote (fit.json)."""
        return cls(d["verdict"], tuple(Reason.from_dict(r) for r in d.get("reasons") or ()))


def _worst(levels: Iterable[Level]) -> Level:
    return max(levels, key=LEVELS.index, default=TRUSTED)
