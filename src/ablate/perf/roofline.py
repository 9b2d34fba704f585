"""The roofline model: is each op, and the step, limited by arithmetic or by memory traffic?

Attainable FLOP/s at arithmetic intensity I (FLOPs per byte moved) is min(peak, I x bandwidth)
(Williams, Waterman & Patterson 2009, "Roofline: an insightful visual performance model").
An op whose intensity is below the ridge point peak / bandwidth cannot reach the peak however
well it is written: it is memory-bound, and the way to speed it up is to move fewer bytes.

Ceilings: the hardware catalogue's peak FLOP/s for the dtype the matmuls run in and its memory
bandwidth; on a CPU both are measured (a matmul and a copy micro-benchmark, cached per machine in
~/.cache/ablate/); a CUDA device run with hardware=auto is matched to the catalogue by name.

The verdict splits the step's time three ways: ops at or above the ridge (compute-bound), ops
below it (memory-bound), each only where the op reaches NEAR_ROOF of its roof, and the rest:
time outside every op (Python, dispatch, kernel launches) and in ops far below both roofs (per-call
cost, or a machine whose cores other work holds), which neither roof explains.
"""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ablate.config import CONF_DIR, HardwareConfig, PrecisionConfig, build
from ablate.files import cache_dir, save_figure
from ablate.perf.hardware import Hardware, cached_measurement, measured_cpu_peak_flops
from ablate.perf.profiling import JSON_FILE, Profile

PLOT_FILE = "roofline.png"
COPY_MIB = 64  # per buffer: well past any CPU's last-level cache, so the copy streams from DRAM


@dataclass(frozen=True)
class Ceilings:
    peak_flops: float  # FLOP/s for `dtype` matmuls
    bandwidth: float  # bytes/s
    dtype: str
    source: str

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/byte) above which an op can be compute-bound."""
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity: float) -> float:
        return min(self.peak_flops, intensity * self.bandwidth)

    def to_dict(self) -> dict:
        return {**asdict(self), "ridge": self.ridge}


@dataclass(frozen=True)
class Verdict:
    bound: str  # "compute", "memory" or "overhead": the largest share of the step
    compute: float  # share of the step's time in compute-bound ops
    memory: float
    overhead: float
    line: str


# ---------------------------------------------------------------------------------------------
# Ceilings
# ---------------------------------------------------------------------------------------------


def matmul_dtype(precision: PrecisionConfig, device: str) -> str:
    """The dtype key of hardware.peak_flops that a policy's matmuls run in (fp32 matmuls on a CUDA
    device use TF32 tensor cores when torch allows it)."""
    key = precision.matmul_dtype
    if key == "fp32" and device == "cuda" and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return key


def ceilings_for(hw: Hardware, precision: PrecisionConfig) -> Ceilings | None:
    """Peak FLOP/s and bandwidth for this run, or None when nothing gives them (e.g. mps, auto)."""
    dtype = matmul_dtype(precision, hw.device)
    peaks, source = dict(hw.peak_flops), f"hardware={hw.name}"
    bandwidth = hw.memory_bandwidth_gbs * 1e9 if hw.memory_bandwidth_gbs else None  # bytes/s
    if hw.device == "cuda" and not (peaks and bandwidth) and torch.cuda.is_available():
        entry = catalogue_match(torch.cuda.get_device_name())
        if entry is not None:
            peaks = {k: float(v) for k, v in entry.peak_flops.items() if v is not None}
            bandwidth = entry.memory_bandwidth_gbs * 1e9 if entry.memory_bandwidth_gbs else None
            source = f"catalogue {entry.name}, matched to {torch.cuda.get_device_name()!r}"
    if hw.device == "cpu":
        # hardware.resolve has put the measured fp32 peak in peak_flops unless one was given.
        if dtype not in peaks:
            peaks[dtype] = measured_cpu_peak_flops(dtype=dtype)
        measured_bandwidth = bandwidth is None
        if measured_bandwidth:
            bandwidth = measured_cpu_bandwidth()
        source = (
            f"hardware={hw.name}: {dtype} peak from this CPU's matmul benchmark unless hardware.peak_flops "
            "gives it, bandwidth from "
            f"{'its copy benchmark' if measured_bandwidth else 'hardware.memory_bandwidth_gbs'}"
            f" (benchmarks cached in {cache_dir()})"
        )
    peak = peaks.get(dtype) or peaks.get("fp32")
    if not peak or not bandwidth:
        return None
    return Ceilings(float(peak), float(bandwidth), dtype if dtype in peaks else "fp32", source)


def catalogue_match(device_name: str) -> HardwareConfig | None:
    """The conf/hardware entry whose name appears in a CUDA device's name ("NVIDIA H200" -> h200)."""
    from omegaconf import OmegaConf

    squashed = device_name.lower().replace(" ", "")
    for path in sorted((CONF_DIR / "hardware").glob("*.yaml")):
        tree = OmegaConf.to_container(OmegaConf.load(path))  # as Hydra reads it: 6.7e13 is a float
        if tree.get("device") == "cuda" and tree.get("peak_flops") and tree.get("name", "") in squashed:
            return build(HardwareConfig, tree, "hardware")
    return None


def measured_cpu_bandwidth(cache: Path | None = None) -> float:
    """This machine's memory bandwidth in bytes/s (copy benchmark), measured once and cached."""
    return cached_measurement(cache or cache_dir() / "cpu_bandwidth.json", "copy", measure_copy_bandwidth)


def measure_copy_bandwidth(mib: int = COPY_MIB, reps: int = 5) -> float:
    """STREAM "copy" (McCalpin 1995): b[:] = a[:] over buffers larger than the caches; bytes/s
    counts the read and the write (2 x the buffer), best of `reps` after a warm-up that touches
    every page."""
    a = torch.ones(mib * 2**20 // 4)
    b = torch.empty_like(a)
    b.copy_(a)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() * a.element_size() / best


# ---------------------------------------------------------------------------------------------
# Placing the ops
# ---------------------------------------------------------------------------------------------


def attach(profile: Profile, ceilings: Ceilings | None) -> Ceilings | None:
    """Mark each op compute-, memory- or overhead-bound and put the ceilings and the verdict in the
    profile (profile.json). Returns the ceilings used: a peak below what an op attained is raised
    to that rate, since no op beats the true peak (a benchmark run on a busy machine reads low)."""
    if ceilings is None:
        profile.extra["verdict"] = {
            "bound": None,
            "line": "no roofline: this hardware has no peak FLOP/s or "
            "bandwidth (use a catalogue entry, e.g. hardware=h200, or set "
            "hardware.peak_flops and hardware.memory_bandwidth_gbs)",
        }
        return None
    fastest = max((r for r in profile.ops if r.flops and r.flops_per_s), key=lambda r: r.flops_per_s, default=None)
    if fastest is not None and fastest.flops_per_s > ceilings.peak_flops:
        ceilings = replace(
            ceilings,
            peak_flops=fastest.flops_per_s,
            source=(
                f"{ceilings.source}; peak raised from {ceilings.peak_flops / 1e9:.3g} GFLOP/s "
                f"to the rate {fastest.name} "
                "attained, since no kernel beats a true ceiling (the benchmark ran slower than this kernel: a busy "
                "machine, or a kernel better tuned than the benchmarked matmul)"
            ),
        )
    for r in profile.ops:
        if not r.flops and not r.bytes:
            r.bound = "overhead"  # views and metadata ops: time without traffic
        elif roof_share(r, ceilings) < NEAR_ROOF:
            # far below both roofs: neither arithmetic nor traffic is what it waits for, but per-call
            # cost (dispatch, tiny kernels) or other processes on its cores
            r.bound = "overhead"
        else:
            r.bound = "compute" if (r.intensity or 0.0) >= ceilings.ridge else "memory"
    profile.extra["ceilings"] = ceilings.to_dict()
    profile.extra["verdict"] = asdict(verdict(profile, ceilings))
    return ceilings


# An op is called compute- or memory-bound only when it reaches this share of the roof above its
# intensity (min(peak, I x bandwidth)): an op at 2% of both ceilings is held back by neither.
NEAR_ROOF = 0.25


def roof_share(r, ceilings: Ceilings) -> float:
    """The share of its roof an op attains: FLOP/s against min(peak, I x bandwidth) where it does
    arithmetic, bytes/s against the bandwidth where it only moves data."""
    seconds = r.ms / 1e3
    if seconds <= 0:
        return 0.0
    if r.flops:
        return (r.flops / seconds) / ceilings.attainable(r.intensity or 0.0)
    return (r.bytes / seconds) / ceilings.bandwidth


def verdict(profile: Profile, ceilings: Ceilings) -> Verdict:
    step = profile.step_ms or float("nan")
    compute = sum(r.ms for r in profile.ops if r.bound == "compute") / step
    memory = sum(r.ms for r in profile.ops if r.bound == "memory") / step
    overhead = max(0.0, 1.0 - compute - memory)
    shares = {"compute": compute, "memory": memory, "overhead": overhead}
    bound = max(shares, key=shares.get)
    ridge = f"the ridge point ({ceilings.ridge:.3g} FLOP/byte)"
    if bound == "overhead":
        line = (
            f"overhead-bound: {overhead:.0%} of the step is outside operators (Python, dispatch, launches) or "
            f"in ops under {NEAR_ROOF:.0%} of their roof (per-call cost, or other work on the cores); "
            f"{memory:.0%} is in ops near the bandwidth roof below {ridge} and {compute:.0%} near the peak above it"
        )
    elif bound == "memory":
        line = (
            f"memory-bound: {memory:.0%} of the step is in ops below {ridge}, {compute:.0%} in ops above it, "
            f"{overhead:.0%} outside operators"
        )
    else:
        line = (
            f"compute-bound: {compute:.0%} of the step is in ops at or above {ridge}, {memory:.0%} in ops "
            f"below it, {overhead:.0%} outside operators"
        )
    return Verdict(bound, compute, memory, overhead, line)


def matmul_rate(profile: Profile) -> float | None:
    """FLOP/s attained by the ops that carry FLOPs (matmuls, attention), over their own time."""
    ms = sum(r.ms for r in profile.ops if r.flops)
    return sum(r.flops for r in profile.ops if r.flops) / (ms / 1e3) if ms > 0 else None


# ---------------------------------------------------------------------------------------------
# The plot
# ---------------------------------------------------------------------------------------------

COLORS = {"compute": "tab:blue", "memory": "tab:orange", "overhead": "tab:gray", None: "tab:gray"}


def plot(profile: Profile, ceilings: Ceilings | None, path: Path, top: int = 12) -> Path:
    """Left: ops with FLOPs on the roofline (area ~ share of step time) and the whole step.
    Right: the top ops by time, coloured by bound, labelled with the share of their ceiling attained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, bars) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.1, 1]})
    placed = [r for r in profile.ops if r.flops and r.bytes and r.ms > 0]
    xs = [r.intensity for r in placed] + ([profile.intensity] if profile.intensity else [])
    lo = min(xs + [ceilings.ridge if ceilings else 1.0]) / 10 if xs else 0.1
    hi = max(xs + [ceilings.ridge if ceilings else 1.0]) * 10 if xs else 100.0
    if ceilings:
        grid = np.logspace(np.log10(lo), np.log10(hi), 200)
        ax.plot(
            grid,
            [ceilings.attainable(i) for i in grid],
            color="black",
            linewidth=2,
            label=f"roofline: {ceilings.peak_flops / 1e9:.3g} GFLOP/s ({ceilings.dtype}), "
            f"{ceilings.bandwidth / 1e9:.3g} GB/s",
        )
        ax.axvline(ceilings.ridge, color="black", linestyle=":", linewidth=1)
        ax.annotate(
            f"ridge {ceilings.ridge:.3g}",
            (ceilings.ridge, ceilings.peak_flops),
            textcoords="offset points",
            xytext=(4, -14),
            fontsize=8,
        )
    for r in placed:
        ax.scatter(
            r.intensity,
            r.flops_per_s,
            s=30 + 600 * r.fraction,
            color=COLORS[r.bound],
            alpha=0.7,
            edgecolor="black",
            linewidth=0.5,
        )
        ax.annotate(_short(r.name), (r.intensity, r.flops_per_s), textcoords="offset points", xytext=(5, 4), fontsize=7)
    if profile.intensity and profile.step_ms > 0:
        achieved = profile.flops / (profile.step_ms / 1e3)
        ax.scatter(
            profile.intensity,
            achieved,
            marker="*",
            s=220,
            color="tab:red",
            edgecolor="black",
            zorder=5,
            label=f"whole step: {profile.intensity:.3g} FLOP/byte, {achieved / 1e9:.3g} GFLOP/s",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("attained FLOP/s")
    ax.set_title("Operators with FLOPs on the roofline (area: share of step time)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1, frameon=False)

    shown = [r for r in profile.ops if r.ms > 0][:top][::-1]
    overhead = profile.overhead_ms / profile.step_ms if profile.step_ms else 0.0
    names = ["(outside operators)"] + [_short(r.name) for r in shown]
    shares = [overhead] + [r.fraction for r in shown]
    colors = [COLORS["overhead"]] + [COLORS[r.bound] for r in shown]
    ypos = range(len(names))
    bars.barh(ypos, [100 * s for s in shares], color=colors)
    bars.set_yticks(list(ypos), names, fontsize=8)
    for y, r in zip(range(1, len(names)), shown, strict=False):
        bars.annotate(
            _attained(r, ceilings), (100 * r.fraction, y), textcoords="offset points", xytext=(3, -3), fontsize=7
        )
    bars.set_xlabel("% of step time (label: how close the op gets to its roofline)")
    bars.set_title("Top operators by time: blue compute-, orange memory-bound", fontsize=10)
    bars.set_xlim(0, 100 * max(shares) * 1.3 if shares else 100)
    bars.grid(True, axis="x", alpha=0.3)
    title = profile.extra.get("verdict", {}).get("line") or ""
    fig.suptitle(_wrap(title, 150), fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def _attained(r, ceilings: Ceilings | None) -> str:
    if ceilings is None or r.bound == "overhead" or not r.ms:
        return ""
    if r.bound == "compute":
        return f"{_pct(r.flops_per_s / ceilings.peak_flops)} of peak"
    return f"{_pct(r.bytes_per_s / ceilings.bandwidth)} of bandwidth"


def _pct(x: float) -> str:
    if x < 0.001:
        return "<0.1%"
    return f"{x:.0%}" if x >= 0.1 else f"{100 * x:.2g}%"


def _short(name: str) -> str:
    return name.replace("aten::", "").replace("scaled_dot_product_", "sdpa_")


def _wrap(text: str, width: int) -> str:

    return "\n".join(textwrap.wrap(text, width))


# ---------------------------------------------------------------------------------------------
# A precision sweep: which bound each policy hit, and why its speed-up is what it is
# ---------------------------------------------------------------------------------------------


def profile_figures(job_dir: Path) -> dict | None:
    """A job's profile figures (its bound, the ceilings, the matmuls' rate), None where it left no
    readable profile.json (it ran without train.profile=true)."""
    try:
        doc = json.loads((job_dir / JSON_FILE).read_text())
    except (OSError, ValueError):
        return None
    verdict_doc, ceilings = doc.get("verdict") or {}, doc.get("ceilings") or {}
    ops = doc.get("operators", [])
    ms = sum(o["ms"] for o in ops if o.get("flops"))
    return {
        "bound": verdict_doc.get("bound"),
        "compute": verdict_doc.get("compute"),
        "memory": verdict_doc.get("memory"),
        "overhead": verdict_doc.get("overhead"),
        "dtype": ceilings.get("dtype"),
        "peak_flops": ceilings.get("peak_flops"),
        "bandwidth": ceilings.get("bandwidth"),
        "ridge": ceilings.get("ridge"),
        "bytes_per_step": doc.get("bytes_per_step"),
        "flops_per_step": doc.get("flops_per_step"),
        "matmul_flops_per_s": sum(o["flops"] for o in ops if o.get("flops")) / (ms / 1e3) if ms > 0 else None,
    }


def bound_notes(rows: list) -> list[str]:
    """One line per profiled run: its bound, and its speed-up explained by the ceilings."""
    profiled = [r for r in rows if (r.get("profile") or {}).get("bound")]
    if not profiled:
        return []
    base = next((r for r in profiled if r.get("label") == r.get("baseline")), None)
    base = base or next((r for r in profiled if r.get("precision") == "fp32"), None)
    notes = []
    for r in rows:
        p = r.get("profile") or {}
        if not p.get("bound"):
            if r.get("status") == "finished":
                notes.append(f"- {r['label']}: not profiled (train.profile=true records where its time goes)")
            continue
        text = (
            f"- {r['label']}: {p['bound']}-bound ({p['memory']:.0%} of the step in memory-bound ops, "
            f"{p['compute']:.0%} compute-bound, {p['overhead']:.0%} outside operators)"
        )
        if p.get("matmul_flops_per_s") and p.get("peak_flops"):
            text += (
                f"; matmuls ran at {p['matmul_flops_per_s'] / 1e9:.3g} GFLOP/s against a "
                f"{p['peak_flops'] / 1e9:.3g} GFLOP/s {p['dtype']} peak"
            )
        if base is not None and r is not base and r.get("speedup"):
            text += "; " + _why(r, base)
        notes.append(text + ".")
    if base is not None and len(profiled) > 1:
        notes.append(
            "- Against the baseline, a compute-bound step can speed up by at most the ratio of the peaks, "
            "a memory-bound one by the inverse ratio of the bytes it moves."
        )
    return notes


def _why(r: dict, base: dict) -> str:
    p, b = r["profile"], base["profile"]
    parts = []
    if p.get("peak_flops") and b.get("peak_flops"):
        parts.append(f"its {p['dtype']} peak is {p['peak_flops'] / b['peak_flops']:.3g}x {b['dtype']}'s")
    if p.get("bytes_per_step") and b.get("bytes_per_step"):
        parts.append(f"it moves {p['bytes_per_step'] / b['bytes_per_step']:.3g}x the bytes per step")
    if p.get("matmul_flops_per_s") and b.get("matmul_flops_per_s"):
        parts.append(f"its matmuls run {p['matmul_flops_per_s'] / b['matmul_flops_per_s']:.3g}x as fast")
    # the speed-up itself only where both runs were timed fairly (sweep/rows.py: speedup_comparable)
    lead = f"speed-up {r['speedup']:.2f}x vs {base['label']}" if r.get("speedup_comparable") else f"vs {base['label']}"
    return f"{lead}: " + ", ".join(parts)
