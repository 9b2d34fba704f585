"""Where torchao's float8 training starts to pay, on the GPU it was measured on.

benchmarks/bench_gpu.py times bf16 against fp8 tensorwise and rowwise (the project's policies,
compiled) at several model widths on a GPU and writes benchmarks/results/gpu.json; its crossover
width per policy is the smallest measured width from which fp8 is faster than bf16 at every larger
measured width. Float8 pays only once the matmuls are large enough for the casts and scales around
them to be small beside the halved matmul time, so the answer depends on the GPU and the width:
`crossover_line` says it for the GPU a plan or a sweep names, or that it was not measured there.

The results file is the source tree's (a checkout), or ABLATE_GPU_RESULTS.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

RESULTS_ENV = "ABLATE_GPU_RESULTS"
RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "gpu.json"


@dataclass(frozen=True)
class Fp8Crossover:
    gpu: str  # the GPU's name as torch reported it
    widths: tuple[int, ...]  # the widths measured
    crossover: dict  # policy -> smallest width from which it pays, or None (never in the widths measured)

    def line(self) -> str:
        paid = {p: w for p, w in self.crossover.items() if w is not None}
        span = f"{min(self.widths)}-{max(self.widths)}" if self.widths else "none"
        if not paid:
            return f"fp8 did not beat bf16 on {self.gpu} at any measured width ({span}; benchmarks/bench_gpu.py)"
        parts = ", ".join(f"{p} from width {w}" for p, w in sorted(paid.items(), key=lambda kv: kv[1]))
        never = [p for p, w in self.crossover.items() if w is None]
        rest = f"; {', '.join(never)} at none of {span}" if never else ""
        return f"fp8 pays on {self.gpu}: {parts}{rest} (measured widths {span}; benchmarks/bench_gpu.py)"


def results_path() -> Path:
    return Path(os.environ.get(RESULTS_ENV) or RESULTS)


def measured(path: Path | None = None) -> Fp8Crossover | None:
    """The crossover in the benchmark's results, or None when there are none from a GPU."""
    try:
        doc = json.loads((path or results_path()).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("dry_run") or not doc.get("device", {}).get("gpu"):
        return None
    fp8 = doc.get("fp8") or {}
    widths = tuple(r["width"] for r in fp8.get("rows", []) if isinstance(r, dict) and "width" in r)
    crossover = fp8.get("crossover_width")
    if not isinstance(crossover, dict) or not widths:
        return None
    return Fp8Crossover(doc["device"]["gpu"], widths, crossover)


def same_gpu(hardware: str, gpu: str) -> bool:
    """Whether a catalogue name (h200, rtx4090) is the GPU torch named (NVIDIA H200, NVIDIA GeForce RTX 4090)."""

    def squeeze(s: str) -> str:
        return "".join(ch for ch in s.lower() if ch.isalnum())

    return bool(squeeze(hardware)) and squeeze(hardware) in squeeze(gpu)


def crossover_line(hardware: str, path: Path | None = None) -> str:
    """Where fp8 starts to pay on `hardware` (a catalogue name or a GPU's own name), as measured."""
    found = measured(path)
    if found is not None and same_gpu(hardware, found.gpu):
        return found.line()
    return f"fp8 crossover width on {hardware}: not measured (benchmarks/bench_gpu.py on that GPU measures it)"
