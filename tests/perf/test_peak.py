"""peak.py: the CPU's per-core peak, measured so that a busy machine cannot fool it, and never an MFU above 1."""

import json
import platform
import subprocess
import sys

import pytest

from ablate.host import available_cores
from ablate.perf import hardware, peak
from ablate.perf.hardware import Hardware
from ablate.run import train

XEON = """processor\t: 0
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
cpu MHz\t\t: 1000.000
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512bw
"""
EPYC = """processor\t: 0
model name\t: AMD EPYC
cpu MHz\t\t: 2445.432
flags\t\t: fpu sse2 fma avx f16c avx2
"""
OLD = "model name\t: Pentium 4 @ 3.00GHz\nflags\t\t: fpu sse sse2\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm\n"


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [
        (XEON, 64 * 2.1e9),  # AVX-512, two FMA pipes, the model name's clock above the current one
        (EPYC, 32 * 2445.432e6),  # AVX2 + FMA
        (OLD, 8 * 3.0e9),  # SSE2: one add and one multiply of 4 floats
        (ARM, None),  # no clock reported
        ("", None),
    ],
)
def test_theoretical_rate_from_cpuinfo(cpuinfo, expected):
    got = peak.theoretical_per_core(cpuinfo)
    assert got == pytest.approx(expected) if expected else got is None


def test_this_machines_theoretical_rate_is_read_when_linux_says_it():
    got = peak.theoretical_per_core()
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        assert got is not None and 1e9 < got < 1e12  # between 1 and 1000 GFLOP/s per core


def test_the_peak_is_the_per_core_figure_times_the_cores(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    one = peak.per_core("fp32")
    assert one.flops == max(one.one_thread, one.all_cores, (one.theoretical or 0) * peak.FLOOR)
    assert one.attempts >= 1 and one.source in ("measured", "all cores", "floor")
    cores = available_cores()
    assert peak.peak_flops("fp32", threads=1) == one.flops
    assert peak.peak_flops("fp32", threads=cores) == cores * one.flops
    assert peak.peak_flops("fp32", threads=cores + 5) == cores * one.flops  # never more cores than there are
    (figures,) = json.loads((tmp_path / peak.CACHE_FILE).read_text()).values()
    assert figures["fp32"]["flops"] == one.flops  # measured once per machine, whatever the threads


def test_a_lower_figure_never_replaces_a_higher_one(tmp_path):
    cache = tmp_path / "peak.json"
    high = peak.PerCore(5e10, 5e10, 1e10, None, 1, "measured", 0.0)
    assert peak._keep(cache, "fp32", high).flops == 5e10
    low = peak.PerCore(1e9, 1e9, 1e9, None, 1, "measured", 1.0)  # as measured on a busy machine
    assert peak._keep(cache, "fp32", low).flops == 5e10
    assert peak.per_core("fp32", cache).flops == 5e10


def test_a_given_peak_that_a_run_beats_is_raised_to_the_runs_rate():
    hw = Hardware("laptop", "cpu", {"fp32": 1e9})  # hardware.peak_flops given: not ours to measure
    assert hw.raise_peak(_fp32(), 3e9) == 3e9 and hw.peak_flops["fp32"] == 3e9


@pytest.mark.slow
def test_a_run_that_beats_a_fooled_peak_has_it_measured_again(tmp_path, monkeypatch, run_config, torch_threads):
    """The cache holds a per-core figure taken on a busy machine (1 GFLOP/s here); a real run
    attains more, so the peak is measured again before any MFU is recorded: none is above 1."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    fooled = peak.PerCore(1e8, 1e8, 1e8, None, 1, "measured", 0.0)
    peak._keep(peak.cache_dir() / peak.CACHE_FILE, "fp32", fooled)
    cfg = run_config(tmp_path, **{"train.steps": 30, "train.log_interval": 5, "train.eval_interval": 30})
    with torch_threads(1):
        result = train.run(cfg, tmp_path / "out")
        assert hardware.measured_cpu_peak_flops(threads=1) > 1e8
    assert result.status == "finished" and 0 < result.mfu <= 1.0
    again = peak.per_core("fp32")
    assert again.flops > 1e8 and again.source in ("measured", "all cores", "floor", "a run")
    history = json.loads((tmp_path / "out" / "result.json").read_text())
    assert history["mfu"] == result.mfu


@pytest.mark.slow
def test_the_measurement_under_load_is_not_fooled(tmp_path, monkeypatch, run_config, torch_threads):
    """Two busy processes per core take most of the machine's time; the per-core figure measured
    meanwhile stays within reach of the one measured before them, and a run under that load
    reports an MFU of at most 1."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    quiet = peak.one_thread_rate("fp32")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * available_cores())]
    try:
        loaded = peak.measure("fp32")
        cfg = run_config(tmp_path, **{"train.steps": 20, "train.log_interval": 5})
        with torch_threads(1):
            result = train.run(cfg, tmp_path / "out")
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert loaded.one_thread >= 0.6 * quiet, (loaded, quiet)
    if loaded.theoretical:
        assert loaded.flops >= peak.FLOOR * loaded.theoretical
    assert result.status == "finished" and 0 < result.mfu <= 1.0


def _fp32():
    from ablate.config import PrecisionConfig

    return PrecisionConfig(name="fp32")
