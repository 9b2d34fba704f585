"""The end of a sweep as data and pictures: a table, three plots and a points file.

Rows come from each job's result.json (a job skipped as already finished reports the figures of
the MLflow run it points to). A job with a list budget (run/branches.py) is a trunk row and a row
per cooldown branch (JOB/branches/KEY=BUDGET/result.json); the branches are ordinary points, the
trunk is not. Files written to the sweep dir (and logged to the parent run):
- summary.md / summary.json: the table; the rows. Each row carries its loss difference against the
  baseline's run of the same seed (val_loss_delta), its arm's mean difference over the seeds with a
  Student's t 95% interval (val_loss_delta_ci95, val_loss_delta_resolved), and its speed-up with
  whether it may be read (speedup_comparable: neither run shared its cores or its GPU);
- loss_vs_flops.png, final_loss.png, speed_memory.png: the plots (sweep/plots.py);
- points.csv: params, tokens, loss, flops, params_non_embedding, train_s, entropy_floor, run_id: the
  input of ablate fit (the floor keeps the fitted irreducible loss above what the data allow).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import CONF_DIR
from ablate.files import read_json, read_regular, write_files
from ablate.perf import fp8
from ablate.sweep.plots import curves_of, plot_final_loss, plot_loss_vs_flops, plot_speed_memory
from ablate.sweep.rows import (
    MIN_CORE_SHARE,
    SEED_KEY,
    SummaryRow,
    arms,
    compared,
    filled_from_mlflow,
    filled_from_record,
    fit_points,
    from_record,
    profiled,
    read_rows,
)

FAILED_STATUSES = ("failed", "killed", "missing")
# What a sweep's end writes in its folder: the record, the table, the points, then the plots.
RECORD, TABLE, POINTS = "summary.json", "summary.md", "points.csv"
PLOTS = ("loss_vs_flops.png", "final_loss.png", "speed_memory.png")
OUTPUT_FILES = (RECORD, TABLE, POINTS, *PLOTS)


@dataclass
class SweepSummary:
    rows: list[SummaryRow]
    table: str
    files: list[Path] = field(default_factory=list)  # the files this summary wrote

    @property
    def failed(self) -> int:
        return sum(r.status in FAILED_STATUSES for r in self.rows)


def summarize(sweep_dir: Path, info: dict) -> SweepSummary:
    dirs = job_dirs(sweep_dir)
    overrides = [_overrides(d) for d in dirs]
    common = set.intersection(*map(set, overrides)) if overrides else set()
    rows: list[SummaryRow] = []
    for d, ov in zip(dirs, overrides, strict=False):
        varying = [o for o in ov if o not in common]
        rows.extend(
            read_rows(d, " ".join(varying) or d.name, dict(o.lstrip("+~").split("=", 1) for o in varying if "=" in o))
        )
    uri = info.get("tracking_uri")
    if uri:
        rows = filled_from_mlflow(rows, uri)
    else:
        rows = filled_from_record(rows, read_json(sweep_dir / RECORD, None))
    rows = profiled(compared(rows), sweep_dir)
    table = format_table(rows, info.get("name", "sweep"))
    record = {"sweep_id": info.get("sweep_id"), "runs": [r.record() for r in rows]}
    files = write_files(
        {
            sweep_dir / RECORD: (json.dumps(record, indent=2, default=str) + "\n").encode(),
            sweep_dir / TABLE: (table + "\n").encode(),
            sweep_dir / POINTS: points_csv(rows).encode(),
        },
        key="hydra.sweep.dir",
    )
    curves = curves_of(rows, uri)
    loss_vs_flops, final_loss, speed_memory = (sweep_dir / name for name in PLOTS)
    for plot in (
        plot_loss_vs_flops(rows, curves, loss_vs_flops),
        plot_final_loss(rows, final_loss),
        plot_speed_memory(rows, speed_memory),
    ):
        if plot:
            files.append(plot)
    return SweepSummary(rows=rows, table=table, files=files)


def recorded_summary(sweep_dir: Path, sweep_id: str | None) -> SweepSummary | None:
    """The summary that launch `sweep_id` wrote at its end (summary.json and summary.md), read back
    (it writes no file); None where the sweep dir holds none, or another launch's (one stopped
    before its summary)."""
    doc = read_json(sweep_dir / RECORD, None)
    if sweep_id is None or not isinstance(doc, dict) or doc.get("sweep_id") != sweep_id:
        return None
    try:
        table = read_regular(sweep_dir / TABLE).decode().removesuffix("\n")
    except (OSError, ValueError):
        return None
    return SweepSummary(rows=[from_record(r) for r in doc.get("runs") or []], table=table)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))


def _overrides(job_dir: Path) -> list[str]:
    import yaml

    try:
        return list(yaml.safe_load(read_regular(job_dir / ".hydra" / "overrides.yaml")) or [])
    except (OSError, ValueError, TypeError, yaml.YAMLError):  # none, not YAML, or not a list
        return []


def format_table(rows: list[SummaryRow], name: str) -> str:
    """One row per run. The loss difference and speed-up against a baseline only where the runs
    share a model size (a precision or attention sweep); across sizes they compare nothing. With
    seeds swept, each difference is against the baseline's run of the same seed, and a second table
    gives each arm's mean difference with its 95% interval over the seeds. A speed-up is shown only
    where it was measured fairly (`speedup_comparable`)."""
    base = next((r.comparison.baseline for r in rows if r.comparison.baseline), "first run")
    compare = len({r.params for r in rows if r.params}) <= 1
    seeded = any(SEED_KEY in r.overrides for r in rows)
    base_arm = next((r.arm.arm for r in rows if r.label == base and r.arm and r.arm.arm), base)
    delta_col = f"Δ vs {base_arm} (same seed)" if seeded else f"Δ vs {base}"
    cols = [
        "run",
        "status",
        "params",
        "tokens",
        "FLOPs",
        "val loss",
        *(["val bpb"] if any(r.final_val_bpb for r in rows) else []),
        *([delta_col] if compare else []),
        "tokens/s",
        *(["speed-up"] if compare else []),
        *(["core share"] if any(r.core_share is not None for r in rows) else []),
        "MFU",
        *(["memory"] if any(r.memory_bytes for r in rows) else []),
    ]
    lines = [f"## Sweep `{name}`", "", "| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    lines += ["| " + " | ".join(_cells(r, cols, compare)) + " |" for r in rows]
    if compare and seeded:
        lines += ["", *arms_table(rows, base_arm)]
    grid = pivot_table(rows)
    if grid:
        lines += ["", grid]
    notes = _notes(rows, base_arm, seeded, compare)
    return "\n".join(lines + ([""] + notes if notes else []))


def _cells(r: SummaryRow, cols: list[str], compare: bool) -> list[str]:
    """One run's line of the table, in the columns `format_table` chose."""
    cells = [
        r.label,
        r.status,
        _num(r.params, ","),
        _num(r.tokens or None, ","),
        _num(r.flops or None, ".3g"),
        _num(r.final_val_loss, ".4f"),
    ]
    if "val bpb" in cols:
        cells.append(_num(r.final_val_bpb, ".4f"))
    if compare:
        cells.append(_num(r.comparison.val_loss_delta, "+.4f"))
    cells.append(_num(r.tokens_per_s, ",.0f"))
    if compare:
        cells.append(_num(r.comparison.speedup if r.comparison.speedup_comparable else None, ".2f", "x"))
    if "core share" in cols:
        cells.append(_num(r.core_share, ".0%"))
    cells.append(_num(r.mfu, ".2%"))
    if "memory" in cols:
        cells.append(_num(r.memory_bytes / 1e6 if r.memory_bytes else None, ".3g", " MB"))
    return cells


def _notes(rows: list[SummaryRow], base_arm: str, seeded: bool, compare: bool) -> list[str]:
    """The lines under the table: what failed, what is not shown and why, what a GPU would change."""
    notes = [f"- {r.label}: {r.status}: {r.reason}" for r in rows if r.status not in ("finished", "skipped")]
    impossible = [r.label for r in rows if r.mfu_impossible]
    if impossible:
        notes.append(
            f"- MFU not shown for {', '.join(impossible)}: the run recorded an impossible one (above 100% or "
            "not positive), measured against a CPU peak that a busy machine had fooled (an older ablate)."
        )
    if compare:
        notes += [line for line in (delta_verdict(rows, base_arm, seeded), speed_note(rows)) if line]
    skipped = sum(r.status == "skipped" for r in rows)
    if skipped:
        notes.append(
            f"- {skipped} run(s) had already finished with the same config and were not run again "
            "(train.rerun=true reruns them)."
        )
    if any(
        r.device == "cpu" and r.comparison.speedup_comparable and r.comparison.speedup < 1 and r.precision != "fp32"
        for r in rows
    ):
        notes.append(
            "- On this CPU reduced precision costs time: without native bf16/fp16 arithmetic the "
            "low-precision kernels are emulated. On GPUs with tensor cores (A100, H100, H200) the "
            "same policies run faster than fp32."
        )
    gpu = gpu_note(rows)
    if gpu:
        notes.append(gpu)
    if any(str(r.precision or "").startswith("fp8") for r in rows):
        notes.append(fp8_note())
    if any(r.memory_bytes for r in rows):
        notes.append(
            "- memory: one training step's peak as perf/memory.py models it for this device (weights, "
            "gradients, Adam states, the activations saved for backward, the optimizer step); `ablate plan` "
            "uses the same model to say what fits on a GPU."
        )
    records = [r.record() for r in rows]
    if any((rec.get("profile") or {}).get("bound") for rec in records):
        from ablate.perf import roofline

        notes += roofline.bound_notes(records)
    return notes


def arms_table(rows: list[SummaryRow], base_arm: str) -> list[str]:
    """Each arm's mean loss difference against the baseline's runs of the same seeds, with its 95%
    interval (mean +- t_{0.975, n-1} sd / sqrt(n) over the n paired seeds) and whether it excludes 0."""
    lines = [
        f"Each arm against {base_arm}, paired by seed (same data order and initialisation):",
        "",
        f"| arm | seeds | val loss (mean) | Δ vs {base_arm} (mean) | 95% interval | difference |",
        "|---|---|---|---|---|---|",
    ]
    for arm in arms(rows):
        losses = [r.final_val_loss for r in arm.runs if r.final_val_loss is not None]
        figures = arm.runs[0].arm
        ci = figures.val_loss_delta_ci95 if figures else None
        resolved = figures.val_loss_delta_resolved if figures else None
        if arm.label == base_arm:
            verdict = "baseline"
        elif resolved is None:
            verdict = "no interval" if losses else "-"
        else:
            verdict = "real" if resolved else "noise"
        cells = [
            arm.label,
            str(len(losses)),
            _num(sum(losses) / len(losses) if losses else None, ".4f"),
            _num(figures.val_loss_delta_mean if figures else None, "+.4f"),
            f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "-",
            verdict,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def delta_verdict(rows: list[SummaryRow], base_arm: str, seeded: bool) -> str | None:
    """One line: which arms' loss differences are real (their interval excludes 0) and which noise."""
    shown_arms = [a for a in arms(rows) if a.label != base_arm and a.runs[0].comparison.val_loss_delta is not None]
    if not shown_arms:
        return None
    if not seeded:
        return (
            f"- One run per arm: the differences against {base_arm} have no noise estimate "
            f"(sweep {SEED_KEY}=0,1,2 for each arm's 95% interval over paired seeds)."
        )

    def resolved(a):
        return a.runs[0].arm.val_loss_delta_resolved if a.runs[0].arm else None

    real = [a for a in shown_arms if resolved(a)]
    noise = [a for a in shown_arms if resolved(a) is False]
    unknown = [a.label for a in shown_arms if resolved(a) is None]

    def shown(a):
        figures = a.runs[0].arm
        lo, hi = figures.val_loss_delta_ci95
        return f"{a.label} {figures.val_loss_delta_mean:+.4f} [{lo:+.4f}, {hi:+.4f}]"

    parts = [
        f"real (the 95% interval excludes 0): {', '.join(map(shown, real))}" if real else "no difference resolved",
        f"noise (the interval holds 0): {', '.join(a.label for a in noise)}" if noise else "",
        f"no interval (fewer than 2 paired seeds): {', '.join(unknown)}" if unknown else "",
    ]
    return f"- Against {base_arm}: " + "; ".join(p for p in parts if p) + "."


def speed_note(rows: list[SummaryRow]) -> str | None:
    """One line, where some speed-up is not shown: why (the run that shared its cores the most)."""
    unfair = [r for r in rows if r.comparison.speedup_comparable is False]
    if not unfair:
        return None
    worst = min(unfair, key=lambda r: r.core_share if r.core_share is not None else -1.0)
    return (
        f"- No speed-up shown for {len(unfair)} of {sum(r.comparison.speedup is not None for r in rows)} runs: "
        f"runs that shared cores cannot be timed against each other ({worst.comparison.speedup_why_not}; a fair "
        f"timing needs a core share of {MIN_CORE_SHARE:.0%} or more, or a GPU each: hydra/launcher=sequential "
        "on a quiet machine)."
    )


GPU_NOTE_HARDWARE = "h100"


def gpu_note(rows: list[SummaryRow]) -> str | None:
    """What a GPU would change for a precision sweep run on a CPU: the catalogue's dense peaks per
    dtype (conf/hardware/h100.yaml) against fp32's, the bound on a compute-bound step's speed-up."""
    precisions = {r.precision for r in rows if r.status == "finished"}
    if len(precisions) < 2 or not any(r.device == "cpu" for r in rows):
        return None
    import yaml

    try:
        peaks = yaml.safe_load((CONF_DIR / "hardware" / f"{GPU_NOTE_HARDWARE}.yaml").read_text())["peak_flops"]
    except (OSError, KeyError, TypeError):
        return None
    peaks = {k: float(v) for k, v in peaks.items()}
    # An emulated fp8 arm computes in fp32 here; on the GPU its recipe runs fp8's matmuls.
    dtypes = {
        "bf16": "bf16",
        "bf16_pure": "bf16",
        "bf16_pure_nearest": "bf16",
        "fp16": "fp16",
        "fp8_tensorwise": "fp8",
        "fp8_rowwise": "fp8",
        "fp8_tensorwise_emulated": "fp8",
        "fp8_rowwise_emulated": "fp8",
    }
    parts = [
        f"{p} {peaks[dtypes[p]] / peaks['tf32']:.2g}x"
        for p in sorted(precisions, key=str)
        if p in dtypes and dtypes[p] in peaks and "tf32" in peaks
    ]
    if not parts:
        return None
    return (
        f"- On a GPU: an {GPU_NOTE_HARDWARE.upper()}'s dense peak is {peaks['tf32'] / 1e12:.0f} TFLOP/s for fp32 "
        f"matmuls (as TF32), {peaks.get('bf16', 0) / 1e12:.0f} for bf16/fp16 and {peaks.get('fp8', 0) / 1e12:.0f} "
        f"for fp8: against fp32, a compute-bound step could speed up by at most {', '.join(parts)} "
        "(an *_emulated arm is the GPU recipe's rounding, computed here in fp32). Runs as small as these are "
        "overhead-bound there too: the gain appears at the sizes `ablate plan` prices."
    )


def fp8_note() -> str:
    """Where float8 starts to pay, on the GPU benchmarks/bench_gpu.py measured (else: not measured)."""
    found = fp8.measured()
    return f"- {found.line() if found else fp8.crossover_line(GPU_NOTE_HARDWARE)}."


def pivot_table(rows: list[SummaryRow]) -> str:
    """Final validation loss on a grid, when the sweep varies exactly two keys (e.g. model x tokens)."""
    keys = list(dict.fromkeys(k for r in rows for k in r.overrides))
    if len(keys) != 2 or len(rows) < 4:
        return ""
    down, across = keys
    cols = _ordered(rows, across)
    lines = [
        f"Final validation loss, {down} (rows) x {across} (columns):",
        "",
        f"| {down} | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for value in _ordered(rows, down):
        cells = []
        for col in cols:
            match = [r for r in rows if r.overrides.get(down) == value and r.overrides.get(across) == col]
            cells.append(_num(match[0].final_val_loss, ".4f") if match else "")
        lines.append(f"| {value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ordered(rows: list[SummaryRow], key: str) -> list[str]:
    """A key's values in a reading order: by number, else by the model size they give."""
    values = list(dict.fromkeys(r.overrides[key] for r in rows if key in r.overrides))

    def order(v):
        try:
            return (0, float(v), v)
        except ValueError:
            sizes = [r.params or 0 for r in rows if r.overrides.get(key) == v]
            return (1, min(sizes) if sizes else 0, v)

    return sorted(values, key=order)


def points_csv(rows: list[SummaryRow]) -> str:
    """Finished runs as ablate fit reads them (columns params, tokens, loss[, flops, ...]; an unknown
    value is an empty cell: a run skipped as finished elsewhere has no train_s here), then one column
    per swept key (precision, model, ...): what `ablate compare points=... arm=KEY` groups by."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    done = fit_points(rows)
    keys = list(dict.fromkeys(k for r in done for k in r.overrides))
    w.writerow(
        [
            *["params", "tokens", "loss", "flops", "params_non_embedding", "train_s", "entropy_floor", "run_id"],
            *["bpb", "seed", "label", *keys],
        ]
    )
    for r in done:
        w.writerow(
            [
                r.params,
                r.tokens,
                r.final_val_loss,
                r.flops,
                r.figures.get("params_non_embedding"),
                r.figures.get("train_s") or "",
                r.entropy_floor or "",
                r.mlflow_run_id or "",
                r.final_val_bpb or "",
                r.overrides.get(SEED_KEY, ""),
                r.label,
                *[r.overrides.get(k, "") for k in keys],
            ]
        )
    return out.getvalue()


def _num(x, fmt: str, unit: str = "") -> str:
    return "-" if x is None else format(x, fmt) + unit
