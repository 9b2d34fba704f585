"""What a plan's run will reach: L(N, D) from an exported fit with its calibrated 95% interval and
verdict, and the compute-optimal (N, D) for the same FLOPs (Hoffmann et al. 2022).

Both follow the fit's verdicts (scaling/verdict.py) through the same Predictor the fit used
(scaling/reports/fitfile.py): a not_determined loss has no number, only why and the runs that would determine
it; where the fit's allocation at this C is not_determined -- which includes any allocation outside 1 to
10,000 tokens per parameter -- the plan falls back to the rule of 20 tokens per parameter, labelled as
such, and names the runs that would settle it. Nothing printed lies below the data's floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.scaling import TOKENS_PER_PARAM_RULE, FitLaw, SuggestedRun, Verdict, predict

RULE = f"rule of thumb D = {TOKENS_PER_PARAM_RULE:g} N (Hoffmann et al. 2022)"


@dataclass(frozen=True)
class LossPrediction:
    """value, lo and hi are None when the verdict is not_determined."""

    value: float | None
    lo: float | None
    hi: float | None
    interval: str  # how lo and hi were obtained
    verdict: Verdict
    runs_to_determine: tuple[SuggestedRun, ...] = ()

    def to_dict(self) -> dict:
        return {
            "value": self.value,
            "lo": self.lo,
            "hi": self.hi,
            "interval": self.interval,
            **self.verdict.to_dict(),
            "runs_to_determine": [r.to_dict() for r in self.runs_to_determine],
        }


INTERVAL = (
    "95% interval for one run: the fit's bootstrap, one run's scatter and the law's error calibrated by "
    "leaving out the largest runs (scaling/calibration.py), never below the data's floor"
)


def predict_loss(fit: FitLaw, N: float, D: float, C: float | None = None) -> LossPrediction:
    """L(N, D) with its calibrated interval and verdict (N counted as the fit counts it, fit.params)."""
    p = predict.predict(fit.predictor, N=N, D=D, C=C)
    if p.loss is None:
        return LossPrediction(None, None, None, INTERVAL, p.verdict, p.runs_to_determine)
    return _printed(p)


def _printed(p: predict.Prediction) -> LossPrediction:
    """A usable prediction's loss with its interval."""
    loss = p.loss
    assert loss is not None and loss.ci95 is not None, "a usable prediction has its loss and band (predict.py)"
    return LossPrediction(loss.value, *loss.ci95, INTERVAL, p.verdict)


@dataclass(frozen=True)
class Alternative:
    """The compute-optimal (N, D) for the same FLOPs C (C = 6ND): the fit's, or the rule's when the
    fit's is not determined (`verdict` then says why the fit's was not used)."""

    C: float
    N_opt: float
    D_opt: float
    method: str
    loss: LossPrediction | None = None
    verdict: Verdict | None = None  # the fit's allocation at C; None without a fit
    from_rule: bool = True
    runs_to_determine: tuple[SuggestedRun, ...] = ()

    @property
    def tokens_per_param(self) -> float:
        return self.D_opt / self.N_opt

    def to_dict(self) -> dict:
        return {
            "C": self.C,
            "N_opt": self.N_opt,
            "D_opt": self.D_opt,
            "tokens_per_param": self.tokens_per_param,
            "method": self.method,
            "from_rule": self.from_rule,
            "loss": None if self.loss is None else self.loss.to_dict(),
            "fit_verdict": None if self.verdict is None else self.verdict.to_dict(),
            "runs_to_determine": [r.to_dict() for r in self.runs_to_determine],
        }


def rule_allocation(C: float) -> tuple[float, float]:
    n = math.sqrt(C / (6 * TOKENS_PER_PARAM_RULE))
    return n, C / (6 * n)


def compute_optimal(C: float, fit: FitLaw | None) -> Alternative:
    if fit is None:
        n, d = rule_allocation(C)
        return Alternative(C, n, d, f"{RULE}; give fit= for your own scaling law")
    p = predict.predict(fit.predictor, C=C)
    law = fit.law()
    counts = "" if fit.params == "total" else f" (N counts {fit.params.replace('_', '-')} parameters)"
    if p.verdict.usable:
        loss = _printed(p)
        method = f"approach-3 fit {fit.path}: N_opt = G (C/6)^{law.a:.3f}, G = {law.G:.4g}{counts}"
        return Alternative(C, p.N.value, p.D.value, method, loss, p.verdict, from_rule=False)
    n, d = rule_allocation(C)
    method = f"{RULE}, because the fit's allocation at this C is not_determined: {p.verdict.because(limit=2)}"
    return Alternative(C, n, d, method, None, p.verdict, True, p.runs_to_determine)


@dataclass(frozen=True)
class Purchase:
    """What the plan's budget buys against the compute-optimal split of the same compute C: the plan's
    loss, the optimal split's, and the compute at which the optimal split reaches the plan's loss
    (C_same <= C; the money it would save is cost x (1 - C_same / C) at the same MFU). All None when
    either loss is not determined; `why` then says which."""

    loss: float | None
    optimal_loss: float | None
    C: float
    C_same: float | None
    why: str = ""
    level: str = ""  # the worse of the two predictions' verdicts (trusted or wide) when decided

    @property
    def decided(self) -> bool:
        return self.C_same is not None

    def to_dict(self) -> dict:
        return {
            "loss": self.loss,
            "optimal_loss": self.optimal_loss,
            "C": self.C,
            "C_same_loss": self.C_same,
            "compute_share": None if self.C_same is None else self.C_same / self.C,
            "why": self.why,
            "verdict": self.level or None,
        }


def what_it_buys(fit: FitLaw, prediction: LossPrediction, alternative: Alternative) -> Purchase:
    """The plan's split against the fit's compute-optimal one at the same C. C_same solves
    L_opt(C') = L_plan on the fitted law's frontier, L_opt(C') = L(N_opt(C'), D_opt(C')), which
    falls with C' (Hoffmann et al. 2022, eq. 4), by bisection in log C' below C."""
    C = alternative.C
    if prediction.value is None:
        return Purchase(None, None, C, None, "the loss this plan reaches is not_determined")
    if alternative.from_rule or alternative.loss is None or alternative.loss.value is None:
        why = "the fit's compute-optimal split at this compute is not_determined"
        return Purchase(prediction.value, None, C, None, why)
    law = fit.law()
    level = Verdict.worst(prediction.verdict, alternative.loss.verdict).level

    def optimal(c: float) -> float:
        return float(law.loss(law.n_opt(c), law.d_opt(c)))

    target, lo, hi = prediction.value, math.log(C) - 6 * math.log(10), math.log(C)
    while target >= optimal(math.exp(lo)) and lo > math.log(C) - 30 * math.log(10):
        lo -= 6 * math.log(10)  # L_opt grows without bound as C' -> 0: the root lies further down
    if target <= optimal(C):  # the plan's split is (within rounding) the optimal one
        return Purchase(target, alternative.loss.value, C, C, level=level)
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if optimal(math.exp(mid)) > target else (lo, mid)
    return Purchase(target, alternative.loss.value, C, math.exp(hi), level=level)
