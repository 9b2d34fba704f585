"""Where fp8 starts to pay (perf/fp8.py), read from benchmarks/bench_gpu.py's results for the GPU a plan
or a sweep names; "not measured" anywhere else."""

import json

from ablate.perf import fp8


def bench_results(path, gpu="NVIDIA H200", dry_run=False, crossover=None):
    rows = [{"width": w} for w in (768, 2048, 4096)]
    doc = {
        "device": {"gpu": gpu, "cuda": True},
        "dry_run": dry_run,
        "fp8": {"rows": rows, "crossover_width": crossover or {"fp8_tensorwise": 4096, "fp8_rowwise": 2048}},
    }
    path.write_text(json.dumps(doc))
    return path


def test_the_crossover_is_stated_for_the_gpu_it_was_measured_on(tmp_path):
    path = bench_results(tmp_path / "gpu.json")
    line = fp8.crossover_line("h200", path)
    assert line.startswith("fp8 pays on NVIDIA H200: fp8_rowwise from width 2048, fp8_tensorwise from width 4096")
    assert "768-4096" in line
    assert "not measured" in fp8.crossover_line("h100", path)  # another GPU's figure is not this one's


def test_a_policy_that_never_paid_is_said_so(tmp_path):
    path = bench_results(tmp_path / "gpu.json", crossover={"fp8_tensorwise": None, "fp8_rowwise": 4096})
    assert "fp8_tensorwise at none of 768-4096" in fp8.crossover_line("h200", path)
    path = bench_results(tmp_path / "gpu.json", crossover={"fp8_tensorwise": None, "fp8_rowwise": None})
    assert fp8.crossover_line("h200", path).startswith("fp8 did not beat bf16 on NVIDIA H200")


def test_no_results_a_dry_run_or_a_torn_file_is_not_measured(tmp_path):
    assert "not measured" in fp8.crossover_line("h200", tmp_path / "missing.json")
    assert "not measured" in fp8.crossover_line("h200", bench_results(tmp_path / "d.json", dry_run=True))
    (tmp_path / "torn.json").write_text("{")
    assert "not measured" in fp8.crossover_line("h200", tmp_path / "torn.json")


def test_catalogue_names_match_the_names_torch_gives():
    assert fp8.same_gpu("rtx4090", "NVIDIA GeForce RTX 4090")
    assert fp8.same_gpu("h100", "NVIDIA H100 80GB HBM3") and not fp8.same_gpu("h100", "NVIDIA H200")
