"""roofline.py: ceilings (catalogue, measured and cached), the bound of each op, the verdict, the plot."""

import json

import pytest
import torch

from ablate.config import HardwareConfig, PrecisionConfig, build
from ablate.perf import hardware, peak, profiling, roofline
from ablate.perf.hardware import Hardware
from ablate.perf.profiling import OpRow, Profile
from support import CONF, preset

CEIL = roofline.Ceilings(peak_flops=100e9, bandwidth=10e9, dtype="fp32", source="test")  # ridge: 10 FLOP/byte


def _profile(ops, step_ms=10.0) -> Profile:
    rows = [OpRow(name, 1, ms, ms / step_ms, flops, nbytes) for name, ms, flops, nbytes in ops]
    return Profile(
        "cpu",
        [1, 2],
        0,
        "cpu",
        step_ms,
        {"forward": step_ms},
        rows,
        float(sum(r.flops for r in rows)),
        float(sum(r.bytes for r in rows)),
        step_ms - sum(r.ms for r in rows),
    )


def test_roofline_is_the_lower_of_the_two_ceilings():
    assert CEIL.ridge == 10.0
    assert CEIL.attainable(1.0) == 10e9  # bandwidth x intensity below the ridge
    assert CEIL.attainable(10.0) == 100e9
    assert CEIL.attainable(1000.0) == 100e9  # the peak above it


def test_ops_are_placed_against_the_ridge_and_the_step_gets_one_verdict():
    profile = _profile(
        [
            ("aten::mm", 5.0, 2e8, 1e7),  # 20 FLOP/byte: compute-bound
            ("aten::gelu", 2.0, 0, 4e7),  # no FLOPs counted, bytes moved: memory-bound
            ("aten::bmm", 1.0, 4e7, 1e7),  # 4 FLOP/byte: memory-bound
            ("aten::view", 0.5, 0, 0),  # no traffic: overhead
        ]
    )
    assert roofline.attach(profile, CEIL) == CEIL
    v = roofline.verdict(profile, CEIL)
    assert [r.bound for r in profile.ops] == ["compute", "memory", "memory", "overhead"]
    assert (v.compute, v.memory) == pytest.approx((0.5, 0.3))
    assert v.overhead == pytest.approx(0.2)  # the view's 0.5 ms and 1.5 ms outside every op
    assert v.bound == "compute"
    assert v.line.startswith("compute-bound: 50% of the step is in ops at or above the ridge point (10 FLOP/byte)")
    assert profile.extra["ceilings"]["ridge"] == 10.0 and profile.extra["verdict"]["bound"] == "compute"


def test_a_step_dominated_by_elementwise_ops_is_memory_bound():
    profile = _profile([("aten::mm", 1.0, 2e7, 1e6), ("aten::add", 7.0, 0, 1e9)])
    roofline.attach(profile, CEIL)
    v = roofline.verdict(profile, CEIL)
    assert v.bound == "memory" and v.line.startswith("memory-bound: 70% of the step")


def test_without_ceilings_there_is_no_verdict():
    profile = _profile([("aten::mm", 1.0, 2e9, 1e8)])
    assert roofline.attach(profile, None) is None
    assert profile.extra["verdict"]["bound"] is None
    assert "hardware.memory_bandwidth_gbs" in profile.extra["verdict"]["line"]


def test_a_peak_below_an_attained_rate_is_raised_to_it():
    # 2e9 FLOPs in 10 ms: 200 GFLOP/s, above the 100 GFLOP/s "peak" (a benchmark on a busy machine)
    profile = _profile([("aten::mm", 10.0, 2e9, 1e8)], step_ms=12.0)
    used = roofline.attach(profile, CEIL)
    assert used.peak_flops == pytest.approx(200e9) and used.bandwidth == CEIL.bandwidth
    assert "peak raised from 100 GFLOP/s to the rate aten::mm attained" in used.source
    assert profile.extra["ceilings"]["ridge"] == pytest.approx(20.0)


def _catalogue(name: str) -> Hardware:
    from omegaconf import OmegaConf

    # As Hydra composes it (YAML 1.2 numbers: 6.7e13 is a float, not a string).
    cfg = build(HardwareConfig, OmegaConf.to_container(OmegaConf.load(CONF / "hardware" / f"{name}.yaml")), "hardware")
    cfg.validate()
    return Hardware(cfg.name, cfg.device, dict(cfg.peak_flops), cfg.memory_gb, cfg.memory_bandwidth_gbs)


def _precision(name: str) -> PrecisionConfig:
    return build(PrecisionConfig, preset("precision", name), "precision")


def test_catalogue_ceilings_follow_the_precision():
    bf16 = roofline.ceilings_for(_catalogue("h200"), _precision("bf16"))
    assert (bf16.peak_flops, bf16.bandwidth, bf16.dtype) == (9.89e14, 4.8e12, "bf16")
    assert bf16.ridge == pytest.approx(206.0, rel=1e-3)
    fp8 = roofline.ceilings_for(_catalogue("h200"), _precision("fp8_tensorwise"))
    assert fp8.peak_flops == 1.979e15
    fp32 = roofline.ceilings_for(_catalogue("h100"), _precision("fp32"))
    if torch.get_float32_matmul_precision() == "highest":
        assert (fp32.peak_flops, fp32.dtype) == (6.7e13, "fp32")


def test_cuda_devices_are_matched_to_the_catalogue_by_name():
    assert roofline.catalogue_match("NVIDIA H200").name == "h200"
    assert roofline.catalogue_match("NVIDIA H100 80GB HBM3").name == "h100"
    assert roofline.catalogue_match("NVIDIA A100-SXM4-80GB").name == "a100"
    assert roofline.catalogue_match("NVIDIA GeForce RTX 4090").name == "rtx4090"
    assert roofline.catalogue_match("NVIDIA T4") is None


def test_cpu_ceilings_are_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    hw = Hardware("cpu", "cpu", {"fp32": 1e11})
    first = roofline.ceilings_for(hw, _precision("fp32"))
    assert first.peak_flops == 1e11  # given figures are used as they are
    assert "bandwidth from its copy benchmark" in first.source
    saved = json.loads((tmp_path / "cpu_bandwidth.json").read_text())
    (figures,) = saved.values()  # one machine key (host, CPU, cores, torch threads)
    assert figures["copy"] == first.bandwidth > 1e8
    figures["copy"] = 1.234e9  # the cache, not a new measurement, answers the next time
    (tmp_path / "cpu_bandwidth.json").write_text(json.dumps(saved))
    assert roofline.ceilings_for(hw, _precision("fp32")).bandwidth == 1.234e9


def test_cpu_ceilings_use_the_cached_per_core_peak_of_the_matmul_dtype(tmp_path, monkeypatch, torch_threads):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    fp32 = hardware.measured_cpu_peak_flops(threads=1)
    saved = json.loads((tmp_path / peak.CACHE_FILE).read_text())
    (figures,) = saved.values()  # one machine key (host, CPU, cores)
    figures["bf16"] = {**figures["fp32"], "flops": 5e8, "theoretical": None}  # no slow bf16 benchmark here
    (tmp_path / peak.CACHE_FILE).write_text(json.dumps(saved))
    assert hardware.measured_cpu_peak_flops(dtype="bf16", threads=1) == 5e8
    assert hardware.measured_cpu_peak_flops(threads=1) == fp32
    with torch_threads(1):
        c = roofline.ceilings_for(Hardware("cpu", "cpu", {"fp32": fp32}, memory_bandwidth_gbs=10.0), _precision("bf16"))
    assert (c.peak_flops, c.dtype, c.bandwidth) == (5e8, "bf16", 1e10)


def test_the_measured_copy_bandwidth_is_plausible():
    bw = roofline.measure_copy_bandwidth(mib=16, reps=2)
    assert 1e8 < bw < 1e13  # between 0.1 GB/s and 10 TB/s


def test_roofline_plot_is_written(tmp_path):
    profile = _profile([("aten::mm", 5.0, 2e8, 1e7), ("aten::gelu", 2.0, 0, 4e7), ("aten::bmm", 1.0, 4e7, 1e7)])
    roofline.attach(profile, CEIL)
    path = roofline.plot(profile, CEIL, tmp_path / "roofline.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*tmp*"))
    assert "compute-bound" in profiling.render_markdown(profile)


def _job(sweep_dir, job: str, ops, peak: float) -> None:
    profile = _profile(ops)
    roofline.attach(profile, roofline.Ceilings(peak, 10e9, "bf16" if peak < 100e9 else "fp32", "test"))
    (sweep_dir / job).mkdir()
    (sweep_dir / job / "profile.json").write_text(json.dumps(profile.to_dict()))


def test_a_precision_sweep_says_which_bound_each_policy_hit_and_why(tmp_path):
    _job(tmp_path, "0", [("aten::mm", 4.0, 2e8, 1e7), ("aten::add", 5.0, 0, 1e9)], 100e9)
    _job(tmp_path, "1", [("aten::mm", 9.0, 4e7, 1.2e7), ("aten::add", 0.5, 0, 5e8)], 5e9)
    rows = [
        {
            "label": "precision=fp32",
            "precision": "fp32",
            "job": "0",
            "status": "finished",
            "speedup": 1.0,
            "speedup_comparable": True,
            "baseline": "precision=fp32",
        },
        {
            "label": "precision=bf16",
            "precision": "bf16",
            "job": "1",
            "status": "finished",
            "speedup": 0.06,
            "speedup_comparable": True,
            "baseline": "precision=fp32",
        },
        {
            "label": "precision=fp16",
            "precision": "fp16",
            "job": "2",
            "status": "finished",
            "speedup": 0.05,
            "speedup_comparable": True,
            "baseline": "precision=fp32",
        },
    ]
    for r in rows[:2]:
        r["profile"] = roofline.profile_figures(tmp_path / r["job"])
    assert roofline.profile_figures(tmp_path / rows[2]["job"]) is None  # it left no profile.json
    assert rows[0]["profile"]["bound"] == "memory" and rows[1]["profile"]["bound"] == "compute"
    notes = roofline.bound_notes(rows)
    assert notes[0].startswith("- precision=fp32: memory-bound (50% of the step in memory-bound ops")
    assert notes[1].startswith("- precision=bf16: compute-bound")
    assert "speed-up 0.06x vs precision=fp32: its bf16 peak is 0.05x fp32's" in notes[1]
    assert "it moves 0.507x the bytes per step, its matmuls run 0.0889x as fast" in notes[1]
    assert notes[2] == "- precision=fp16: not profiled (train.profile=true records where its time goes)"
    assert notes[3].startswith("- Against the baseline, a compute-bound step can speed up by at most the ratio")


def test_a_sweep_without_profiles_adds_no_notes(tmp_path):
    rows = [{"label": "a", "job": "0", "status": "finished", "profile": roofline.profile_figures(tmp_path / "0")}]
    assert rows[0]["profile"] is None and roofline.bound_notes(rows) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_hardware_on_a_catalogued_gpu_gets_its_ceilings():
    from ablate.perf.hardware import resolve

    hw = resolve(build(HardwareConfig, preset("hardware", "auto"), "hardware"))
    c = roofline.ceilings_for(hw, _precision("bf16"))
    if roofline.catalogue_match(torch.cuda.get_device_name()) is None:
        pytest.skip(f"{torch.cuda.get_device_name()} is not in the catalogue")
    assert c is not None and c.dtype == "bf16" and "catalogue" in c.source


def test_the_sweep_summary_carries_the_bound_notes(tmp_path):
    import yaml

    from ablate.sweep.summary import summarize

    _job(tmp_path, "0", [("aten::mm", 4.0, 2e8, 1e7), ("aten::add", 5.0, 0, 1e9)], 100e9)
    _job(tmp_path, "1", [("aten::mm", 9.0, 4e7, 1.2e7), ("aten::add", 0.5, 0, 5e8)], 5e9)
    for job, (precision, speed) in enumerate([("fp32", 1000.0), ("bf16", 60.0)]):
        (tmp_path / str(job) / ".hydra").mkdir()
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"precision={precision}"]))
        (tmp_path / str(job) / "result.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "reason": "",
                    "precision": precision,
                    "params": 100,
                    "tokens": 10,
                    "final_val_loss": 2.0,
                    "tokens_per_s": speed,
                    "device": "cpu",
                    "torch_threads": 1,
                    "core_share": 0.97,  # timed fairly: the speed-up is shown
                }
            )
        )
    table = summarize(tmp_path, {"name": "precision"}).table
    assert "- precision=fp32: memory-bound (50% of the step in memory-bound ops" in table
    assert "- precision=bf16: compute-bound" in table and "speed-up 0.06x vs precision=fp32" in table
    assert json.loads((tmp_path / "summary.json").read_text())["runs"][1]["profile"]["bound"] == "compute"


def test_ops_far_below_both_roofs_are_not_called_memory_bound():
    """The review's loaded machine: 95% of the step in ops that reach a few percent of their roofs
    (aten::mm at 4 FLOP/byte and 0.4 GFLOP/s where its roof is 40; aten::add at 0.44 of 10 GB/s):
    neither roof holds them back, so the step is not 'memory-bound' but overhead-bound, and the line
    says why."""
    profile = _profile([("aten::mm", 10.0, 4e6, 1e6), ("aten::add", 9.0, 0, 4e6)], step_ms=20.0)  # 1%, 4.4%
    roofline.attach(profile, CEIL)
    assert [r.bound for r in profile.ops] == ["overhead", "overhead"]
    v = roofline.verdict(profile, CEIL)
    assert v.bound == "overhead" and (v.compute, v.memory) == (0.0, 0.0)
    assert "in ops under 25% of their roof (per-call cost, or other work on the cores)" in v.line
    near = _profile([("aten::add", 9.0, 0, 4e7)])  # 4.4 GB/s of 10: near the roof, memory-bound
    roofline.attach(near, CEIL)
    assert near.ops[0].bound == "memory"
