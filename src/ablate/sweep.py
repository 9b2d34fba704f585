"""A sweep is many runs plus one summary.

`SweepCallback` (a Hydra callback, in the launching process) creates the MLflow store, the
experiment and a parent run *before* any job starts, and writes them to SWEEP_DIR/sweep.json,
which every job reads (whatever process or node it runs in). At the end it gathers each job's
result.json into a table and a loss-against-FLOPs plot, printed and logged to the parent run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from hydra.experimental.callback import Callback

SWEEP_FILE = "sweep.json"
LAST_SUMMARY: "SweepSummary | None" = None


@dataclass
class JobContext:
    in_sweep: bool = False
    sweep_id: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    threads: int | None = None


def job_context(hc) -> JobContext:
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return JobContext()
    info = read_sweep_file(Path(hc.sweep.dir))
    return JobContext(
        in_sweep=True,
        sweep_id=info.get("sweep_id"),
        experiment_id=info.get("experiment_id"),
        parent_run_id=info.get("parent_run_id"),
        threads=info.get("threads_per_job"),
    )


def read_sweep_file(sweep_dir: Path) -> dict:
    try:
        return json.loads((sweep_dir / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        return {}


class SweepCallback(Callback):
    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        # Jobs get HydraConfig set by Hydra; the launching process does not, and the tracking
        # URI interpolates ${hydra:runtime.cwd}.
        HydraConfig.instance().set_config(config)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        name = OmegaConf.select(config, "hydra.runtime.choices.sweep") or "sweep"
        info = {"sweep_id": f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}", "name": name}
        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        if tracking.get("backend") == "mlflow":
            info.update(start_parent_run(tracking, info["sweep_id"], name))
        write_json(sweep_dir / SWEEP_FILE, info)
        print(f"sweep {info['sweep_id']}: results in {sweep_dir}", file=sys.stderr)

    def on_multirun_end(self, config, **kwargs) -> None:
        global LAST_SUMMARY
        sweep_dir = Path(config.hydra.sweep.dir)
        info = read_sweep_file(sweep_dir)
        LAST_SUMMARY = summarize(sweep_dir, info)
        print(LAST_SUMMARY.table, file=sys.stderr)
        if info.get("parent_run_id"):
            finish_parent_run(info, LAST_SUMMARY)


def start_parent_run(tracking: dict, sweep_id: str, name: str) -> dict:
    from mlflow.tracking import MlflowClient

    from ablate.provenance import code_version
    from ablate.tracking import SWEEP_TAG, ensure_experiment

    experiment_id = ensure_experiment(tracking["uri"], tracking["experiment"])
    client = MlflowClient(tracking_uri=tracking["uri"])
    run = client.create_run(
        experiment_id,
        run_name=f"sweep:{name}",
        tags={SWEEP_TAG: sweep_id, "ablate.kind": "sweep", **code_version()},
    )
    return {"experiment_id": experiment_id, "parent_run_id": run.info.run_id, "tracking_uri": tracking["uri"]}


def finish_parent_run(info: dict, summary: "SweepSummary") -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=info["tracking_uri"])
    run_id = info["parent_run_id"]
    for path in summary.files:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, status="FAILED" if summary.failed else "FINISHED")


@dataclass
class SweepSummary:
    rows: list
    failed: int
    table: str
    files: list = field(default_factory=list)


def summarize(sweep_dir: Path, info: dict) -> SweepSummary:
    dirs = job_dirs(sweep_dir)
    overrides = [_overrides(d) for d in dirs]
    common = set.intersection(*map(set, overrides)) if overrides else set()
    rows = [_row(d, " ".join(o for o in ov if o not in common) or d.name) for d, ov in zip(dirs, overrides)]
    _fill_from_mlflow(rows, info.get("tracking_uri"))
    _compare_to_baseline(rows)
    table = format_table(rows, info.get("name", "sweep"))
    files = [
        write_json(sweep_dir / "summary.json", {"sweep_id": info.get("sweep_id"), "runs": rows}),
        write_text(sweep_dir / "summary.md", table + "\n"),
    ]
    plot = plot_loss_vs_flops(rows, info.get("tracking_uri"), sweep_dir / "loss_vs_flops.png")
    if plot:
        files.append(plot)
    failed = sum(r["status"] in ("failed", "killed", "missing") for r in rows)
    return SweepSummary(rows=rows, failed=failed, table=table, files=files)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))


def _row(job_dir: Path, label: str) -> dict:
    try:
        result = json.loads((job_dir / "result.json").read_text())
    except (OSError, ValueError):
        result = {"status": "missing", "reason": "the job wrote no result.json (crashed or still running)"}
    return {"label": label, "job": job_dir.name, **result}


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
        r["tokens_per_s"] = m.get("final/tokens_per_s")
        r["mfu"] = m.get("final/mfu")
        r["flops"] = m.get("flops", r.get("flops"))


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


def format_table(rows: list, name: str) -> str:
    base = next((r["baseline"] for r in rows if r.get("baseline")), "first run")
    head = f"| run | status | val loss | Δ vs {base} | tokens/s | speed-up | MFU | FLOPs |"
    lines = [f"## Sweep `{name}`", "", head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['status']} | {_num(r.get('final_val_loss'), '.4f')} | "
            f"{_num(r.get('val_loss_delta'), '+.4f')} | {_num(r.get('tokens_per_s'), ',.0f')} | "
            f"{_num(r.get('speedup'), '.2f')}x | {_num(r.get('mfu'), '.2%')} | {_num(r.get('flops'), '.3g')} |"
        )
    notes = [f"- {r['label']}: {r['status']}: {r['reason']}" for r in rows if r["status"] not in ("finished", "skipped")]
    skipped = sum(r["status"] == "skipped" for r in rows)
    if skipped:
        notes.append(f"- {skipped} run(s) had already finished with the same config and were not run again (train.rerun=true reruns them).")
    if any(r.get("device") == "cpu" and (r.get("speedup") or 1) < 1 for r in rows):
        notes.append(
            "- On this CPU reduced precision costs time: without native bf16/fp16 arithmetic the "
            "low-precision kernels are emulated. On GPUs with tensor cores (A100, H100, H200) the "
            "same policies run faster than fp32."
        )
    return "\n".join(lines + ([""] + notes if notes else []))


def plot_loss_vs_flops(rows: list, uri: str | None, path: Path) -> Path | None:
    curves = _curves(rows, uri)
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (flops, loss) in curves.items():
        ax.plot(flops, loss, marker="o", markersize=3, label=label)
    floors = {r.get("entropy_floor") for r in rows if r.get("entropy_floor")}
    for floor in floors:
        ax.axhline(floor, color="gray", linestyle="--", linewidth=1, label=f"entropy floor {floor:.3f}")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (nats/token)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _curves(rows: list, uri: str | None) -> dict:
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
            curves[r["label"]] = tuple(zip(*points))
    return curves


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def write_json(path: Path, obj) -> Path:
    return write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
