"""The prepared GPU check (scripts/gpu_check.sh -> benchmarks/gpu_check.py, bench_gpu.py), its dry run
on this CPU: every path of the check, tiny, with the packages the GPU machine lacks (MLflow, Optuna,
submitit) made unimportable, as they are there. Each case is the user's command read back from its
result.json; the report is one JSON covering honest time, checkpoints, the benchmark, the sweep's
GPUs and decode against its bound."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import ROOT


@pytest.mark.slow
def test_the_gpu_check_dry_run_takes_every_path_on_a_cpu_and_writes_one_report(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["device"]["cuda"] is False
    # 1. honest time: steady figures, the warm-up apart, peaks measured on CUDA only
    for run in report["runs"]:
        assert run["status"] == "finished", run
        assert run["tokens_per_s"] > 0 and 0 < run["mfu"] <= 1
        assert run["warmup_steps"] == 1 and run["measured_peak_bytes"] is None
    # 2. checkpoints: what each cost the step path, from the run that made them
    assert report["checkpoint"]["checkpoints"] == 2 and report["checkpoint"]["step_path_s_each"] > 0
    # 3. the benchmark: both arms at every batch, the fp8 table, the memory rows
    bench = report["bench"]
    assert (tmp_path / "gpu.json").is_file()
    for row in bench["throughput"]["rows"]:
        assert row["trainer_over_bare"] > 0, row
    assert {"width", *bench["fp8"]["policies"]} <= set(bench["fp8"]["rows"][0])
    assert set(bench["fp8"]["crossover_width"]) == set(bench["fp8"]["policies"][1:])
    assert bench["memory"]["rows"] and all(r["modelled_peak_bytes"] > 0 for r in bench["memory"]["rows"])
    # 4. two jobs, each with its own GPU of two named in CUDA_VISIBLE_DEVICES, with no MLflow installed
    sweep = report["sweep"]
    assert sweep["exit"] == 0, sweep
    assert sorted(j["cuda_visible_devices"] for j in sweep["jobs"]) == ["0", "1"] and sweep["own_gpu_each"]
    assert "DDP needs 2" in report["ddp"]["skipped"]
    # 5. decode against its bandwidth bound
    assert 0 < report["decode"]["share_of_bound"] <= 1


def test_the_gpu_check_needs_a_gpu_and_says_so_in_one_line():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2 and done.stdout.startswith("error: bench_gpu.py measures a GPU")


def test_the_wheels_it_carries_are_made_by_a_script_into_an_ignored_folder():
    script = (ROOT / "scripts" / "gpu_wheels.sh").read_text()
    assert "antlr4-python3-runtime==4.9.3" in script and "torchao==0.18.0" in script
    assert ".gpu-wheels/" in (ROOT / ".gitignore").read_text().splitlines()
    assert "--no-index --no-deps" in (ROOT / "scripts" / "gpu_check.sh").read_text()
