"""The end of a sweep as data and pictures: a table, three plots and a points file.

Rows come from each job's result.json (a job skipped as already finished reports the figures of
the MLflow run it points to). A job with a list budget (run/branches.py) is a trunk row and a row
per cooldown branch (JOB/branches/KEY=BUDGET/result.json); the branches are ordinary points, the
trunk is not. Files written to the sweep dir (and logged to the parent run):
- summary.md / summary.json: the table; the rows. Each row carries its loss difference against the
  baseline's run of the same seed (val_loss_delta), its arm's mean difference over the seeds with a
  Student's t 95% interval (val_loss_delta_ci95, val_loss_delta_resolved), and its speed-up with
  whether it may be read (speedup_comparable: neither run shared its cores or its GPU);
- loss_vs_flops.png: validation loss against training FLOPs for every run (Kaplan et al. 2020,
  fig. 1; Hoffmann et al. 2022, fig. 2: the envelope of these curves is Chinchilla approach 1);
- final_loss.png: final validation loss against parameters and against training tokens, log-log,
  one line per value of the other swept keys (Kaplan's L(N) and L(D); across FLOP budgets, the
  iso-FLOP curves of Chinchilla approach 2);
- points.csv: params, tokens, loss, flops, params_non_embedding, train_s, entropy_floor, run_id: the
  input of ablate fit (the floor keeps the fitted irreducible loss above what the data allow).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import CONF_DIR
from ablate.files import read_json, save_figure, write_files
from ablate.model import recorded_mfu
from ablate.run import BRANCHES_DIR

# Override keys that set a run's size, and those that set how long it trains.
SIZE_KEYS = ("model",)
BUDGET_KEYS = ("train.steps", "train.tokens", "train.flops", "train.tokens_per_param")
FAILED_STATUSES = ("failed", "killed", "missing")
# What a sweep's end writes in its folder: the record, the table, the points, then the plots.
RECORD, TABLE, POINTS = "summary.json", "summary.md", "points.csv"
PLOTS = ("loss_vs_flops.png", "final_loss.png", "speed_memory.png")
OUTPUT_FILES = (RECORD, TABLE, POINTS, *PLOTS)


@dataclass
class SweepSummary:
    rows: list
    table: str
    files: list = field(default_factory=list)  # the files this summary wrote

    @property
    def failed(self) -> int:
        return sum(r["status"] in FAILED_STATUSES for r in self.rows)


def summarize(sweep_dir: Path, info: dict) -> SweepSummary:
    dirs = job_dirs(sweep_dir)
    overrides = [_overrides(d) for d in dirs]
    common = set.intersection(*map(set, overrides)) if overrides else set()
    rows = []
    for d, ov in zip(dirs, overrides, strict=False):
        varying = [o for o in ov if o not in common]
        rows.extend(
            _rows(d, " ".join(varying) or d.name, dict(o.lstrip("+~").split("=", 1) for o in varying if "=" in o))
        )
    uri = info.get("tracking_uri")
    if uri:
        _fill_from_mlflow(rows, uri)
    else:
        _fill_from_record(rows, read_json(sweep_dir / "summary.json", None))
    _drop_impossible_mfus(rows)
    _compare_to_baseline(rows)
    _add_profiles(rows, sweep_dir)
    table = format_table(rows, info.get("name", "sweep"))
    record = {"sweep_id": info.get("sweep_id"), "runs": rows}
    files = write_files(
        {
            sweep_dir / RECORD: (json.dumps(record, indent=2, default=str) + "\n").encode(),
            sweep_dir / TABLE: (table + "\n").encode(),
            sweep_dir / POINTS: points_csv(rows).encode(),
        }
    )
    curves = _curves(rows, uri)
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
    doc = read_json(sweep_dir / "summary.json", None)
    if sweep_id is None or not isinstance(doc, dict) or doc.get("sweep_id") != sweep_id:
        return None
    try:
        table = (sweep_dir / "summary.md").read_text().removesuffix("\n")
    except OSError:
        return None
    return SweepSummary(rows=doc.get("runs") or [], table=table)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))


def _rows(job_dir: Path, label: str, overrides: dict) -> list[dict]:
    """The job's row; for a trunk, then a row per branch, labelled and keyed by its own budget."""
    try:  # the process launchers record each job's CPU time (a trunk's includes its branches')
        cpu_s = json.loads((job_dir / "usage.json").read_text())["cpu_s"]
    except (OSError, ValueError, KeyError):
        cpu_s = None
    rows = [{**_row(job_dir, label, overrides, job_dir.name), "job_cpu_s": cpu_s}]
    branches = job_dir / BRANCHES_DIR
    if rows[0].get("kind") == "trunk" and branches.is_dir():
        rows[0]["label"] = f"{label} (trunk)".strip()
        for d in sorted((d for d in branches.iterdir() if "=" in d.name), key=_budget_order):
            key, value = d.name.split("=", 1)
            budget = {f"train.{key}": value}
            name = " ".join(f"{k}={v}" for k, v in budget.items())
            rows.append(
                _row(d, f"{label} {name}".strip(), {**overrides, **budget}, f"{job_dir.name}/{BRANCHES_DIR}/{d.name}")
            )
    return rows


def _budget_order(d: Path) -> float:
    return float(d.name.split("=", 1)[1])


def _row(job_dir: Path, label: str, overrides: dict, job: str) -> dict:
    try:
        result = json.loads((job_dir / "result.json").read_text())
    except (OSError, ValueError):
        result = {"status": "missing", "reason": "the job wrote no result.json (crashed or still running)"}
    return {"label": label, "job": job, "overrides": overrides, **result, "job_cpu_s": None}


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
        r["final_val_bpb"] = m.get("final/val_bpb", m.get("val/bpb"))
        r["final_train_loss"] = m.get("final/train_loss")
        r["tokens_per_s"] = m.get("final/tokens_per_s")
        r["mfu"] = m.get("final/mfu")
        r["flops"] = m.get("flops", r.get("flops"))
        r["tokens"] = int(m["tokens"]) if "tokens" in m else r.get("tokens")
        r["wall_s"] = m.get("final/wall_s", r.get("wall_s"))


def _fill_from_record(rows: list, recorded) -> None:
    """Without the store (a fresh clone keeps none), a run skipped as already finished reports the
    figures the summary recorded for it while the store was there, not an empty row."""
    if not isinstance(recorded, dict):
        return
    before = {(r.get("job"), r.get("mlflow_run_id")): r for r in recorded.get("runs") or []}
    for r in rows:
        old = before.get((r["job"], r.get("mlflow_run_id")))
        if r["status"] == "skipped" and old is not None and r.get("final_val_loss") is None:
            r.update({k: v for k, v in old.items() if k not in ("label", "job", "overrides") and v is not None})


def _drop_impossible_mfus(rows: list) -> None:
    """An MFU above 100% in a record (a run of an older ablate, whose CPU peak a busy machine fooled)
    is not shown: the row says it was impossible instead (model/accounting.recorded_mfu)."""

    for r in rows:
        raw = r.get("mfu")
        r["mfu"] = recorded_mfu(raw)
        if raw is not None and r["mfu"] is None:
            r["mfu_impossible"] = True


SEED_KEY = "train.seed"
# A run's speed is comparable with another's only when neither shared its cores (or its GPU):
# core share = training CPU seconds / (training wall seconds x torch threads), 1.0 for a run that
# had its threads' cores to itself; below this, another process took a part of them.
MIN_CORE_SHARE = 0.85


def _compare_to_baseline(rows: list) -> None:
    """Loss difference and speed-up of each run against its baseline: the fp32 run (else the first
    finished one) with the same seed (train.seed swept: same data order and initialisation), so the
    difference is paired. Each arm (the runs that differ only in their seed) then gets the mean of its
    runs' differences with a Student's t 95% interval over the seeds (`val_loss_delta_ci95`)."""
    from ablate.scaling import mean_interval  # scipy: a second to import

    done = [r for r in rows if r.get("final_val_loss") is not None and r.get("kind") != "trunk"]
    base = next((r for r in done if r.get("precision") == "fp32"), done[0] if done else None)
    base_arm = _arm(base) if base else None
    partners = {r.get("overrides", {}).get(SEED_KEY): r for r in done if _arm(r) == base_arm}
    for r in rows:
        seed = r.get("overrides", {}).get(SEED_KEY)
        partner = partners.get(seed) if seed is not None else base
        r["baseline"] = base["label"] if base else None
        r["baseline_job"] = partner["job"] if partner else None
        ok = partner is not None and r.get("final_val_loss") is not None
        r["val_loss_delta"] = r["final_val_loss"] - partner["final_val_loss"] if ok else None
        speed, base_speed = r.get("tokens_per_s"), partner.get("tokens_per_s") if partner else None
        r["speedup"] = speed / base_speed if speed and base_speed else None
        why = _why_not_comparable(r, partner, rows) if r["speedup"] else None
        r["speedup_comparable"] = None if r["speedup"] is None else why is None
        r["speedup_why_not"] = why
    for arm in _arms(rows):
        deltas = [r["val_loss_delta"] for r in arm["runs"] if r.get("val_loss_delta") is not None]
        is_base = arm["arm"] == base_arm
        est = mean_interval(deltas) if deltas and not is_base else None
        ci = list(est.ci95) if est is not None and est.ci95 is not None else None
        for r in arm["runs"]:
            r["arm"] = arm["label"]
            r["val_loss_delta_mean"] = est.value if est is not None else None
            r["val_loss_delta_ci95"] = ci
            r["val_loss_delta_n"] = len(deltas)
            r["val_loss_delta_resolved"] = None if ci is None else not ci[0] <= 0.0 <= ci[1]


def _arm(row: dict) -> tuple:
    """What sets a run apart but its seed: runs that share it are one arm's replicates."""
    return tuple(sorted((k, v) for k, v in row.get("overrides", {}).items() if k != SEED_KEY))


def _arms(rows: list) -> list[dict]:
    """[{"arm", "label", "runs"}] in the order of their first run: the runs that differ only in seed."""
    arms: dict = {}
    for r in rows:
        if r.get("kind") == "trunk":
            continue
        key = _arm(r)
        label = " ".join(f"{k}={v}" for k, v in key) or r["label"]
        arms.setdefault(key, {"arm": key, "label": label, "runs": []})["runs"].append(r)
    return list(arms.values())


def _why_not_comparable(r: dict, base: dict, rows: list) -> str | None:
    """Why a run's speed cannot be set against its baseline's, or None when it can: both ran on a
    CPU with their cores to themselves (core share >= MIN_CORE_SHARE), or both on a GPU of their own
    (no other run of the sweep on the same GPU while it ran)."""
    devices = {str(r.get("device") or "?").split(":")[0], str(base.get("device") or "?").split(":")[0]}
    if len(devices) != 1:
        return f"{r['label']} and {base['label']} ran on different devices ({', '.join(sorted(devices))})"
    for x in (r, base):
        if devices == {"cuda"}:
            other = _gpu_sharer(x, rows)
            if other is not None:
                return f"{x['label']} shared its GPU with {other}"
            continue
        share = x.get("core_share")
        if share is None:
            return f"{x['label']} recorded no core share (an older ablate, or a run skipped as finished)"
        if share < MIN_CORE_SHARE:
            return f"{x['label']} had {share:.0%} of its {x.get('torch_threads') or '?'} thread(s)' cores"
    return None


def _gpu_sharer(r: dict, rows: list) -> str | None:
    """Another run of the sweep on r's GPU while r ran ("?" when r recorded no GPU or times)."""
    if not r.get("gpu") or r.get("started_at") is None or r.get("ended_at") is None:
        return "?"
    for o in rows:
        if o is r or o.get("gpu") != r["gpu"] or o.get("started_at") is None or o.get("ended_at") is None:
            continue
        if o["started_at"] < r["ended_at"] and r["started_at"] < o["ended_at"]:
            return o["label"]
    return None


def _add_profiles(rows: list, sweep_dir: Path) -> None:
    """Runs launched with train.profile=true left a profile.json: which bound each hit (roofline.py)."""
    if any((sweep_dir / str(r["job"]) / "profile.json").exists() for r in rows):
        from ablate.perf import roofline

        roofline.annotate_rows(rows, sweep_dir)


def format_table(rows: list, name: str) -> str:
    """One row per run. The loss difference and speed-up against a baseline only where the runs
    share a model size (a precision or attention sweep); across sizes they compare nothing. With
    seeds swept, each difference is against the baseline's run of the same seed, and a second table
    gives each arm's mean difference with its 95% interval over the seeds. A speed-up is shown only
    where it was measured fairly (`speedup_comparable`)."""
    base = next((r["baseline"] for r in rows if r.get("baseline")), "first run")
    compare = len({r.get("params") for r in rows if r.get("params")}) <= 1
    seeded = any(SEED_KEY in r.get("overrides", {}) for r in rows)
    base_arm = next((r["arm"] for r in rows if r.get("label") == base and r.get("arm")), base)
    delta_col = f"Δ vs {base_arm} (same seed)" if seeded else f"Δ vs {base}"
    cols = [
        "run",
        "status",
        "params",
        "tokens",
        "FLOPs",
        "val loss",
        *(["val bpb"] if any(r.get("final_val_bpb") for r in rows) else []),
        *([delta_col] if compare else []),
        "tokens/s",
        *(["speed-up"] if compare else []),
        *(["core share"] if any(r.get("core_share") is not None for r in rows) else []),
        "MFU",
        *(["memory"] if any(r.get("memory_bytes") for r in rows) else []),
    ]
    lines = [f"## Sweep `{name}`", "", "| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    for r in rows:
        cells = [
            r["label"],
            r["status"],
            _num(r.get("params"), ","),
            _num(r.get("tokens") or None, ","),
            _num(r.get("flops") or None, ".3g"),
            _num(r.get("final_val_loss"), ".4f"),
        ]
        if "val bpb" in cols:
            cells.append(_num(r.get("final_val_bpb"), ".4f"))
        if compare:
            cells.append(_num(r.get("val_loss_delta"), "+.4f"))
        cells.append(_num(r.get("tokens_per_s"), ",.0f"))
        if compare:
            cells.append(_num(r.get("speedup") if r.get("speedup_comparable") else None, ".2f", "x"))
        if "core share" in cols:
            cells.append(_num(r.get("core_share"), ".0%"))
        cells.append(_num(r.get("mfu"), ".2%"))
        if "memory" in cols:
            cells.append(_num(r["memory_bytes"] / 1e6 if r.get("memory_bytes") else None, ".3g", " MB"))
        lines.append("| " + " | ".join(cells) + " |")
    if compare and seeded:
        lines += ["", *arms_table(rows, base_arm)]
    grid = pivot_table(rows)
    if grid:
        lines += ["", grid]
    notes = [
        f"- {r['label']}: {r['status']}: {r['reason']}" for r in rows if r["status"] not in ("finished", "skipped")
    ]
    impossible = [r["label"] for r in rows if r.get("mfu_impossible")]
    if impossible:
        notes.append(
            f"- MFU not shown for {', '.join(impossible)}: the run recorded an impossible one (above 100% or "
            "not positive), measured against a CPU peak that a busy machine had fooled (an older ablate)."
        )
    if compare:
        notes += [line for line in (delta_verdict(rows, base_arm, seeded), speed_note(rows)) if line]
    skipped = sum(r["status"] == "skipped" for r in rows)
    if skipped:
        notes.append(
            f"- {skipped} run(s) had already finished with the same config and were not run again "
            "(train.rerun=true reruns them)."
        )
    if any(
        r.get("device") == "cpu" and r.get("speedup_comparable") and r["speedup"] < 1 and r.get("precision") != "fp32"
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
    if any(r.get("memory_bytes") for r in rows):
        notes.append(
            "- memory: one training step's peak as perf/memory.py models it for this device (weights, "
            "gradients, Adam states, the activations saved for backward, the optimizer step); `ablate plan` "
            "uses the same model to say what fits on a GPU."
        )
    if any((r.get("profile") or {}).get("bound") for r in rows):
        from ablate.perf import roofline

        notes += roofline.bound_notes(rows)
    return "\n".join(lines + ([""] + notes if notes else []))


def arms_table(rows: list, base_arm: str) -> list[str]:
    """Each arm's mean loss difference against the baseline's runs of the same seeds, with its 95%
    interval (mean +- t_{0.975, n-1} sd / sqrt(n) over the n paired seeds) and whether it excludes 0."""
    lines = [
        f"Each arm against {base_arm}, paired by seed (same data order and initialisation):",
        "",
        f"| arm | seeds | val loss (mean) | Δ vs {base_arm} (mean) | 95% interval | difference |",
        "|---|---|---|---|---|---|",
    ]
    for arm in _arms(rows):
        runs = arm["runs"]
        losses = [r["final_val_loss"] for r in runs if r.get("final_val_loss") is not None]
        first = runs[0]
        ci = first.get("val_loss_delta_ci95")
        if arm["label"] == base_arm:
            verdict = "baseline"
        elif first.get("val_loss_delta_resolved") is None:
            verdict = "no interval" if losses else "-"
        else:
            verdict = "real" if first["val_loss_delta_resolved"] else "noise"
        cells = [
            arm["label"],
            str(len(losses)),
            _num(sum(losses) / len(losses) if losses else None, ".4f"),
            _num(first.get("val_loss_delta_mean"), "+.4f"),
            f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "-",
            verdict,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def delta_verdict(rows: list, base_arm: str, seeded: bool) -> str | None:
    """One line: which arms' loss differences are real (their interval excludes 0) and which noise."""
    arms = [a for a in _arms(rows) if a["label"] != base_arm and a["runs"][0].get("val_loss_delta") is not None]
    if not arms:
        return None
    if not seeded:
        return (
            f"- One run per arm: the differences against {base_arm} have no noise estimate "
            f"(sweep {SEED_KEY}=0,1,2 for each arm's 95% interval over paired seeds)."
        )
    real = [a for a in arms if a["runs"][0].get("val_loss_delta_resolved")]
    noise = [a for a in arms if a["runs"][0].get("val_loss_delta_resolved") is False]
    unknown = [a["label"] for a in arms if a["runs"][0].get("val_loss_delta_resolved") is None]

    def shown(a):
        r = a["runs"][0]
        lo, hi = r["val_loss_delta_ci95"]
        return f"{a['label']} {r['val_loss_delta_mean']:+.4f} [{lo:+.4f}, {hi:+.4f}]"

    parts = [
        f"real (the 95% interval excludes 0): {', '.join(map(shown, real))}" if real else "no difference resolved",
        f"noise (the interval holds 0): {', '.join(a['label'] for a in noise)}" if noise else "",
        f"no interval (fewer than 2 paired seeds): {', '.join(unknown)}" if unknown else "",
    ]
    return f"- Against {base_arm}: " + "; ".join(p for p in parts if p) + "."


def speed_note(rows: list) -> str | None:
    """One line, where some speed-up is not shown: why (the run that shared its cores the most)."""
    unfair = [r for r in rows if r.get("speedup_comparable") is False]
    if not unfair:
        return None
    worst = min(unfair, key=lambda r: r.get("core_share") if r.get("core_share") is not None else -1.0)
    return (
        f"- No speed-up shown for {len(unfair)} of {sum(r.get('speedup') is not None for r in rows)} runs: "
        f"runs that shared cores cannot be timed against each other ({worst['speedup_why_not']}; a fair "
        f"timing needs a core share of {MIN_CORE_SHARE:.0%} or more, or a GPU each: hydra/launcher=sequential "
        "on a quiet machine)."
    )


GPU_NOTE_HARDWARE = "h100"


def gpu_note(rows: list) -> str | None:
    """What a GPU would change for a precision sweep run on a CPU: the catalogue's dense peaks per
    dtype (conf/hardware/h100.yaml) against fp32's, the bound on a compute-bound step's speed-up."""
    precisions = {r.get("precision") for r in rows if r.get("status") == "finished"}
    if len(precisions) < 2 or not any(r.get("device") == "cpu" for r in rows):
        return None
    import yaml

    try:
        peaks = yaml.safe_load((CONF_DIR / "hardware" / f"{GPU_NOTE_HARDWARE}.yaml").read_text())["peak_flops"]
    except (OSError, KeyError, TypeError):
        return None
    peaks = {k: float(v) for k, v in peaks.items()}
    # fp8_emulated: fp32 math
    dtypes = {"bf16": "bf16", "bf16_pure": "bf16", "fp16": "fp16", "fp8_tensorwise": "fp8", "fp8_rowwise": "fp8"}
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
        "(fp8_emulated only simulates fp8's rounding, in fp32). Runs as small as these are overhead-bound "
        "there too: the gain appears at the sizes `ablate plan` prices."
    )


def pivot_table(rows: list) -> str:
    """Final validation loss on a grid, when the sweep varies exactly two keys (e.g. model x tokens)."""
    keys = list(dict.fromkeys(k for r in rows for k in r.get("overrides", {})))
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
    """Finished runs as ablate fit reads them (columns params, tokens, loss[, flops, ...]; an unknown
    value is an empty cell: a run skipped as finished elsewhere has no train_s here), then one column
    per swept key (precision, model, ...): what `ablate compare points=... arm=KEY` groups by."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    done = _finished(rows)
    keys = list(dict.fromkeys(k for r in done for k in r.get("overrides", {})))
    w.writerow(
        [
            *["params", "tokens", "loss", "flops", "params_non_embedding", "train_s", "entropy_floor", "run_id"],
            *["bpb", "seed", "label", *keys],
        ]
    )
    for r in done:
        w.writerow(
            [
                r["params"],
                r["tokens"],
                r["final_val_loss"],
                r.get("flops"),
                r.get("params_non_embedding"),
                r.get("train_s") or "",
                r.get("entropy_floor") or "",
                r.get("mlflow_run_id") or "",
                r.get("final_val_bpb") or "",
                r["overrides"].get("train.seed", ""),
                r["label"],
                *[r["overrides"].get(k, "") for k in keys],
            ]
        )
    return out.getvalue()


def _finished(rows: list) -> list:
    """Rows that are points of a fit: finished runs and branches, not trunks (constant rate)."""
    return [
        r
        for r in rows
        if r.get("final_val_loss") is not None and r.get("params") and r.get("tokens") and r.get("kind") != "trunk"
    ]


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
        try:
            flops = {m.step: m.value for m in client.get_metric_history(r["mlflow_run_id"], "flops")}
            loss = sorted((m.step, m.value) for m in client.get_metric_history(r["mlflow_run_id"], "val/loss"))
        except Exception as exc:  # an outage: the plots go without curves, the sweep still ends
            print(
                f"summary: loss curves left out of the plots, the store did not answer ({type(exc).__name__})",
                file=sys.stderr,
            )
            return {}
        points = [(flops[s], v) for s, v in loss if s in flops and flops[s] > 0]
        if points:
            curves[r["job"]] = tuple(zip(*points, strict=False))
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
    """Every run's validation loss against training FLOPs; when the runs share one model and one
    ran in fp32 (a precision or attention sweep), a lower panel shows each run's loss divided by
    fp32's at the same FLOPs, where differences of a fraction of a percent are visible."""
    if not curves:
        return None
    plt = _pyplot()
    base = _ratio_baseline(rows, curves)
    if base is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
    else:
        fig, (ax, low) = plt.subplots(2, 1, figsize=(7.5, 6.8), sharex=True, height_ratios=[3, 2])
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
    _bpb_axis(ax, rows)
    if base is not None:
        _ratio_panel(low, rows, curves, base)
    ax.set_title(
        "Validation loss against compute (dots: end of each run)" if colors else "Validation loss against compute"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(ax.get_legend_handles_labels()[0]) > 8 else 1)
    return _save(fig, plt, path)


def _bpb_axis(ax, rows: list) -> None:
    """A right-hand axis in bits per byte (loss / ln 2 / bytes per token) when every run with a
    final bpb shares one tokenizer's bytes per token: the scale that compares tokenizers."""
    ratios = {
        round(r["final_val_loss"] / r["final_val_bpb"], 9)
        for r in rows
        if r.get("final_val_bpb") and r.get("final_val_loss")
    }
    if len(ratios) != 1:
        return
    nats_per_bit = ratios.pop()  # ln 2 x bytes per token
    axis = ax.secondary_yaxis("right", functions=(lambda v: v / nats_per_bit, lambda v: v * nats_per_bit))
    per_token = nats_per_bit / math.log(2)
    axis.set_ylabel(f"bits per byte ({per_token:.3g} byte{'' if per_token == 1 else 's'} per token)")


def _ratio_baseline(rows: list, curves: dict) -> dict | None:
    """The fp32 row the ratios are taken against, when every plotted run has the same model."""
    plotted = [r for r in rows if r["job"] in curves]
    if len(plotted) < 2 or len({r.get("params") for r in plotted}) != 1:
        return None
    return next((r for r in plotted if r.get("precision") == "fp32"), None)


def _ratio_panel(ax, rows: list, curves: dict, base: dict) -> None:
    """Each run against its baseline run (the same seed's, where seeds were swept)."""
    for r in rows:
        if r["job"] not in curves:
            continue
        partner = r.get("baseline_job") if r.get("baseline_job") in curves else base["job"]
        at = dict(zip(*curves[partner], strict=False))
        points = [(f, v / at[f]) for f, v in zip(*curves[r["job"]], strict=False) if f in at]
        if points:
            xs, ys = zip(*points, strict=False)
            ax.plot(xs, ys, marker="o", markersize=3, label=r["label"])
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel(f"val loss / {base['label']}'s")
    ax.grid(True, which="both", alpha=0.3)
    ax.yaxis.get_major_formatter().set_useOffset(False)


def plot_speed_memory(rows: list, path: Path) -> Path | None:
    """Side by side, per run of a sweep over precision: training speed measured here, and one
    step's modelled peak memory (what the policy saves wherever it runs)."""
    done = [r for r in rows if r.get("status") == "finished" and r.get("tokens_per_s")]
    if len({r.get("precision") for r in done}) < 2:
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [r.get("precision") or r["label"] for r in done]
    if len(set(labels)) < len(labels):  # seeds swept: one bar per run, named by its label
        labels = [r["label"] for r in done]
    speeds = [r["tokens_per_s"] for r in done]
    left.barh(labels, speeds, color="tab:blue")
    device = next((r.get("device") for r in done if r.get("device")), "this machine")
    left.set_xlabel(f"training tokens/s on {device} (measured)")
    left.invert_yaxis()
    for y, v in enumerate(speeds):
        left.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    memory = [(r.get("memory_bytes") or 0) / 1e6 for r in done]
    right.barh(labels, memory, color="tab:orange")
    right.set_xlabel("one step's peak memory, MB (modelled)")
    right.invert_yaxis()
    for y, v in enumerate(memory):
        right.text(v, y, f" {v:.3g}", va="center", fontsize=8)
    for ax in (left, right):
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(x=0.25)
    fig.suptitle("Speed and memory per precision policy", fontsize=10)
    return _save(fig, plt, path)


def plot_final_loss(rows: list, path: Path) -> Path | None:
    """Final loss against params (a line per token budget) and against tokens (a line per model)."""
    done = _finished(rows)
    panels = [
        (x, group_out, title)
        for x, group_out, title in (
            ("params", SIZE_KEYS, "Final loss against model size, L(N)"),
            ("tokens", BUDGET_KEYS, "Final loss against training tokens, L(D)"),
        )
        if len({r[x] for r in done}) >= 2
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
            members.sort(key=lambda r: r[x])
            color = cmap(i / max(1, len(groups) - 1) * 0.9)
            ax.plot(
                [r[x] for r in members],
                [r["final_val_loss"] for r in members],
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


def _group(row: dict, leave_out: tuple) -> str:
    """The row's other swept values: a line joins runs that differ only in the plotted axis."""
    parts = [
        f"{k}={v}"
        for k, v in row.get("overrides", {}).items()
        if not any(k == g or k.startswith(g + ".") for g in leave_out)
    ]
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
    save_figure(fig, path)
    plt.close(fig)
    return path


def _short(n: float) -> str:
    for unit, div in (("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def _num(x, fmt: str, unit: str = "") -> str:
    return "-" if x is None else format(x, fmt) + unit
