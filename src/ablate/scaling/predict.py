"""Predictions a researcher can act on: the loss at a target (N, D), or at the compute-optimal allocation
of a budget C, with a calibrated 95% interval (calibration.py) and a verdict (verdict.py, checks.py).

A Predictor is approach 3 ready to extrapolate: the law, its bootstrap laws, the calibration, the range
and floor of the data it was fitted on, and the law's own verdict. fit_all builds one from a fit; the
planner rebuilds the same one from fit.json (fitfile.py), so both print the same numbers and verdicts.

Nothing it returns goes below the data's floor: E is fitted above it (optimizer.py), every term of the
law is positive, and the interval's lower end is clipped there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from ablate.config import FitSourceConfig
from ablate.scaling.calibration import (
    ADAPTIVE,
    CALIBRATION_BOOT,
    CUT_FRACTIONS,
    PAST_DRIFT,
    PAST_DRIFT_SD,
    Calibration,
    calibrate,
    log_interval,
    run_sigma,
    warm_grid,
)
from ablate.scaling.checks import (
    RunNoise,
    Thresholds,
    allocation_reasons,
    approach3_facts,
    coverage_reasons,
    extrapolation_reasons,
    interval_reasons,
    law_verdict,
    run_noise,
)
from ablate.scaling.fitting.bootstrap import DEFAULT_BOOT, Estimate
from ablate.scaling.laws.chinchilla import Approach3Fit, Law, fit_approach3
from ablate.scaling.laws.frontier import Frontier
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN, FitInputError, Points, check_positive
from ablate.scaling.verdict import Reason, Verdict

TOKENS_PER_PARAM_RULE = 20.0  # Hoffmann et al. 2022: compute-optimal models see about 20 tokens per parameter


@dataclass(frozen=True)
class SuggestedRun:
    """A training run that would extend the data toward a target: size, tokens, FLOPs (6ND) and its
    time on the hardware the fitted runs used (None when their timings are unknown)."""

    N: float
    D: float
    C: float
    seconds: float | None

    def to_dict(self) -> dict:
        return {"N": self.N, "D": self.D, "C": self.C, "seconds": self.seconds}


@dataclass(frozen=True)
class Predictor:
    """Approach 3 as a forecaster (module docstring)."""

    law: Law  # either form (chinchilla.FORMS)
    samples: np.ndarray  # (R, 5) bootstrap laws in law.NAMES order (R = 0: none)
    calibration: Calibration
    data: dict  # "N", "D", "C" -> (min, max) of the fitted runs
    verdict: Verdict  # the law's
    thresholds: Thresholds = field(default_factory=Thresholds)
    floor: float | None = None  # the data's known floor
    params: str = "total"  # which parameter count N is: 'total' or 'non_embedding'
    flops_per_second: float | None = None  # the fitted runs' training throughput

    def decades_past(self, C) -> np.ndarray:
        """Decades of compute past the largest fitted run (0 inside the data)."""
        return np.maximum(np.log10(np.asarray(C, float) / self.data["C"][1]), 0.0)

    def orders_past(self, N: float, D: float, C: float) -> dict[str, float]:
        point = {"N": N, "D": D, "C": C}
        return {
            k: float(max(0.0, math.log10(point[k] / hi), math.log10(lo / point[k])))
            for k, (lo, hi) in self.data.items()
        }

    def loss_band(self, N, D, C=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The predicted loss at (N, D) and its calibrated 95% interval, (g,) each; C defaults to 6ND.
        The prediction is the law's L(N, D), moved by the drift past the data where the calibration
        corrects it (calibration.ADAPTIVE)."""
        N, D = np.broadcast_arrays(np.atleast_1d(np.asarray(N, float)), np.atleast_1d(np.asarray(D, float)))
        C = FLOPS_PER_PARAM_TOKEN * N * D if C is None else np.broadcast_to(np.asarray(C, float), N.shape)
        law = self.law.loss(N, D)
        samples = np.log(type(self.law).sample_loss(self.samples, N, D)) if len(self.samples) else None
        with np.errstate(over="ignore", invalid="ignore"):
            value, lo, hi = (
                np.exp(v) for v in log_interval(np.log(law), samples, self.decades_past(C), self.calibration)
            )
        if self.floor is not None:  # the drift's correction, like the interval, stops at the floor
            value, lo = np.maximum(value, self.floor), np.maximum(lo, self.floor)
        return value, lo, hi


@dataclass(frozen=True)
class FitOptions:
    """How approach 3 is fitted, checked and calibrated. A field named as a key of config/fit.py's
    FitSourceConfig is that key (from_config); grid, thresholds and cut_fractions are the library's."""

    entropy_floor: float | None = None  # the data's known lowest loss; None: the points' entropy_floor
    tie_exponents: bool = False  # alpha = beta
    form: str = "additive"  # the law's form: additive (Hoffmann et al. 2022) or joint (Kaplan et al. 2020)
    params: str = "total"  # N is 'total' or 'non_embedding' parameters (recorded; the points carry it)
    n_boot: int = DEFAULT_BOOT
    seed: int = 0
    noise: float | None = None  # run-to-run sd of log loss; None: from repeated runs, else checks.DEFAULT_NOISE
    grid: np.ndarray | None = None  # starts in Hoffmann's layout; None: his 4,500
    thresholds: Thresholds = field(default_factory=Thresholds)
    cut_fractions: tuple[float, ...] = CUT_FRACTIONS
    interval: str = ADAPTIVE  # calibration.ADAPTIVE (drift corrected, conformal width) or HULL (before)
    # ADAPTIVE's drift past the data beyond the ladder's own cuts' and its sd, per decade (calibration.py);
    # the backtest's leave-one-ladder-out check passes the values learned without the ladder tested
    past_drift: tuple[float, float] = (PAST_DRIFT, PAST_DRIFT_SD)

    @classmethod
    def from_config(cls, cfg: FitSourceConfig) -> FitOptions:
        """The options `ablate fit` and `ablate backtest` were given: each field the config declares
        under the same name, the rest at their defaults."""
        keys = {f.name for f in fields(FitSourceConfig)}
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls) if f.name in keys})


@dataclass(frozen=True)
class Forecast:
    """Approach 3 fitted, checked and calibrated: what fit_predictor returns."""

    fit: Approach3Fit
    predictor: Predictor
    noise: RunNoise


def fit_predictor(points: Points, opts: FitOptions) -> Forecast:
    """Approach 3 on `points` with the data's floor (opts.entropy_floor, else points'), its verdict,
    and the calibration of its intervals by refits below cuts of the runs' compute (calibration.py)."""
    floor = opts.entropy_floor if opts.entropy_floor is not None else points.entropy_floor
    fit = fit_approach3(
        points,
        floor=floor,
        tie_exponents=opts.tie_exponents,
        n_boot=opts.n_boot,
        seed=opts.seed,
        grid=opts.grid,
        form=opts.form,
    )
    noise = run_noise(points.N, points.D, points.L, opts.noise, points.seeds)
    verdict = law_verdict(approach3_facts(fit), noise, opts.thresholds)
    n_params = fit.n_params
    sigma = run_sigma(fit.diagnostics.residuals, n_params, noise.interval_floor)
    if fit.converged:
        law = fit.law
        n_boot = min(opts.n_boot, CALIBRATION_BOOT)  # a refit's curve term, as the interval's own has one

        def refit(sub: Points) -> Approach3Fit:
            return fit_approach3(
                sub,
                floor=floor,
                tie_exponents=opts.tie_exponents,
                n_boot=n_boot,
                seed=opts.seed,
                grid=warm_grid(law, floor or 0.0),
                form=opts.form,
            )

        calibration = calibrate(
            points, refit, sigma, opts.cut_fractions, n_params, noise.interval_floor, opts.interval, opts.past_drift
        )
    else:
        calibration = Calibration(sigma, None, None, method=opts.interval)
    samples = fit.bootstrap.usable() if fit.bootstrap is not None else np.empty((0, 5))
    predictor = Predictor(
        fit.law,
        samples,
        calibration,
        {k: (float(v.min()), float(v.max())) for k, v in (("N", points.N), ("D", points.D), ("C", points.C))},
        verdict,
        opts.thresholds,
        floor,
        opts.params,
        points.flops_per_second,
    )
    return Forecast(fit, predictor, noise)


@dataclass(frozen=True)
class Prediction:
    """The loss at a target (N, D), or at the compute-optimal allocation of a budget C (N and D then
    carry the allocation's bootstrap intervals). `loss` is None when the verdict is not_determined."""

    N: Estimate
    D: Estimate
    C: float
    loss: Estimate | None
    compute_optimal: bool
    orders_past_data: dict[str, float]  # decades outside the fitted data's range, per N, D, C (0 inside)
    verdict: Verdict
    runs_to_determine: tuple[SuggestedRun, ...] = ()  # when not determined: runs that would settle it
    params: str = "total"

    @property
    def tokens_per_param(self) -> float:
        return self.D.value / self.N.value

    def to_dict(self) -> dict:
        return {
            "N": self.N.to_dict(),
            "D": self.D.to_dict(),
            "C": self.C,
            "params": self.params,
            "compute_optimal": self.compute_optimal,
            "tokens_per_param": self.tokens_per_param,
            **self.verdict.to_dict(),
            "loss": None if self.loss is None else self.loss.to_dict(),
            "orders_past_data": self.orders_past_data,
            "runs_to_determine": [r.to_dict() for r in self.runs_to_determine],
        }


def predict(pred: Predictor, *, N: float | None = None, D: float | None = None, C: float | None = None) -> Prediction:
    """Give (N, D), or C alone (compute-optimal allocation), or C with one of N, D (the other = C/(6x)),
    or all three (a run whose recorded FLOPs count more than 6ND, e.g. attention)."""
    given = {k for k, v in (("N", N), ("D", D), ("C", C)) if v is not None}
    if C is not None and N is None and D is None:
        check_positive("C", [C], "predict")
        return _at_optimum(pred, float(C))
    if N is not None and D is not None:
        N, D = float(N), float(D)
    elif N is not None and C is not None:
        N = float(N)
        D = float(C) / (FLOPS_PER_PARAM_TOKEN * N)
    elif D is not None and C is not None:
        N = float(C) / (FLOPS_PER_PARAM_TOKEN * float(D))
        D = float(D)
    else:
        raise target_error(given)
    for name, v in (("N", N), ("D", D)):
        check_positive(name, [v], "predict")
    C = FLOPS_PER_PARAM_TOKEN * N * D if C is None else float(C)
    return _prediction(pred, Estimate(N), Estimate(D), C, False, Verdict.of([]))


def target_error(given) -> FitInputError:
    """The error for a target that is not N and D, or C alone, or C with N or D; `given` its keys."""
    return FitInputError(f"predict: give N and D, or C alone, or C with N or D; got {sorted(given) or 'nothing'}")


def _at_optimum(pred: Predictor, C: float) -> Prediction:
    n, lo, hi = _n_opt_band(pred, np.array([C]))
    N = Estimate(float(n[0]), None if np.isnan(lo[0]) else (float(lo[0]), float(hi[0])))
    per = C / FLOPS_PER_PARAM_TOKEN
    with np.errstate(divide="ignore", over="ignore"):  # an interval reaching N = 0 or inf: D at inf or 0
        D_band = None if N.ci95 is None else (float(per / np.float64(N.ci95[1])), float(per / np.float64(N.ci95[0])))
    D = Estimate(per / N.value, D_band)
    return _prediction(pred, N, D, C, True, allocation_verdict(pred, C, N))


def _prediction(pred: Predictor, N: Estimate, D: Estimate, C: float, optimal: bool, extra: Verdict) -> Prediction:
    value, lo, hi = (float(v[0]) for v in pred.loss_band(N.value, D.value, C))
    loss = Estimate(value, (lo, hi))
    th = pred.thresholds
    orders = pred.orders_past(N.value, D.value, C)
    reach = pred.calibration.reach
    # the interval grows with compute past the data; a size or token count far past the data's (an
    # allocation unlike any fitted run's) is also beyond what the calibration saw
    decades = float(pred.decades_past(C))
    own = Verdict.of(
        extrapolation_reasons(decades, reach, th)
        + coverage_reasons(decades, pred.calibration)
        + extrapolation_reasons(_past_top(N.value, pred.data["N"]), reach, th, "size N")
        + extrapolation_reasons(_past_top(D.value, pred.data["D"]), reach, th, "tokens D")
        + interval_reasons("the loss", loss, th.interval_factor_wide, th.interval_factor_nd)
    )
    verdict = Verdict.worst(from_law(pred.verdict), extra, own)
    usable = verdict.usable
    return Prediction(
        N,
        D,
        C,
        loss if usable else None,
        optimal,
        orders,
        verdict,
        () if usable else runs_to_determine(pred, C),
        pred.params,
    )


def _past_top(x: float, span: tuple[float, float]) -> float:
    return max(0.0, math.log10(x / span[1]))


def from_law(law: Verdict) -> Verdict:
    """A law's verdict as one reason of what is predicted from it: its level and its worst reason."""
    if law.trusted:
        return law
    return Verdict.of([Reason("law", law.level, f"approach 3 is {law.level}: {law.because(limit=1)}")])


def _n_opt_band(pred: Predictor, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = pred.law.n_opt(C)
    if not len(pred.samples):
        nan = np.full(C.shape, np.nan)
        return n, nan, nan
    with np.errstate(invalid="ignore"):
        lo, hi = np.nanpercentile(type(pred.law).sample_n_opt(pred.samples, C), [2.5, 97.5], axis=0)
    return n, lo, hi


def allocation_verdict(pred: Predictor, C: float, N_opt: Estimate) -> Verdict:
    """Whether the compute-optimal allocation at C may be used: the law's verdict, how far past the data
    C lies, how wide N_opt's interval is, and whether D/N is plausible."""
    th = pred.thresholds
    per = C / FLOPS_PER_PARAM_TOKEN
    decades = float(pred.decades_past(C))
    return Verdict.worst(
        from_law(pred.verdict),
        Verdict.of(
            extrapolation_reasons(decades, pred.calibration.reach, th)
            + coverage_reasons(decades, pred.calibration)
            + interval_reasons("N_opt", N_opt, th.n_opt_factor_wide, th.n_opt_factor_nd)
            + allocation_reasons(per / N_opt.value**2, th)
        ),
    )


def frontier(pred: Predictor, C) -> Frontier:
    """The compute-optimal allocation over a grid of C: N_opt = G (C/6)^a, D_opt = (C/6)/N_opt
    (Hoffmann et al. 2022, eq. 4), the loss there with its calibrated interval, and a verdict per C."""
    C = np.atleast_1d(np.asarray(C, float))
    N, N_lo, N_hi = _n_opt_band(pred, C)
    D = C / FLOPS_PER_PARAM_TOKEN / N
    loss, lo, hi = pred.loss_band(N, D, C)
    levels = tuple(
        allocation_verdict(pred, float(c), Estimate(float(n), None if np.isnan(a) else (float(a), float(b)))).level
        for c, n, a, b in zip(C, N, N_lo, N_hi, strict=True)
    )
    per = C / FLOPS_PER_PARAM_TOKEN
    with np.errstate(divide="ignore", over="ignore"):  # a band reaching N = 0 or inf: D at inf or 0
        D_lo, D_hi = per / N_hi, per / N_lo
    return Frontier(C, N, D, loss, N_lo, N_hi, D_lo, D_hi, lo, hi, levels)


def runs_to_determine(pred: Predictor, C: float) -> tuple[SuggestedRun, ...]:
    """Three runs (sizes N/2, N, 2N, D = C_step / (6N)) at the budget C_step that would bring a target
    at C within the calibrated reach: C / 10^reach, but at most 10 times the largest fitted run (the
    next decade, a step that can be taken), and at least that largest run. N is the law's optimum at
    C_step when its allocation there is usable, else 20 tokens per parameter (Hoffmann et al. 2022)."""
    top = pred.data["C"][1]
    reach = pred.calibration.reach or 0.0
    step = float(np.clip(C / 10**reach, top, 10 * top))
    n = float(pred.law.n_opt(step))
    if not allocation_verdict(pred, step, Estimate(n)).usable:
        n = math.sqrt(step / (FLOPS_PER_PARAM_TOKEN * TOKENS_PER_PARAM_RULE))
    per = step / FLOPS_PER_PARAM_TOKEN
    seconds = None if not pred.flops_per_second else step / pred.flops_per_second
    return tuple(SuggestedRun(n * k, per / (n * k), step, seconds) for k in (0.5, 1.0, 2.0))
