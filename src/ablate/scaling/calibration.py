"""Intervals that cover and are no wider than they need to be: a prediction's 95% interval for the log
loss of one new run is built from three separate sources of error, each estimated from the data.

    curve   the parameters' uncertainty: the bootstrap's percentile interval of log L_hat at the
            target (bootstrap.py), b_lo below and b_hi above the fitted value
    run     one run's scatter about a curve it was not fitted to: sigma_run
    law     the law's error, growing with distance d (decades of compute past the largest fitted
            run): a drift mu * d that the refits below cuts inside the data share, give or take
            kappa * d

combined as

    lo = log L_hat + min(mu d, 0) - sqrt(b_lo^2 + z^2 (sigma_run^2 + kappa^2 d^2)),
    hi = log L_hat + max(mu d, 0) + sqrt(b_hi^2 + z^2 (sigma_run^2 + kappa^2 d^2)),   z = 1.96

(the bootstrap's half-width is already a 95% one; the two Gaussian terms are scaled to it). The
interval holds both readings of the cuts' history: that the law's error past the data has no mean
(an interval about the law), and that it goes on drifting as the refits below cuts did (the same
interval moved by mu d), so it is widened on the side the cuts drifted to. Neither reading alone
covers: on Epoch's Chinchilla points the drift inside the data does not carry on past it (moving the
interval drops coverage half a decade out to 84%), on this project's first text ladder it did, and
grew (an interval about the law held 86%).

The prediction is the law's value (HULL), or (ADAPTIVE, the default) that value moved by s mu d, the
drift read against the drift other ladders showed (posterior_drift: s = P^2 / (P^2 + se^2), P =
PRIOR_DRIFT, or 1 - se^2 / mu^2 where the drift stands that far beyond its own error), with mu
replaced by s mu in the interval and kappa by the sd of a new cut's drift (adaptive()); either stays
inside the interval. ADAPTIVE also keeps the interval's own backtest by
distance (CoverageBand), which the verdict reads: no prediction is trusted where the cuts' held-out
runs fell outside it too often.

Both sigma_run and (mu, kappa) come from refits below cuts inside the data (CUT_FRACTIONS of the runs'
log-C span). Each refit, with its own small bootstrap (CALIBRATION_BOOT resamples), predicts the runs
above its cut; e_i are their log errors, d_i their distances past the cut.

sigma_run is the maximum-likelihood sd s of the errors of the held-out runs within NEAR_DECADES of their
cut under e ~ N(0, curve_sd^2 + s^2), so that the refit's own curve error is not counted twice; at
least the fit's in-sample scatter (run_sigma: the winsorized RMS log residual over n - p) and the
seed-to-seed noise floor (checks.run_noise). In-sample residuals alone understate it: the fit was
drawn towards them.

mu and kappa: each cut's drift is the least-squares slope b_j = sum d e / sum d^2 (a wrong exponent
makes exactly such an error, linear in log C). Part of a drift is not the law's: the refit's parameter
error (the spread of the same slope over its bootstrap laws) and the runs' scatter
(sigma_run^2 / sum d^2) move it too, and both are already in the curve and run terms. So with v_j their
variance, the drifts are modelled as b_j ~ N(mu, tau^2 + v_j) (a random-slope model, Gelman et al.,
BDA 3rd ed., ch. 5): mu the drift the cuts share, tau their spread beyond what the refits' own
uncertainty explains, both at the maximum of the likelihood; kappa = sqrt(mu^2 + tau^2), at least
sigma_run per decade (the floor: a misfit below one run's scatter per decade is not resolved by a
few cuts). Taking the drifts' RMS instead counts the refits' own error, larger than the full fit's,
as the law's, and gives intervals several times the errors.
`reach` is the farthest distance at which a held-out run was predicted: past it the terms are
extrapolated, and checks.py says so.

How well this covers, and how wide it is, is measured, not assumed: backtest.py fits below several
cut points and counts how often the interval holds the runs above and how wide it is against the
errors (docs/fitting.md has the tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ablate.scaling.points import FitInputError, Points

Z95 = 1.959963984540054  # the normal's 97.5% quantile
CUT_FRACTIONS = (0.4, 0.5, 0.6, 0.7, 0.8)
CALIBRATION_BOOT = 40  # bootstrap resamples of each refit below a cut: enough for the sd of one slope
NEAR_DECADES = 0.5  # held-out runs this close to their cut measure one run's out-of-sample scatter
WINSOR = 3.0  # residuals beyond this many robust sds count as that many in sigma_run
ADAPTIVE = "adaptive"  # the hull on the drift read against other ladders', the prediction moved by it (default)
HULL = "hull"  # the law's value, the interval widened to the drift: how intervals were built before
INTERVAL_METHODS = (ADAPTIVE, HULL)
BAND_EDGES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)  # decades past the data: the backtest's bands
# The law's drift per decade where no cut of this ladder has looked (past `reach`): the RMS drift of
# the refits below cuts on the five public ladders of tests/fixtures, over the backtest's fits, each
# drift measured to better than 0.02 per decade (0.012 Chinchilla, 0.020 to 0.029 Marin's three, 0.034
# fineweb_c4; 0.022 pooled, 0.020 to 0.026 leaving any one ladder out), taken as 0.02. What other
# ladders showed stands in for what this one cannot show (ADAPTIVE only).
UNSEEN_DRIFT = 0.02
# The same figure is the prior the ladder's own drift is read against (ADAPTIVE, posterior_drift): the
# drift mu the cuts share is drawn, ladder to ladder, from N(0, PRIOR_DRIFT^2), and the cuts' spread tau
# about it is pooled with PRIOR_DRIFT as if PRIOR_CUTS more cuts had shown it (normal-normal
# shrinkage, Efron and Morris 1975; Gelman et al., BDA 3rd ed., sec. 5.4). Leaving any one public ladder
# out gives 0.020 to 0.026; at 0.026 the backtest's coverage by band rises by 0 to 5 points and its
# half-width over the error by 0.1 to 0.6, and PRIOR_CUTS 1 to 4 moves them by at most 2 points and
# 0.4 (docs/fitting.md).
PRIOR_DRIFT = UNSEEN_DRIFT
PRIOR_CUTS = 1
# What a ladder's own cuts do not show (ADAPTIVE): the drift past the data beyond the posterior drift
# of the cuts below it. On the six public ladders of tests/fixtures, each backtest cut's held-out runs
# against its prediction without this term (benchmarks/bench_backtest.py past, results/past_drift.json):
# the least-squares slope of log(actual / predicted) on decades past the cut has mean -0.0104 and sd
# 0.0207 over 30 cuts (-0.0076 to -0.0117 and 0.016 to 0.022 leaving any one ladder out; 21 of the 30
# negative, 19 of the 24 above each ladder's lowest cut). A law fitted to the smaller runs predicts the larger ones
# too high, further past by more, and by more than its own cuts measure inside the data: the drift
# grows with scale on every GPU-scale ladder (docs/fitting.md). The prediction moves PAST_DRIFT d
# further; PAST_DRIFT_SD (d - NEAR_DECADES) joins the interval in quadrature (past_spread).
PAST_DRIFT = -0.010
PAST_DRIFT_SD = 0.021
FORMULAS = {
    HULL: (
        "log L 95% interval: lo = log L_hat + min(mu d, 0) - sqrt(b_lo^2 + z^2 (sigma_run^2 + kappa^2 d^2)), "
        "hi = log L_hat + max(mu d, 0) + sqrt(b_hi^2 + z^2 (sigma_run^2 + kappa^2 d^2)); b the bootstrap's "
        "percentile half-width on that side, sigma_run the held-out runs' scatter near their cut (at least the "
        "in-sample scatter and the noise floor), d decades of compute past the largest fitted run, mu the drift "
        "of the log error per decade that the refits below cuts share (b_j ~ N(mu, tau^2 + v_j) at the maximum "
        "likelihood, v_j what each refit's own bootstrap and run scatter explain), kappa = sqrt(mu^2 + tau^2), "
        "at least sigma_run per decade"
    ),
    ADAPTIVE: (
        "the hull's interval (below) with mu read against the public ladders' drift, P = 0.02 per decade: mu "
        "~ N(0, P^2) and tau^2 pooled with P^2 as one more cut; mu replaced by s mu, s = P^2 / (P^2 + se^2) or "
        "1 - se^2 / mu^2 where that is more, se the standard error of mu, and kappa by sqrt((s mu)^2 + "
        f"tau_pooled^2 + s se^2 + {PAST_DRIFT_SD:g}^2); past the farthest calibrated distance r also 0.02 (d - r) "
        "per decade in quadrature (what the public ladders' cuts drifted); the prediction log L_hat + (s mu + o) "
        f"d, o = {PAST_DRIFT:g} +- {PAST_DRIFT_SD:g} per decade the drift past the data that the public ladders' own "
        "cuts did not show; "
        "a prediction is trusted only at a distance where the "
        "cuts' own held-out runs lie inside this interval at least 90% of the time"
    ),
}


def warm_grid(law, floor: float = 0.0) -> np.ndarray:
    """Starts for refits near `law` (either form, chinchilla.FORMS): the law itself (E at least the
    floor), then its form's coarse grid (law.COARSE), in the starts' layout (LseHuber.starts)."""
    start = law.start()
    start[0] = math.log(max(law.E, floor, 1e-12))
    return np.vstack([start, law.COARSE])


@dataclass(frozen=True)
class CalibrationCut:
    """One refit below a cut: fitted on runs with C <= C_cut, predicting the runs above it."""

    C_cut: float
    n_fit: int
    n_held: int
    reach: float  # decades past the largest fitted run of the farthest held-out run
    drift: float | None  # log error (actual - predicted) per decade past the cut; None: not refitted
    note: str = ""  # why it was not refitted

    def to_dict(self) -> dict:
        return {
            "C_cut": self.C_cut,
            "n_fit": self.n_fit,
            "n_held": self.n_held,
            "reach_decades": self.reach,
            "drift_per_decade": self.drift,
            "note": self.note,
        }


@dataclass(frozen=True)
class CoverageBand:
    """The calibration's own backtest at one range of distance past the data: of the n runs above a cut
    that its refit predicted from lo to hi decades past the cut's largest run, how many the interval
    (this calibration's, applied to that refit) held."""

    lo: float
    hi: float
    n: int
    inside: int

    @property
    def coverage(self) -> float:
        return self.inside / self.n if self.n else float("nan")

    def holds(self, decades: float) -> bool:
        return (self.lo < decades <= self.hi) or (self.lo == 0 and decades == 0)

    def to_dict(self) -> dict:
        return {"decades": [self.lo, None if math.isinf(self.hi) else self.hi], "n": self.n, "inside": self.inside}

    @classmethod
    def from_dict(cls, d: dict) -> CoverageBand:
        lo, hi = d["decades"]
        return cls(float(lo), math.inf if hi is None else float(hi), int(d["n"]), int(d["inside"]))


@dataclass(frozen=True)
class Calibration:
    """The terms a prediction's interval adds to the bootstrap's (module docstring)."""

    run_sigma: float  # sd of one run's log loss about the curve
    kappa: float | None  # sd of the law's log error per decade of compute past the data; None: no cut fitted
    reach: float | None  # farthest calibrated distance, decades of compute; None: no cut fitted
    cuts: tuple[CalibrationCut, ...] = ()
    drift: float = 0.0  # mu: the law's mean log error (actual - law) per decade past the data
    method: str = ADAPTIVE  # ADAPTIVE or HULL (adaptive(): what ADAPTIVE adds to HULL)
    drift_sd: float = 0.0  # the standard error of mu (ADAPTIVE)
    bands: tuple[CoverageBand, ...] = ()  # the calibration's own backtest by distance (ADAPTIVE)
    drift_share: float = 0.0  # the share of mu d the prediction is moved by (ADAPTIVE: adaptive())
    # PRIOR_DRIFT when the drift was read against it (the interval's drift side then reaches s mu d too);
    # 0 in fit.json files from before, whose interval reaches the whole mu d
    drift_prior: float = 0.0
    # PAST_DRIFT: the prediction's move per decade beyond drift_share * drift (ADAPTIVE); 0 in fit.json
    # files from before it
    drift_offset: float = 0.0
    drift_offset_sd: float = 0.0  # PAST_DRIFT_SD: its spread ladder to ladder, past NEAR_DECADES (ADAPTIVE)

    @property
    def calibrated(self) -> bool:
        return self.kappa is not None

    @property
    def corrects(self) -> bool:
        """Whether predictions past the data are moved toward the drift (ADAPTIVE, where the cuts show
        that it stands beyond its own error) rather than only the interval widened toward it (HULL)."""
        return self.method == ADAPTIVE and ((self.calibrated and self.drift_share > 0) or self.drift_offset != 0)

    def extra_sd(self, decades) -> np.ndarray:
        """sd of log loss beyond the curve's: sqrt(run_sigma^2 + (kappa d)^2), d = decades past the data;
        ADAPTIVE adds UNSEEN_DRIFT (d - reach) past the farthest distance the cuts predicted at."""
        d = np.maximum(np.asarray(decades, float), 0.0)
        kappa = self.kappa or 0.0
        # no cut of this ladder looked past `reach` (nowhere, when none could be refitted): the public
        # ladders' drift stands in; fit.json files from before the past drift left uncalibrated fits without
        seen = self.reach or 0.0
        unseen = (
            UNSEEN_DRIFT * np.maximum(d - seen, 0.0)
            if self.method == ADAPTIVE and (self.reach or self.drift_offset)
            else 0.0
        )
        return np.sqrt(self.run_sigma**2 + (kappa * d) ** 2 + unseen**2 + past_spread(self.drift_offset_sd, d) ** 2)

    def shift(self, decades) -> np.ndarray:
        """The log error at d decades past the data if the law drifts on as the cuts did: mu d."""
        return self.drift * np.maximum(np.asarray(decades, float), 0.0)

    def moved(self, decades) -> np.ndarray:
        """How far the prediction moves at d decades past the data (ADAPTIVE): (s mu + PAST_DRIFT) d."""
        return (self.drift_share * self.drift + self.drift_offset) * np.maximum(np.asarray(decades, float), 0.0)

    def reaches(self, decades) -> tuple[np.ndarray, np.ndarray]:
        """How far below and above the law's value the interval's ends reach before its width: the hull
        of the law's value and each reading of the drift. HULL: mu d. ADAPTIVE: the prediction's move,
        (s mu + PAST_DRIFT) d, and the ladder's own posterior drift s mu d without the past drift, so
        that a ladder whose cuts drift against the public ladders' is still held where its own
        drift carries it (its larger runs gaining less than the form says, where others gained more)."""
        if not self.drift_prior:
            side = self.shift(decades)
            return np.minimum(side, 0.0), np.maximum(side, 0.0)
        own = self.drift_share * self.shift(decades)
        moved = self.moved(decades)
        return np.minimum(np.minimum(moved, own), 0.0), np.maximum(np.maximum(moved, own), 0.0)

    def band(self, decades: float) -> CoverageBand | None:
        """The backtest band that holds a distance, None past every band."""
        return next((b for b in self.bands if b.holds(decades)), None)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "run_sigma": self.run_sigma,
            "kappa_per_decade": self.kappa,
            "drift_per_decade": self.drift,
            "drift_sd_per_decade": self.drift_sd,
            "drift_share": self.drift_share,
            "drift_prior_per_decade": self.drift_prior,
            "drift_offset_per_decade": self.drift_offset,
            "drift_offset_sd_per_decade": self.drift_offset_sd,
            "reach_decades": self.reach,
            "formula": FORMULAS[self.method],
            "backtest_by_distance": [b.to_dict() for b in self.bands],
            "cuts": [c.to_dict() for c in self.cuts],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        method = d.get("method")
        return cls(
            float(d["run_sigma"]),
            _opt(d.get("kappa_per_decade")),
            _opt(d.get("reach_decades")),
            drift=float(d.get("drift_per_decade") or 0.0),
            # fit.json files written before the adaptive interval hold the formula under `method`
            method=method if method in FORMULAS else HULL,
            drift_sd=float(d.get("drift_sd_per_decade") or 0.0),
            drift_share=float(d.get("drift_share") or 0.0),
            drift_prior=float(d.get("drift_prior_per_decade") or 0.0),
            drift_offset=float(d.get("drift_offset_per_decade") or 0.0),
            drift_offset_sd=float(d.get("drift_offset_sd_per_decade") or 0.0),
            bands=tuple(CoverageBand.from_dict(b) for b in d.get("backtest_by_distance") or ()),
        )


def _opt(x) -> float | None:
    return None if x is None else float(x)


def run_sigma(residuals: np.ndarray, n_params: int, floor: float = 0.0) -> float:
    """One run's scatter about the curve: the RMS of the log residuals winsorized at WINSOR robust sds
    (1.4826 x their median absolute value), over n - p degrees of freedom, and at least `floor`. A few
    runs far off the law (named by the verdict, checks.py) do not widen every interval."""
    r = np.asarray(residuals, float)
    n = r.size
    if n == 0:
        return float(floor)
    cap = WINSOR * 1.4826 * float(np.median(np.abs(r)))
    kept = np.clip(r, -cap, cap) if cap > 0 else r
    return max(float(np.sqrt(np.sum(kept**2) / max(n - n_params, 1))), float(floor))


@dataclass(frozen=True)
class HeldOut:
    """The runs above one cut as its refit predicted them: log errors e (actual - predicted), their
    distances d past the cut's largest run, the refit's curve sd at each, and the variance over the
    refit's bootstrap laws of the drift they would make (the part of a drift the refit's parameter
    error explains)."""

    e: np.ndarray
    d: np.ndarray
    curve_sd: np.ndarray
    boot_drift_var: float

    @property
    def drift(self) -> float:
        """The least-squares slope of e on d through 0: sum d e / sum d^2."""
        return float(np.sum(self.e * self.d) / np.sum(self.d**2))

    def drift_var(self, sigma: float) -> float:
        """The drift's variance without any misfit: the refit's parameter error and the runs' scatter."""
        return self.boot_drift_var + sigma**2 / float(np.sum(self.d**2))


def calibrate(
    points: Points,
    refit: Callable[[Points], object],
    sigma: float,
    fractions: tuple[float, ...] = CUT_FRACTIONS,
    n_params: int = 5,
    noise_floor: float = 0.0,
    method: str = ADAPTIVE,
    past: tuple[float, float] = (PAST_DRIFT, PAST_DRIFT_SD),
) -> Calibration:
    """sigma_run, kappa and reach from refits below cuts of the runs' log-C span (module docstring).
    refit(points) returns a fit with .converged, .law.loss(N, D) and .bootstrap (None, or .usable()
    laws as rows in its law's NAMES order), or raises FitInputError when the runs below a cut cannot
    support one (that cut is kept, with the reason). `sigma` is the full fit's in-sample run scatter
    (run_sigma), the least sigma_run can be. `method` ADAPTIVE also corrects the drift and scales the
    width to the cuts' own errors (adaptive()); HULL widens the interval toward the drift."""
    if method not in INTERVAL_METHODS:
        raise FitInputError(f"interval={method!r} is not a method (valid: {', '.join(INTERVAL_METHODS)})")
    logC = np.log10(points.C)
    lo, hi = float(logC.min()), float(logC.max())
    cuts, held, seen = [], [], set()
    for f in fractions:
        below = logC <= lo + f * (hi - lo) + 1e-12
        n_fit = int(below.sum())
        if n_fit in seen or n_fit == len(points):
            continue
        seen.add(n_fit)
        cut, errors = _cut(points, below, refit)
        cuts.append(cut)
        if errors is not None:
            held.append(errors)
    if not held:  # no cut could be refitted: ADAPTIVE still moves by, and widens to, the public ladders' drift
        if method != ADAPTIVE:
            return Calibration(sigma, None, None, tuple(cuts), method=method)
        return Calibration(
            sigma,
            None,
            None,
            tuple(cuts),
            method=method,
            drift_prior=PRIOR_DRIFT,
            drift_offset=past[0],
            drift_offset_sd=past[1],
        )
    scatter = near_scatter(held, max(sigma, noise_floor))
    drifts = np.array([h.drift for h in held])
    variances = np.array([h.drift_var(scatter) for h in held])
    reach = max(c.reach for c in cuts if c.drift is not None)
    # the floor: a law is not taken to drift by less than one run's scatter per decade
    mu, kappa = shared_drift(drifts, variances, scatter)
    if method == HULL:
        return Calibration(scatter, kappa, reach, tuple(cuts), drift=mu, method=HULL)
    return adaptive(held, scatter, reach, tuple(cuts), mu, kappa, past)


def adaptive(
    held: list[HeldOut],
    scatter: float,
    reach: float,
    cuts: tuple[CalibrationCut, ...],
    mu: float,
    kappa: float,
    past: tuple[float, float] = (PAST_DRIFT, PAST_DRIFT_SD),
) -> Calibration:
    """The ADAPTIVE calibration: the drift the cuts share read against what other ladders showed
    (posterior_drift), the prediction moved by it, HULL's interval built on it, and the interval's own
    backtest.

    A ladder's cuts measure its drift with an error se (one cut fitted on a few runs: 0.1 to 0.2 per
    decade on Marin's comma ladder), and its spread tau from 2 to 5 cuts; taken at face value the first
    moved intervals by 10% a decade and the second made them as narrow as the cuts happened to agree
    (comma's 45-run fit: 0.010 per decade, its next budget then 3% to 5% below every prediction).
    Read against the public ladders' drift, PRIOR_DRIFT, the prediction is log L_hat + s mu d with
    s = PRIOR_DRIFT^2 / (PRIOR_DRIFT^2 + se^2) (or 1 - se^2 / mu^2 where that is more), and the law's
    error per decade kappa = sqrt((s mu)^2 + tau_pooled^2 + s se^2): the posterior mean and sd of a new
    cut's drift. The interval reaches s mu d
    further on the drift's side (HULL), so the prediction stays inside it. `mu` and `kappa` as
    shared_drift gave them are replaced.

    The bands are the calibration's own backtest: each cut's held-out runs against the interval this
    calibration gives that cut's refit (its curve sd, sigma_run, kappa, and the posterior drift of the
    *other* cuts), counted by distance past the cut. checks.coverage_reasons lets no prediction be
    trusted at a distance where they under-cover."""
    drifts = np.array([h.drift for h in held])
    variances = np.array([h.drift_var(scatter) for h in held])
    post = posterior_drift(drifts, variances)
    offset, spread = past
    kappa = max(post.kappa, scatter)
    loco = [_others_drift(drifts, variances, j) for j in range(len(held))]
    d = np.concatenate([h.d for h in held])
    inside = np.concatenate(
        [_held_inside(h, (m, m + offset), scatter, kappa, spread) for m, h in zip(loco, held, strict=True)]
    )
    bands = tuple(
        CoverageBand(a, b, int(m.sum()), int(inside[m].sum()))
        for a, b in zip(BAND_EDGES[:-1], BAND_EDGES[1:], strict=True)
        if (m := ((d > a) & (d <= b)) | ((a == 0) & (d == 0))).any()
    )
    return Calibration(
        scatter,
        kappa,
        reach,
        cuts,
        drift=post.mu,
        method=ADAPTIVE,
        drift_sd=post.se,
        bands=bands,
        drift_share=post.share,
        drift_prior=PRIOR_DRIFT,
        drift_offset=offset,
        drift_offset_sd=spread,
    )


@dataclass(frozen=True)
class PosteriorDrift:
    """The cuts' shared drift read against the public ladders' (posterior_drift): mu and se as the cuts
    alone give them, the share s of mu that stands, and the sd per decade of a new cut's drift."""

    mu: float
    se: float
    share: float
    kappa: float


def posterior_drift(drifts: np.ndarray, variances: np.ndarray) -> PosteriorDrift:
    """The random-slope model's mu, tau and se (drift_terms) with mu ~ N(0, PRIOR_DRIFT^2) and tau^2
    pooled with PRIOR_DRIFT^2 over PRIOR_CUTS more cuts: mu's posterior is s mu with variance s se^2,
    s = PRIOR_DRIFT^2 / (PRIOR_DRIFT^2 + se^2), or 1 - se^2 / mu^2 where that is more (a drift its own
    error cannot explain), and a new cut's drift has sd sqrt((s mu)^2 + tau_pooled^2 + s se^2) about 0
    (its square mean)."""
    mu, tau, se = drift_terms(drifts, variances)
    prior = PRIOR_DRIFT**2
    n = len(drifts)
    # a drift many standard errors from 0 stands whatever other ladders showed (the positive-part
    # James-Stein share, Efron and Morris 1973; none from one cut): a law far off its own runs drifts
    # further than any public ladder did (this project's scaling study: -0.29 +- 0.04 per decade)
    stands = max(0.0, 1.0 - se**2 / mu**2) if (mu and n >= 2) else 0.0
    share = max(prior / (prior + se**2), stands)
    tau2 = (PRIOR_CUTS * prior + n * tau**2) / (PRIOR_CUTS + n)
    return PosteriorDrift(mu, se, share, math.sqrt((share * mu) ** 2 + tau2 + share * se**2))


def _others_drift(drifts: np.ndarray, variances: np.ndarray, j: int) -> float:
    """The posterior drift s mu from every cut but the j-th (0 with no other)."""
    others = np.arange(drifts.size) != j
    if not others.any():
        return 0.0
    post = posterior_drift(drifts[others], variances[others])
    return post.share * post.mu


def past_spread(sd: float, d) -> np.ndarray:
    """The public ladders' spread of the drift past the data, sd per decade, counted from NEAR_DECADES
    on: nearer, the ladder's own held-out runs measured its error (near_scatter)."""
    return sd * np.maximum(np.asarray(d, float) - NEAR_DECADES, 0.0)


def _held_inside(
    h: HeldOut, slopes: tuple[float, ...], scatter: float, kappa: float, spread: float = 0.0
) -> np.ndarray:
    """Which of a cut's held-out runs the interval holds, built for that cut's refit: its curve sd,
    sigma_run, kappa d and the past drift's spread in quadrature, its ends reaching each drift of
    `slopes` (per decade) on that drift's side (Calibration.reaches)."""
    half = Z95 * np.sqrt(h.curve_sd**2 + scatter**2 + (kappa * h.d) ** 2 + past_spread(spread, h.d) ** 2)
    shifts = [slope * h.d for slope in slopes]
    down = np.minimum(np.min(shifts, axis=0), 0.0)
    up = np.maximum(np.max(shifts, axis=0), 0.0)
    return (h.e >= down - half) & (h.e <= up + half)


def _cut(points: Points, below: np.ndarray, refit) -> tuple[CalibrationCut, HeldOut | None]:
    """Refit on the runs `below`; the errors of its predictions of the runs above."""
    logC = np.log10(points.C)
    n_fit = int(below.sum())
    held = np.flatnonzero(~below)
    top = float(logC[below].max()) if n_fit else float(logC.min())
    C_cut = float(10**top)
    d = logC[held] - top
    reach = float(d.max())
    try:
        fit = refit(points.subset(np.flatnonzero(below)))
    except FitInputError as exc:
        return CalibrationCut(C_cut, n_fit, held.size, reach, None, str(exc)), None
    if not fit.converged:
        return CalibrationCut(C_cut, n_fit, held.size, reach, None, "the refit did not converge"), None
    N, D = points.N[held], points.D[held]
    center = np.log(fit.law.loss(N, D))
    errors = HeldOut(np.log(points.L[held]) - center, d, *_bootstrap_terms(fit, N, D, center, d))
    return CalibrationCut(C_cut, n_fit, held.size, reach, errors.drift), errors


def _bootstrap_terms(fit, N: np.ndarray, D: np.ndarray, center: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, float]:
    """The refit's bootstrap sd of log L_hat at each run (from its 95% percentile range, robust to a
    few wild resamples) and the variance of the drift its bootstrap laws make; zeros without one."""
    boot = getattr(fit, "bootstrap", None)
    samples = boot.usable() if boot is not None else np.empty((0, 5))
    if len(samples) < 2:
        return np.zeros(N.shape), 0.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        logs = np.log(type(fit.law).sample_loss(samples, N, D))
        q_lo, q_hi = np.nanpercentile(logs, [2.5, 97.5], axis=0)
        slopes = ((logs - center) @ d) / float(np.sum(d * d))
    slopes = slopes[np.isfinite(slopes)]
    lo, hi = np.percentile(slopes, [2.5, 97.5]) if slopes.size >= 2 else (0.0, 0.0)
    return np.nan_to_num((q_hi - q_lo) / (2 * Z95), nan=0.0), float(((hi - lo) / (2 * Z95)) ** 2)


def near_scatter(held: list[HeldOut], floor: float, near: float = NEAR_DECADES, steps: int = 200) -> float:
    """One run's scatter about a curve it was not fitted to: the maximum-likelihood sd s of the errors of
    the held-out runs within `near` decades of their cut, e ~ N(0, curve_sd^2 + s^2), at least `floor`
    (in-sample residuals understate it: the fit was drawn towards them)."""
    e = np.concatenate([h.e[h.d <= near] for h in held])
    if e.size == 0:
        return floor
    v = np.concatenate([h.curve_sd[h.d <= near] for h in held]) ** 2
    top = max(float(np.sqrt(np.mean(e**2))), floor)
    grid = np.geomspace(max(floor, 1e-6), max(top, floor) * 1.0001 + 1e-9, steps)
    V = v[None] + grid[:, None] ** 2
    return float(grid[int(np.argmin(np.sum(np.log(V) + e[None] ** 2 / V, axis=1)))])


def shared_drift(
    drifts: np.ndarray, variances: np.ndarray, floor: float = 0.0, steps: int = 400
) -> tuple[float, float]:
    """(mu, kappa) from the cuts' drifts b_j ~ N(mu, tau^2 + v_j), v_j what the refit's own error and the
    runs' scatter make: mu the drift the cuts share (a form wrong the same way at every cut), tau their
    spread beyond v_j, kappa = sqrt(mu^2 + tau^2) at the maximum of the likelihood, at least `floor`."""
    mu, tau, _ = drift_terms(drifts, variances, steps)
    return mu, max(math.hypot(mu, tau), float(floor))


def drift_terms(drifts: np.ndarray, variances: np.ndarray, steps: int = 400) -> tuple[float, float, float]:
    """(mu, tau, se(mu)) of the random-slope model b_j ~ N(mu, tau^2 + v_j) at the maximum of the
    likelihood. For each tau on a log grid (to 10 times the largest drift or drift sd, 0 included) mu
    is its weighted mean, sum w b / sum w with w = 1 / (tau^2 + v_j), and se(mu) = 1 / sqrt(sum w).
    A drift its refit's uncertainty explains adds nothing."""
    b, v = np.asarray(drifts, float), np.asarray(variances, float)
    top = 10 * max(float(np.abs(b).max()), float(np.sqrt(v.max())), 1e-6)
    tau = np.concatenate([[0.0], np.geomspace(top * 1e-6, top, steps)])
    V = tau[:, None] ** 2 + v[None] + 1e-300
    w = 1.0 / V
    mu = np.sum(w * b[None], axis=1) / np.sum(w, axis=1)
    log_lik = -0.5 * np.sum(np.log(V) + (b[None] - mu[:, None]) ** 2 / V, axis=1)
    best = int(np.argmax(log_lik))
    return float(mu[best]), float(tau[best]), float(1.0 / math.sqrt(float(np.sum(w[best]))))


def log_interval(
    center: np.ndarray, samples: np.ndarray | None, decades: np.ndarray, cal: Calibration
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prediction and its 95% interval of log L: center (g,) the law's log L_hat, bootstrap samples
    of log L_hat (R, g) or None, decades (g,) past the data. Returns (value, lo, hi), each (g,).

    Each side's half-width is the bootstrap's on that side and Z95 * extra_sd added in quadrature,
    beyond how far that end reaches (Calibration.reaches): mu d on the side the cuts drifted to (HULL),
    or the prediction's move and the ladder's own s mu d, each on its side (ADAPTIVE). The value is the
    law's, moved by (s mu + PAST_DRIFT) d (ADAPTIVE; 0 for HULL): inside the interval."""
    center = np.asarray(center, float)
    low = high = np.zeros_like(center)
    if samples is not None and samples.shape[0]:
        q_lo, q_hi = np.nanpercentile(samples, [2.5, 97.5], axis=0)
        low, high = np.maximum(center - q_lo, 0.0), np.maximum(q_hi - center, 0.0)
    extra = Z95 * cal.extra_sd(decades)
    moved = cal.moved(decades)
    value = center + moved if cal.corrects else center
    down, up = cal.reaches(decades)
    return value, center + down - np.hypot(low, extra), center + up + np.hypot(high, extra)
