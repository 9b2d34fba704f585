"""The planner's "binding" line says which constraint binds and by how much, or that none does and
how close the nearest one is (plan/render.py), and agrees with plan.json."""

import json
import re
import subprocess
import sys

import pytest


def plan(tmp_path, *args):
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", "plan", "model=gpt_1p5b", "hardware=h200", f"out={tmp_path}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("binding"))
    return line, json.loads((tmp_path / "plan.json").read_text())


def test_when_nothing_binds_the_line_says_so_and_names_the_closest_limit(tmp_path):
    line, doc = plan(tmp_path, "budget.tokens=1e11")
    assert not doc["binds"]
    pct = re.search(r"nothing binds; closest is memory \(hardware\) at (\d+)% of its limit", line)
    assert pct, line
    assert int(pct.group(1)) == round(doc["binding_ratio"] * 100)


def test_a_binding_budget_says_by_how_much(tmp_path):
    line, doc = plan(tmp_path, "budget.tokens=1e11", "budget.flops=5e20")
    assert doc["binds"] and doc["binding"] == "compute"
    need = re.search(r"FLOPs binds \(compute\): the plan needs ([\d.]+)x what it has", line)
    assert need, line
    assert float(need.group(1)) == pytest.approx(doc["binding_ratio"], rel=1e-2)
