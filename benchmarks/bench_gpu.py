"""The trainer on a GPU, as ratios and figures within one run of this script (GPU only; --dry-run
takes every path on a CPU with a tiny model, for the tests).

1. Throughput: the trainer (run/trainer.py, in this process, tracking off) against a bare compiled
   loop of the same model, batch, optimizer and precision policy (nanoGPT's loop: batch, forward
   under autocast, backward, clip, AdamW, nothing else), alternating at batch 16, 32 and 64. Both
   are timed by synchronization: the trainer by its own clock (perf/clock.py, steady intervals after
   the warm-up), the bare loop by torch.cuda.synchronize() around its steps after a warm-up. Target:
   trainer >= 0.97x bare at every batch. MFU of each.
2. Float8: bf16 against torchao's fp8 tensorwise and rowwise (the project's policies, compiled), a
   GPT of 2 blocks at widths 768, 2048 and 4096 (head dimension 64, an 8,192-token vocabulary, so
   that the blocks' matmuls are the step), 8 x 1,024 tokens a step. The crossover width: the
   smallest measured width from which fp8 is faster than bf16 at every larger measured width.
3. Memory: torch.cuda.max_memory_allocated over the trainer's steps against perf/memory.py's model
   (result.json's measured_peak_bytes / memory_bytes), compiled (the throughput runs) and eager.
4. Checkpoints: what one checkpoint of the model's state (weights, AdamW moments) costs the step path,
   written synchronously (checkpoint.save: serialize, write, fsync) against in the background
   (checkpoint.BackgroundSaver: a copy to host memory, then a thread writes it); median of 3 each.

Each section runs while time is left (--budget-s); a section that would not fit is recorded as
skipped with the reason, so that the script ends in its budget with what it measured.

    python benchmarks/bench_gpu.py [--hardware h200] [--out benchmarks/results/gpu.json]
    python benchmarks/bench_gpu.py --dry-run --out X.json          # the same paths on a CPU
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from ablate.config import ConfigError  # noqa: E402
from ablate.data import TrainBatches  # noqa: E402
from ablate.files import write_json  # noqa: E402
from ablate.model import GPT, accounting, apply_precision, build_optimizer, lr_at  # noqa: E402
from ablate.run import checkpoint  # noqa: E402
from ablate.run.prepare import prepare  # noqa: E402
from ablate.run.trainer import Trainer  # noqa: E402
from ablate.tracking import Tracker  # noqa: E402
from support import run_config  # noqa: E402  (the tests' preset loader, which bench_train.py uses too)

OUT = ROOT / "benchmarks" / "results" / "gpu.json"
THROUGHPUT_TARGET = 0.97
MEMORY_TARGET = 0.10  # the modelled peak within 10% of the measured one
FP8_POLICIES = ("fp8_tensorwise", "fp8_rowwise")
WIDTHS = (768, 2048, 4096)
BATCHES = (16, 32, 64)


class Plan:
    """What a run of this script measures: the GPU's (full) or a CPU's (dry run, tiny)."""

    def __init__(self, dry_run: bool, hardware: str):
        self.dry = dry_run
        self.hardware = "cpu" if dry_run else hardware
        self.model = "nano" if dry_run else "gpt2_124m"
        self.batches = (2, 4) if dry_run else BATCHES
        self.steps = 6 if dry_run else 30
        self.log_interval = 2 if dry_run else 10
        self.compile = not dry_run
        self.widths = (32, 64) if dry_run else WIDTHS
        self.fp8 = _emulated_fp8() if dry_run else FP8_POLICIES
        self.baseline = "fp32" if dry_run else "bf16"
        self.precision = "fp32" if dry_run else "bf16"

    def config(self, tmp: Path, **overrides):
        tree = {
            "model": self.model,
            "model.planning_only": False,
            "precision": self.precision,
            "hardware": self.hardware,
            "train.compile": self.compile,
            "train.steps": self.steps,
            "train.log_interval": self.log_interval,
            "train.eval_interval": self.steps,
            "train.eval_batches": 1,
            "train.checkpoint_interval": 10**9,
            **overrides,
        }
        return run_config(tmp, **tree)


def _emulated_fp8() -> tuple[str, ...]:
    """The fp8 policies a CPU can run (their numerics emulated), as the presets name them."""
    names = sorted(p.stem for p in (ROOT / "src" / "ablate" / "conf" / "precision").glob("fp8*emulated.yaml"))
    return tuple(names)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# -- the two arms ---------------------------------------------------------------------------------


def trainer_arm(cfg, tmp: Path) -> dict:
    """One whole run of the trainer in this process (tracking off): its own steady figures."""
    prepared = prepare(cfg)
    # its checkpoints in memory where there is a tmpfs: writing them is not what this arm measures
    shm = Path("/dev/shm")
    state = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp / "state"
    try:
        result = Trainer(prepared, Tracker(), state, tmp / "out").train(None)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return {
        "tokens_per_s": result.tokens_per_s,
        "mfu": result.mfu,
        "compile_s": result.compile_s,
        "warmup_steps": result.warmup_steps,
        "measured_peak_bytes": result.measured_peak_bytes,
        "modelled_peak_bytes": result.memory_bytes,
    }


def bare_arm(cfg, warmup: int) -> dict:
    """nanoGPT's loop on the same model, policy, optimizer and batches, compiled as the trainer is;
    timed with the device synchronized around the steps after `warmup`."""
    prepared = prepare(cfg)
    device, c = prepared.hardware.device, prepared.cfg
    torch.manual_seed(c.train.seed)
    model = GPT(c.model)
    runtime = apply_precision(model, c.precision, device)
    model.to(device)
    optimizer = build_optimizer(model, c.optim, compiled=c.train.compile)
    forward = torch.compile(model) if c.train.compile else model
    batches = TrainBatches(prepared.data.train, c.train.batch_size, c.model.block_size, c.train.seed, device)
    total = prepared.total_steps
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = 0.0
    for step in range(total):
        if step == warmup:
            synchronize(device)
            start = time.perf_counter()
        x, y = batches.take(step)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total, c.optim)
        with runtime.autocast():
            _, loss = forward(x, y)
        loss.backward()
        if step + 1 < total:
            batches.prefetch(step + 1)
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    seconds = time.perf_counter() - start
    tokens_per_s = (total - warmup) * c.train.batch_size * c.model.block_size / seconds
    attained = tokens_per_s * accounting.flops_per_token(c.model)
    peak = prepared.hardware.peak_for(c.precision)
    if peak and attained > peak:  # a CPU peak measured on a busy machine: raised, as the trainer does
        peak = prepared.hardware.raise_peak(c.precision, attained)
    return {
        "tokens_per_s": tokens_per_s,
        "mfu": attained / peak if peak else None,
        "final_loss": float(loss.item()),
    }


def fresh_compile() -> None:
    """Each arm compiles its own model from nothing in memory (inductor's disk cache may still
    hit); without it, dynamo's per-function cache fills and later models would run eagerly."""
    torch._dynamo.reset()


# -- sections -------------------------------------------------------------------------------------


def throughput(plan: Plan, tmp: Path, pairs: int, deadline: float) -> dict:
    rows = []
    for batch in plan.batches:
        if time.monotonic() > deadline:
            rows.append({"batch": batch, "skipped": "the time budget ran out"})
            continue
        trainer, bare = [], []
        for i in range(pairs):  # alternating which arm goes first
            order = ("trainer", "bare") if i % 2 == 0 else ("bare", "trainer")
            for arm in order:
                fresh_compile()
                cfg = plan.config(tmp / f"b{batch}-{i}-{arm}", **{"train.batch_size": batch})
                if arm == "trainer":
                    trainer.append(trainer_arm(cfg, tmp / f"b{batch}-{i}-{arm}"))
                else:
                    bare.append(bare_arm(cfg, warmup=plan.log_interval))
        ratios = [t["tokens_per_s"] / b["tokens_per_s"] for t, b in zip(trainer, bare, strict=True)]
        rows.append(
            {
                "batch": batch,
                "trainer_over_bare": statistics.median(ratios),
                "ratios": ratios,
                "trainer": trainer,
                "bare": bare,
                "met": statistics.median(ratios) >= THROUGHPUT_TARGET,
            }
        )
    return {"target": f">= {THROUGHPUT_TARGET} at every batch", "compile": plan.compile, "rows": rows}


def fp8_sweep(plan: Plan, tmp: Path, deadline: float) -> dict:
    """bf16 against each fp8 policy at each width, the bare timed loop on the project's model and
    policies; where fp8 starts to pay."""
    rows = []
    for width in plan.widths:
        row: dict = {"width": width}
        for policy in (plan.baseline, *plan.fp8):
            if time.monotonic() > deadline:
                row[policy] = {"skipped": "the time budget ran out"}
                continue
            fresh_compile()
            overrides = {
                "precision": policy,
                "model.n_layer": 2,
                "model.n_embd": width,
                "model.n_head": max(1, width // 64) if not plan.dry else 2,
                "model.vocab_size": None if plan.dry else 8192,
                "train.batch_size": 2 if plan.dry else 8,
            }
            try:
                row[policy] = bare_arm(plan.config(tmp / f"w{width}-{policy}", **overrides), warmup=plan.log_interval)
            except ConfigError as exc:  # a policy this device cannot run: its one line
                row[policy] = {"refused": str(exc)}
        base = row.get(plan.baseline, {}).get("tokens_per_s")
        for policy in plan.fp8:
            speed = row.get(policy, {}).get("tokens_per_s")
            if base and speed:
                row[policy]["speedup_over_" + plan.baseline] = speed / base
        rows.append(row)
    return {
        "policies": [plan.baseline, *plan.fp8],
        "rows": rows,
        "crossover_width": {p: crossover(rows, p, plan.baseline) for p in plan.fp8},
        "model": "2 blocks, head dim 64, vocabulary 8192, 8 x 1024 tokens a step" if not plan.dry else "dry run",
    }


def crossover(rows: list[dict], policy: str, baseline: str) -> int | None:
    """The smallest width from which `policy` beats the baseline at every larger measured width;
    None when it never does (or nothing was measured)."""
    key = "speedup_over_" + baseline
    measured = [(r["width"], r.get(policy, {}).get(key)) for r in rows]
    measured = [(w, s) for w, s in measured if s is not None]
    found = None
    for width, speedup in reversed(measured):
        if speedup <= 1.0:
            break
        found = width
    return found


def memory(plan: Plan, tmp: Path, runs: dict, deadline: float) -> dict:
    """Measured over modelled peak: the compiled throughput runs, and one eager run at the first batch."""
    rows = []
    for row in runs.get("rows", []):
        for t in row.get("trainer", [])[:1]:
            rows.append({"batch": row["batch"], "compile": plan.compile, **_ratio(t)})
    if time.monotonic() < deadline and plan.compile:
        fresh_compile()
        batch = plan.batches[0]
        cfg = plan.config(tmp / "eager", **{"train.batch_size": batch, "train.compile": False})
        rows.append({"batch": batch, "compile": False, **_ratio(trainer_arm(cfg, tmp / "eager"))})
    return {"target": f"modelled within {MEMORY_TARGET:.0%} of measured", "rows": rows}


def _ratio(t: dict) -> dict:
    measured, modelled = t.get("measured_peak_bytes"), t.get("modelled_peak_bytes")
    ratio = measured / modelled if measured and modelled else None
    return {
        "measured_peak_bytes": measured,
        "modelled_peak_bytes": modelled,
        "measured_over_modelled": ratio,
        "met": abs(1 - ratio) <= MEMORY_TARGET if ratio else None,
    }


def checkpoint_cost(plan: Plan, tmp: Path, model: str, repeats: int = 3) -> dict:
    """One checkpoint's step-path seconds, synchronous against background, for `model`'s state."""
    prepared = prepare(plan.config(tmp / "ckpt", model=model, **{"train.compile": False, "train.batch_size": 1}))
    c, device = prepared.cfg, prepared.hardware.device
    net = GPT(c.model).to(device)
    optimizer = build_optimizer(net, c.optim)
    x, y = TrainBatches(prepared.data.train, 1, c.model.block_size, 0, device).take(0)
    net(x, y)[1].backward()
    optimizer.step()  # the AdamW moments exist, as in a run's checkpoint
    state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": 1, "train_time": 0.0}
    state.update(rng=torch.get_rng_state(), pending=[], config_hash="bench")
    sync, step_path, written = [], [], []
    saver = checkpoint.BackgroundSaver()
    for i in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        checkpoint.save(state, tmp / f"sync{i}")
        sync.append(time.perf_counter() - t0)
        synchronize(device)
        t0 = time.perf_counter()
        saver.save(state, tmp / f"background{i}")
        step_path.append(time.perf_counter() - t0)
        saver.wait()
        written.append(time.perf_counter() - t0)
    size = (tmp / "sync0" / checkpoint.CHECKPOINT).stat().st_size
    return {
        "model": model,
        "params": sum(p.numel() for p in net.parameters()),
        "bytes": size,
        "synchronous_s": statistics.median(sync),
        "background_step_path_s": statistics.median(step_path),
        "background_written_s": statistics.median(written),
        "step_path_saved": 1 - statistics.median(step_path) / statistics.median(sync),
    }


def device_facts() -> dict:
    facts = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gb=round(props.total_memory / 1e9, 1),
            gpus=torch.cuda.device_count(),
        )
    return facts


def run(plan: Plan, budget_s: float, pairs: int, tmp: Path) -> dict:
    """Every section in order of need, each while its share of the budget is left."""
    start = time.monotonic()
    report: dict = {"device": device_facts(), "dry_run": plan.dry, "hardware": plan.hardware}
    report["throughput"] = throughput(plan, tmp, pairs, start + 0.45 * budget_s)
    report["fp8"] = fp8_sweep(plan, tmp, start + 0.85 * budget_s)
    report["memory"] = memory(plan, tmp, report["throughput"], start + 0.92 * budget_s)
    report["checkpoint"] = (
        checkpoint_cost(plan, tmp, plan.model)
        if time.monotonic() < start + 0.95 * budget_s
        else {"skipped": "the time budget ran out"}
    )
    report["seconds"] = time.monotonic() - start
    return report


def table(report: dict) -> str:
    lines = ["| batch | trainer / bare | trainer MFU | bare MFU | compile_s |", "|---|---|---|---|---|"]
    for r in report["throughput"]["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['batch']} | {r['skipped']} | | | |")
            continue
        t, b = r["trainer"][0], r["bare"][0]
        lines.append(
            f"| {r['batch']} | {r['trainer_over_bare']:.3f} | {_pct(t['mfu'])} | {_pct(b['mfu'])} | "
            f"{_num(t['compile_s'])} |"
        )
    fp8 = report["fp8"]
    lines += ["", "| width | " + " | ".join(fp8["policies"]) + " |", "|---" * (len(fp8["policies"]) + 1) + "|"]
    for r in fp8["rows"]:
        cells = [_num(r.get(p, {}).get("tokens_per_s"), ",.0f") for p in fp8["policies"]]
        lines.append(f"| {r['width']} | " + " | ".join(cells) + " |")
    lines.append(f"fp8 crossover width: {fp8['crossover_width']}")
    for r in report["memory"]["rows"]:
        lines.append(
            f"memory batch {r['batch']} compile={r['compile']}: measured/modelled {_num(r['measured_over_modelled'])}"
        )
    return "\n".join(lines)


def _pct(x) -> str:
    return f"{x:.1%}" if isinstance(x, float) and math.isfinite(x) else "-"


def _num(x, fmt: str = ".3f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="cuda", help="the catalogue entry for MFU (h200, h100, ...)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--dry-run", action="store_true", help="every path on a CPU, tiny")
    parser.add_argument(
        "--checkpoint-only", default=None, metavar="MODEL", help="only the checkpoint section, for MODEL (CPU too)"
    )
    args = parser.parse_args(argv)
    if args.checkpoint_only:
        plan = Plan(not torch.cuda.is_available(), args.hardware)
        with tempfile.TemporaryDirectory() as tmp:
            figures = checkpoint_cost(plan, Path(tmp), args.checkpoint_only)
        print(figures)
        return 0
    if not args.dry_run and not torch.cuda.is_available():
        print("error: bench_gpu.py measures a GPU and none is visible (valid: a CUDA machine, or --dry-run)")
        return 2
    plan = Plan(args.dry_run, args.hardware)
    with tempfile.TemporaryDirectory() as tmp:
        report = run(plan, args.budget_s, args.pairs, Path(tmp))
    write_json(args.out, report)
    print(table(report))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
