"""This CPU's peak FLOP/s, measured so that a busy machine cannot fool it.

A CPU's peak is a rate per core times the cores a run uses: peak(t threads) = t x per-core rate.
The per-core rate is measured once per machine and dtype and kept in CACHE/cpu_peak_per_core.json;
MFU's denominator is then what t cores can do, never what t threads happened to get on a machine
that others were using (a one-thread figure taken that way once read 13 GFLOP/s where the CPU does
97 per core, and a sweep's table showed MFUs of 300%).

How the per-core rate is measured (an n x n matmul is 2 n^3 FLOPs):
1. one thread, timed by the process's CPU time instead of the clock: time slices that other
   processes took do not count. Best of REPEATS.
2. the same with every core's thread, timed by the clock, divided by the cores: the per-core rate
   at another thread count. It is a lower bound too (threads wait for each other and for the
   machine), so when it is higher than step 1, step 1 was fooled and this figure is taken.
3. checked against the CPU's theoretical rate per core, clock x FLOPs per cycle (the widest FMA
   in /proc/cpuinfo's flags, two FMA units: AVX-512 64 fp32 FLOPs per cycle, AVX2+FMA 32, AVX 16,
   SSE2 8). A large fp32 matmul attains most of it; a figure below FLOOR of it was taken while
   the core was shared, so it is measured again (up to RETRIES times), and if it stays below,
   FLOOR x theoretical is the peak. The theoretical rate is not a ceiling: /proc/cpuinfo gives
   the nominal clock and cores boost above it.
4. `raise_to` when a run beats it: a rate a run attained is possible, so the peak that it beat was
   low. It is measured again, and the figure kept is the larger of that and the run's rate, so
   that no MFU above 100% is ever reported.

Figures only ever go up: no measurement can overstate a rate (the FLOPs were done in that time).
"""

from __future__ import annotations

import os
import platform
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ablate.files import cache_dir, read_json_object, write_json
from ablate.host import available_cores

CACHE_FILE = "cpu_peak_per_core.json"
REPEATS = 8
RETRIES = 3
FLOOR = 0.25  # of the theoretical fp32 rate: below it, the core was shared during the measurement
# fp32 FLOPs per cycle per core for the widest FMA the flags announce, two FMA pipes per core
# (Intel since Haswell, AMD since Zen 2); without FMA, one add and one multiply pipe.
FLOPS_PER_CYCLE = (("avx512f", 64), ("fma", 32), ("avx", 16), ("sse2", 8), ("asimd", 16))
MATMUL_N = {"fp32": 1024, "bf16": 512, "fp16": 512}  # reduced precisions run 20-40x slower on CPUs without them


@dataclass
class PerCore:
    """The per-core figure of one dtype, and how it was arrived at (kept in the cache as is)."""

    flops: float  # the per-core peak used
    one_thread: float  # step 1: best one-thread rate by CPU time
    all_cores: float  # step 2: best all-core rate by the clock, per core
    theoretical: float | None  # step 3: clock x FLOPs per cycle (fp32 only)
    attempts: int  # measurements taken (more than one: the first were below the floor)
    source: str  # "measured", "all cores", "floor" or "a run"
    measured_at: float

    def to_dict(self) -> dict:
        return asdict(self)


def per_core(dtype: str = "fp32", cache: Path | None = None) -> PerCore:
    """The per-core peak of `dtype` matmuls on this machine: cached, else measured now."""
    path = cache or cache_dir() / CACHE_FILE
    saved = read_json_object(path).get(machine_key(), {}).get(dtype)
    if isinstance(saved, dict):
        try:
            return PerCore(**saved)
        except TypeError:  # an older layout: measure again
            pass
    return _keep(path, dtype, measure(dtype))


def peak_flops(dtype: str = "fp32", threads: int | None = None, cache: Path | None = None) -> float:
    """FLOP/s of `threads` cores (default: this process's torch threads, at most the cores)."""
    return cores_for(threads) * per_core(dtype, cache).flops


def raise_to(dtype: str, attained: float, threads: int | None = None, cache: Path | None = None) -> float:
    """A run attained `attained` FLOP/s with `threads` cores, more than the peak: measure again and
    keep the larger of the new figure and the run's. Returns the new peak for those cores."""
    cores = cores_for(threads)
    path = cache or cache_dir() / CACHE_FILE
    again = measure(dtype)
    if attained / cores > again.flops:
        again.flops, again.source = attained / cores, "a run"
    return cores * _keep(path, dtype, again).flops


def cores_for(threads: int | None) -> int:
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    return max(1, min(int(threads), available_cores()))


def measure(dtype: str = "fp32") -> PerCore:
    """Steps 1-3 of the module doc, now."""
    theoretical = theoretical_per_core() if dtype == "fp32" else None
    one, everyone, attempts = 0.0, 0.0, 0
    while attempts <= RETRIES:
        attempts += 1
        one = max(one, one_thread_rate(dtype))
        everyone = max(everyone, all_cores_rate(dtype))
        if theoretical is None or max(one, everyone) >= FLOOR * theoretical:
            break
    best = max(one, everyone)
    source = "measured" if one >= everyone else "all cores"
    if theoretical is not None and best < FLOOR * theoretical:
        best, source = FLOOR * theoretical, "floor"
    return PerCore(best, one, everyone, theoretical, attempts, source, time.time())


def one_thread_rate(dtype: str, repeats: int = REPEATS) -> float:
    """Best FLOPs per CPU-second of one thread's n x n matmul. The process's CPU time (all its
    threads) is the clock: it does not run while the process waits for a core."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _best_rate(dtype, repeats, time.process_time)
    finally:
        torch.set_num_threads(before)


def all_cores_rate(dtype: str, repeats: int = REPEATS // 2) -> float:
    """Best wall-clock FLOP/s of a matmul on every core's thread, divided by the cores."""
    import torch

    cores = available_cores()
    before = torch.get_num_threads()
    torch.set_num_threads(cores)
    try:
        return _best_rate(dtype, repeats, time.perf_counter) / cores
    finally:
        torch.set_num_threads(before)


def _best_rate(dtype: str, repeats: int, clock) -> float:
    import torch

    n = MATMUL_N[dtype]
    kind = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a, b = torch.randn(n, n, dtype=kind), torch.randn(n, n, dtype=kind)
    a @ b  # warm-up: the first call allocates and picks its kernel
    best = 0.0
    for _ in range(repeats):
        t0 = clock()
        a @ b
        elapsed = clock() - t0
        if elapsed > 0:
            best = max(best, 2 * n**3 / elapsed)
    return best


def theoretical_per_core(cpuinfo: str | None = None) -> float | None:
    """Clock x fp32 FLOPs per cycle of one core, from /proc/cpuinfo and cpufreq's maximum clock
    (or from the `cpuinfo` text given); None when either is unknown (not Linux, an unknown
    architecture, no clock reported)."""
    max_freqs: list[float] = []
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
        for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq"):
            try:
                max_freqs.append(float(path.read_text()) * 1e3)  # kHz
            except (OSError, ValueError):
                pass
    flags = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            flags.update(value.split())
    per_cycle = next((f for flag, f in FLOPS_PER_CYCLE if flag in flags), None)
    hz = clock_hz(cpuinfo, max_freqs)
    return per_cycle * hz if per_cycle and hz else None


def clock_hz(cpuinfo: str, max_freqs: list[float] = ()) -> float | None:
    """The highest clock reported: cpufreq's maximum, "cpu MHz", or the model name's "@ 2.45GHz"."""
    found = list(max_freqs)
    for m in re.finditer(r"^cpu MHz\s*:\s*([0-9.]+)", cpuinfo, re.M):
        found.append(float(m[1]) * 1e6)
    for m in re.finditer(r"@\s*([0-9.]+)\s*GHz", cpuinfo):
        found.append(float(m[1]) * 1e9)
    return max(found) if found else None


def machine_key() -> str:
    return f"{platform.node()}|{platform.processor()}|{os.cpu_count()}"


def _keep(path: Path, dtype: str, figure: PerCore) -> PerCore:
    """Save `figure` unless the cache already holds a higher one for this machine (kept instead)."""
    saved = read_json_object(path)  # another process may have measured meanwhile
    entry = saved.setdefault(machine_key(), {})
    old = entry.get(dtype)
    if isinstance(old, dict) and isinstance(old.get("flops"), (int, float)) and old["flops"] >= figure.flops:
        try:
            return PerCore(**old)
        except TypeError:
            pass
    entry[dtype] = figure.to_dict()
    try:
        write_json(path, saved)
    except OSError:  # a read-only home: the figure is still good for this process
        pass
    return figure
