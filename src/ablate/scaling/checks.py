"""The checks behind every verdict (verdict.py): of a fitted law, of a prediction, of a compute-optimal
allocation. Each check is a function of numbers the fit already has, returns Reasons, and cites its
threshold from Thresholds (stated in docs/fitting.md and recorded in fit.json, so that the planner,
reading fit.json, reaches the same verdicts).

A law is checked for
    design           too few sizes or token counts, or too narrow a span (decades of N, D, C)
    flat loss        losses that vary by less than a few times the run-to-run noise
    bounds           E at the data's floor, at 0 or at the lowest loss; an exponent at 0
    identification   an exponent whose 95% interval spans more than a factor; E's interval covering
                     most of its allowed range
    residuals        their size against the run-to-run noise, and a systematic pattern (the mean
                     residual of the runs in one band of C, N or D, in standard errors)
a prediction for how far past the data it lies (decades of compute against the distance its interval
was calibrated at, calibration.py) and how wide its interval is; an allocation also for its spread
and for tokens per parameter outside a plausible range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.laws.chinchilla import Approach3Fit
from ablate.scaling.laws.single import SingleLawFit
from ablate.scaling.verdict import NOT_DETERMINED, WIDE, Reason, Verdict

DEFAULT_NOISE = 0.01  # sd of log loss between repeats of one run: about 1% for small LMs over seeds
# The least seed-to-seed sd of log loss taken as noise: repeats that agree more closely (0.01-0.1%) are
# reruns of one seed (nondeterminism), and a law is not judged against them.
NOISE_FLOOR = 0.003


@dataclass(frozen=True)
class Thresholds:
    """Where each check turns a verdict `wide` or `not_determined` (docs/fitting.md, "Verdicts")."""

    sizes_nd: int = 3  # distinct N (and D) below which a law is not determined
    sizes_wide: int = 4  # ... below which it is wide
    decades_nd: float = 0.5  # span of N, D (and C) in decades below which a law is not determined
    decades_wide: float = 1.0
    flat_noise: float = 3.0  # max L / min L - 1 below this many times the noise: a flat loss
    exponent_factor_wide: float = 2.0  # hi / lo of an exponent's 95% interval
    exponent_factor_nd: float = 10.0
    exponent_floor: float = 0.01  # an exponent below this is at its bound 0
    bound_share: float = 0.01  # E within this share of (F, U) of a bound is at it
    e_share_wide: float = 0.5  # E's 95% interval covering more than this share of (F, U)
    boot_converged_wide: float = 0.9  # fraction of bootstrap refits that converged
    residual_wide: float = 2.0  # RMS log residual / run-to-run noise
    residual_nd: float = 5.0
    trend_sigmas: float = 3.0  # a band's mean residual, in standard errors, that is a pattern
    top_run_sigmas: float = 3.0  # the largest-compute runs' mean residual, in standard errors, that is off the law
    interval_factor_wide: float = 1.25  # hi / lo of a prediction's 95% interval
    interval_factor_nd: float = 2.0
    reach_nd: float = 2.0  # past the calibrated distance: wide up to this multiple, then not determined
    backtest_coverage: float = 0.9  # the fit's own backtest must hold this share at the target's distance
    backtest_coverage_nd: float = 0.5  # ... under this share the prediction is not determined
    backtest_min_runs: int = 5  # ... from at least this many held-out runs at that distance
    n_opt_factor_wide: float = 3.0  # hi / lo of N_opt's 95% interval
    n_opt_factor_nd: float = 30.0
    tokens_per_param_min: float = 1.0  # a compute-optimal D/N outside these is not determined
    tokens_per_param_max: float = 10_000.0
    multiplier_factor_wide: float = 4.0  # hi / lo of a compute multiplier's 95% interval (x0.5 to x2)
    multiplier_factor_nd: float = 100.0  # ... (x0.1 to x10): neither its size nor its side is known
    multiplier_reach_share: float = 0.5  # past the arms' common compute, as a share of its span in decades

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Thresholds:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in names})


@dataclass(frozen=True)
class RunNoise:
    """The spread of one run's log loss about the curve that no law can explain (seeds, data order).
    `sigma` is what the checks use: the measured spread (`measured`), never below NOISE_FLOOR, or the
    given one, or DEFAULT_NOISE without replicates."""

    sigma: float
    source: str  # starts with "seeds", "replicates", "floor", "given" or "default", then why
    measured: float | None = None  # the pooled sd of the replicates, before the floor

    @property
    def kind(self) -> str:
        return self.source.split(" ")[0].rstrip(":,")

    @property
    def interval_floor(self) -> float:
        """The least scatter one new run has about the curve (calibration.run_sigma's floor): the noise
        when it was measured or given, else NOISE_FLOOR (a default is a guess, not a floor)."""
        return NOISE_FLOOR if self.kind == "default" else self.sigma

    def to_dict(self) -> dict:
        return {"sigma": self.sigma, "source": self.source, "measured": self.measured, "floor": NOISE_FLOOR}


def run_noise(
    N: np.ndarray, D: np.ndarray, L: np.ndarray, given: float | None = None, seeds: Sequence | None = None
) -> RunNoise:
    """`given`, else the pooled sd of log L over replicates of one (N, D) (at least 2 degrees of
    freedom), floored at NOISE_FLOOR, else DEFAULT_NOISE. With `seeds` (one per run), replicates are
    runs of distinct seeds: reruns of one seed at one (N, D) are averaged into one run first, since
    they measure the hardware's nondeterminism, not the seed-to-seed spread."""
    if given is not None:
        return RunNoise(float(given), "given")
    logL = np.log(np.asarray(L, float))
    groups = _replicate_groups(N, D, logL, seeds)
    ss = sum(float(((v - v.mean()) ** 2).sum()) for v in groups)
    dof = sum(v.size - 1 for v in groups)
    what = "seeds" if seeds is not None else "replicates"
    if dof >= 2 and ss > 0:
        sd = math.sqrt(ss / dof)
        counted = f"{len(groups)} repeated (N, D), {dof} degrees of freedom"
        if sd >= NOISE_FLOOR:
            return RunNoise(sd, f"{what} ({counted})", sd)
        return RunNoise(
            NOISE_FLOOR,
            f"floor: the {what} ({counted}) agree to {sd:.2g} in log loss, far below the seed-to-seed spread "
            f"of LM losses; such runs are reruns, not replicates, so the noise is taken as the floor {NOISE_FLOOR:g}",
            sd,
        )
    reruns = _rerun_spread(N, D, logL, seeds)
    if reruns is not None:
        return RunNoise(
            NOISE_FLOOR,
            f"floor: only reruns of one seed repeat an (N, D) (they agree to {reruns:.2g} in log loss: the "
            f"hardware's nondeterminism, not seeds); the noise is taken as the floor {NOISE_FLOOR:g}",
            reruns,
        )
    return RunNoise(DEFAULT_NOISE, "default (no repeated runs to measure it)")


def _keys(N: np.ndarray, D: np.ndarray) -> np.ndarray:
    keys = np.stack([np.round(np.log(np.asarray(N, float)), 6), np.round(np.log(np.asarray(D, float)), 6)], axis=1)
    return np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)


def _replicate_groups(N, D, logL: np.ndarray, seeds: Sequence | None) -> list[np.ndarray]:
    """The log losses of each (N, D) run more than once: one value per distinct seed (the mean of its
    reruns) when seeds are known, else every run."""
    group = _keys(N, D)
    out = []
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        if seeds is not None:
            by_seed: dict = {}
            for i in idx:
                by_seed.setdefault(str(seeds[int(i)]), []).append(logL[int(i)])
            v = np.array([np.mean(x) for x in by_seed.values()])
        else:
            v = logL[idx]
        if v.size > 1:
            out.append(v)
    return out


def _rerun_spread(N, D, logL: np.ndarray, seeds: Sequence | None) -> float | None:
    """The pooled sd of reruns of one seed at one (N, D); None without any (or without seeds)."""
    if seeds is None:
        return None
    group, names = _keys(N, D), np.array([str(s) for s in seeds])
    ss, dof = 0.0, 0
    for g, name in set(zip(group.tolist(), names.tolist(), strict=True)):
        v = logL[(group == g) & (names == name)]
        ss += float(((v - v.mean()) ** 2).sum())
        dof += v.size - 1
    return math.sqrt(ss / dof) if dof else None


# ---------------------------------------------------------------------------------------------
# A law
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LawFacts:
    """What the checks read from a fitted law: built by law_facts_* from an approach-3 or single fit."""

    converged: bool
    message: str
    L: np.ndarray  # (n,) the losses fitted
    residuals: np.ndarray  # (n,) log L_hat - log L
    axes: dict  # name -> (n,) the variables: N, D (design), C (residual pattern)
    design: tuple[str, ...]  # the axes whose sizes and span a law needs
    E: Estimate
    E_bounds: tuple[float, float]  # (F, U)
    floor_known: bool
    exponents: dict  # name -> Estimate
    n_params: int
    n_boot: int  # resamples drawn (0: none)
    boot_converged: float  # fraction converged


def approach3_facts(fit: Approach3Fit) -> LawFacts:
    p, d, b = fit.points, fit.diagnostics, fit.bootstrap
    params = fit.params
    exponents = {name: params[name] for name in fit.exponent_names}
    return LawFacts(
        d.converged,
        d.message,
        p.L,
        d.residuals,
        {"N": p.N, "D": p.D, "C": p.C},
        ("N", "D"),
        params["E"],
        (fit.floor, fit.upper),
        fit.floor > 0,  # a positive lower bound is a known floor
        exponents,
        fit.n_params,
        0 if b is None else b.n_resamples,
        1.0 if b is None else float(b.converged.mean()),
    )


def single_facts(fit: SingleLawFit, floor_known: bool) -> LawFacts:
    d, b = fit.diagnostics, fit.bootstrap
    params = fit.params
    return LawFacts(
        d.converged,
        d.message,
        fit.L,
        d.residuals,
        {fit.variable: fit.x},
        (fit.variable,),
        params["E"],
        (fit.floor, fit.upper),
        floor_known and fit.floor > 0,
        {"alpha": params["alpha"]},
        3,
        0 if b is None else b.n_resamples,
        1.0 if b is None else float(b.converged.mean()),
    )


def law_verdict(f: LawFacts, noise: RunNoise, th: Thresholds) -> Verdict:
    if not f.converged:
        return Verdict.of([Reason("not_converged", NOT_DETERMINED, f.message)])
    # the order of a fit's reasons at one level: E's bounds, the exponents', then their intervals
    reasons = _design(f, th) + _flat(f, noise, th) + _e_bounds(f, th) + _exponent_bounds(f, th)
    reasons += _exponent_intervals(f, th) + _e_interval(f, th)
    reasons += _bootstrap(f, th) + _residuals(f, noise, th)
    return Verdict.of(reasons)


def _design(f: LawFacts, th: Thresholds) -> list[Reason]:
    out = []
    if len(f.L) < f.n_params + 2:
        out.append(Reason("few_points", WIDE, f"{len(f.L)} points for {f.n_params} parameters"))
    for name in f.design:
        x = f.axes[name]
        k = len(np.unique(np.round(np.log(x), 6)))
        if k < th.sizes_wide:
            level = NOT_DETERMINED if k < th.sizes_nd else WIDE
            sizes = th.sizes_nd if level == NOT_DETERMINED else th.sizes_wide
            out.append(Reason("few_sizes", level, f"{k} distinct {_AXIS[name]} (needs {sizes})"))
    for name in dict.fromkeys((*f.design, "C")):
        x = f.axes.get(name)
        if x is None:
            continue
        span = float(np.log10(x.max() / x.min()))
        if span < th.decades_wide:
            level = NOT_DETERMINED if span < th.decades_nd else WIDE
            need = th.decades_nd if level == NOT_DETERMINED else th.decades_wide
            out.append(Reason("narrow_span", level, f"{_AXIS[name]} span {span:.2f} decades (needs {need:g})"))
    return out


def design_reasons(N: np.ndarray, D: np.ndarray, th: Thresholds | None = None, n_params: int = 5) -> list[Reason]:
    """The reasons the fit's design check (_design) would give a law fitted to runs at sizes N and
    token counts D (each (n,), one per run), before any of them is trained: a sweep can say what
    its fit will say. n_params: the law's (approach 3's L = E + A/N^a + B/D^b: 5)."""
    N, D = np.asarray(N, float), np.asarray(D, float)
    facts = LawFacts(
        True, "", np.ones(len(N)), np.zeros(len(N)), {"N": N, "D": D, "C": 6 * N * D}, ("N", "D"),
        Estimate(0.0), (0.0, np.inf), False, {}, n_params, 0, 1.0,
    )  # fmt: skip
    return _design(facts, th or Thresholds())


_AXIS = {"N": "sizes N", "D": "token counts D", "C": "FLOPs C", "N_non_embedding": "non-embedding sizes N"}


def _flat(f: LawFacts, noise: RunNoise, th: Thresholds) -> list[Reason]:
    spread = float(f.L.max() / f.L.min() - 1)
    if spread < th.flat_noise * noise.sigma:
        return [
            Reason(
                "flat_loss",
                NOT_DETERMINED,
                f"the loss varies by {100 * spread:.2g}% across the runs, under {th.flat_noise:g} times the "
                f"run-to-run noise ({100 * noise.sigma:.2g}%): nothing to fit a trend to",
            )
        ]
    return []


def e_reasons(f: LawFacts, th: Thresholds) -> list[Reason]:
    """Why the irreducible loss E is not determined by the data: at a bound, or an interval covering
    most of its allowed range (empty when it is). A law's extrapolation far past the data rests on E."""
    return _e_bounds(f, th) + _e_interval(f, th)


def _e_bounds(f: LawFacts, th: Thresholds) -> list[Reason]:
    out = []
    F, U = f.E_bounds
    E = f.E.value
    if (E - F) <= th.bound_share * (U - F):
        if f.floor_known:
            text = (
                f"E at the data's floor {F:.4g}: the runs lie too far above it to show where the loss "
                "levels off, so the floor, not the data, sets E"
            )
        else:
            text = (
                "E at its lower bound 0: these data do not determine the irreducible loss "
                "(give the data's floor, entropy_floor=, when it is known)"
            )
        out.append(Reason("at_bound", WIDE, text))
    if (U - E) <= th.bound_share * (U - F):
        out.append(
            Reason(
                "at_bound",
                NOT_DETERMINED,
                f"E at the lowest loss the runs reached ({U:.4g}): the law says the loss stops falling "
                "where the data end, which the form cannot tell from a poor fit",
            )
        )
    return out


def _e_interval(f: LawFacts, th: Thresholds) -> list[Reason]:
    out = []
    F, U = f.E_bounds
    if f.E.ci95 is not None and U > F:
        share = (f.E.ci95[1] - f.E.ci95[0]) / (U - F)
        if share > th.e_share_wide:
            out.append(
                Reason(
                    "not_identified",
                    WIDE,
                    f"E's 95% interval {_g(f.E.ci95[0])} to {_g(f.E.ci95[1])} covers {100 * share:.0f}% of "
                    f"its allowed range {_g(F)} to {_g(U)}",
                )
            )
    return out


def _exponent_bounds(f: LawFacts, th: Thresholds) -> list[Reason]:
    """An exponent at its bound 0: no trend with it."""
    return [
        Reason("at_bound", NOT_DETERMINED, f"{name} = {est.value:.2g} at its bound 0: no trend with it")
        for name, est in f.exponents.items()
        if est.value <= th.exponent_floor
    ]


def _exponent_intervals(f: LawFacts, th: Thresholds) -> list[Reason]:
    """An exponent whose 95% interval spans more than a factor."""
    out = []
    for name, est in f.exponents.items():
        if est.ci95 is None or est.value <= th.exponent_floor:
            continue
        lo, hi = est.ci95
        factor = hi / lo if lo > 0 else math.inf
        if factor > th.exponent_factor_wide:
            level = NOT_DETERMINED if factor > th.exponent_factor_nd else WIDE
            limit = th.exponent_factor_nd if level == NOT_DETERMINED else th.exponent_factor_wide
            out.append(
                Reason(
                    "not_identified",
                    level,
                    f"{name}'s 95% interval {_g(lo)} to {_g(hi)} spans a factor {_g(factor)} (over {limit:g})",
                )
            )
    return out


def _bootstrap(f: LawFacts, th: Thresholds) -> list[Reason]:
    if f.n_boot == 0:
        return [Reason("bootstrap", WIDE, "no bootstrap (n_boot=0): the intervals leave out the fit's uncertainty")]
    if f.boot_converged < th.boot_converged_wide:
        return [
            Reason(
                "bootstrap",
                WIDE,
                f"{100 * f.boot_converged:.0f}% of bootstrap refits converged "
                f"(under {100 * th.boot_converged_wide:.0f}%)",
            )
        ]
    return []


def _residuals(f: LawFacts, noise: RunNoise, th: Thresholds) -> list[Reason]:
    r = f.residuals
    n = r.size
    rms = float(np.sqrt(np.mean(r**2) * n / max(n - f.n_params, 1)))
    out = []
    ratio = rms / noise.sigma
    if ratio > th.residual_wide:
        level = NOT_DETERMINED if ratio > th.residual_nd else WIDE
        out.append(
            Reason(
                "residual_size",
                level,
                f"the runs scatter about the law by {rms:.3g} in log loss (sd over n - {f.n_params} degrees of "
                f"freedom), {ratio:.1f} times the run-to-run noise {noise.sigma:.2g} "
                f"({noise.source.split(' (')[0]}): the law's form does not describe these runs",
            )
        )
    named = f"; {off_law_text(f, noise)}"
    if out:
        out[-1] = Reason(out[-1].code, out[-1].level, out[-1].text + named)
    out += _top_compute(f, noise, th)
    worst = max((_pattern(r, f.axes[name], name) for name in f.axes), key=lambda p: p[0], default=None)
    if worst is not None and worst[0] > th.trend_sigmas and abs(worst[1]) > noise.sigma / 2:
        t, mean, name, lo, hi = worst
        side = "above" if mean < 0 else "below"
        out.append(
            Reason(
                "residual_trend",
                WIDE,
                f"the runs at {name} {_g(lo)} to {_g(hi)} lie {100 * abs(mean):.2g}% {side} the law on average "
                f"({t:.1f} standard errors): a pattern the form misses" + ("" if out else named),
            )
        )
    return out


def _top_compute(f: LawFacts, noise: RunNoise, th: Thresholds) -> list[Reason]:
    """The runs at the largest compute (within TOP_DECADES of it), where a prediction past the data
    starts: their mean residual against s (residual_scale: the noise, or the residuals' robust sd when
    larger) times the standard error of a mean of that many runs. A law that bends away from its
    largest runs will bend further past them, whatever the other runs say."""
    C = f.axes.get("C")
    if C is None or C.size < f.n_params + 2:
        return []
    logC = np.log10(C)
    top = np.flatnonzero(logC >= logC.max() - TOP_DECADES)
    if top.size * 2 > C.size:  # most runs at the largest compute: no top to speak of
        return []
    mean = float(f.residuals[top].mean())  # log L_hat - log L
    s = residual_scale(f, noise)
    t = abs(mean) / (s / math.sqrt(top.size))
    if t <= th.top_run_sigmas:
        return []
    above = math.exp(-mean) - 1
    runs = "the largest-compute run" if top.size == 1 else f"the {top.size} largest-compute runs"
    at = ", ".join(f"N={_g(f.axes['N'][i])}, D={_g(f.axes['D'][i])}" for i in top[:3]) if "N" in f.axes else ""
    per = "" if top.size == 1 else f" (their mean, over the square root of {top.size})"
    return [
        Reason(
            "residual_trend",
            WIDE,
            f"{runs} ({at}{', ...' if top.size > 3 else ''}, C={_g(float(C.max()))}) "
            f"{'lies' if top.size == 1 else 'lie'} {100 * abs(above):.2g}% {'above' if above > 0 else 'below'} the "
            f"law, {t:.1f} times {_g(s)}{per}, the larger of the run-to-run noise and the runs' typical scatter "
            "about the law: the law bends away from the data where a prediction past it starts",
        )
    ]


TOP_DECADES = 0.05  # runs within this many decades of the largest compute are its top
OFF_LAW_MAX = 3  # runs named when residuals break the law
BREAKS_LAW = ("residual_size", "residual_trend")  # the reasons that name the runs furthest off the law


def breaks_law(v: Verdict) -> bool:
    """Whether runs break the law: a residual reason among the verdict's (each is wide or worse)."""
    return any(r.code in BREAKS_LAW for r in v.reasons)


@dataclass(frozen=True)
class OffLawRun:
    """One run far off the law: its row in the fitted points, where it lies (the law's design axes,
    e.g. N and D), the share it lies above the law (L / L_hat - 1, negative below) and its
    standardized residual (log L - log L_hat) / s, s as in runs_off_law (positive above)."""

    index: int
    at: dict[str, float]
    above: float
    residual_sd: float

    @property
    def tokens_per_param(self) -> float | None:
        return self.at["D"] / self.at["N"] if {"N", "D"} <= set(self.at) else None

    def where(self) -> str:
        """'N=.., D=.. (.. tokens per parameter)'."""
        text = ", ".join(f"{k}={_g(v)}" for k, v in self.at.items())
        tpp = self.tokens_per_param
        return text if tpp is None else f"{text} ({_g(tpp)} tokens per parameter)"

    def described(self) -> str:
        """'N=.., D=.. (.. tokens per parameter, 16% above)'."""
        text = ", ".join(f"{k}={_g(v)}" for k, v in self.at.items())
        tpp = self.tokens_per_param
        return f"{text} ({'' if tpp is None else f'{_g(tpp)} tokens per parameter, '}{self.how_far()})"

    def how_far(self) -> str:
        """'16% above' or '8.9% below'."""
        return f"{100 * abs(self.above):.2g}% {'above' if self.above > 0 else 'below'}"

    def to_dict(self) -> dict:
        return {
            **self.at,
            "tokens_per_param": self.tokens_per_param,
            "above": self.above,
            "residual_sd": self.residual_sd,
        }


def residual_scale(f: LawFacts, noise: RunNoise) -> float:
    """s, what a residual is standardized by: the larger of the noise and the residuals' robust sd
    (1.4826 x median |r|, the normal's sd from its median absolute deviation about 0)."""
    return max(noise.sigma, 1.4826 * float(np.median(np.abs(f.residuals))))


def runs_off_law(f: LawFacts, noise: RunNoise, k_max: int = OFF_LAW_MAX) -> np.ndarray:
    """Indices of the runs with the largest standardized residuals |r| / s (residual_scale): those
    beyond 3 s, at least the largest one, at most k_max, largest first."""
    r = np.abs(f.residuals)
    order = np.argsort(-r, kind="stable")
    k = int(np.clip(np.sum(r > 3 * residual_scale(f, noise)), 1, k_max))
    return order[:k]


def off_law_runs(f: LawFacts, noise: RunNoise) -> tuple[OffLawRun, ...]:
    """The runs of runs_off_law as data, largest standardized residual first."""
    s = residual_scale(f, noise)
    return tuple(
        OffLawRun(
            int(i),
            {k: float(f.axes[k][i]) for k in f.design},
            float(math.exp(-f.residuals[i]) - 1),  # residuals are log L_hat - log L
            float(-f.residuals[i] / s),
        )
        for i in runs_off_law(f, noise)
    )


def off_law_text(f: LawFacts, noise: RunNoise) -> str:
    """The runs furthest off the law, by name: 'furthest off: N=.., D=.. (D/N ..) 16% above; ...'."""
    return "furthest off the law: " + "; ".join(f"{r.where()} {r.how_far()}" for r in off_law_runs(f, noise))


def _pattern(r: np.ndarray, x: np.ndarray, name: str) -> tuple[float, float, str, float, float]:
    """The band of x (quantiles of log x, 3 or 4 bands of at least 3 runs) whose mean residual is the
    most standard errors from 0: (t, mean, name, x lo, x hi); t = 0 with too few runs."""
    n = r.size
    bands = min(4, n // 3)
    if bands < 3:
        return 0.0, 0.0, name, float(x.min()), float(x.max())
    sd = float(np.sqrt(np.mean(r**2)))
    order = np.argsort(x, kind="stable")
    best = (0.0, 0.0, name, float(x.min()), float(x.max()))
    for idx in np.array_split(order, bands):
        mean = float(r[idx].mean())
        t = abs(mean) / (sd / math.sqrt(idx.size)) if sd > 0 else 0.0
        if t > best[0]:
            best = (t, mean, name, float(x[idx].min()), float(x[idx].max()))
    return best


# ---------------------------------------------------------------------------------------------
# A prediction and an allocation
# ---------------------------------------------------------------------------------------------


def extrapolation_reasons(decades: float, reach: float | None, th: Thresholds, what: str = "compute") -> list[Reason]:
    """`decades` past the largest fitted run (in compute, or in N or D: `what`) against `reach`, the
    farthest distance in compute at which held-out runs were predicted when the interval was calibrated
    (None: it could not be)."""
    if decades <= 0:
        return []
    if reach is None or reach <= 0:
        return [
            Reason(
                "extrapolation",
                NOT_DETERMINED,
                f"{decades:.2g} decades of {what} past the largest run, and the interval could not be calibrated "
                "(too few runs to leave the largest out and refit)",
            )
        ]
    if decades <= reach:
        return []
    level = NOT_DETERMINED if decades > th.reach_nd * reach else WIDE
    tail = f" (not determined past {th.reach_nd:g} times that)" if level == NOT_DETERMINED else ""
    past, calibrated = _apart(decades, reach)
    text = f"{past} decades of {what} past the largest run; the interval was calibrated up to {calibrated} decades"
    return [Reason("extrapolation", level, text + tail)]


def _apart(a: float, b: float) -> tuple[str, str]:
    """a and b to 2 significant figures, or to as many more (up to 4) as it takes for a reader to see
    that they differ: 1.52 decades past a reach of 1.48 is not "1.5 past 1.5"."""
    for digits in (2, 3, 4):
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


def coverage_reasons(decades: float, cal, th: Thresholds | None = None) -> list[Reason]:
    """Whether the fit's own backtest covers at `decades` past the data: the calibration's refits below
    cuts, each predicting the runs above with this calibration's interval (calibration.adaptive), by
    distance. A target is trusted only where the band that holds its distance has at least
    th.backtest_min_runs runs and holds at least th.backtest_coverage of them; under
    th.backtest_coverage_nd of them it is not determined. Inside the data (d = 0) and for a
    calibration without bands (HULL, or fit.json files from before them) there is nothing to add:
    extrapolation_reasons speaks for the distance."""
    th = th or Thresholds()
    if decades <= 0 or not cal.bands:
        return []
    band = cal.band(decades)
    at = f"{decades:.2g} decades past the data"
    if band is None or band.n < th.backtest_min_runs:
        seen = "no held-out run" if band is None else f"only {band.n} held-out run{'s' * (band.n != 1)}"
        return [
            Reason(
                "backtest",
                WIDE,
                f"{at}, the fit's own backtest has {seen} to show that the interval covers there "
                f"(needs {th.backtest_min_runs})",
            )
        ]
    if band.coverage >= th.backtest_coverage:
        return []
    level = NOT_DETERMINED if band.coverage < th.backtest_coverage_nd else WIDE
    span = f"{band.lo:g} to {band.hi:g}" if math.isfinite(band.hi) else f"over {band.lo:g}"
    return [
        Reason(
            "backtest",
            level,
            f"the fit's own backtest under-covers at {at}: {band.inside} of {band.n} held-out runs "
            f"{span} decades past their cut inside the interval ({100 * band.coverage:.0f}%, under "
            f"{100 * th.backtest_coverage:.0f}%)",
        )
    ]


def interval_reasons(what: str, est: Estimate, factor_wide: float, factor_nd: float) -> list[Reason]:
    if est.ci95 is None:
        return []
    lo, hi = est.ci95
    factor = hi / lo if lo > 0 else math.inf
    if factor <= factor_wide:
        return []
    level = NOT_DETERMINED if factor > factor_nd else WIDE
    limit = factor_nd if level == NOT_DETERMINED else factor_wide
    return [
        Reason(
            "interval_width",
            level,
            f"{what}'s 95% interval {_g(lo)} to {_g(hi)} spans a factor {_g(factor)} (over {limit:g})",
        )
    ]


def multiplier_extrapolation_reasons(decades: float, span: float, th: Thresholds) -> list[Reason]:
    """A compute multiplier `decades` past the largest compute both arms reached, which span `span`
    decades. Its interval is the two laws' bootstrap alone, with no calibration of the laws' error past
    the data (unlike a fit's prediction, calibration.py): any extrapolation is at least wide, and one
    further than multiplier_reach_share of the span the arms were measured over is not determined."""
    if decades <= 0:
        return []
    limit = th.multiplier_reach_share * span
    past = f"{decades:.2g} decades of compute past the largest compute both arms reached"
    if decades > limit:
        return [
            Reason(
                "extrapolation",
                NOT_DETERMINED,
                f"{past}, over {th.multiplier_reach_share:g} of the {span:.2g} decades they span",
            )
        ]
    return [Reason("extrapolation", WIDE, f"{past}: the interval leaves out how wrong the laws' form is there")]


def allocation_reasons(tokens_per_param: float, th: Thresholds) -> list[Reason]:
    if th.tokens_per_param_min <= tokens_per_param <= th.tokens_per_param_max:
        return []
    return [
        Reason(
            "allocation",
            NOT_DETERMINED,
            f"{_g(tokens_per_param)} tokens per parameter at the optimum, outside "
            f"{th.tokens_per_param_min:g} to {th.tokens_per_param_max:,.0f}",
        )
    ]


def _g(x: float) -> str:
    return f"{x:.3g}"
