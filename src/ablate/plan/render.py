"""A plan for people and programs: the terminal table, plan.md and plan.json."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.config import PrecisionConfig
from ablate.files import write_files
from ablate.perf import decode, fp8
from ablate.plan.loss import LossPrediction, Purchase
from ablate.plan.make import Plan, _gb

if TYPE_CHECKING:
    from ablate.scaling import FitLaw

SCHEMA = "ablate.plan/1"
GB = 1e9


def plan_dict(p: Plan) -> dict:
    """The content of plan.json (bytes, FLOPs, hours, dollars; loss in nats per token)."""
    mem = p.memory
    binding = p.binding
    return {
        "schema": SCHEMA,
        "model": p.model.name,
        "precision": p.precision.name,
        "hardware": p.hardware.name,
        "inputs": {
            "model": asdict(p.model),
            "budget": asdict(p.plan.budget),
            "data": asdict(p.plan.data),
            "gpus": p.plan.gpus,
            "batch_size": p.plan.batch_size,
            "context": p.model.block_size,
            "activation_checkpointing": p.plan.activation_checkpointing,
            "fit": p.plan.fit,
        },
        "params": p.params,
        "params_non_embedding": p.params_non_embedding,
        "tokens": p.tokens,
        "tokens_from": p.tokens_from,
        "tokens_per_param": p.tokens / p.params,
        "flops_6nd": p.flops_6nd,
        "flops": p.flops,
        "flops_per_token": p.flops_per_token,
        "flops_formula": "flops = tokens x (6 N_matmul + 12 L T d); flops_6nd = 6 x params x tokens",
        "memory": {
            **mem.at_gpus.parts(),
            "gpus": mem.at_gpus.gpus,
            "sharded": mem.at_gpus.sharded,
            "activations_saved": mem.at_gpus.activations_saved,
            "usable_per_gpu": mem.usable,
            "capacity_per_gpu": mem.capacity,
            "bytes_per_param": mem.bytes_per_param,
            "total_formula": "weights + gradients + optimizer_states + master_weights + buffers + "
            "max(activations + fsdp_buffers, optimizer_step)",
        },
        "memory_at_gpus_needed": None
        if mem.needed is None
        else {**mem.needed.parts(), "gpus": mem.needed.gpus, "sharded": mem.needed.sharded},
        "fits": p.fits,
        "gpus_needed": p.gpus_needed,
        "gpus_needed_with": _needed_with(p),
        "gpus": p.gpus_used,
        "nodes": math.ceil(p.gpus_used / p.hardware.gpus_per_node),
        "peak_flops_per_gpu": p.hardware.peak_flops,
        "peak_dtype": p.hardware.peak_key,
        "mfu": p.mfu.value,
        "mfu_source": p.mfu.source,
        "mfu_detail": p.mfu.detail,
        "mfu_runs": list(p.mfu.run_ids),
        "hours": p.hours,
        "gpu_hours": p.gpu_hours,
        "price_per_hour": p.hardware.price_per_hour,
        "cost": p.cost,
        "predicted_loss": None if p.prediction is None else p.prediction.to_dict(),
        "compute_optimal": p.alternative.to_dict(),
        "what_it_buys": None if p.purchase is None else p.purchase.to_dict(),
        "binding": binding.corner,
        "binding_what": binding.what,
        "binding_ratio": binding.ratio,
        "binds": binding.ratio > 1,
        "broken": [c.what for c in p.broken],
        "binding_detail": binding.text,
        "constraints": [{**asdict(c), "ratio": c.ratio} for c in p.constraints],
        "communication": _communication_entry(p),
        "decode": _decode_entry(p),
        "notes": list(p.notes),
    }


def _needed_with(p: Plan) -> dict | None:
    """The settings gpus_needed assumes: the configured ones, or the fallback's."""
    mem = p.memory
    if mem.gpus_needed_as_configured is not None:
        return {
            "batch_size": p.plan.batch_size,
            "activation_checkpointing": p.plan.activation_checkpointing,
            "changed": False,
        }
    if mem.fallback is not None:
        return {"batch_size": mem.fallback.batch_size, "activation_checkpointing": True, "changed": True}
    return None


def _count(x: float) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def _loss(pred: LossPrediction | None, p: Plan) -> str:
    """The loss with its interval and verdict; not_determined: the word, why, and what would settle it."""
    if pred is None:
        return "n/a"
    v = pred.verdict
    if pred.value is None:
        text = f"not_determined: {v.because(limit=3)}"
        return text + (
            f"; runs that would determine it: {_runs(pred.runs_to_determine, p)}" if pred.runs_to_determine else ""
        )
    ci = "" if pred.lo is None else f" (95%: {pred.lo:.3f} to {pred.hi:.3f})"
    verdict = v.level + (f": {v.because(limit=2)}" if v.reasons else "")
    return f"{pred.value:.3f} nats/token{ci}, {verdict}"


def _runs(runs, p: Plan) -> str:
    """The suggested runs, what they cost on this plan's hardware, and how far they leave the plan:
    they are the next step (at most a decade past the fitted runs), not the whole way."""
    sizes = "; ".join(f"N={_count(r.N)}, D={_count(r.D)}" for r in runs)
    step = runs[0]
    parts = [f"{step.C:.3g} FLOPs"]
    if step.seconds is not None:
        parts.append(f"{_seconds(step.seconds)} each on one {p.hardware.name}")
        if p.hardware.price_per_hour:
            parts.append(f"${len(runs) * step.seconds / 3600 * p.hardware.price_per_hour:,.2g} for all {len(runs)}")
    available = p.plan.data.tokens_available
    most = max(r.D for r in runs)
    if available and most > available:
        parts.append(f"D up to {most / available:,.0f}x the {available:.3g} tokens available")
    gap = math.log10(p.flops / step.C) if step.C > 0 else 0.0
    if gap > 0.05:
        parts.append(f"a step only: this run's {p.flops:.3g} FLOPs stay {gap:.1f} decades past them")
    return f"{sizes} ({', '.join(parts)})"


def _alternative(p: Plan) -> str:
    a = p.alternative
    text = f"N_opt {_count(a.N_opt)}, D_opt {_count(a.D_opt)} ({a.tokens_per_param:.1f} tokens/param) for C={a.C:.3g}"
    if not a.from_rule:
        return text + (f", loss {_loss(a.loss, p)}" if a.loss else "")
    text += f": {a.method}"
    return text + (f"; runs that would settle it: {_runs(a.runs_to_determine, p)}" if a.runs_to_determine else "")


def _seconds(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else _duration(seconds / 3600)


def _duration(hours: float) -> str:
    return f"{hours:,.1f} h" + (f" ({hours / 24:,.1f} days)" if hours >= 48 else "")


def summary_rows(p: Plan) -> list[tuple[str, str]]:
    """(label, value) rows shared by the terminal table and plan.md."""
    m, mem = p.memory.at_gpus, p.memory
    dtype = p.precision.param_dtype
    per = "per GPU" + (f", sharded over {m.gpus}" if m.sharded else "")
    act = (
        f"micro-batch {p.plan.batch_size} x {p.model.block_size} tokens, "
        f"{'with' if p.plan.activation_checkpointing else 'no'} activation checkpointing"
    )
    rows = [
        (
            "model",
            f"{p.model.name}: {_count(p.params)} params ({p.model.n_layer} layers, d={p.model.n_embd}, "
            f"context {p.model.block_size}, vocab {p.model.vocab_size})",
        ),
        ("tokens", f"{_count(p.tokens)} ({p.tokens_from}; {p.tokens / p.params:.1f} per param)"),
        ("training FLOPs", f"{p.flops_6nd:.3g} by 6ND; {p.flops:.3g} with attention (6N+12LTd per token)"),
        (f"weights ({per})", f"{_gb(m.weights)}  [{dtype}]"),
        ("gradients", _gb(m.gradients)),
        ("optimizer states", f"{_gb(m.optimizer_states)}  [fp32 Adam m, v]"),
        ("master weights", _gb(m.master_weights) if m.master_weights else f"0  [{_no_master(p.precision)}]"),
        ("buffers", f"{_gb(m.buffers)}  [causal masks, L x T^2 bytes]"),
        ("activations", f"{_gb(m.activations)}  [{act}]"),
    ]
    if m.sharded:
        rows.append(("FSDP buffers", f"{_gb(m.fsdp_buffers)}  [two gathered blocks + one block's gradients]"))
    rows += [
        ("optimizer step", f"{_gb(m.optimizer_step)}  [temporaries; not at the same time as activations]"),
        (
            "total (peak)",
            f"{_gb(m.total)} of {_gb(mem.usable)} usable ({mem.bytes_per_param:.4g} bytes/param "
            f"before activations): {'fits' if mem.fits else 'DOES NOT FIT'} on {m.gpus} {p.hardware.name}",
        ),
        ("GPUs needed", _gpus_needed(p)),
        (
            "time",
            f"{_duration(p.hours)} on {p.gpus_used} {p.hardware.name} at MFU {p.mfu.value:.2f} "
            f"({p.mfu.source}: {p.mfu.detail}); peak {p.hardware.peak_flops:.3g} FLOP/s ({p.hardware.peak_key})",
        ),
        ("communication", _communication(p)),
        (
            "cost",
            "n/a (no price: set hardware.price_per_hour=)"
            if p.cost is None
            else f"${p.cost:,.0f} ({p.gpu_hours:,.0f} GPU-hours at ${p.hardware.price_per_hour:g}/h)",
        ),
        ("predicted loss", _loss(p.prediction, p)),
        ("compute-optimal", _alternative(p)),
        *([("what it buys", _purchase(p.purchase, p.cost))] if p.purchase is not None else []),
        ("binding", _binding(p)),
        _decode_row(p),
    ]
    if p.hardware.device == "cuda":  # where torchao's float8 starts to pay on this GPU, as benchmarked
        rows.append(("fp8", fp8.crossover_line(p.hardware.name)))
    return rows


def _communication_entry(p: Plan) -> dict | None:
    c = p.communication
    if c is None:
        return None
    return {
        "strategy": c.strategy,
        "gpus": c.gpus,
        "nodes": c.nodes,
        "all_reduce_s": c.all_reduce_s,
        "all_gather_s": c.all_gather_s,
        "reduce_scatter_s": c.reduce_scatter_s,
        "total_s": c.total_s,
        "compute_s": c.compute_s,
        "exposed_s": c.exposed_s,
        "slowdown": c.slowdown,
        "binds": c.binds,
        "missing": c.missing or None,
        "nvlink_gbs": p.hardware.nvlink_gbs,
        "network_gbs": p.hardware.network_gbs,
        "efficiency": p.plan.comm_efficiency,
    }


def _communication(p: Plan) -> str:
    """One step's collectives, their time, what the step waits for, and whether they bind."""
    c = p.communication
    if c is None or c.strategy == "none":
        return "none: one GPU"
    if c.missing:
        return f"not timed: hardware.{c.missing} is not set for hardware={p.hardware.name}"
    hw = p.hardware
    where = f"{c.gpus} {hw.name} in {c.nodes} node(s)"
    links = f"NVLink {hw.nvlink_gbs:g} GB/s" + (f", network {hw.network_gbs:g} GB/s" if c.nodes > 1 else "")
    if c.strategy == "ddp":
        what = f"DDP all-reduce of the gradients {c.all_reduce_s * 1e3:,.3g} ms"
    else:
        what = (
            f"FSDP all-gather (forward and backward) {c.all_gather_s * 1e3:,.3g} ms + "
            f"reduce-scatter {c.reduce_scatter_s * 1e3:,.3g} ms"
        )
    verdict = (
        "binds: it takes longer than the compute it can hide behind" if c.binds else "hidden but for the first block's"
    )
    return (
        f"{what} per step on {where} ({links} per GPU, at {p.plan.comm_efficiency:.0%}); "
        f"compute {c.compute_s * 1e3:,.3g} ms; the step waits {c.exposed_s * 1e3:,.3g} ms "
        f"(+{c.slowdown - 1:.1%}, in the time above): {verdict}"
    )


def _decode_entry(p: Plan):
    return decode.plan_entry(p.decode)


def _decode_row(p: Plan) -> tuple[str, str]:
    return decode.plan_row(p.decode)


def _no_master(precision: PrecisionConfig) -> str:
    if precision.param_dtype == "bf16" and precision.rounding == "nearest":
        return "none kept: bf16 weights updated with round-to-nearest (an update under half an ulp is lost)"
    if precision.param_dtype == "bf16":
        return "none kept: bf16 weights updated with stochastic rounding"
    if precision.autocast or precision.fp8:
        return "no separate copy: the fp32 weights are the master weights the low-precision math casts from"
    return "none needed: fp32 throughout"


def _gpus_needed(p: Plan) -> str:
    mem = p.memory
    n, needed = mem.gpus_needed, mem.needed
    if n is None or needed is None:  # each is None exactly when the other is (plan_memory)
        return "none: activations alone exceed one GPU, even with checkpointing and one sequence per GPU"
    text = str(n)
    if n > 1:
        text += (
            f" (states sharded FSDP/ZeRO-3 style: {_gb(needed.total)} per GPU; "
            f"{math.ceil(n / p.hardware.gpus_per_node)} node(s) of {p.hardware.gpus_per_node})"
        )
    if mem.gpus_needed_as_configured is None and mem.fallback is not None:  # n is then the fallback's
        text += (
            f", with batch_size={mem.fallback.batch_size} and activation_checkpointing=true "
            "(no GPU count fits the configured settings)"
        )
    return text


def _binding(p: Plan) -> str:
    """Every limit the plan breaks, each with how far; when none does, the closest one and its headroom."""
    broken = p.broken
    if broken:
        return "; ".join(
            f"{b.what} binds ({b.corner}): the plan needs {b.ratio:.3g}x what it has: {b.text}" for b in broken
        )
    b = p.binding
    return f"nothing binds; closest is {b.what} ({b.corner}) at {b.ratio:.0%} of its limit: {b.text}"


def _purchase(b: Purchase, cost: float | None) -> str:
    """The plan's loss against the compute-optimal split's at the same compute, and what reaching the
    plan's loss the optimal way would cost (`cost`: the plan's, when priced)."""
    if b.C_same is None or b.loss is None or b.optimal_loss is None:  # decided (C_same) comes with both losses
        return f"not_determined: {b.why}"
    gap = b.loss / b.optimal_loss - 1
    text = (
        f"this split reaches {b.loss:.3f} nats/token; the compute-optimal split of the same {b.C:.3g} FLOPs "
        f"reaches {b.optimal_loss:.3f} ({gap:+.1%} for this split)"
    )
    if b.C_same >= b.C * 0.999:
        return text + f": this split is the compute-optimal one (both predictions {b.level})"
    text += f"; the compute-optimal split reaches {b.loss:.3f} with {b.C_same:.3g} FLOPs ({b.C_same / b.C:.0%} of them"
    if cost is not None:
        text += f", ${cost * b.C_same / b.C:,.0f} instead of ${cost:,.0f} at the same MFU"
    return text + f"); both predictions {b.level}"


def render_table(p: Plan) -> str:
    rows = summary_rows(p)
    width = max(len(label) for label, _ in rows)
    title = f"Plan: {p.model.name} on {p.hardware.name}, precision={p.precision.name}"
    lines = [title, "=" * len(title)]
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def render_markdown(p: Plan) -> str:
    lines = [f"# Plan: {p.model.name} on {p.hardware.name} ({p.precision.name})", "", "| | |", "|---|---|"]
    lines += [f"| {label} | {value.replace('|', '/')} |" for label, value in summary_rows(p)]
    lines += ["", "## Constraints", "", "| corner | what | need / have | detail |", "|---|---|---|---|"]
    lines += [f"| {c.corner} | {c.what} | {c.ratio:.3g} | {c.text} |" for c in p.constraints]
    lines += [
        "",
        "## How these numbers are computed",
        "",
        "- FLOPs: 6ND (Hoffmann et al. 2022) and tokens x (6 N_matmul + 12 L T d) with attention; "
        "time uses the latter, like the MFU of recorded runs.",
        "- Memory: weights, gradients and fp32 Adam states exactly as this project's optimizer keeps them; "
        "activations from the tensors this model saves for backward, plus the logits and cross-entropy's "
        "gradient buffers at the start of backward (src/ablate/perf/memory.py; checked against saved-tensor "
        "hooks and torch's MemTracker). Every gradient is counted as live during backward, as with "
        "gradient accumulation.",
        "- Sharded plans assume FSDP full sharding / ZeRO-3 with one block per unit.",
        "- Communication: ring collectives (DDP all-reduce; FSDP all-gather twice and reduce-scatter) within a "
        "node over NVLink and across nodes over each GPU's NIC, overlapped with compute but for the first "
        "block's share (src/ablate/plan/comm.py).",
        f"- Compute-optimal: {p.alternative.method}.",
    ]
    if p.prediction is not None:
        lines.append(f"- Loss interval: {p.prediction.interval}.")
    if p.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in p.notes]
    return "\n".join(lines) + "\n"


def write_plan(p: Plan, out: str | Path, resolved_config: str = "", fit: FitLaw | None = None) -> list[Path]:
    """plan.md, config.yaml (the resolved config), torchtitan_job.py with export=torchtitan
    (plan/export.py), plan.png with the fit it was priced with (plan/plot.py) and plan.json,
    written as one set (files.write_files)."""
    out = Path(out)
    files = [(out / "plan.md", render_markdown(p))]
    if resolved_config:
        files.append((out / "config.yaml", resolved_config))
    if p.plan.export == "torchtitan":
        from ablate.plan.export import EXPORT_FILE, torchtitan_module

        files.append((out / EXPORT_FILE, torchtitan_module(p)))
    files.append((out / "plan.json", json.dumps(plan_dict(p), indent=2) + "\n"))
    written = {path: text.encode() for path, text in files}
    if fit is not None:
        from ablate.plan.plot import PLOT_FILE, render_plan_plot

        written[out / PLOT_FILE] = render_plan_plot(p, fit)
    return write_files(written)
