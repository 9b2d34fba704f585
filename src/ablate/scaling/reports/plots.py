"""The fit's pictures, readable at a glance (matplotlib, imported only when drawing):

fit_curves.png  loss against compute: the runs, approach 3 at a few sizes with their 95% bands, the
                compute-optimal loss with its band out to the target, the data's floor as a line,
                the target as a marked point with its interval (or marked not_determined), the
                held-out runs marked; then one panel per single-variable law
frontier.png    N_opt(C), D_opt(C) and tokens per parameter with bands clipped to a readable range
                (the caption says where), the not_determined range of C shaded
residuals.png   approach 3's log residuals against C and N
isoflop.png     approach 2's budgets, the runs each parabola used, its minimum
"""

from __future__ import annotations

import numpy as np

from ablate.files import figure_bytes
from ablate.scaling.analysis import FitReport
from ablate.scaling.laws.frontier import FrontierFit
from ablate.scaling.reports.report import NOT_CONVERGED, g
from ablate.scaling.verdict import NOT_DETERMINED

BAND_CLIP = 100.0  # a frontier band is drawn at most this factor either side of its estimate
FLOOR_STYLE = {"color": "k", "ls": "--", "lw": 1.2}
TARGET_STYLE = {"color": "crimson", "marker": "*", "ms": 14, "mec": "k"}
HELD_STYLE = {"marker": "s", "s": 60, "facecolors": "none", "edgecolors": "crimson", "lw": 1.5}
NOT_FITTED = "approach 3\nnot fitted"


def render_plots(result: FitReport) -> dict[str, bytes]:
    """{file name: PNG bytes} of the fit's plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rendered = {}
    plots = [("fit_curves.png", _plot_curves), ("frontier.png", _plot_frontier), ("residuals.png", _plot_residuals)]
    a2 = result.approach2
    if a2 is not None:
        plots.append(("isoflop.png", lambda result, plt: _plot_isoflop(result, a2, plt)))
    for name, draw in plots:
        fig = draw(result, plt)
        # Every figure is laid out by constrained layout, which keeps its texts on the canvas;
        # bbox_inches="tight" would measure every artist again (about 30% more time per figure).
        rendered[name] = figure_bytes(fig, "png", 120)
        plt.close(fig)
    return rendered


def _stamp(ax, text: str) -> None:
    ax.text(
        0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=14, color="crimson", weight="bold"
    )


def _unusable(result: FitReport) -> str | None:
    """Why approach 3 cannot be drawn, or None."""
    if result.approach3 is None:
        return NOT_FITTED
    if not result.approach3.converged:
        return f"approach 3\n{NOT_CONVERGED}"
    return None


def _grid(ax) -> None:
    """Major grid; minor log ticks only on an x axis of at most two decades, where they are the only
    labels between powers of ten (over many decades they make each PNG take seconds to lay out)."""
    lo, hi = ax.get_xlim()
    keep_x = ax.get_xscale() == "log" and lo > 0 and hi / lo <= 100
    ax.minorticks_off()
    if keep_x:
        from matplotlib.ticker import LogLocator

        ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    ax.grid(True, alpha=0.25)


def _plain_y(ax) -> None:
    """Loss ticks as plain numbers: a log axis over less than a decade otherwise reads '2 x 10^0'.
    Over more than a decade matplotlib's own ticks (10^k) read better, and these would crowd out."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    lo, hi = ax.get_ylim()
    if lo <= 0 or hi / lo > 10:
        return
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _size_colors(plt, N: np.ndarray):
    norm = plt.Normalize(np.log10(N.min()), np.log10(N.max()) + 1e-9)
    return norm, plt.get_cmap("viridis")


def _floor(ax, result: FitReport) -> None:
    floor = result.points.entropy_floor
    if floor is not None:
        ax.axhline(floor, **FLOOR_STYLE, label=f"entropy floor {g(floor)}")


def _plot_curves(result: FitReport, plt):
    """Loss against C with approach 3 and its bands, the floor, the target and the held-out runs; then
    each single-variable law."""
    p = result.points
    panels = ["C"] + [v for v in ("N", "N_non_embedding", "D") if v in result.single]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False, layout="constrained")
    norm, cmap = _size_colors(plt, p.N)
    labels = {"C": "training FLOPs C", "N": "parameters N", "D": "tokens D", "N_non_embedding": "non-embedding N"}
    for ax, var in zip(axes[0], panels, strict=True):
        sc = ax.scatter(p.variable(var), p.L, c=np.log10(p.N), cmap=cmap, norm=norm, s=14, alpha=0.85, zorder=3)
        ax.set(xscale="log", yscale="log", xlabel=labels[var], ylabel="loss (nats/token)")
        single = result.single.get(var)
        if var != "C" and single is not None and single.diagnostics.converged:
            x = np.geomspace(single.x.min(), single.x.max(), 100)
            level = result.verdicts[f"kaplan_{var}"].level
            ax.plot(x, single.law.loss(x), "k-", lw=1.5, label=f"E + A/x^α, α={single.law.alpha:.3g} ({level})")
            ax.set_title(f"L({var})")
        _floor(ax, result)
    ax = axes[0][0]
    ax.set_title("loss vs compute (approach 3: " + result.verdicts["chinchilla_approach3"].level + ")")
    why = _unusable(result)
    if why:
        _stamp(ax, why)
    else:
        _approach3_on_compute(ax, result, cmap, norm)
    for a in axes[0]:
        _grid(a)
        _plain_y(a)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7, loc="upper right")
    fig.colorbar(sc, ax=axes[0].tolist(), label="log10 N", shrink=0.9)
    return fig


def _approach3_on_compute(ax, result: FitReport, cmap, norm) -> None:
    p, pred = result.points, result.predictor
    assert pred is not None, "drawn for a converged approach 3, which fit_all gives its predictor"
    for N in np.unique(np.quantile(p.N, [0.05, 0.5, 0.98])):
        C = np.geomspace(max(p.C.min(), 6 * N * p.D.min()), min(p.C.max(), 6 * N * p.D.max()), 60)
        value, lo, hi = pred.loss_band(N, C / (6 * N), C)
        color = cmap(norm(np.log10(N)))
        ax.plot(C, value, color=color, lw=1.2)
        ax.fill_between(C, lo, hi, color=color, alpha=0.12, lw=0)
    ax.plot([], [], color="grey", lw=1.2, label="approach 3 at fixed N, 95% band (colour = size)")
    f = result.frontier
    if f is not None:
        ok = np.array([lv != NOT_DETERMINED for lv in f.levels])
        ax.plot(f.C[ok], f.loss[ok], color="crimson", lw=2, label="approach 3 at N_opt(C), 95% band")
        ax.fill_between(f.C[ok], f.loss_lo[ok], f.loss_hi[ok], color="crimson", alpha=0.15, lw=0)
        if (~ok).any():
            ax.axvspan(
                f.C[~ok].min(), f.C[~ok].max(), color="grey", alpha=0.12, lw=0, label="allocation not_determined"
            )
    held = result.held_out
    if held is not None and held.runs:
        ax.scatter(
            [r.C for r in held.runs], [r.actual for r in held.runs], **HELD_STYLE, zorder=4, label="held-out runs"
        )
        for r in held.runs:
            ax.plot([r.C, r.C], [r.lo, r.hi], color="crimson", lw=1, alpha=0.7)
    for pr in result.predictions:
        if pr.loss is not None:
            assert pr.loss.ci95 is not None, "a predicted loss has its band (predict._prediction)"
            low, high = pr.loss.ci95
            ax.errorbar(
                [pr.C],
                [pr.loss.value],
                yerr=[[pr.loss.value - low], [high - pr.loss.value]],
                capsize=4,
                ecolor="crimson",
                **{k: v for k, v in TARGET_STYLE.items()},
                ls="none",
                zorder=5,
                label=f"target: {g(pr.loss.value)} ({g(low)} to {g(high)}), {pr.verdict.level}",
            )
        else:
            ax.axvline(pr.C, color="crimson", ls=":", lw=1.5, label=f"target C={g(pr.C)}: not_determined")


def _plot_frontier(result: FitReport, plt):
    """N_opt(C), D_opt(C) and D/N with 95% bands clipped to BAND_CLIP, beside approaches 1 and 2."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
    f, why, a3 = result.frontier, _unusable(result), result.approach3
    if why or f is None or a3 is None:  # no why: approach 3 is there and converged
        _stamp(ax, why or "approach 3: no frontier")
        return fig
    clipped = 0
    for y, lo, hi, color, name in (
        (f.N_opt, f.N_lo, f.N_hi, "tab:blue", "N_opt"),
        (f.D_opt, f.D_lo, f.D_hi, "tab:orange", "D_opt"),
    ):
        ax.plot(f.C, y, color=color, lw=2, label=f"{name} (approach 3)")
        if np.isfinite(lo).any():
            c_lo, c_hi = np.maximum(lo, y / BAND_CLIP), np.minimum(hi, y * BAND_CLIP)
            clipped = max(clipped, int(((c_lo > lo) | (c_hi < hi)).sum()))
            ax.fill_between(f.C, c_lo, c_hi, color=color, alpha=0.2, lw=0, label=f"{name} 95% band")
    styles = {
        "approach1": {"marker": "s", "s": 6, "alpha": 0.5},
        "approach2": {"marker": "^", "s": 40, "edgecolors": "k"},
    }
    for fit in (result.approach1, result.approach2):
        if fit is None:
            continue
        style = styles[fit.method]
        ax.scatter(fit.C, fit.N, color="tab:blue", label=f"N_opt ({fit.method})", **style)
        ax.scatter(fit.C, fit.D, color="tab:orange", label=f"D_opt ({fit.method})", **style)
    nd = np.array([lv == NOT_DETERMINED for lv in f.levels])
    for a in (ax, ax2):
        a.axvspan(result.points.C.min(), result.points.C.max(), color="grey", alpha=0.1, lw=0, label="C of the runs")
        if nd.any():
            a.axvspan(f.C[nd].min(), f.C[nd].max(), color="crimson", alpha=0.07, lw=0, label="not_determined")
        for pr in result.predictions:
            a.axvline(pr.C, color="crimson", ls=":", lw=1.2)
    law = a3.law
    ax.set(xscale="log", yscale="log", xlabel="training FLOPs C", ylabel="parameters / tokens")
    ax.set_title(f"compute-optimal allocation: a={law.a:.3f}, b={law.b:.3f}")
    _grid(ax)
    ax.legend(fontsize=7)
    per = f.C / 6
    ratio = f.tokens_per_param
    with np.errstate(divide="ignore", over="ignore"):  # a band reaching N = 0 or inf: D/N at inf or 0
        r_lo, r_hi = per / f.N_hi**2, per / f.N_lo**2
    ax2.plot(f.C, ratio, color="tab:green", lw=2, label="D_opt / N_opt (approach 3)")
    if np.isfinite(r_lo).any():
        c_lo, c_hi = np.maximum(r_lo, ratio / BAND_CLIP), np.minimum(r_hi, ratio * BAND_CLIP)
        clipped = max(clipped, int(((c_lo > r_lo) | (c_hi < r_hi)).sum()))
        ax2.fill_between(f.C, c_lo, c_hi, color="tab:green", alpha=0.2, lw=0, label="95% band")
    th = result.options.thresholds
    for bound in (th.tokens_per_param_min, th.tokens_per_param_max):
        ax2.axhline(bound, color="k", lw=0.8, ls="--")
    ax2.set(xscale="log", yscale="log", xlabel="training FLOPs C", ylabel="tokens per parameter")
    ax2.set_title(
        f"tokens per parameter (dashed: the plausible {th.tokens_per_param_min:g} to {th.tokens_per_param_max:g})"
    )
    _grid(ax2)
    ax2.legend(fontsize=7)
    caption = "Bands: 95% bootstrap intervals of approach 3. "
    caption += (
        f"Where a band spans more than a factor {BAND_CLIP:g} either side of its estimate it is clipped there "
        f"({clipped} of {len(f.C)} values of C)."
        if clipped
        else f"No band needed clipping (at most a factor {BAND_CLIP:g} either side)."
    )
    fig.supxlabel(caption, fontsize=8)  # constrained layout keeps room for it below the panels
    return fig


def _plot_residuals(result: FitReport, plt):
    """log L_hat - log L of approach 3 against C and against N."""
    p = result.points
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    if result.approach3 is None:
        _stamp(axes[0], NOT_FITTED)
        return fig
    why = _unusable(result)
    d = result.approach3.diagnostics
    norm, cmap = _size_colors(plt, p.N)
    for ax, x, label in ((axes[0], p.C, "training FLOPs C"), (axes[1], p.N, "parameters N")):
        sc = ax.scatter(x, d.residuals, c=np.log10(p.N), cmap=cmap, norm=norm, s=14)
        ax.axhline(0, color="k", lw=1)
        noise = result.noise.sigma
        ax.axhspan(-noise, noise, color="grey", alpha=0.15, lw=0, label=f"± run-to-run noise {g(noise)}")
        ax.set(xscale="log", xlabel=label)
        _grid(ax)
    axes[0].set_ylabel("log(predicted / actual)")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"approach 3 residuals (RMS {d.rms_residual:.3g})")
    fig.colorbar(sc, ax=axes.tolist(), label="log10 N", shrink=0.9)
    if why:
        _stamp(axes[0], why)
    return fig


def _plot_isoflop(result: FitReport, fit: FrontierFit, plt):
    """Approach 2 (`fit`): each budget's loss against N with its parabola over the runs it used, then N_opt
    against C."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    cmap = plt.get_cmap("plasma")
    Cs = np.log10([b.C for b in fit.budgets])
    span = max(Cs.max() - Cs.min(), 1e-9)
    for b in fit.budgets:
        color = cmap(0.85 * (np.log10(b.C) - Cs.min()) / span)
        used = b.used if b.used.size else np.zeros(len(b.N), bool)
        ax.scatter(b.N[used], b.L[used], color=color, s=18, label=f"C={b.C:.2g}")
        ax.scatter(b.N[~used], b.L[~used], facecolors="none", edgecolors=color, s=18)
        if b.N_opt is not None and b.coef is not None:  # usable: a budget with an N_opt has its parabola
            x = np.linspace(np.log(b.N[used]).min(), np.log(b.N[used]).max(), 100) - b.x_mid
            ax.plot(np.exp(x + b.x_mid), b.coef[0] + b.coef[1] * x + b.coef[2] * x * x, color=color, lw=1.2)
            ax.plot(b.N_opt, b.L_opt, marker="*", color=color, markeredgecolor="k", ms=12)
    ax.set(xscale="log", xlabel="parameters N", ylabel="loss")
    ax.set_title("iso-FLOP budgets (filled: runs the parabola used; ★ minimum)")
    _grid(ax)
    ax.legend(fontsize=7, ncol=2)
    C = np.geomspace(fit.C.min(), fit.C.max(), 50)
    usable = [
        (b.C, b.N_opt, b.N_opt_ci.ci95)
        for b in fit.budgets
        if b.N_opt is not None and b.N_opt_ci is not None and b.N_opt_ci.ci95 is not None
    ]
    if usable:
        ax2.errorbar(
            [C_b for C_b, _, _ in usable],
            [n for _, n, _ in usable],
            yerr=np.array([[n - lo, hi - n] for _, n, (lo, hi) in usable]).T,
            fmt="o",
            color="k",
            capsize=3,
            label="N_opt per budget (95% bootstrap)",
        )
    else:
        ax2.scatter(fit.C, fit.N, color="k", label="N_opt per budget")
    ax2.plot(C, fit.n_opt(C), color="k", label=f"k C^a, a={fit.n_opt.exponent.value:.3f}")
    if result.approach3 is not None and result.approach3.converged:
        ax2.plot(
            C,
            result.approach3.law.n_opt(C),
            color="crimson",
            ls="--",
            label=f"approach 3, a={result.approach3.law.a:.3f}",
        )
    ax2.set(xscale="log", yscale="log", xlabel="training FLOPs C", ylabel="N_opt", title="approach 2 frontier")
    _grid(ax2)
    ax2.legend(fontsize=8)
    return fig
