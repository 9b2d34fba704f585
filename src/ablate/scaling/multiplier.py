"""Ablations as compute multipliers: what an arm of an ablation is worth in baseline compute, at each scale.

Each arm (a precision policy, an attention kernel, muP on or off, an optimizer setting) trains the same
ladder of sizes x budgets. Its law is L_a(C) = E_a + A_a / C^alpha_a, fitted over the arm's compute
envelope (single.py: the best loss reached with at most C training FLOPs, Kaplan et al. 2020, fig. 1).
The compute multiplier of arm a against baseline b at compute C is

    m(C) = C_b(L_a(C)) / C,   C_b(L) = (A_b / (L - E_b))^(1 / alpha_b)

the compute the baseline needs to reach the loss the arm reaches with C, over C: m > 1 is a gain (the
arm is worth m times its compute), m < 1 a cost. Where L_a(C) <= E_b no baseline compute matches the
arm: m is infinite. This is the "compute-equivalent gain" by which algorithmic progress is measured
(Ho et al. 2024, "Algorithmic progress in language models"; Hernandez & Brown 2020).

Two methods, one per comparison, the report saying which:

    paired      where the arm and the baseline share at least 3 cells run against run (the same N,
                D, data config and seed: multiplier_paired.py): each pair's log-loss offset,
                converted to compute through the baseline's law, log m(C) = mu + k log(C / C_c)
                fitted over the cells, a two-stage bootstrap of cells and seeds; the arm's own
                law is reported but not used
    unpaired    otherwise (different ladders, seeds or data): each arm's bootstrap (its own
                resamples, an arm-specific seed), paired sample by sample, through m(C) above

Each gives 95% intervals of m at each scale, at the centre of the compute range (the headline: the
cells' geometric mean, paired; the geometric midpoint of the range, unpaired), of the trend and at
the target. The trend is the exponent k of m ~ C^k between the smallest and largest compute both
arms reached: it grows (the interval of k above 0), shrinks (below 0) or holds (the interval covers
0); it is not determined where the multiplier at either end is not. Verdicts (trusted / wide /
not_determined, verdict.py, with the checks of checks.py and their Thresholds) are given to

    each arm's law      law_verdict, as for `ablate fit`'s L(C) (design, flat loss, bounds, residuals)
    each multiplier     its interval's width (hi / lo over multiplier_factor_wide: wide; over
                        multiplier_factor_nd: not determined); unpaired, the worse of the two laws'
                        verdicts and an arm below the baseline's fitted E (no compute matches it):
                        not determined; paired, a baseline law that is not determined makes it wide
                        (its size rests on the law's slope, its side on the pairs alone), a wide one
                        adds nothing (the slope's uncertainty is in the bootstrap)
    the target          as a multiplier, and how far past the arms' common compute it lies (any
                        distance: wide, the interval being the bootstrap's alone; past
                        multiplier_reach_share of the span the arms were measured over: not
                        determined), and a law it rests on whose E the data do not determine: not
                        determined, for the extrapolation rests on where the law levels off
    the report          the worst of the multipliers inside the data, each with the laws it rests on
                        (the MLflow tag ablate.fit_verdict, like approach 3's for a fit)

A not_determined multiplier has no number in any output, only the word and its reasons. E is fitted
above the data's entropy floor when it is known (single.py), so no arm's E lies below it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ablate.scaling.checks import (
    Thresholds,
    e_reasons,
    interval_reasons,
    law_verdict,
    multiplier_extrapolation_reasons,
    run_noise,
    single_facts,
)
from ablate.scaling.fitting.bootstrap import CI_LEVEL, DEFAULT_BOOT, Estimate
from ablate.scaling.laws.single import SingleLawFit, fit_single_law
from ablate.scaling.multiplier_paired import MIN_UNITS, PairedFit, fit_paired, pair_runs, run_keys
from ablate.scaling.points import FitInputError, Points
from ablate.scaling.verdict import NOT_DETERMINED, WIDE, Reason, Verdict

GROWS, HOLDS, SHRINKS = "grows", "holds", "shrinks"
PAIRED, UNPAIRED = "paired", "unpaired"
SCALES_PER_DECADE = 2  # the table's compute scales: 10^(k/2) inside the range both arms reached


@dataclass(frozen=True)
class Arm:
    """One arm: its value of the ablated key, its runs and its law L(C)."""

    name: str
    points: Points
    law: SingleLawFit
    verdict: Verdict  # the law's (checks.law_verdict)
    e_reasons: tuple[Reason, ...] = ()  # why its E is not determined (empty: it is)

    @property
    def C_range(self) -> tuple[float, float]:
        return float(self.law.x.min()), float(self.law.x.max())


@dataclass(frozen=True)
class AtScale:
    C: float
    multiplier: Estimate  # m(C) and its 95% interval; inf where no baseline compute matches
    arm_loss: float  # L_a(C)
    baseline_loss: float  # L_b(C)
    verdict: Verdict = Verdict.of(())  # not usable: the multiplier is not determined, no number is shown

    @property
    def shown(self) -> Estimate | None:
        """The multiplier where its verdict lets it be printed, else None."""
        return self.multiplier if self.verdict.usable else None


@dataclass(frozen=True)
class Trend:
    exponent: Estimate  # k in m ~ C^k between C_lo and C_hi
    ratio: Estimate  # m(C_hi) / m(C_lo)
    C_lo: float
    C_hi: float
    direction: str  # grows | holds | shrinks | not_determined (as its verdict)
    verdict: Verdict = Verdict.of(())  # the worse of the multipliers' at C_lo and C_hi

    def sentence(self) -> str:
        if not self.verdict.usable:
            return (
                f"is not determined with scale from {self.C_lo:.2g} to {self.C_hi:.2g} FLOPs: "
                f"{self.verdict.reasons[0].text}"
            )
        lo, hi = self.ratio.ci95 or (math.nan, math.nan)
        return (
            f"{self.direction} with scale: from {self.C_lo:.2g} to {self.C_hi:.2g} FLOPs the multiplier changes by "
            f"x{self.ratio.value:.3g} (95% interval x{lo:.3g} to x{hi:.3g}; m ~ C^{self.exponent.value:+.3f})"
        )


@dataclass(frozen=True)
class Comparison:
    """One arm against the baseline."""

    arm: str
    baseline: str
    scales: tuple[AtScale, ...]  # inside the compute range both arms reached
    trend: Trend
    target: AtScale | None
    curve_C: np.ndarray  # (g,) compute grid for the plot, data range and on to the target
    curve: np.ndarray  # (g,) m(C)
    curve_lo: np.ndarray  # (g,)
    curve_hi: np.ndarray  # (g,)
    n_pairs: int  # bootstrap samples behind each interval
    headline: AtScale  # at the centre of the compute range (the cells' geometric mean, paired)
    method: str = UNPAIRED  # PAIRED or UNPAIRED
    paired: PairedFit | None = None  # the run-against-run fit, when paired
    why_unpaired: str = ""  # what kept the arms from being compared run against run


@dataclass(frozen=True)
class MultiplierReport:
    key: str  # the ablated config key (e.g. precision.name)
    baseline: str
    arms: dict[str, Arm]  # every arm, the baseline included
    comparisons: tuple[Comparison, ...]
    target_C: float | None
    entropy_floor: float | None
    dropped: dict[str, int]  # runs per arm left out because other arms lack their (N, D) cell
    thresholds: Thresholds = Thresholds()

    @property
    def verdict(self) -> Verdict:
        """The worst of every multiplier inside the data (not the target's), each carrying the laws it
        rests on."""
        return Verdict.worst(*(s.verdict for c in self.comparisons for s in c.scales))


def fit_arms(
    groups: dict[str, Points],
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    entropy_floor: float | None = None,
    noise: float | None = None,
    thresholds: Thresholds | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Arm]:
    """L(C) over each arm's compute envelope, E bounded below by the entropy floor (when known), with
    its verdict; arm i draws its resamples with seed + i, so that two arms of equal size do not share
    their resampling pattern. `noise`: the run-to-run sd of log loss (None: from each arm's repeats).
    progress(label, done, total) as each arm's fit starts (its bootstrap is most of the time)."""
    th = thresholds or Thresholds()
    arms = {}
    for i, (name, points) in enumerate(groups.items()):
        if progress is not None:
            progress(f"arm {name}", i, len(groups))
        try:
            law = fit_single_law(points, "C", floor=entropy_floor, n_boot=n_boot, seed=seed + i)
        except FitInputError as exc:
            raise FitInputError(f"arm {name}: {exc}") from None
        facts = single_facts(law, entropy_floor is not None)
        verdict = law_verdict(facts, run_noise(points.N, points.D, points.L, noise), th)
        arms[name] = Arm(name, points, law, verdict, tuple(e_reasons(facts, th)) if facts.converged else ())
    return arms


def compare_arms(
    groups: dict[str, Points],
    baseline: str,
    *,
    key: str = "arm",
    target_C: float | None = None,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    entropy_floor: float | None = None,
    shared: bool = True,
    noise: float | None = None,
    thresholds: Thresholds | None = None,
    keys: dict[str, list[tuple]] | None = None,
    paired: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> MultiplierReport:
    """Every arm of `groups` ({value: its points}) against `baseline`, one of them. With `shared`, each
    arm keeps only the (size, D) cells every arm has: laws fitted on different ladders compare ladders.
    `entropy_floor`: the data's floor (None: each arm's points' own, when they give one). `keys`: each
    arm's runs' pairing keys (multiplier_paired.run_keys; None: (N, D) alone, as for runs of one sweep
    that record no seed); with `paired`, arms that share cells run against run are compared so.
    progress(label, done, total): each arm's fit, then each comparison (a terminal's bar, cli/compare.py)."""
    if baseline not in groups:
        raise FitInputError(f"baseline={baseline} is not an arm (valid: {', '.join(groups)})")
    if len(groups) < 2:
        raise FitInputError(f"only one arm ({baseline}): a multiplier needs a baseline and at least one other arm")
    if target_C is not None and not (math.isfinite(target_C) and target_C > 0):
        raise FitInputError(f"target={target_C} is not a compute (valid: FLOPs > 0, e.g. 1e18)")
    ordered = {baseline: groups[baseline], **{k: v for k, v in groups.items() if k != baseline}}
    keys = {k: (keys or {}).get(k) or run_keys(p) for k, p in ordered.items()}
    kept = _shared_index(ordered, keys) if shared else {k: np.arange(len(p)) for k, p in ordered.items()}
    dropped = {k: len(p) - len(kept[k]) for k, p in ordered.items()}
    ordered = {k: p.subset(kept[k]) for k, p in ordered.items()}
    keys = {k: [keys[k][i] for i in kept[k]] for k in ordered}
    if entropy_floor is None:
        floors = {p.entropy_floor for p in ordered.values() if p.entropy_floor is not None}
        if len(floors) > 1:
            raise FitInputError(
                f"the arms give different entropy floors ({', '.join(f'{f:.4g}' for f in sorted(floors))}): "
                "arms of one ablation see the same data (valid: entropy_floor=<one floor>)"
            )
        entropy_floor = floors.pop() if floors else None
    th = thresholds or Thresholds()
    steps = 2 * len(ordered) - 1  # every arm's fit, then every arm against the baseline
    arms = fit_arms(
        ordered, n_boot=n_boot, seed=seed, entropy_floor=entropy_floor, noise=noise, thresholds=th,
        progress=None if progress is None else lambda label, i, _: progress(label, i, steps),
    )  # fmt: skip
    base = arms[baseline]
    comparisons: list[Comparison] = []
    for name in (n for n in arms if n != baseline):
        if progress is not None:
            progress(f"{name} against {baseline}", len(arms) + len(comparisons), steps)
        fit, why = None, "paired=false"
        if paired:
            fit, why = _paired_fit(arms[name], keys[name], base, keys[baseline])
        comparisons.append(
            _compare_paired(arms[name], base, fit, target_C, th)
            if fit is not None
            else replace(_compare(arms[name], base, target_C, th), why_unpaired=why)
        )
    if progress is not None:
        progress("done", steps, steps)
    return MultiplierReport(key, baseline, arms, tuple(comparisons), target_C, entropy_floor, dropped, th)


def shared_cells(groups: dict[str, Points]) -> tuple[dict[str, Points], dict[str, int]]:
    """Each arm restricted to the (N, D) cells that every arm has (N and D to 6 significant digits)."""
    kept = _shared_index(groups, {k: run_keys(p) for k, p in groups.items()})
    return {k: p.subset(kept[k]) for k, p in groups.items()}, {k: len(p) - len(kept[k]) for k, p in groups.items()}


def _shared_index(groups: dict[str, Points], keys: dict[str, list[tuple]]) -> dict[str, np.ndarray]:
    """Each arm's runs in the (size, D) cells that every arm has (run_keys: the size a model's name
    or its N)."""
    cells = {k: [key[:2] for key in keys[k]] for k in groups}
    common = set.intersection(*(set(c) for c in cells.values()))
    if not common:
        raise FitInputError(
            f"the arms share no (params, tokens) cell ({', '.join(groups)}): train them on a shared ladder, "
            "or compare them anyway with shared=false"
        )
    return {k: np.array([i for i, c in enumerate(cs) if c in common], int) for k, cs in cells.items()}


def multiplier(C, arm: np.ndarray, base: np.ndarray) -> np.ndarray:
    """m(C) for law parameters (E, A, alpha): arm and base (3,) or (R, 3); C (g,). Returns (g,) or (R, g);
    inf where the arm's loss is at or below the baseline's E."""
    C = np.asarray(C, float)
    a, b = np.atleast_2d(arm), np.atleast_2d(base)
    Ea, Aa, aa = (a[:, j : j + 1] for j in range(3))
    Eb, Ab, ab = (b[:, j : j + 1] for j in range(3))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gap = Ea + Aa * C[None] ** -aa - Eb  # L_a(C) - E_b
        log_Cb = (np.log(Ab) - np.log(gap)) / ab
        m = np.where(gap > 0, np.exp(log_Cb - np.log(C)[None]), np.inf)
    return m[0] if np.ndim(arm) == 1 and np.ndim(base) == 1 else m


def _common_range(arm: Arm, base: Arm) -> tuple[float, float]:
    lo_a, hi_a = arm.C_range
    lo_b, hi_b = base.C_range
    C_lo, C_hi = max(lo_a, lo_b), min(hi_a, hi_b)
    if C_hi <= C_lo:
        raise FitInputError(
            f"arms {arm.name} and {base.name} reached no common compute ({lo_a:.3g}-{hi_a:.3g} and "
            f"{lo_b:.3g}-{hi_b:.3g} FLOPs): train them on a shared ladder"
        )
    return C_lo, C_hi


def _compare(arm: Arm, base: Arm, target_C: float | None, th: Thresholds) -> Comparison:
    """Unpaired: each arm's own law, their bootstrap samples paired index by index."""
    C_lo, C_hi = _common_range(arm, base)
    theta_a, theta_b = _theta(arm.law), _theta(base.law)
    samples_a, samples_b = _samples(arm.law), _samples(base.law)
    n = min(len(samples_a), len(samples_b))
    samples_a, samples_b = samples_a[:n], samples_b[:n]
    scales = _scales(C_lo, C_hi)
    laws = Verdict.worst(_from_law(arm), _from_law(base))
    at = tuple(_checked(_at(C, arm, base, theta_a, theta_b, samples_a, samples_b), laws, th) for C in scales)
    ends = np.array([C_lo, C_hi])
    m_ends = multiplier(ends, theta_a, theta_b)
    k_value = float(np.log(m_ends[1] / m_ends[0]) / np.log(C_hi / C_lo))
    if n:
        m_s = multiplier(ends, samples_a, samples_b)
        with np.errstate(divide="ignore", invalid="ignore"):
            k_s = np.log(m_s[:, 1] / m_s[:, 0]) / np.log(C_hi / C_lo)
    else:
        k_s = np.empty(0)
    exponent = _estimate(k_value, k_s)
    trend = _trend(exponent, C_lo, C_hi, at)
    target = None
    if target_C:
        target = _at(target_C, arm, base, theta_a, theta_b, samples_a, samples_b)
        target = _checked(target, laws, th, _past(target_C, C_lo, C_hi, (arm, base), th))
    mid = math.sqrt(C_lo * C_hi)
    headline = _checked(_at(mid, arm, base, theta_a, theta_b, samples_a, samples_b), laws, th)
    top = max(C_hi, target_C or C_hi)
    grid = np.geomspace(C_lo, top, 60)
    curve = multiplier(grid, theta_a, theta_b)
    if n:
        band = _percentiles(multiplier(grid, samples_a, samples_b))
    else:
        band = (np.full_like(grid, np.nan), np.full_like(grid, np.nan))
    return Comparison(arm.name, base.name, at, trend, target, grid, curve, band[0], band[1], n, headline)


def _trend(exponent: Estimate, C_lo: float, C_hi: float, at: tuple[AtScale, ...]) -> Trend:
    """m ~ C^k from C_lo to C_hi: grows, holds or shrinks by k's interval; the worse verdict of its ends."""
    span = math.log(C_hi / C_lo)
    ratio = Estimate(
        float(math.exp(exponent.value * span)),
        None
        if exponent.ci95 is None
        else (float(math.exp(exponent.ci95[0] * span)), float(math.exp(exponent.ci95[1] * span))),
    )
    direction = HOLDS
    if exponent.ci95 is not None and exponent.ci95[0] > 0:
        direction = GROWS
    elif exponent.ci95 is not None and exponent.ci95[1] < 0:
        direction = SHRINKS
    ends_verdict = Verdict.worst(at[0].verdict, at[-1].verdict)
    if not ends_verdict.usable:
        direction = NOT_DETERMINED
    return Trend(exponent, ratio, C_lo, C_hi, direction, ends_verdict)


def _past(target_C: float, C_lo: float, C_hi: float, laws: tuple[Arm, ...], th: Thresholds) -> list[Reason]:
    """The target's distance past [C_lo, C_hi]; past it, each law's undetermined E (the extrapolation
    rests on where the law levels off)."""
    span = math.log10(C_hi / C_lo)
    decades = math.log10(target_C / C_hi) if target_C > C_hi else max(0.0, math.log10(C_lo / target_C))
    past = multiplier_extrapolation_reasons(decades, span, th)
    if past:
        past += [Reason("law", NOT_DETERMINED, f"{a.name}'s {r.text}") for a in laws for r in a.e_reasons]
    return past


def _paired_fit(arm: Arm, arm_keys: list[tuple], base: Arm, base_keys: list[tuple]) -> tuple[PairedFit | None, str]:
    """The run-against-run fit, or None and why the arms cannot be compared so."""
    runs = pair_runs(arm.points, arm_keys, base.points, base_keys)
    if runs.n_units < MIN_UNITS or len(np.unique(runs.C)) < 2:
        return None, (
            f"{len(runs)} runs shared run against run (same size, tokens, data and seed) from "
            f"{runs.n_units} model instances (needs {MIN_UNITS}, at 2 computes or more)"
        )
    fit = fit_paired(runs, _theta(base.law), _samples(base.law))
    if fit is None:
        return None, f"at a shared cell {arm.name}'s loss, carried to {base.name}'s law, lies below its E"
    return fit, ""


def _compare_paired(arm: Arm, base: Arm, fit: PairedFit, target_C: float | None, th: Thresholds) -> Comparison:
    """Paired: the cells' log-multipliers (multiplier_paired.py), the baseline's law for the slope."""
    C_lo, C_hi = float(fit.runs.C.min()), float(fit.runs.C.max())
    law = []
    if not base.verdict.usable:
        law = [
            Reason(
                "law",
                WIDE,
                f"{base.name}'s law L(C) is not_determined: the multiplier's size rests on its slope "
                "(its side, on the pairs alone)",
            )
        ]
    at = tuple(_paired_at(C, fit, base, th, law) for C in _scales(C_lo, C_hi))
    trend = _trend(fit.exponent(), C_lo, C_hi, at)
    target = None
    if target_C:
        target = _paired_at(target_C, fit, base, th, law + _past(target_C, C_lo, C_hi, (base,), th))
    grid = np.geomspace(C_lo, max(C_hi, target_C or C_hi), 60)
    lo, hi = fit.band(grid)
    headline = _paired_headline(fit, base, th, law)
    return Comparison(
        arm.name,
        base.name,
        at,
        trend,
        target,
        grid,
        fit.value(grid),
        lo,
        hi,
        len(_samples(base.law)),
        headline,
        PAIRED,
        fit,
    )


def _paired_headline(fit: PairedFit, base: Arm, th: Thresholds, extra: list[Reason]) -> AtScale:
    """The pairs' mean multiplier, at their geometric-mean compute."""
    return _paired_at(fit.C_c, fit, base, th, extra, fit.headline())


def _paired_at(
    C: float, fit: PairedFit, base: Arm, th: Thresholds, extra: list[Reason], m: Estimate | None = None
) -> AtScale:
    """m(C) from the paired fit (or `m`); the arm's loss shown is the one it implies, L_b(m C)."""
    m = m or fit.at(C)
    own = list(extra) + interval_reasons("the multiplier", m, th.multiplier_factor_wide, th.multiplier_factor_nd)
    base_loss = float(base.law.law.loss(C))
    return AtScale(float(C), m, float(base.law.law.loss(m.value * C)), base_loss, Verdict.of(own))


def _at(C, arm, base, theta_a, theta_b, samples_a, samples_b) -> AtScale:
    value = float(multiplier([C], theta_a, theta_b)[0])
    samples = multiplier([C], samples_a, samples_b)[:, 0] if len(samples_a) else np.empty(0)
    return AtScale(float(C), _estimate(value, samples), float(arm.law.law.loss(C)), float(base.law.law.loss(C)))


def _from_law(arm: Arm) -> Verdict:
    """An arm's law verdict as one reason of a multiplier from it: its level and its worst reason."""
    if arm.verdict.trusted:
        return arm.verdict
    text = f"{arm.name}'s law L(C) is {arm.verdict.level}: {arm.verdict.reasons[0].text}"
    return Verdict.of([Reason("law", arm.verdict.level, text)])


def _checked(at: AtScale, laws: Verdict, th: Thresholds, extra: Sequence[Reason] = ()) -> AtScale:
    """`at` with its verdict: the laws', its interval's width, whether any compute matches, `extra`."""
    m = at.multiplier
    own = list(extra)
    if not math.isfinite(m.value):
        own.append(
            Reason(
                "unmatched",
                NOT_DETERMINED,
                f"the arm's loss {at.arm_loss:.4g} lies below the baseline's fitted E: no baseline compute matches it",
            )
        )
    else:
        own += interval_reasons("the multiplier", m, th.multiplier_factor_wide, th.multiplier_factor_nd)
    return replace(at, verdict=Verdict.worst(laws, Verdict.of(own)))


def _theta(fit: SingleLawFit) -> np.ndarray:
    return np.array([fit.law.E, fit.law.A, fit.law.alpha])


def _samples(fit: SingleLawFit) -> np.ndarray:
    """(R, 3) converged bootstrap samples in natural parameters, finite ones only."""
    if fit.bootstrap is None:
        return np.empty((0, 3))
    s = fit.bootstrap.usable()
    return s[np.all(np.isfinite(s), axis=1)]


def _scales(C_lo: float, C_hi: float) -> list[float]:
    """Half decades inside [C_lo, C_hi], with both ends; at least the two ends."""
    k0, k1 = math.ceil(SCALES_PER_DECADE * math.log10(C_lo)), math.floor(SCALES_PER_DECADE * math.log10(C_hi))
    inner = [10 ** (k / SCALES_PER_DECADE) for k in range(k0, k1 + 1)]
    inner = [c for c in inner if C_lo * 1.05 < c < C_hi / 1.05]
    return [C_lo, *inner, C_hi]


def _estimate(value: float, samples: np.ndarray) -> Estimate:
    """Value and 95% percentile interval; samples may be +inf (a match no compute buys), never NaN."""
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return Estimate(value)
    lo, hi = np.percentile(samples, [50 * (1 - CI_LEVEL), 50 * (1 + CI_LEVEL)], method="nearest")
    return Estimate(value, (float(lo), float(hi)))


def _percentiles(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore"):
        lo, hi = np.percentile(samples, [50 * (1 - CI_LEVEL), 50 * (1 + CI_LEVEL)], axis=0, method="nearest")
    return lo, hi
