"""A finished sweep's plots: loss against FLOPs (with each run's ratio to fp32 when the runs share a
model), final loss against parameters and tokens, and speed and memory per precision policy.

- loss_vs_flops.png: validation loss against training FLOPs for every run (Kaplan et al. 2020,
  fig. 1; Hoffmann et al. 2022, fig. 2: the envelope of these curves is Chinchilla approach 1);
- final_loss.png: final validation loss against parameters and against training tokens, log-log,
  one line per value of the other swept keys (Kaplan's L(N) and L(D); across FLOP budgets, the
  iso-FLOP curves of Chinchilla approach 2);
- speed_memory.png: training tokens/s as measured and one step's modelled peak memory, per run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from ablate.files import save_figure
from ablate.sweep.rows import SEED_KEY, SummaryRow, fit_points

# Override keys that set a run's size, and those that set how long it trains.
SIZE_KEYS = ("model",)
BUDGET_KEYS = ("train.steps", "train.tokens", "train.flops", "train.tokens_per_param")


def curves_of(rows: list[SummaryRow], uri: str | None) -> dict:
    """{job: (flops, val loss)} from each run's MLflow history."""
    if not uri:
        return {}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    curves = {}
    for r in rows:
        if not r.mlflow_run_id:
            continue
        try:
            flops = {m.step: m.value for m in client.get_metric_history(r.mlflow_run_id, "flops")}
            loss = sorted((m.step, m.value) for m in client.get_metric_history(r.mlflow_run_id, "val/loss"))
        except Exception as exc:  # an outage: the plots go without curves, the sweep still ends
            print(
                f"summary: loss curves left out of the plots, the store did not answer ({type(exc).__name__})",
                file=sys.stderr,
            )
            return {}
        points = [(flops[s], v) for s, v in loss if s in flops and flops[s] > 0]
        if points:
            curves[r.job] = tuple(zip(*points, strict=False))
    return curves


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size_colors(rows: list[SummaryRow]) -> dict | None:
    """{params: colour}, smallest model darkest, when the sweep has more than one model size."""
    sizes = sorted({r.params for r in rows if r.params})
    if len(sizes) < 2:
        return None
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return {p: cmap(i / max(1, len(sizes) - 1) * 0.9) for i, p in enumerate(sizes)}


def line_arm(row: SummaryRow, sized: bool) -> str:
    """What a run's line stands for beside its size and seed: the swept values of its arm (its
    overrides but the seed and, in a sweep over sizes, the size and the budget), as the user wrote them."""
    skip = (SEED_KEY, *(SIZE_KEYS + BUDGET_KEYS if sized else ()))
    parts = [f"{k}={v}" for k, v in row.overrides.items() if k not in skip]
    return " ".join(parts) or "all runs"


def arm_styles(arms: list[str], by_colour: bool) -> dict[str, dict]:
    """{arm: matplotlib line style}: a colour each of a qualitative palette (tab10, tab20 past ten
    arms, so no two arms share one), or, where colour already tells the sizes apart, a dash pattern
    and marker each."""
    import matplotlib

    if by_colour:
        cmap = matplotlib.colormaps["tab10" if len(arms) <= 10 else "tab20"]
        return {a: {"color": cmap(i % cmap.N)} for i, a in enumerate(arms)}
    dashes = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    return {
        a: {"linestyle": dashes[i % len(dashes)], "marker": markers[i % len(markers)], "markevery": [-1]}
        for i, a in enumerate(arms)
    }


def plot_loss_vs_flops(rows: list[SummaryRow], curves: dict, path: Path) -> Path | None:
    """Every run's validation loss against training FLOPs; when the runs share one model and one
    ran in fp32 (a precision or attention sweep), a lower panel shows each run's loss divided by
    its baseline run's (the same seed's) at the same FLOPs, where differences of a fraction of a
    percent are visible. Each arm has a colour of its own and one legend entry (its seeds share it);
    over several sizes colour tells the sizes and a dash pattern each arm. The legend sits outside
    the axes, beside them."""
    plotted = [r for r in rows if r.job in curves]
    if not plotted:
        return None
    plt = _pyplot()
    base = _ratio_baseline(rows, curves)
    if base is None:
        fig, ax = plt.subplots(figsize=(9.5, 4.8))
    else:
        fig, (ax, low) = plt.subplots(2, 1, figsize=(9.5, 6.8), sharex=True, height_ratios=[3, 2])
    colors = _size_colors(plotted)
    arms = list(dict.fromkeys(line_arm(r, colors is not None) for r in plotted))
    styles = arm_styles(arms, by_colour=colors is None)
    labelled: set[str] = set()
    for r in plotted:
        flops, loss = curves[r.job]
        arm = line_arm(r, colors is not None)
        style = dict(styles[arm])
        if colors:
            style["color"] = colors[r.params]
            size = f"{r.figures.get('model', '?')} ({_short(r.params)} params)"
            name = size if len(arms) == 1 else f"{size}, {arm}"
        else:
            name = arm
        ax.plot(flops, loss, linewidth=1.2, label=None if name in labelled else name, **style)
        ax.plot(flops[-1:], loss[-1:], "o", color=style.get("color"), markersize=4)
        labelled.add(name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _floor(ax, plotted, curves)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (nats/token)")
    _bpb_axis(ax, rows)
    if base is not None:
        _ratio_panel(low, rows, curves, base, styles)
    ax.set_title("Validation loss against compute (dots: end of each run; seeds of an arm share its line style)")
    ax.title.set_fontsize(9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.12, 1.0), borderaxespad=0.0, frameon=False)
    return _save(fig, plt, path)


def _bpb_axis(ax, rows: list[SummaryRow]) -> None:
    """A right-hand axis in bits per byte (loss / ln 2 / bytes per token) when every run with a
    final bpb shares one tokenizer's bytes per token: the scale that compares tokenizers."""
    ratios = {round(r.final_val_loss / r.final_val_bpb, 9) for r in rows if r.final_val_bpb and r.final_val_loss}
    if len(ratios) != 1:
        return
    nats_per_bit = ratios.pop()  # ln 2 x bytes per token
    axis = ax.secondary_yaxis("right", functions=(lambda v: v / nats_per_bit, lambda v: v * nats_per_bit))
    per_token = nats_per_bit / math.log(2)
    shown = f"{per_token:.3g}"
    axis.set_ylabel(f"bits per byte ({shown} byte{'' if shown == '1' else 's'} per token)")


def _ratio_baseline(rows: list[SummaryRow], curves: dict) -> SummaryRow | None:
    """The fp32 row the ratios are taken against, when every plotted run has the same model."""
    plotted = [r for r in rows if r.job in curves]
    if len(plotted) < 2 or len({r.params for r in plotted}) != 1:
        return None
    return next((r for r in plotted if r.precision == "fp32"), None)


def _ratio_panel(ax, rows: list[SummaryRow], curves: dict, base: SummaryRow, styles: dict[str, dict]) -> None:
    """Each run against its baseline run: the same seed's where seeds were swept, else the one
    baseline run; the label says which."""
    seeded = any(SEED_KEY in r.overrides for r in rows)
    for r in rows:
        if r.job not in curves or r.job == base.job and not seeded:
            continue
        partner = r.comparison.baseline_job if r.comparison.baseline_job in curves else base.job
        at = dict(zip(*curves[partner], strict=False))
        points = [(f, v / at[f]) for f, v in zip(*curves[r.job], strict=False) if f in at]
        if points:
            xs, ys = zip(*points, strict=False)
            ax.plot(xs, ys, marker="o", markersize=2, linewidth=1.0, **styles[line_arm(r, False)])
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    base_arm = line_arm(base, False)
    ax.set_ylabel(f"val loss / {base_arm}'s\n(same seed)" if seeded else f"val loss / {base.label}'s")
    ax.grid(True, which="both", alpha=0.3)
    ax.yaxis.get_major_formatter().set_useOffset(False)


def plot_speed_memory(rows: list[SummaryRow], path: Path) -> Path | None:
    """Side by side, per run of a sweep over precision: training speed measured here, and one
    step's modelled peak memory (what the policy saves wherever it runs). Speeds that the summary
    cannot compare (runs that shared their cores: Comparison.speedup_comparable) are drawn grey
    and hatched, with the reason on the plot."""
    done = [r for r in rows if r.status == "finished" and r.tokens_per_s]
    if len({r.precision for r in done}) < 2:
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.9 + 0.28 * len(done)))
    labels = [r.precision or r.label for r in done]
    if len(set(labels)) < len(labels):  # seeds swept: one bar per run, named by its label
        labels = [r.label for r in done]
    arms = list(dict.fromkeys(line_arm(r, False) for r in done))
    styles = arm_styles(arms, by_colour=True)
    colours = [styles[line_arm(r, False)]["color"] for r in done]
    comparable = any(r.comparison.speedup_comparable for r in done)
    speeds = [r.tokens_per_s for r in done]
    device = next((r.device for r in done if r.device), "this machine")
    if comparable:
        left.barh(labels, speeds, color=colours)
        left.set_xlabel(f"training tokens/s on {device} (measured)")
    else:
        left.barh(labels, speeds, color="lightgray", hatch="//", edgecolor="gray")
        left.set_xlabel(f"training tokens/s on {device} (measured; not comparable)")
        left.set_title("not comparable: the runs shared their cores (summary.md says which)", fontsize=8)
    left.invert_yaxis()
    for y, v in enumerate(speeds):
        left.text(v, y, f" {v:,.0f}", va="center", fontsize=7)
    memory = [(r.memory_bytes or 0) / 1e6 for r in done]
    right.barh(labels, memory, color=colours)
    right.set_xlabel("one step's peak memory, MB (modelled)")
    right.set_yticklabels([])
    right.invert_yaxis()
    for y, v in enumerate(memory):
        right.text(v, y, f" {v:.3g}", va="center", fontsize=7)
    for ax in (left, right):
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(x=0.25)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("Speed and memory per precision policy", fontsize=10)
    return _save(fig, plt, path)


def plot_final_loss(rows: list[SummaryRow], path: Path) -> Path | None:
    """Final loss against params (a line per token budget) and against tokens (a line per model)."""
    done = fit_points(rows)
    panels = [
        (x, group_out, title)
        for x, group_out, title in (
            ("params", SIZE_KEYS, "Final loss against model size, L(N)"),
            ("tokens", BUDGET_KEYS, "Final loss against training tokens, L(D)"),
        )
        if len({_axis(r, x) for r in done}) >= 2
    ]
    if not panels:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    for ax, (x, group_out, title) in zip(axes[0], panels, strict=False):
        groups: dict = {}
        for r in done:
            groups.setdefault(_group(r, group_out), []).append(r)
        cmap = plt.get_cmap("viridis")
        for i, (name, members) in enumerate(sorted(groups.items(), key=lambda kv: _group_order(kv[1], x))):
            members.sort(key=lambda r: _axis(r, x))
            color = cmap(i / max(1, len(groups) - 1) * 0.9)
            ax.plot(
                [_axis(r, x) for r in members],
                [r.final_val_loss for r in members],
                "o-",
                color=color,
                markersize=4,
                label=name,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _floor(ax, rows)
        ax.set_xlabel("parameters (total)" if x == "params" else "training tokens")
        ax.set_ylabel("final validation loss (nats/token)")
        _bpb_axis(ax, rows)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, plt, path)


def _axis(row: SummaryRow, x: str) -> int:
    """A point's place on the plotted axis: its parameters or its training tokens."""
    return row.params if x == "params" else row.tokens


def _group(row: SummaryRow, leave_out: tuple[str, ...]) -> str:
    """The row's other swept values: a line joins runs that differ only in the plotted axis."""
    parts = [
        f"{k}={v}" for k, v in row.overrides.items() if not any(k == g or k.startswith(g + ".") for g in leave_out)
    ]
    return " ".join(parts) or "all runs"


def _group_order(members: list[SummaryRow], x: str) -> int:
    other = "tokens" if x == "params" else "params"
    return min(_axis(r, other) for r in members)


def _floor(ax, rows: list[SummaryRow], curves: dict | None = None) -> None:
    """The lowest loss any model can reach (the synthetic language's entropy rate), and plain
    decimal labels on the log-scaled loss axis (losses span well under a decade). With the curves
    given, the axis spans their losses and a floor far below them is named in the legend, not drawn
    (it would squeeze every curve into the top of the plot)."""
    from matplotlib.ticker import FormatStrFormatter

    low = min((min(curves[r.job][1]) for r in rows if r.job in (curves or {})), default=None)
    for floor in {r.entropy_floor for r in rows if r.entropy_floor}:
        if low is not None and floor < 0.8 * low:
            ax.plot([], [], color="gray", linestyle="--", label=f"entropy floor {floor:.3f} (below the axis)")
        else:
            ax.axhline(floor, color="gray", linestyle="--", linewidth=1, label=f"entropy floor {floor:.3f}")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.1f"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.1f"))


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def _short(n: float) -> str:
    for unit, div in (("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"
