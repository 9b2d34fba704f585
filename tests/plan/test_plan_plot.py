"""plan.png (plan/plot.py): `ablate plan fit=...` draws the planned run on the fit's compute-optimal
frontier with its interval, beside plan.md and plan.json; without a fit there is nothing to draw on."""

import subprocess
import sys

from support import ROOT

FIT = ROOT / "experiments" / "synthetic_ladder" / "fit" / "fit.json"
PLAN = ["plan", "model=large", "model.vocab_size=27", "hardware=cpu", "precision=fp32", "budget.tokens=2e7"]
PNG = b"\x89PNG\r\n\x1a\n"


def plan(tmp_path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "ablate", *PLAN, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_plan_with_a_fit_draws_the_run_on_the_frontier(tmp_path):
    done = plan(tmp_path, f"fit={FIT}", "out=with")
    picture = tmp_path / "with" / "plan.png"
    assert picture.read_bytes().startswith(PNG) and picture.stat().st_size > 20_000
    assert "plan.png" in done.stdout + done.stderr  # named among the files written


def test_without_a_fit_there_is_no_frontier_to_draw(tmp_path):
    plan(tmp_path, "out=without")
    assert (tmp_path / "without" / "plan.md").is_file() and not (tmp_path / "without" / "plan.png").exists()
