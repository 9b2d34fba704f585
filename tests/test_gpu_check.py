"""The prepared GPU check (scripts/gpu_check.sh -> benchmarks/gpu_check.py), run on this CPU up to
its CUDA calls: every case is the user's command read back from its result.json, a policy the
device cannot run is recorded with its one-line reason, and the report is one JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import ROOT


@pytest.mark.slow
def test_the_gpu_check_runs_its_cases_on_a_cpu_and_writes_one_report(tmp_path):
    out = tmp_path / "gpu_check.json"
    args = ["--model", "nano", "--steps", "2", "--batch", "2", "--compile", "off", "--precisions", "fp32,fp8_rowwise"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), *args, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    fp32, fp8, ddp = report["cases"]
    assert fp32["status"] == "finished" and 0 < fp32["mfu"] <= 1 and fp32["modelled_peak_bytes"] > 0
    assert fp32["measured_peak_bytes"] is None  # measured on CUDA only
    assert fp8["exit"] == 2 and fp8["reason"].startswith("error: precision=fp8_rowwise cannot run on cpu")
    assert ddp["ddp"] and "DDP needs 2" in ddp["skipped"]
    assert report["device"]["cuda"] is False and report["device"]["torchao"]
    assert "bash" in (ROOT / "scripts" / "gpu_check.sh").read_text().splitlines()[0]
