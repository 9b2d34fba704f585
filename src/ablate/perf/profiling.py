"""Where the time of a training step goes: torch.profiler over a few steady-state steps.

`train.profile=true` captures steps of a run (StepCapture, driven by train.Trainer):
- step `profile_start` runs under OpCounter, a dispatch mode that counts, for every aten op, its
  FLOPs (torch.utils.flop_counter's formulas: matmuls, convolutions, attention) and the bytes it
  moves (every input tensor read once, every output written once; views move nothing);
- the next `profile_steps` steps run under torch.profiler; each is one "ablate.step" range, split
  into "ablate.data", "ablate.forward", "ablate.backward" and "ablate.optimizer" (phase()).

Two passes because a dispatch mode in Python costs far more per op than the op itself on small
models: counted and timed on separate (identical) steps, the times stay those of a plain step.
Op times are inclusive of the kernels an op calls (e.g. aten::embedding's index_select), taken
from the outermost counted op on each call path; what is left of a step is "overhead" (Python,
dispatch, and on a GPU the time it waits for launches).

Files (run dir, and the run's MLflow artifacts): profile_trace.json (Chrome trace format: open it
in https://ui.perfetto.dev or chrome://tracing), profile.json (the tables as data), profile.md,
roofline.png (roofline.py).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ablate.config import ConfigError
from ablate.files import temporary_path, write_json, write_text
from ablate.perf.trace_log import kineto_quiet

if TYPE_CHECKING:
    from ablate.config import TrainConfig

SCHEMA = "ablate.profile/1"
STEP = "ablate.step"
PHASES = ("data", "forward", "backward", "optimizer")
TRACE_FILE, JSON_FILE, MD_FILE = "profile_trace.json", "profile.json", "profile.md"
TOP = 15  # operators in profile.md and on the roofline's bar chart


def phase(name: str, traced: bool = True) -> contextlib.AbstractContextManager:
    """A named range in the trace ("ablate.forward", ...); nothing in a run that is not profiled
    (a range costs about 6 us even with no profiler running, and a step opens four to six)."""
    return torch.profiler.record_function(f"ablate.{name}") if traced else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# FLOPs and bytes per op
# ---------------------------------------------------------------------------------------------


@dataclass
class OpCount:
    calls: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


def _cpu_attention_formulas() -> dict:
    """The CPU fused attention kernels, which torch's counter has no formula for: the same two
    (forward) and five (backward, scores recomputed) batched matmuls as the CUDA kernels'."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten
    return {
        aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, out_val=None, **kw: sdpa_flop_count(
            q.shape, k.shape, v.shape
        ),
        aten._scaled_dot_product_flash_attention_for_cpu_backward: lambda g, q, k, v, *a, out_val=None, **kw: (
            sdpa_backward_flop_count(g.shape, q.shape, k.shape, v.shape)
        ),
    }


class OpCounter(TorchDispatchMode):
    """Counts calls, FLOPs and bytes per aten op name ("aten::mm") while active.

    Bytes are a lower bound on memory traffic: each distinct input tensor read once and each
    output written once (in-place ops read and write their operand), as the roofline model
    assumes (Williams et al. 2009); an expanded (stride-0) input counts the memory it spans.
    """

    def __init__(self):
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.formulas = {**flop_registry, **_cpu_attention_formulas()}
        self.counts: dict[str, OpCount] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        c = self.counts.setdefault(op_name(func), OpCount())
        c.calls += 1
        formula = self.formulas.get(func.overloadpacket)
        if formula is not None:
            c.flops += int(formula(*args, **kwargs, out_val=out))
        read, written = _traffic(func, args, kwargs, out)
        c.bytes_read += read
        c.bytes_written += written
        return out


@contextlib.contextmanager
def counting() -> Iterator[OpCounter]:
    counter = OpCounter()
    with counter:
        yield counter


def op_name(func) -> str:
    """The profiler's name of an aten op: aten.mm -> "aten::mm"."""
    return str(func.overloadpacket).replace(".", "::", 1)


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes of memory a tensor covers: numel for a dense tensor, less when broadcast (stride 0)."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=False))
    return min(t.numel(), span) * t.element_size()


def _traffic(func, args, kwargs, out) -> tuple[int, int]:
    """(bytes read, bytes written) by one call.

    Views and aliases move nothing; *_like factories read only their argument's shape; a mutating
    op (add_, _foreach_mul_, mm.out) writes the arguments its schema marks as written.
    """
    if func.is_view:
        return 0, 0
    schema = func._schema
    inputs = [] if schema.name.endswith("_like") else _tensors((args, kwargs))
    if schema.is_mutable:
        outputs = _tensors(_written_args(schema, args, kwargs))
    else:
        outputs = _tensors(out)
        storages = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
        if outputs and all(o.untyped_storage().data_ptr() in storages for o in outputs if o.numel()):
            return 0, 0  # an alias such as _unsafe_view
    seen, read = set(), 0
    for t in inputs:
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key not in seen:
            seen.add(key)
            read += _span_bytes(t)
    return read, sum(_span_bytes(t) for t in outputs)


def _written_args(schema, args, kwargs) -> list:
    written = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            written.append(args[i] if i < len(args) else kwargs.get(a.name))
    return written


# ---------------------------------------------------------------------------------------------
# The profile of a few steps
# ---------------------------------------------------------------------------------------------


@dataclass
class OpRow:
    """One aten op, per step: calls, time, and what it computed and moved."""

    name: str
    calls: float
    ms: float
    fraction: float  # of the step's time
    flops: float
    bytes: float
    bound: str | None = None  # "compute", "memory" (against the ridge point) or "overhead" (roofline.py)

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes if self.bytes else None

    @property
    def flops_per_s(self) -> float | None:
        return self.flops / (self.ms / 1e3) if self.ms > 0 else None

    @property
    def bytes_per_s(self) -> float | None:
        return self.bytes / (self.ms / 1e3) if self.ms > 0 else None

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "intensity": self.intensity,
            "flops_per_s": self.flops_per_s,
            "bytes_per_s": self.bytes_per_s,
        }


@dataclass
class Profile:
    device: str
    steps: list  # the traced steps' indices in the run
    counted_step: int
    timeline: str  # "cpu" (wall time of the host) or "device" (GPU kernel time)
    step_ms: float  # mean over the traced steps (wall time, synchronized at each step's end)
    phases: dict  # name -> ms per step; "other" is what no phase covers
    ops: list  # OpRow, by time, slowest first
    flops: float  # per step, every counted op
    bytes: float
    overhead_ms: float  # step time outside every counted op
    extra: dict = field(default_factory=dict)  # roofline.py adds "ceilings" and "verdict"

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes else None

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "device": self.device,
            "steps": self.steps,
            "counted_step": self.counted_step,
            "timeline": self.timeline,
            "step_ms": self.step_ms,
            "phases": self.phases,
            "flops_per_step": self.flops,
            "bytes_per_step": self.bytes,
            "intensity": self.intensity,
            "overhead_ms": self.overhead_ms,
            "operators": [r.to_dict() for r in self.ops],
            "trace": TRACE_FILE,
            **self.extra,
        }


class StepCapture:
    """Counts step `start`, traces steps start+1 .. start+steps; `around(step)` wraps each step.

    After the last traced step, `profile` holds the analysis and `finish(profile, prof)` runs with
    the torch.profiler object (whose export_chrome_trace writes the trace)."""

    def __init__(self, start: int, steps: int, device: str):
        self.start, self.steps, self.device = start, steps, device
        self.counts: dict[str, OpCount] | None = None
        self.profile: Profile | None = None
        self.prof = None  # the torch.profiler object of the traced steps, once they are done
        self._prof = None

    @property
    def traced(self) -> range:
        return range(self.start + 1, self.start + 1 + self.steps)

    @contextlib.contextmanager
    def around(self, step: int):
        if step == self.start:
            with counting() as counter:
                yield
            self.counts = counter.counts
            return
        if step not in self.traced or self.counts is None:  # outside the window, or resumed inside it
            yield
            return
        if step == self.traced[0]:
            self._prof = _profiler(self.device)
            with kineto_quiet():
                self._prof.start()
        try:
            with torch.profiler.record_function(STEP):
                yield
                _sync(self.device)
        except BaseException:
            with kineto_quiet():
                self._prof.stop()
            self._prof = None
            raise
        if step == self.traced[-1]:
            with kineto_quiet():
                self._prof.stop()
            self.profile = analyse(self._prof.events(), self.counts, self.device, list(self.traced), self.start)
            self.finish(self.profile, self._prof)
            self._prof = None

    def finish(self, profile: Profile, prof) -> None:
        self.prof = prof


def around(capture: StepCapture | None, step: int) -> contextlib.AbstractContextManager:
    return capture.around(step) if capture is not None else contextlib.nullcontext()


def check_window(train: TrainConfig, total_steps: int) -> None:
    """ConfigError (one line) when train.profile's window does not fit in the run."""

    need = train.profile_start + 1 + train.profile_steps
    if train.profile and need > total_steps:
        latest = total_steps - 1 - train.profile_steps
        valid = (
            f"train.profile_start <= {latest}, or a longer run"
            if latest >= 0
            else f"train.profile_steps <= {total_steps - 1}, or a longer run"
        )
        raise ConfigError(
            f"train.profile_start={train.profile_start} with train.profile_steps={train.profile_steps} "
            f"needs {need} steps, this run has {total_steps} (valid: {valid})"
        )


def _profiler(device: str):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    return profile(activities=activities, record_shapes=True)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def analyse(events, counts: dict[str, OpCount], device: str, steps: list, counted_step: int) -> Profile:
    """Join the traced events (times) with the counted step (FLOPs, bytes), per step.

    An op's time is that of its outermost call on each path (inclusive of what it calls), within a
    "ablate.step" range. On a GPU it is its kernels' time, and the phases sum the kernels of the
    ops launched inside each phase's range (the backward pass runs on autograd's own thread).
    """
    on_device = device == "cuda"
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name == STEP]
    if not windows:
        raise RuntimeError("the profiler recorded no ablate.step range: nothing to analyse")
    ranges = {p: [(e.time_range.start, e.time_range.end) for e in events if e.name == f"ablate.{p}"] for p in PHASES}
    n = len(windows)
    times: dict[str, float] = {}
    calls: dict[str, int] = {}
    phase_device = dict.fromkeys(PHASES, 0.0)
    for e in events:
        if e.name not in counts or not _inside(e.time_range.start, windows) or _counted_ancestor(e, counts):
            continue
        us = e.device_time_total if on_device else e.cpu_time_total
        times[e.name] = times.get(e.name, 0.0) + us
        calls[e.name] = calls.get(e.name, 0) + 1
        if on_device:
            where = next((p for p in PHASES if _inside(e.time_range.start, ranges[p])), None)
            if where:
                phase_device[where] += us
    step_ms = sum(end - start for start, end in windows) / n / 1e3
    if on_device:
        phases = {p: phase_device[p] / n / 1e3 for p in PHASES}
    else:
        phases = {p: sum(end - start for start, end in ranges[p]) / n / 1e3 for p in PHASES}
    phases["other"] = max(0.0, step_ms - sum(phases.values()))
    rows = []
    for name, c in counts.items():
        ms = times.get(name, 0.0) / n / 1e3
        rows.append(
            OpRow(
                name,
                calls.get(name, 0) / n if name in calls else c.calls,
                ms,
                ms / step_ms if step_ms > 0 else 0.0,
                c.flops,
                c.bytes_read + c.bytes_written,
            )
        )
    rows.sort(key=lambda r: (-r.ms, -r.flops, r.name))
    op_ms = sum(r.ms for r in rows)
    return Profile(
        device,
        steps,
        counted_step,
        "device" if on_device else "cpu",
        step_ms,
        phases,
        rows,
        float(sum(c.flops for c in counts.values())),
        float(sum(c.bytes_read + c.bytes_written for c in counts.values())),
        max(0.0, step_ms - op_ms),
    )


def _inside(t: float, windows: list) -> bool:
    return any(start <= t <= end for start, end in windows)


def _counted_ancestor(e, counts: dict) -> bool:
    parent = e.cpu_parent
    while parent is not None:
        if parent.name in counts:
            return True
        parent = parent.cpu_parent
    return False


def profile_function(fn: Callable[[], object], steps: int = 3, device: str = "cpu") -> tuple[Profile, object]:
    """Profile `fn` as a training step: one counted call, then `steps` traced calls.
    Returns the Profile and the torch.profiler object (export_chrome_trace writes its trace)."""
    capture = StepCapture(0, steps, device)
    for step in range(steps + 1):
        with capture.around(step):
            fn()
    return capture.profile, capture.prof


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def write_profile(profile: Profile, prof, out_dir: Path) -> list[Path]:
    """profile_trace.json, profile.json and profile.md in out_dir, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = out_dir / TRACE_FILE
    tmp = temporary_path(trace)  # torch writes the trace to a path: rename it into place like write_bytes
    prof.export_chrome_trace(str(tmp))
    os.replace(tmp, trace)
    return [
        trace,
        write_json(out_dir / JSON_FILE, profile.to_dict()),
        write_text(out_dir / MD_FILE, render_markdown(profile)),
    ]


def render_markdown(profile: Profile, top: int = TOP) -> str:
    p = profile
    where = "GPU kernel time" if p.timeline == "device" else "host wall time"
    verdict = p.extra.get("verdict", {}).get("line")
    lines = [f"# Profile: steps {p.steps[0]}..{p.steps[-1]} on {p.device}", ""]
    if verdict:
        lines += [f"**{verdict}**", ""]
    lines += [
        f"Step: {p.step_ms:.2f} ms ({where}, mean of {len(p.steps)} steps); "
        f"{_si(p.flops)}FLOPs and {_si(p.bytes)}B moved per step "
        f"({_num(p.intensity, '.3g')} FLOP/byte). FLOPs and bytes counted on step {p.counted_step}.",
        "",
        "| phase | ms/step | share |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {ms:.2f} | {ms / p.step_ms:.0%} |" for name, ms in p.phases.items() if p.step_ms > 0]
    lines += [
        "",
        f"Top operators by time (outside them: {p.overhead_ms:.2f} ms, "
        f"{p.overhead_ms / p.step_ms:.0%} of the step, is Python and dispatch overhead):",
        "",
        "| op | calls/step | ms/step | share | FLOPs | bytes | FLOP/byte | GFLOP/s | GB/s | bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in p.ops[:top]:
        lines.append(
            f"| {r.name} | {r.calls:g} | {r.ms:.3f} | {r.fraction:.1%} | {_si(r.flops)} | {_si(r.bytes)} | "
            f"{_num(r.intensity, '.3g')} | {_num(r.flops_per_s and r.flops_per_s / 1e9, '.3g')} | "
            f"{_num(r.bytes_per_s and r.bytes_per_s / 1e9, '.3g')} | {r.bound or '-'} |"
        )
    ceilings = p.extra.get("ceilings")
    if ceilings:
        lines += [
            "",
            f"Ceilings ({ceilings['source']}): {ceilings['peak_flops'] / 1e9:.4g} GFLOP/s "
            f"({ceilings['dtype']}), {ceilings['bandwidth'] / 1e9:.4g} GB/s; ridge point "
            f"{ceilings['ridge']:.3g} FLOP/byte.",
        ]
    lines += ["", f"Trace: {TRACE_FILE} (open in https://ui.perfetto.dev or chrome://tracing)."]
    return "\n".join(lines) + "\n"


def _si(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g} "


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)
