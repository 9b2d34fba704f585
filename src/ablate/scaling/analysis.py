"""Every method the data allow, at once: fit_all returns a FitReport (export it with
ablate.scaling.reports.export.export_fit). Each method gets a verdict (verdict.py); a method the data cannot
support at all is `not_determined` with the one-line reason (approach 3 too: then no prediction has
a number, and each says why)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ablate.scaling.backtest import Backtest, held_out
from ablate.scaling.checks import (
    OffLawRun,
    RunNoise,
    Thresholds,
    law_verdict,
    run_noise,
    single_facts,
)
from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.laws.approach1 import fit_approach1
from ablate.scaling.laws.approach2 import BUDGET_TOL_DECADES, WINDOW_DECADES, fit_approach2
from ablate.scaling.laws.chinchilla import Approach3Fit, e_bounds
from ablate.scaling.laws.frontier import Frontier, FrontierFit
from ablate.scaling.laws.single import SingleLawFit, fit_single_law
from ablate.scaling.offlaw import REFIT_BOOT, WithoutRuns, named_runs, refit_without
from ablate.scaling.otherform import OtherForm, other_form
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN, FitInputError, Points, RunCurve
from ablate.scaling.predict import (
    TOKENS_PER_PARAM_RULE,
    FitOptions,
    Forecast,
    Prediction,
    Predictor,
    fit_predictor,
    frontier,
    predict,
    target_error,
)
from ablate.scaling.validation import FloorComparison, compare_floor
from ablate.scaling.verdict import NOT_DETERMINED, WIDE, Reason, Verdict

APPROACH3 = "chinchilla_approach3"


@dataclass(frozen=True)
class FitReport:
    """What fit_all found; export it with ablate.scaling.reports.export.export_fit."""

    points: Points
    options: FitOptions
    noise: RunNoise
    approach3: Approach3Fit | None  # None when the data cannot support it (verdicts say why)
    predictor: Predictor | None  # approach 3 ready to extrapolate; None when it did not converge
    approach1: FrontierFit | None
    approach2: FrontierFit | None
    single: dict[str, SingleLawFit]  # keyed by variable: 'N', 'D', 'C', 'N_non_embedding'
    frontier: Frontier | None
    predictions: tuple[Prediction, ...]
    held_out: Backtest | None
    entropy_floor: FloorComparison | None
    verdicts: dict[str, Verdict]  # method (fit.json key) -> its verdict, for every method tried
    skipped: dict[str, str] = field(default_factory=dict)  # method -> why it could not run on these data
    off_law: tuple[OffLawRun, ...] = ()  # the runs approach 3's verdict names as breaking the law
    without_off_law: WithoutRuns | None = None  # approach 3 refitted without them: a suggestion, not applied
    other_form: OtherForm | None = None  # approach 3 in its other form when the runs break the law: a suggestion

    @property
    def converged(self) -> bool:
        """Approach 3 was fitted and its optimiser converged (the command's exit status)."""
        return self.approach3 is not None and self.approach3.converged


def fit_all(
    points: Points,
    *,
    curves: Sequence[RunCurve] | None = None,
    targets: Sequence[dict] = (),
    options: FitOptions | None = None,
    held_out_k: int = 0,
    single: Sequence[str] = ("N", "D", "C"),
    approach2: bool = True,
    budget_tol_decades: float = BUDGET_TOL_DECADES,
    window_decades: float = WINDOW_DECADES,
    n_frontier: int = 50,
    held_out_boot: int | None = None,
    on_stage: Callable[[str, int, int], None] | None = None,
) -> FitReport:
    """Approach 3 with its verdict and calibrated predictor, then each optional method the data allow;
    `targets` are predict() keyword dicts, e.g. {"C": 1e21} or {"N": 1.5e9, "D": 3e10}. The floor is
    options.entropy_floor, else points'. The held-out refit draws held_out_boot resamples (default
    min(n_boot, 200)). on_stage(label, i, total) is called before each method and once at the end."""
    opts = options or FitOptions()
    floor = opts.entropy_floor if opts.entropy_floor is not None else points.entropy_floor
    if floor is not None:
        e_bounds(points, floor, "fit")  # a floor above a loss some run reached is an input error
    points = points.with_floor(floor)
    labels = (
        ["approach 3"]
        + [f"L({v})" for v in single]
        + (["approach 1"] if curves else [])
        + (["approach 2"] if approach2 else [])
        + (["held-out refit"] if held_out_k else [])
    )
    done = iter(range(len(labels) + 1))

    def stage(label: str) -> None:
        if on_stage is not None:
            on_stage(label, next(done), len(labels))

    skipped: dict[str, str] = {}
    verdicts: dict[str, Verdict] = {}

    def attempt(name, fn):
        try:
            return fn()
        except FitInputError as err:
            skipped[name] = str(err)
            verdicts[name] = _cannot(err)
            return None

    stage(labels[0])
    noise = run_noise(points.N, points.D, points.L, opts.noise, points.seeds)
    forecast: Forecast | None = attempt(APPROACH3, lambda: fit_predictor(points, opts))
    a3: Approach3Fit | None = None
    predictor: Predictor | None = None
    off_law: tuple = ()
    without: WithoutRuns | None = None
    other: OtherForm | None = None
    refit_boot = min(opts.n_boot, REFIT_BOOT)  # n_boot=0 asks for no bootstrap, here too
    if forecast is not None:
        a3, predictor, noise = forecast.fit, forecast.predictor, forecast.noise
        verdicts[APPROACH3] = predictor.verdict
        off_law = named_runs(a3, predictor.verdict, noise)
        if off_law:
            without = refit_without(a3, off_law, opts.thresholds, opts.noise, opts.seed, refit_boot)
        other = other_form(a3, predictor.verdict, noise, opts.thresholds, opts.seed, refit_boot)

    singles = {}
    for v in single:
        stage(f"L({v})")
        fit = attempt(
            f"kaplan_{v}", lambda v=v: fit_single_law(points, v, floor=floor, n_boot=opts.n_boot, seed=opts.seed)
        )
        if fit is not None:
            singles[v] = fit
            verdicts[f"kaplan_{v}"] = law_verdict(single_facts(fit, floor is not None), noise, opts.thresholds)
    a1 = a2 = None
    if curves:
        stage("approach 1")
        a1 = attempt("chinchilla_approach1", lambda: fit_approach1(curves, n_boot=opts.n_boot, seed=opts.seed))
        if a1 is not None:
            verdicts["chinchilla_approach1"] = frontier_fit_verdict(a1, opts.thresholds)
    if approach2:
        stage("approach 2")
        a2 = attempt(
            "chinchilla_approach2",
            lambda: fit_approach2(
                points,
                budget_tol_decades=budget_tol_decades,
                window_decades=window_decades,
                n_boot=opts.n_boot,
                seed=opts.seed,
            ),
        )
        if a2 is not None:
            verdicts["chinchilla_approach2"] = frontier_fit_verdict(a2, opts.thresholds)
    held = None
    if held_out_k:
        stage("held-out refit")
        boot = min(opts.n_boot, 200) if held_out_boot is None else held_out_boot
        held = attempt("held_out", lambda: held_out(points, held_out_k, _with_boot(opts, boot)))
        verdicts.pop("held_out", None)
    stage("done")
    if predictor is not None and a3 is not None and a3.converged:  # a3 and predictor come together
        predictions = tuple(predict(predictor, **t) for t in targets)
        C_top = max([points.C.max() * 10] + [p.C for p in predictions])
        front = frontier(predictor, np.geomspace(points.C.min(), C_top, n_frontier))
    else:
        why = verdicts.get(APPROACH3, Verdict.of([]))
        predictions = tuple(_without_law(points, t, why) for t in targets)
        front = None
    floor_cmp = compare_floor(a3.params["E"], floor) if floor is not None and a3 is not None and a3.converged else None
    return FitReport(
        points,
        opts,
        noise,
        a3,
        predictor,
        a1,
        a2,
        singles,
        front,
        predictions,
        held,
        floor_cmp,
        verdicts,
        skipped,
        off_law,
        without,
        other,
    )


def _with_boot(opts: FitOptions, n_boot: int) -> FitOptions:
    return replace(opts, n_boot=n_boot)


def _cannot(err: FitInputError) -> Verdict:
    """The verdict of a method whose requirements the data do not meet: the error's one line, without
    the law's name it starts with ('Chinchilla approach 2: ...'), which the verdict's line gives."""
    text = str(err)
    head, _, rest = text.partition(": ")
    if rest and ("approach" in head or "power law" in head):
        text = rest
    return Verdict.of([Reason(err.code, NOT_DETERMINED, text)])


def _without_law(points: Points, target: dict, why: Verdict) -> Prediction:
    """A prediction when approach 3 could not be fitted or did not converge: no number, the reasons, and
    for a budget C the allocation of the 20-tokens-per-parameter rule (Hoffmann et al. 2022) as the size."""
    N, D, C = target.get("N"), target.get("D"), target.get("C")
    if N is None or D is None:
        if C is None:  # N or D alone, or nothing: what predict() refuses when the law is usable
            raise target_error(k for k, v in target.items() if v is not None)
        if N is None:
            N = (
                C / (FLOPS_PER_PARAM_TOKEN * D)
                if D is not None
                else math.sqrt(C / (FLOPS_PER_PARAM_TOKEN * TOKENS_PER_PARAM_RULE))
            )
        if D is None:
            D = C / (FLOPS_PER_PARAM_TOKEN * N)
    elif C is None:
        C = FLOPS_PER_PARAM_TOKEN * N * D
    reason = why.reasons[0].text if why.reasons else "approach 3 was not fitted"
    verdict = Verdict.of([Reason("law", NOT_DETERMINED, f"approach 3 is not determined: {reason}")])
    orders = {
        k: float(max(0.0, math.log10(x / v.max()), math.log10(v.min() / x)))
        for k, x, v in (("N", N, points.N), ("D", D, points.D), ("C", C, points.C))
    }
    return Prediction(Estimate(N), Estimate(D), C, None, set(target) == {"C"}, orders, verdict)


def frontier_fit_verdict(fit: FrontierFit, th: Thresholds) -> Verdict:
    """Approaches 1 and 2: enough optima over enough decades of C, an exponent that the bootstrap pins
    down, and (approach 2) enough of the FLOP groups usable as budgets."""
    reasons = []
    span = float(np.log10(fit.C.max() / fit.C.min()))
    if span < th.decades_wide:
        level = NOT_DETERMINED if span < th.decades_nd else WIDE
        reasons.append(Reason("narrow_span", level, f"the optima span {span:.2f} decades of C"))
    est = fit.n_opt.exponent
    if est.ci95 is not None:
        lo, hi = est.ci95
        factor = hi / lo if lo > 0 else math.inf
        if factor > th.exponent_factor_wide:
            level = NOT_DETERMINED if factor > th.exponent_factor_nd else WIDE
            reasons.append(
                Reason("not_identified", level, f"a's 95% interval {lo:.3g} to {hi:.3g} spans a factor {factor:.3g}")
            )
    if fit.budgets:
        used = sum(b.usable for b in fit.budgets)
        if used < len(fit.budgets) / 2:
            reasons.append(
                Reason(
                    "few_sizes",
                    WIDE,
                    f"{used} of {len(fit.budgets)} FLOP groups with enough sizes are usable budgets "
                    "(the others do not bracket their optimum or are not one budget)",
                )
            )
    return Verdict.of(reasons)
