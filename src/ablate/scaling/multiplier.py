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

Uncertainty: each arm's bootstrap (its own resamples, an arm-specific seed), paired sample by sample;
95% percentile intervals of m at each scale, of the trend and at the target. The trend is the exponent
k of m ~ C^k between the smallest and largest compute both arms reached: it grows (the interval of k
above 0), shrinks (below 0) or holds (the interval covers 0); it is not determined where the
multiplier at either end is not. Verdicts (trusted / wide /
not_determined, verdict.py, with the checks of checks.py and their Thresholds) are given to

    each arm's law      law_verdict, as for `ablate fit`'s L(C) (design, flat loss, bounds, residuals)
    each multiplier     the worse of the two laws' verdicts; its interval's width (hi / lo over
                        multiplier_factor_wide: wide; over multiplier_factor_nd: not determined); an
                        arm below the baseline's fitted E (no compute matches it): not determined
    the target          as a multiplier, and how far past the arms' common compute it lies (any
                        distance: wide, the interval being the bootstrap's alone; past
                        multiplier_reach_share of the span the arms were measured over: not
                        determined), and a law whose E the data do not determine: not determined,
                        for the extrapolation rests on where each law levels off
    the report          the worst of the laws and of the multipliers inside the data (the MLflow tag
                        ablate.fit_verdict, like approach 3's for a fit)

A not_determined multiplier has no number in any output, only the word and its reasons. E is fitted
above the data's entropy floor when it is known (single.py), so no arm's E lies below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ablate.scaling.bootstrap import CI_LEVEL, DEFAULT_BOOT, Estimate
from ablate.scaling.checks import (
    Thresholds,
    e_reasons,
    interval_reasons,
    law_verdict,
    multiplier_extrapolation_reasons,
    run_noise,
    single_facts,
)
from ablate.scaling.points import FitInputError, Points
from ablate.scaling.single import SingleLawFit, fit_single_law
from ablate.scaling.verdict import NOT_DETERMINED, Reason, Verdict

GROWS, HOLDS, SHRINKS = "grows", "holds", "shrinks"
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
    n_pairs: int  # bootstrap samples paired between the two laws


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
        """The worst of the arms' laws and of every multiplier inside the data (not the target's)."""
        return Verdict.worst(
            *(a.verdict for a in self.arms.values()), *(s.verdict for c in self.comparisons for s in c.scales)
        )


def fit_arms(
    groups: dict[str, Points],
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    entropy_floor: float | None = None,
    noise: float | None = None,
    thresholds: Thresholds | None = None,
) -> dict[str, Arm]:
    """L(C) over each arm's compute envelope, E bounded below by the entropy floor (when known), with
    its verdict; arm i draws its resamples with seed + i, so that two arms of equal size do not share
    their resampling pattern. `noise`: the run-to-run sd of log loss (None: from each arm's repeats)."""
    th = thresholds or Thresholds()
    arms = {}
    for i, (name, points) in enumerate(groups.items()):
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
) -> MultiplierReport:
    """Every arm of `groups` ({value: its points}) against `baseline`, one of them. With `shared`, each
    arm keeps only the (N, D) cells every arm has: laws fitted on different ladders compare ladders.
    `entropy_floor`: the data's floor (None: each arm's points' own, when they give one)."""
    if baseline not in groups:
        raise FitInputError(f"baseline={baseline} is not an arm (valid: {', '.join(groups)})")
    if len(groups) < 2:
        raise FitInputError(f"only one arm ({baseline}): a multiplier needs a baseline and at least one other arm")
    if target_C is not None and not (math.isfinite(target_C) and target_C > 0):
        raise FitInputError(f"target={target_C} is not a compute (valid: FLOPs > 0, e.g. 1e18)")
    ordered = {baseline: groups[baseline], **{k: v for k, v in groups.items() if k != baseline}}
    ordered, dropped = shared_cells(ordered) if shared else (ordered, {k: 0 for k in ordered})
    if entropy_floor is None:
        floors = {p.entropy_floor for p in ordered.values()} - {None}
        if len(floors) > 1:
            raise FitInputError(
                f"the arms give different entropy floors ({', '.join(f'{f:.4g}' for f in sorted(floors))}): "
                "arms of one ablation see the same data (valid: entropy_floor=<one floor>)"
            )
        entropy_floor = floors.pop() if floors else None
    th = thresholds or Thresholds()
    arms = fit_arms(ordered, n_boot=n_boot, seed=seed, entropy_floor=entropy_floor, noise=noise, thresholds=th)
    base = arms[baseline]
    comparisons = tuple(_compare(arms[name], base, target_C, th) for name in arms if name != baseline)
    return MultiplierReport(key, baseline, arms, comparisons, target_C, entropy_floor, dropped, th)


def shared_cells(groups: dict[str, Points]) -> tuple[dict[str, Points], dict[str, int]]:
    """Each arm restricted to the (N, D) cells that every arm has (N and D to 6 significant digits)."""

    def cells(p: Points) -> list[tuple[float, float]]:
        return [(float(f"{n:.6g}"), float(f"{d:.6g}")) for n, d in zip(p.N, p.D, strict=True)]

    common = set.intersection(*(set(cells(p)) for p in groups.values()))
    if not common:
        raise FitInputError(
            f"the arms share no (params, tokens) cell ({', '.join(groups)}): train them on a shared ladder, "
            "or compare them anyway with shared=false"
        )
    kept, dropped = {}, {}
    for name, p in groups.items():
        idx = [i for i, c in enumerate(cells(p)) if c in common]
        kept[name], dropped[name] = p.subset(idx), len(p) - len(idx)
    return kept, dropped


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


def _compare(arm: Arm, base: Arm, target_C: float | None, th: Thresholds) -> Comparison:
    lo_a, hi_a = arm.C_range
    lo_b, hi_b = base.C_range
    C_lo, C_hi = max(lo_a, lo_b), min(hi_a, hi_b)
    if C_hi <= C_lo:
        raise FitInputError(
            f"arms {arm.name} and {base.name} reached no common compute ({lo_a:.3g}-{hi_a:.3g} and "
            f"{lo_b:.3g}-{hi_b:.3g} FLOPs): train them on a shared ladder"
        )
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
    ratio = Estimate(
        float(np.exp(k_value * np.log(C_hi / C_lo))),
        None if exponent.ci95 is None else tuple(float(np.exp(k * np.log(C_hi / C_lo))) for k in exponent.ci95),
    )
    direction = HOLDS
    if exponent.ci95 is not None and exponent.ci95[0] > 0:
        direction = GROWS
    elif exponent.ci95 is not None and exponent.ci95[1] < 0:
        direction = SHRINKS
    ends_verdict = Verdict.worst(at[0].verdict, at[-1].verdict)
    if not ends_verdict.usable:
        direction = NOT_DETERMINED
    trend = Trend(exponent, ratio, C_lo, C_hi, direction, ends_verdict)
    target = None
    if target_C:
        target = _at(target_C, arm, base, theta_a, theta_b, samples_a, samples_b)
        span = math.log10(C_hi / C_lo)
        decades = math.log10(target_C / C_hi) if target_C > C_hi else max(0.0, math.log10(C_lo / target_C))
        past = multiplier_extrapolation_reasons(decades, span, th)
        if past:  # an extrapolation rests on where each law levels off: on E
            past += [Reason("law", NOT_DETERMINED, f"{a.name}'s {r.text}") for a in (arm, base) for r in a.e_reasons]
        target = _checked(target, laws, th, past)
    top = max(C_hi, target_C or C_hi)
    grid = np.geomspace(C_lo, top, 60)
    curve = multiplier(grid, theta_a, theta_b)
    if n:
        band = _percentiles(multiplier(grid, samples_a, samples_b))
    else:
        band = (np.full_like(grid, np.nan), np.full_like(grid, np.nan))
    return Comparison(arm.name, base.name, at, trend, target, grid, curve, band[0], band[1], n)


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


def _checked(at: AtScale, laws: Verdict, th: Thresholds, extra: list[Reason] = ()) -> AtScale:
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
