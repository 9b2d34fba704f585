"""The end of a sweep as data and pictures: a table, three plots and a points file.

Rows come from each job's result.json (a job skipped as already finished reports the figures of
the MLflow run it points to). Files written to the sweep dir (and logged to the parent run):
- summary.md / summary.json: the table; the rows;
- loss_vs_flops.png: validation loss against training FLOPs for every run (Kaplan et al. 2020,
  fig. 1; Hoffmann et al. 2022, fig. 2: the envelope of these curves is Chinchilla approach 1);
- final_loss.png: final validation loss against parameters and against training tokens, log-log,
  one line per value of the other swept keys (Kaplan's L(N) and L(D); across FLOP budgets, the
  iso-FLOP curves of Chinchilla approach 2);
- points.csv: params, tokens, loss, flops, params_non_embedding, run_id: the input of ablate.laws.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

# Override keys that set a run's size, and those that set how long it trains.
SIZE_KEYS = ("model",)
BUDGET_KEYS = ("train.steps", "train.tokens", "train.flops")
FAILED_STATUSES = ("failed", "killed", "missing")


@dataclass
class SweepSummary:
    rows: list
    failed: int
    table: str
    files: list = field(default_factory=list)


def summarize(sweep_dir: Path, info: dict) -> SweepSummary:
    from ablate.sweep import write_json, write_text

    dirs = job_dirs(sweep_dir)
    overrides = [_overrides(d) for d in dirs]
    common = set.intersection(*map(set, overrides)) if overrides else set()
    rows = []
    for d, ov in zip(dirs, overrides):
        varying = [o for o in ov if o not in common]
        rows.append(_row(d, " ".join(varying) or d.name, dict(o.lstrip("+~").split("=", 1) for o in varying if "=" in o)))
    uri = info.get("tracking_uri")
    _fill_from_mlflow(rows, uri)
    _compare_to_baseline(rows)
    _add_profiles(rows, sweep_dir)
    table = format_table(rows, info.get("name", "sweep"))
    files = [
        write_json(sweep_dir / "summary.json", {"sweep_id": info.get("sweep_id"), "runs": rows}),
        write_text(sweep_dir / "summary.md", table + "\n"),
        write_text(sweep_dir / "points.csv", points_csv(rows)),
    ]
    curves = _curves(rows, uri)
    for plot in (plot_loss_vs_flops(rows, curves, sweep_dir / "loss_vs_flops.png"),
                 plot_final_loss(rows, sweep_dir / "final_loss.png")):
        if plot:
            files.append(plot)
    failed = sum(r["status"] in FAILED_STATUSES for r in rows)
    return SweepSummary(rows=rows, failed=failed, table=table, files=files)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))


def _row(job_dir: Path, label: str, overrides: dict) -> dict:
    try:
        result = json.loads((job_dir / "result.json").read_text())
    except (OSError, ValueError):
        result = {"status": "missing", "reason": "the job wrote no result.json (crashed or still running)"}
    try:  # the process launchers record each job's CPU time
        cpu_s = json.loads((job_dir / "usage.json").read_text())["cpu_s"]
    except (OSError, ValueError, KeyError):
        cpu_s = None
    return {"label": label, "job": job_dir.name, "overrides": overrides, **result, "job_cpu_s": cpu_s}


def _overrides(job_dir: Path) -> list[str]:
    import yaml

    try:
        return list(yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or [])
    except OSError:
        return []


def _fill_from_mlflow(rows: list, uri: str | None) -> None:
    """A run skipped as already finished reports the figures of the run it points to."""
    skipped = [r for r in rows if r["status"] == "skipped" and r.get("mlflow_run_id")]
    if not skipped or not uri:
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    for r in skipped:
        m = client.get_run(r["mlflow_run_id"]).data.metrics
        r["final_val_loss"] = m.get("final/val_loss", m.get("val/loss"))
        r["final_train_loss"] = m.get("final/train_loss")
        r["tokens_per_s"] = m.get("final/tokens_per_s")
        r["mfu"] = m.get("final/mfu")
        r["flops"] = m.get("flops", r.get("flops"))
        r["tokens"] = int(m["tokens"]) if "tokens" in m else r.get("tokens")
        r["wall_s"] = m.get("final/wall_s", r.get("wall_s"))


def _compare_to_baseline(rows: list) -> None:
    """Loss difference and speed-up against fp32 when it ran, else the first finished row."""
    done = [r for r in rows if r.get("final_val_loss") is not None]
    base = next((r for r in done if r.get("precision") == "fp32"), done[0] if done else None)
    for r in rows:
        r["baseline"] = base["label"] if base else None
        ok = base is not None and r.get("final_val_loss") is not None
        r["val_loss_delta"] = r["final_val_loss"] - base["final_val_loss"] if ok else None
        speed, base_speed = r.get("tokens_per_s"), base.get("tokens_per_s") if base else None
        r["speedup"] = speed / base_speed if speed and base_speed else None


def _add_profiles(rows: list, sweep_dir: Path) -> None:
    """Runs launched with train.profile=true left a profile.json: which bound each hit (roofline.py)."""
    if any((sweep_dir / str(r["job"]) / "profile.json").exists() for r in rows):
        from ablate import roofline

        roofline.annotate_rows(rows, sweep_dir)


def format_table(rows: list, name: str) -> str:
    """One row per run. The loss difference and speed-up against a baseline only where the runs
    share a model size (a precision or attention sweep); across sizes they compare nothing."""
    base = next((r["baseline"] for r in rows if r.get("baseline")), "first run")
    compare = len({r.get("params") for r in rows if r.get("params")}) <= 1
    cols = ["run", "status", "params", "tokens", "FLOPs", "val loss", *([f"Δ vs {base}"] if compare else []),
            "tokens/s", *(["speed-up"] if compare else []), "MFU"]
    lines = [f"## Sweep `{name}`", "", "| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    for r in rows:
        cells = [r["label"], r["status"], _num(r.get("params"), ","), _num(r.get("tokens") or None, ","),
                 _num(r.get("flops") or None, ".3g"), _num(r.get("final_val_loss"), ".4f")]
        if compare:
            cells.append(_num(r.get("val_loss_delta"), "+.4f"))
        cells.append(_num(r.get("tokens_per_s"), ",.0f"))
        if compare:
            cells.append(_num(r.get("speedup"), ".2f", "x"))
        cells.append(_num(r.get("mfu"), ".2%"))
        lines.append("| " + " | ".join(cells) + " |")
    grid = pivot_table(rows)
    if grid:
        lines += ["", grid]
    notes = [f"- {r['label']}: {r['status']}: {r['reason']}" for r in rows if r["status"] not in ("finished", "skipped")]
    skipped = sum(r["status"] == "skipped" for r in rows)
    if skipped:
        notes.append(f"- {skipped} run(s) had already finished with the same config and were not run again (train.rerun=true reruns them).")
    if any(r.get("device") == "cpu" and (r.get("speedup") or 1) < 1 and r.get("precision") != "fp32" for r in rows):
        notes.append(
            "- On this CPU reduced precision costs time: without native bf16/fp16 arithmetic the "
            "low-precision kernels are emulated. On GPUs with tensor cores (A100, H100, H200) the "
            "same policies run faster than fp32."
        )
    if any((r.get("profile") or {}).get("bound") for r in rows):
        from ablate import roofline

        notes += roofline.bound_notes(rows)
    return "\n".join(lines + ([""] + notes if notes else []))


def pivot_table(rows: list) -> str:
    """Final validation loss on a grid, when the sweep varies exactly two keys (e.g. model x tokens)."""
    keys = list(dict.fromkeys(k for r in rows for k in r.get("overrides", {})))
    if len(keys) != 2 or len(rows) < 4:
        return ""
    down, across = keys
    cols = _ordered(rows, across)
    lines = [f"Final validation loss, {down} (rows) x {across} (columns):", "",
             f"| {down} | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for value in _ordered(rows, down):
        cells = []
        for col in cols:
            match = [r for r in rows if r["overrides"].get(down) == value and r["overrides"].get(across) == col]
            cells.append(_num(match[0].get("final_val_loss"), ".4f") if match else "")
        lines.append(f"| {value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ordered(rows: list, key: str) -> list:
    """A key's values in a reading order: by number, else by the model size they give."""
    values = list(dict.fromkeys(r["overrides"][key] for r in rows if key in r.get("overrides", {})))

    def order(v):
        try:
            return (0, float(v), v)
        except ValueError:
            sizes = [r.get("params") or 0 for r in rows if r["overrides"].get(key) == v]
            return (1, min(sizes) if sizes else 0, v)

    return sorted(values, key=order)


def points_csv(rows: list) -> str:
    """Finished runs as ablate.laws reads them (columns params, tokens, loss[, flops, ...])."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["params", "tokens", "loss", "flops", "params_non_embedding", "run_id", "label"])
    for r in _finished(rows):
        w.writerow([r["params"], r["tokens"], r["final_val_loss"], r.get("flops"), r.get("params_non_embedding"),
                    r.get("mlflow_run_id") or "", r["label"]])
    return out.getvalue()


def _finished(rows: list) -> list:
    return [r for r in rows if r.get("final_val_loss") is not None and r.get("params") and r.get("tokens")]


# -- plots ----------------------------------------------------------------------------------------

def _curves(rows: list, uri: str | None) -> dict:
    """{job: (flops, val loss)} from each run's MLflow history."""
    if not uri:
        return {}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    curves = {}
    for r in rows:
        if not r.get("mlflow_run_id"):
            continue
        flops = {m.step: m.value for m in client.get_metric_history(r["mlflow_run_id"], "flops")}
        loss = sorted((m.step, m.value) for m in client.get_metric_history(r["mlflow_run_id"], "val/loss"))
        points = [(flops[s], v) for s, v in loss if s in flops and flops[s] > 0]
        if points:
            curves[r["job"]] = tuple(zip(*points))
    return curves


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size_colors(rows: list) -> dict | None:
    """{params: colour}, smallest model darkest, when the sweep has more than one model size."""
    sizes = sorted({r["params"] for r in rows if r.get("params")})
    if len(sizes) < 2:
        return None
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return {p: cmap(i / max(1, len(sizes) - 1) * 0.9) for i, p in enumerate(sizes)}


def plot_loss_vs_flops(rows: list, curves: dict, path: Path) -> Path | None:
    if not curves:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colors = _size_colors([r for r in rows if r["job"] in curves])
    labelled = set()
    for r in rows:
        if r["job"] not in curves:
            continue
        flops, loss = curves[r["job"]]
        if colors:  # one colour per model size, one legend entry per size
            name = f"{r.get('model', '?')} ({_short(r['params'])} params)"
            ax.plot(flops, loss, color=colors[r["params"]], linewidth=1.2, label=None if name in labelled else name)
            ax.plot(flops[-1:], loss[-1:], "o", color=colors[r["params"]], markersize=4)
            labelled.add(name)
        else:
            ax.plot(flops, loss, marker="o", markersize=3, label=r["label"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    _floor(ax, rows)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Validation loss against compute (dots: end of each run)" if colors else "Validation loss against compute")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(ax.get_legend_handles_labels()[0]) > 8 else 1)
    return _save(fig, plt, path)


def plot_final_loss(rows: list, path: Path) -> Path | None:
    """Final loss against params (a line per token budget) and against tokens (a line per model)."""
    done = _finished(rows)
    panels = [(x, group_out, title) for x, group_out, title in (
        ("params", SIZE_KEYS, "Final loss against model size, L(N)"),
        ("tokens", BUDGET_KEYS, "Final loss against training tokens, L(D)"),
    ) if len({r[x] for r in done}) >= 2]
    if not panels:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    for ax, (x, group_out, title) in zip(axes[0], panels):
        groups: dict = {}
        for r in done:
            groups.setdefault(_group(r, group_out), []).append(r)
        cmap = plt.get_cmap("viridis")
        for i, (name, members) in enumerate(sorted(groups.items(), key=lambda kv: _group_order(kv[1], x))):
            members.sort(key=lambda r: r[x])
            color = cmap(i / max(1, len(groups) - 1) * 0.9)
            ax.plot([r[x] for r in members], [r["final_val_loss"] for r in members], "o-", color=color,
                    markersize=4, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _floor(ax, rows)
        ax.set_xlabel("parameters (total)" if x == "params" else "training tokens")
        ax.set_ylabel("final validation loss (nats/token)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, plt, path)


def _group(row: dict, leave_out: tuple) -> str:
    """The row's other swept values: a line joins runs that differ only in the plotted axis."""
    parts = [f"{k}={v}" for k, v in row.get("overrides", {}).items()
             if not any(k == g or k.startswith(g + ".") for g in leave_out)]
    return " ".join(parts) or "all runs"


def _group_order(members: list, x: str):
    other = "tokens" if x == "params" else "params"
    return min(r[other] for r in members)


def _floor(ax, rows: list) -> None:
    """The lowest loss any model can reach (the synthetic language's entropy rate), and plain
    decimal labels on the log-scaled loss axis (losses span well under a decade)."""
    from matplotlib.ticker import FormatStrFormatter

    for floor in {r.get("entropy_floor") for r in rows if r.get("entropy_floor")}:
        ax.axhline(floor, color="gray", linestyle="--", linewidth=1, label=f"entropy floor {floor:.3f}")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.1f"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.1f"))


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


def _short(n: float) -> str:
    for unit, div in (("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def _num(x, fmt: str, unit: str = "") -> str:
    return "-" if x is None else format(x, fmt) + unit
