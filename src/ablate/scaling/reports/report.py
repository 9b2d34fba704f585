"""A FitReport for people: fit.md (tables) and the terminal summary (one line per law, allocation and
prediction, its verdict first). What is printed follows the verdict (verdict.py): a `trusted` or
`wide` number is printed with its interval (and, when wide, why); `not_determined` prints that word,
why, and for a prediction the runs that would determine it, instead of a number."""

from __future__ import annotations

import math

import numpy as np

from ablate.scaling.analysis import APPROACH3, FitReport
from ablate.scaling.calibration import NEAR_DECADES
from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.laws.chinchilla import law_text
from ablate.scaling.laws.frontier import Frontier, FrontierFit
from ablate.scaling.predict import Prediction, SuggestedRun, frontier
from ablate.scaling.verdict import NOT_DETERMINED, Verdict

NOT_CONVERGED = "DID NOT CONVERGE"
CONSOLE_REASONS = 3  # reasons shown on one console line; fit.md has them all
TITLES = {
    APPROACH3: "Chinchilla approach 3",
    "chinchilla_approach1": "Chinchilla approach 1",
    "chinchilla_approach2": "Chinchilla approach 2",
}


def title(method: str) -> str:
    return TITLES.get(method) or f"L({method.removeprefix('kaplan_')})"


def g(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.4g}"


def ci(e: Estimate | None) -> str:
    return "n/a (no bootstrap)" if e is None or e.ci95 is None else f"{g(e.ci95[0])} to {g(e.ci95[1])}"


WHOLE_RANGE = 0.9  # an interval over this share of its parameter's allowed range is said to be that range


def parameter_ci(name: str, e: Estimate, fit) -> str:
    """A parameter's 95% interval as text: "(fixed)" for a value the variant fixes (a = b = 0.5 with tied
    exponents), "tied to alpha" for beta then, and an E interval that covers almost all of its allowed
    range said in words, not as two numbers that look measured."""
    if fit.tied and name in ("a", "b"):
        return "none: tie_exponents fixes it"
    if fit.tied and name == "beta":
        return "tied to alpha"
    if name == "E" and e.ci95 is not None and math.isfinite(fit.upper) and fit.upper > fit.floor:
        share = (e.ci95[1] - e.ci95[0]) / (fit.upper - fit.floor)
        if share > WHOLE_RANGE:
            return (
                f"{ci(e)}: {100 * share:.0f}% of its allowed range {g(fit.floor)} to {g(fit.upper)}, "
                "not determined by the data"
            )
    return ci(e)


def parameter_rows(fit) -> list[list[str]]:
    """[name, value, 95% interval text] for approach 3's parameters and its exponents a, b."""
    return [
        [k, f"{g(v.value)} (fixed)" if fit.tied and k in ("a", "b") else g(v.value), parameter_ci(k, v, fit)]
        for k, v in {**fit.params, **fit.exponents}.items()
    ]


def duration(seconds: float) -> str:
    for div, unit in ((365.25 * 86400, "years"), (86400, "days"), (3600, "h"), (60, "min")):
        if seconds >= div:
            return f"{seconds / div:,.1f} {unit}"
    return f"{seconds:.0f} s"


def runs_text(runs: tuple[SuggestedRun, ...]) -> str:
    """'N=.., D=..; ... (each C=.. FLOPs, T on the fitted runs' hardware)'."""
    if not runs:
        return ""
    sizes = "; ".join(f"N={g(r.N)}, D={g(r.D)}" for r in runs)
    seconds = runs[0].seconds
    when = "the runs' timings are unknown" if seconds is None else f"{duration(seconds)} each on the runs' hardware"
    return f"{sizes} (C={g(runs[0].C)} FLOPs each; {when})"


def decade_frontier(result: FitReport) -> Frontier | None:
    """The frontier at each power of ten inside the report's frontier grid."""
    f = result.frontier
    if f is None or result.predictor is None:
        return None
    powers = range(int(np.ceil(np.log10(f.C.min()))), int(np.floor(np.log10(f.C.max()))) + 1)
    return frontier(result.predictor, [float(f"1e{k}") for k in powers]) if len(powers) else None


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _diag_line(d) -> str:
    return (
        f"Optimiser: objective {d.objective:.6g}, max |gradient| {d.grad_norm:.2g}, {d.n_iter} iterations, "
        f"{d.n_starts_at_best} of {d.n_starts} starts reached the best; RMS log residual {d.rms_residual:.3g}."
    )


def _md_verdict(v: Verdict) -> list[str]:
    return [f"**Verdict: {v.level}**"] + ([""] + [f"- {r.text} (`{r.code}`)" for r in v.reasons] if v.reasons else [])


def _target(p: Prediction) -> str:
    if p.compute_optimal:
        return f"C={g(p.C)} at its compute-optimal N={g(p.N.value)}, D={g(p.D.value)}"
    return f"N={g(p.N.value)}, D={g(p.D.value)} (C={g(p.C)})"


def suggestion_lines(result: FitReport) -> list[str]:
    """Approach 3 refitted without the runs furthest off the law (offlaw.py), for the console: the runs
    and the refit's verdict line, then its parameters when that verdict is usable; empty without one."""
    lines = []
    s = result.without_off_law
    if s is not None:
        runs = "; ".join(r.described() for r in s.runs)
        lines = [f"  suggestion, not applied: {s.verdict.line(f'without {runs}', CONSOLE_REASONS)}"]
        lines += [f"    refitted law: {s.params_line()}"] if s.verdict.usable else []
    o = result.other_form
    if o is not None and o.fit.converged:
        lines.append(f"  suggestion, not applied: {o.verdict.line(f'form={o.form}', CONSOLE_REASONS)}")
        lines.append(f"    {law_text(o.fit.law)} {o.scatter_line()}")
    return lines


# ---------------------------------------------------------------------------------------------
# fit.md
# ---------------------------------------------------------------------------------------------


def _md_data(result: FitReport) -> list[str]:
    s = result.points.summary()
    rows = [[k, g(s[k]["min"]), g(s[k]["max"])] for k in ("N", "D", "C", "L")]
    floor = result.points.entropy_floor
    lines = [
        f"{s['n_points']} points, {s['distinct_N']} distinct sizes; N counts {result.options.params} parameters; "
        + (f"entropy floor {g(floor)} (E is fitted above it)." if floor else "no entropy floor known."),
        f"Run-to-run noise: {g(result.noise.sigma)} in log loss, {result.noise.source}.",
        "",
    ]
    return lines + _table(["", "min", "max"], rows)


def _md_approach3(result: FitReport) -> list[str]:
    fit, verdict = result.approach3, result.verdicts[APPROACH3]
    if fit is None:
        return ["## Chinchilla approach 3: not fitted", ""] + _md_verdict(verdict)
    d = fit.diagnostics
    if not d.converged:
        return [f"## Chinchilla approach 3: {NOT_CONVERGED}", "", d.message + ".", "", _diag_line(d)]
    lines = [
        "## Chinchilla approach 3",
        "",
        *_md_verdict(verdict),
        "",
        *_md_without(result),
        *_md_other_form(result),
        f"{law_text(fit.law, fit.tied)} ({fit.law.SOURCE}).",
        "",
    ]
    lines += _table(["parameter", "value", "95% CI"], parameter_rows(fit))
    lines += [
        "",
        f"E is bounded to {g(fit.floor)} to {g(fit.upper)} (the data's floor, or 0, to the lowest loss); "
        f"the exponents to > 0. {fit.law.EXPONENTS}.",
        "",
        _diag_line(d),
    ]
    if fit.bootstrap is not None:
        b = fit.bootstrap
        lines.append(f"Bootstrap: {int(b.converged.sum())} of {b.n_resamples} resamples converged (seed {b.seed}).")
    cal = result.predictor.calibration if result.predictor is not None else None
    if cal is not None:
        lines += ["", "### Interval calibration", ""]
        if cal.calibrated:
            lines.append(
                f"A prediction's 95% interval adds, in quadrature to the bootstrap's, one run's scatter "
                f"(sd {g(cal.run_sigma)} in log loss) and the law's error, {g(cal.kappa)} per decade of compute past "
                f"the data (calibrated up to {g(cal.reach)} decades by refitting below these cuts){_drift_words(cal)}"
                f"{_correction_words(cal)}:"
            )
        else:
            lines.append("The law's error past the data could not be calibrated (no cut left a fit):")
        lines.append("")
        lines += _table(
            ["C cut", "runs fitted", "runs predicted", "reach (decades)", "drift per decade", "note"],
            [[g(c.C_cut), str(c.n_fit), str(c.n_held), g(c.reach), g(c.drift), c.note or ""] for c in cal.cuts],
        )
        if cal.bands:
            lines += [
                "",
                "The cuts' own backtest, with this interval: a prediction is `trusted` only at a distance where it "
                "holds at least 90% of at least 5 runs.",
                "",
            ]
            lines += _table(
                ["decades past the cut", "held-out runs", "inside the 95% interval"],
                [[_span(b.lo, b.hi), str(b.n), f"{b.inside} ({100 * b.coverage:.0f}%)"] for b in cal.bands],
            )
    return lines


def _md_without(result: FitReport) -> list[str]:
    """The refit without the runs furthest off the law, as a suggestion: the runs, its verdict with its
    reasons, its parameters when usable (empty without one)."""
    s = result.without_off_law
    if s is None:
        return []
    n = len(s.runs)
    head = (
        f"A suggestion, not applied (the fit above keeps every run): refitted without the {n} run"
        f"{'s' if n > 1 else ''} with the largest standardized residuals, approach 3 is **{s.verdict.level}**"
    )
    head += f" ({s.params_line()})." if s.verdict.usable else "."
    rows = [[g(r.at["N"]), g(r.at["D"]), g(r.tokens_per_param), r.how_far(), f"{r.residual_sd:+.1f}"] for r in s.runs]
    lines = ["### Without the runs furthest off the law", "", head, ""]
    lines += _table(["N", "D", "tokens per parameter", "off the law", "standardized residual"], rows)
    if s.verdict.reasons:
        lines += [""] + [f"- {r.text} (`{r.code}`)" for r in s.verdict.reasons]
    return lines + [""]


def _md_other_form(result: FitReport) -> list[str]:
    """The law's other form on the same runs, as a suggestion (empty when the runs do not break this one)."""
    o = result.other_form
    if o is None or not o.fit.converged:
        return []
    lines = [
        "### The other form",
        "",
        f"A suggestion, not applied: fitted to the same runs, {law_text(o.fit.law)} ({o.fit.law.SOURCE}) "
        f"{o.scatter_line()}, and is **{o.verdict.level}**; refit with `form={o.form}` to predict with it.",
        "",
    ]
    lines += _table(["parameter", "value", "95% CI"], parameter_rows(o.fit))
    if o.verdict.reasons:
        lines += [""] + [f"- {r.text} (`{r.code}`)" for r in o.verdict.reasons]
    return lines + [""]


def _md_frontier(result: FitReport) -> list[str]:
    f = decade_frontier(result)
    if f is None:
        return []
    rows = []
    for i, c in enumerate(f.C):
        if f.levels[i] == NOT_DETERMINED:
            rows.append([g(c), "", "", "", "", "", NOT_DETERMINED])
            continue
        rows.append(
            [
                g(c),
                g(f.N_opt[i]),
                g(f.D_opt[i]),
                g(f.tokens_per_param[i]),
                g(f.loss[i]),
                f"{g(f.loss_lo[i])} to {g(f.loss_hi[i])}",
                f.levels[i],
            ]
        )
    return ["## Compute-optimal frontier (approach 3, C = 6ND)", ""] + _table(
        ["C (FLOPs)", "N_opt", "D_opt", "D/N", "loss", "loss 95% interval", "verdict"], rows
    )


def _md_predictions(result: FitReport) -> list[str]:
    if not result.predictions:
        return []
    lines = ["## Predictions", ""]
    rows = []
    for p in result.predictions:
        loss = "" if p.loss is None else g(p.loss.value)
        interval = "" if p.loss is None else ci(p.loss)
        rows.append(
            [_target(p), loss, interval, p.verdict.level, ", ".join(f"`{c}`" for c in p.verdict.codes()) or "-"]
        )
    lines += _table(["target", "loss", "95% interval", "verdict", "reasons (listed at the top)"], rows)
    for p in result.predictions:
        if p.runs_to_determine:
            lines += [
                "",
                f"Runs that would determine the prediction for {_target(p)}: {runs_text(p.runs_to_determine)}.",
            ]
    return lines


def held_out_cells(r, inside: str, outside: str) -> list[str]:
    """predicted, error, interval, inside, verdict of a held-out run; a not_determined prediction prints
    that word and no number, as every not_determined prediction does."""
    if not r.verdict.usable:
        return [NOT_DETERMINED, "", "", "", NOT_DETERMINED]
    interval = f"{g(r.lo)} to {g(r.hi)}"
    return [g(r.predicted), f"{100 * r.rel_error:+.2f}%", interval, inside if r.inside else outside, r.verdict.level]


def _md_held_out(result: FitReport) -> list[str]:
    h = result.held_out
    if h is None or not h.cuts:
        return []
    cut = h.cuts[0]
    lines = [f"## Held-out validation (fit on {cut.n_fit} runs, the {cut.n_held} largest-compute held out)", ""]
    if cut.law is None:
        return lines + [f"The refit could not run: {cut.note}."]
    lines.append(f"The refit's verdict: {cut.law.level}" + (f" ({cut.law.because()})." if cut.law.reasons else "."))
    rows = [[g(r.N), g(r.D), g(r.C), g(r.actual), *held_out_cells(r, "yes", "no")] for r in h.runs]
    return (
        lines
        + [""]
        + _table(["N", "D", "C", "actual", "predicted", "error", "95% interval", "inside", "verdict"], rows)
    )


def _md_floor(result: FitReport) -> list[str]:
    f = result.entropy_floor
    if f is None:
        return []
    return [
        "## Entropy floor",
        "",
        f"Known floor {g(f.floor)}: E is fitted at or above it. Fitted E {g(f.fitted.value)} (95% CI {ci(f.fitted)}); "
        f"E - floor = {f.difference:+.4g}.",
    ]


def _md_frontier_fit(fit: FrontierFit, verdict: Verdict) -> list[str]:
    name = {
        "approach1": "Chinchilla approach 1 (training-curve envelope)",
        "approach2": "Chinchilla approach 2 (iso-FLOP parabolas near each minimum)",
    }[fit.method]
    rows = [
        ["N_opt = k C^a", g(fit.n_opt.k.value), ci(fit.n_opt.k), g(fit.n_opt.exponent.value), ci(fit.n_opt.exponent)],
        ["D_opt = k C^b", g(fit.d_opt.k.value), ci(fit.d_opt.k), g(fit.d_opt.exponent.value), ci(fit.d_opt.exponent)],
    ]
    lines = [f"## {name}", "", *_md_verdict(verdict), ""]
    lines += _table(["law", "k", "k 95% CI", "exponent", "exponent 95% CI"], rows)
    lines += ["", f"{len(fit.C)} optima from C = {g(fit.C.min())} to {g(fit.C.max())}."]
    return lines + [f"- {n}" for n in fit.notes]


def _md_single(result: FitReport) -> list[str]:
    if not result.single:
        return []
    lines = ["## Single-variable laws L(x) = E + A / x^alpha (Kaplan et al. 2020 form, Huber on log L)", ""]
    rows = []
    for var, fit in result.single.items():
        v = result.verdicts[f"kaplan_{var}"]
        if not fit.diagnostics.converged:
            rows.append([var, NOT_CONVERGED, "", "", "", "", v.because()])
            continue
        p = fit.params
        rows.append(
            [var]
            + [f"{g(p[k].value)} ({ci(p[k])})" for k in ("E", "A", "alpha")]
            + [str(len(fit.x)), v.level, v.because() or "-"]
        )
    return lines + _table(["x", "E (95% CI)", "A (95% CI)", "alpha (95% CI)", "points used", "verdict", "why"], rows)


def _md_decision(result: FitReport) -> list[str]:
    """The decision first, in one or two lines (approach 3's verdict, then each prediction's), then
    its reasons as a list with their codes, each reason once."""
    verdict = result.verdicts[APPROACH3]
    head = f"**Chinchilla approach 3: {verdict.level}.**"
    for p in result.predictions:
        if p.loss is None:
            head += f" Prediction for {_target(p)}: {NOT_DETERMINED}."
        else:
            head += f" Prediction for {_target(p)}: loss {g(p.loss.value)} ({ci(p.loss)}), {p.verdict.level}."
    if result.without_off_law is not None:
        head += (
            f" Without the runs furthest off the law: {result.without_off_law.verdict.level}"
            " (a suggestion, not applied; see approach 3)."
        )
    o = result.other_form
    if o is not None and o.fit.converged:
        head += (
            f" In the other form (form={o.form}): {o.verdict.level}, {o.rms / o.noise:.3g} times the noise"
            f" against {o.rms_fitted / o.noise:.3g} (a suggestion, not applied; see approach 3)."
        )
    reasons = Verdict.worst(verdict, *(p.verdict for p in result.predictions)).reasons
    return [head, ""] + ([f"- {r.text} (`{r.code}`, {r.level})" for r in reasons] or ["- no reason against it"])


def fit_markdown(result: FitReport) -> str:
    """fit.md: the same results as fit.json, as tables for people."""
    sections = [
        ["# Scaling-law fit", ""] + _md_decision(result),
        ["## Data", ""] + _md_data(result),
        _md_approach3(result),
        _md_frontier(result),
        _md_predictions(result),
        _md_held_out(result),
        _md_floor(result),
    ]
    sections += [
        _md_frontier_fit(f, result.verdicts[k])
        for k, f in (("chinchilla_approach1", result.approach1), ("chinchilla_approach2", result.approach2))
        if f is not None
    ]
    sections.append(_md_single(result))
    if result.skipped:
        sections.append(["## Not run on these data", ""] + [f"- {title(k)}: {v}" for k, v in result.skipped.items()])
    return "\n\n".join("\n".join(s) for s in sections if s) + "\n"


# ---------------------------------------------------------------------------------------------
# The terminal summary
# ---------------------------------------------------------------------------------------------


def _rows(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def summary_text(result: FitReport) -> str:
    """Approach 3's verdict (then, when usable, its parameters), the held-out check, the floor, one
    line for each other law, then one line per prediction. A not_determined law shows no table, a
    not_determined prediction no number; a fit that did not converge shows no parameters."""
    lines = _summary_approach3(result)
    lines += _summary_held_out(result) + _summary_floor(result) + _summary_others(result)
    lines += [prediction_line(p) for p in result.predictions]
    return "\n".join(lines)


def prediction_line(p: Prediction) -> str:
    head = f"prediction for {_target(p)}"
    if p.loss is None:
        text = p.verdict.line(head, CONSOLE_REASONS)
        if p.runs_to_determine:
            text += f"; runs that would determine it: {runs_text(p.runs_to_determine)}"
        return text
    text = f"{head}: loss {g(p.loss.value)} (95% interval {ci(p.loss)}), {p.verdict.level}"
    return text + (f": {p.verdict.because(CONSOLE_REASONS)}" if p.verdict.reasons else "")


def _summary_approach3(result: FitReport) -> list[str]:
    a3, verdict = result.approach3, result.verdicts[APPROACH3]
    if a3 is None or not a3.converged:
        lines = [verdict.line("Chinchilla approach 3", CONSOLE_REASONS)]
        return lines + ([_diag_line(a3.diagnostics)] if a3 is not None else [])
    boot = (
        "no bootstrap"
        if a3.bootstrap is None
        else f"{int(a3.bootstrap.converged.sum())} of {a3.bootstrap.n_resamples} bootstrap resamples converged"
    )
    lines = [verdict.line("Chinchilla approach 3", CONSOLE_REASONS)]
    lines += suggestion_lines(result)
    if not verdict.usable:
        return lines + ["  (parameters and diagnostics in fit.md and fit.json)"]
    lines.append(f"  {law_text(a3.law, a3.tied)} (converged; {boot})")
    names = {"a": "a (N_opt ~ C^a)", "b": "b (D_opt ~ C^b)"}
    lines += _rows([["", "value", "95% CI"]] + [[names.get(r[0], r[0]), *r[1:]] for r in parameter_rows(a3)])
    d = a3.diagnostics
    lines.append(
        f"  RMS log residual {d.rms_residual:.3g} over {len(d.residuals)} points; "
        f"run-to-run noise {g(result.noise.sigma)} ({result.noise.source.split(' (')[0]})"
    )
    predictor = result.predictor
    assert predictor is not None, "fit_all gives a converged approach 3 its predictor"
    cal = predictor.calibration
    if cal.calibrated:
        lines.append(
            f"  95% intervals include the law's error: {g(cal.kappa)} per decade of compute past the data, "
            f"calibrated up to {g(cal.reach)} decades{_drift_words(cal)}{_correction_words(cal)}"
        )
    return lines


def _correction_words(cal) -> str:
    """How far the prediction itself moves toward the drift (calibration.adaptive), in words."""
    if cal.method != "adaptive" or not (cal.drift or cal.drift_offset):
        return ""
    if cal.drift_offset:
        own = (
            f"{100 * cal.drift_share:.0f}% of the cuts' drift stands, read against the {g(cal.drift_prior)} per "
            f"decade other ladders' drifts spread over (its standard error {g(cal.drift_sd)}), "
            if cal.drift
            else ""
        )
        down, up = (float(x) for x in cal.reaches(1.0))
        ends = " and ".join(
            f"its {side} end {g(abs(x))} per decade" for side, x in (("lower", down), ("upper", up)) if x
        )
        return (
            f"; {own}and the public ladders drifted {g(cal.drift_offset)} per decade further past their data "
            f"than their cuts showed, give or take {g(cal.drift_offset_sd)}: the prediction moves "
            f"{g(cal.drift_share * cal.drift + cal.drift_offset)} per decade, "
            f"{ends or 'neither end of the interval'} further than the law's value (the moved prediction "
            f"or the cuts' own drift, whichever lies further), and its width takes {g(cal.drift_offset_sd)} "
            f"per decade from {g(NEAR_DECADES)} decades on in quadrature"
        )
    if cal.drift_prior:
        return (
            f"; read against the {g(cal.drift_prior)} per decade other ladders' drifts spread over, "
            f"{100 * cal.drift_share:.0f}% of it stands (its standard error {g(cal.drift_sd)}): the prediction "
            f"moves {g(cal.drift_share * cal.drift)} per decade and the interval's end that much further"
        )
    if not cal.corrects:
        return f"; the prediction stays the law's: the drift is within its own standard error {g(cal.drift_sd)}"
    return (
        f"; the prediction moves {100 * cal.drift_share:.0f}% of that way, {g(cal.drift_share * cal.drift)} per "
        f"decade (the drift shrunk by its standard error {g(cal.drift_sd)})"
    )


def _span(lo: float, hi: float) -> str:
    return f"{lo:g} to {hi:g}" if math.isfinite(hi) else f"over {lo:g}"


def _drift_words(cal) -> str:
    """What the cuts' shared drift does to the interval, in words; nothing when there is none."""
    if not cal.drift:
        return ""
    side, way = ("lower", "too high") if cal.drift < 0 else ("upper", "too low")
    said = (
        f"; the refits below the cuts predicted the runs above them {way}, by {g(abs(cal.drift))} in log loss "
        "per decade on average"
    )
    if cal.drift_prior:  # how far the interval reaches is said with the share that stands (_correction_words)
        return said
    return f"{said}, so the interval's {side} end reaches that much further"


def _summary_held_out(result: FitReport) -> list[str]:
    h = result.held_out
    if h is None or not h.cuts:
        return []
    cut = h.cuts[0]
    what = "the largest-compute run" if cut.n_held == 1 else f"the {cut.n_held} largest-compute runs"
    if cut.law is None:
        return [f"held-out: refit without {what}: {cut.note}"]
    lines = [f"held-out: refit without {what} ({cut.law.level}), then predicted {'it' if cut.n_held == 1 else 'them'}"]
    if not h.runs:
        return lines
    lines += _rows(
        [["N", "D", "actual", "predicted", "error", "95% interval", "", "verdict"]]
        + [[g(r.N), g(r.D), g(r.actual), *held_out_cells(r, "inside", "OUTSIDE")] for r in h.runs]
    )
    return lines


def _summary_floor(result: FitReport) -> list[str]:
    f = result.entropy_floor
    if f is None:
        return []
    return [
        f"entropy floor {g(f.floor)}: E is fitted at or above it; fitted E {g(f.fitted.value)} "
        f"(95% CI {ci(f.fitted)}), E - floor = {f.difference:+.4g}"
    ]


def _summary_others(result: FitReport) -> list[str]:
    lines = []
    for key, fit in (("chinchilla_approach1", result.approach1), ("chinchilla_approach2", result.approach2)):
        if key not in result.verdicts:
            continue
        v = result.verdicts[key]
        line = v.line(TITLES[key], CONSOLE_REASONS)
        if fit is not None and v.usable:
            line += (
                f"; N_opt ~ C^{fit.n_opt.exponent.value:.3f} (95% CI {ci(fit.n_opt.exponent)}), "
                f"D_opt ~ C^{fit.d_opt.exponent.value:.3f}, from {len(fit.C)} optima"
            )
        lines.append(line)
    for key, v in result.verdicts.items():
        if not key.startswith("kaplan_"):
            continue
        var = key.removeprefix("kaplan_")
        single = result.single.get(var)
        line = v.line(f"L({var})", CONSOLE_REASONS)
        if single is not None and single.diagnostics.converged and v.usable:
            p = single.params
            alpha = f"alpha {g(p['alpha'].value)} (95% CI {ci(p['alpha'])})"
            line += f"; {alpha}, E {g(p['E'].value)}, {len(single.x)} points"
        lines.append(line)
    return lines


def backtest_markdown(bt, title_text: str) -> str:
    """The backtest (backtest.py) for docs and the backtest command: the decision in one line, what
    it rests on as a list with codes, then the table by distance and the cuts."""

    def pct(x, digits=0):
        return "-" if x is None else f"{100 * x:.{digits}f}%"

    rows = [
        [
            f"{b.lo:g} to {b.hi:g}" if np.isfinite(b.hi) else f"over {b.lo:g}",
            str(b.n),
            pct(b.coverage),
            pct(b.median_abs_error, 2),
            pct(b.median_half_width, 2),
            f"{b.sharpness:.1f}",
            f"{b.levels['trusted']} / {b.levels['wide']} / {b.levels[NOT_DETERMINED]}",
            pct(b.printed_coverage),
        ]
        for b in bt.bins()
    ]
    lines = [f"# {title_text}", "", f"**{bt.decision()}**", ""]
    lines += [f"- {f.text} (`{f.code}`)" for f in bt.findings()] or ["- every target met"]
    lines.append("")
    lines += _table(
        [
            "decades of compute past the largest fitted run",
            "held-out runs",
            "inside the 95% interval",
            "median abs. error",
            "median half-width",
            "half-width / error",
            "trusted / wide / not_determined",
            "printed runs inside",
        ],
        rows,
    )
    lines += [
        "",
        "| cut: C of the largest fitted run | runs fitted | runs predicted | law | run sd | kappa per decade "
        "| drift per decade |",
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    lines += [
        f"| {g(c.C_cut)} | {c.n_fit} | {c.n_held} | {c.law.level if c.law else c.note} | "
        f"{g(c.run_sigma)} | {g(c.kappa)} | {g(c.drift)} |"
        for c in bt.cuts
    ]
    return "\n".join(lines) + "\n"
