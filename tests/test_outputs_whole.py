"""A command's set of output files appears whole or not at all, and one command at a time writes an
output folder: kills between renames, leftovers of killed writers, two writers at once, a sweep
whose summary writer dies, a run killed -9 early beside its tracking agent. Every case is a ledger row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reliability
from ablate.files import INCOMPLETE
from bad_inputs import materialize, statuses
from support import SMALL_DATA

pytestmark = [pytest.mark.reliability]

FIT = ["points=OK", "n_boot=10", "held_out=0", "out=exp"]
PLAN_ON_FIT = ["model=gpt_1p5b", "budget.tokens=1e11"]
PREPARE = ["paths=stdlib", "max_bytes=200000", "progress=false", "out=tok"]
CHINCHILLA = Path(__file__).parent / "fixtures" / "chinchilla.csv"  # 245 runs: a fit of some seconds
SHORT_RUN = ["model=nano", "train.steps=2", "train.progress=false"]


def _one_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    return lines[0]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") or p.name == INCOMPLETE)


@pytest.mark.ledger(
    "fault",
    "`ablate fit` killed -9 at its rename #{nth} over an earlier export, then `ablate plan fit=` on it, then fit again",
)
@pytest.mark.parametrize("nth", [1, 2, 4])
def test_a_fit_killed_between_its_renames_is_refused_by_readers_then_replaced_whole(cli, request, tmp_path, nth):
    args = materialize(FIT, tmp_path)
    assert cli(args, tmp_path, command="fit").returncode == 0
    killed = cli(
        [*args, "n_boot=20"], tmp_path, command="fit", env={**os.environ, "ABLATE_FAILPOINTS": f"files.rename@{nth}"}
    )
    assert killed.returncode in (-9, 137), killed.stderr[-2000:]
    assert (tmp_path / "exp" / INCOMPLETE).exists()
    plan = cli([*PLAN_ON_FIT, f"fit={tmp_path / 'exp' / 'fit.json'}", "out=p"], tmp_path, command="plan")
    line = _one_line(plan)
    assert plan.returncode == 2 and "incomplete output" in line and not (tmp_path / "p" / "plan.json").exists()
    again = cli([*args, "n_boot=20"], tmp_path, command="fit")
    assert again.returncode == 0, again.stderr[-2000:]
    assert _leftovers(tmp_path / "exp") == [] and "schema" in json.loads((tmp_path / "exp" / "fit.json").read_text())
    reread = cli([*PLAN_ON_FIT, f"fit={tmp_path / 'exp' / 'fit.json'}", "out=p"], tmp_path, command="plan")
    assert "incomplete" not in reread.stderr  # (these six runs give approach 3 too few points to plan on)
    reliability.record(
        request,
        f"killed (exit {killed.returncode}) with {INCOMPLETE} left in the export; plan exit 2: {line[:140]}; "
        "fit again exit 0, its fit.json whole, nothing left over, and plan no longer refuses it as incomplete",
    )


@pytest.mark.slow
@pytest.mark.ledger(
    "fault",
    "`ablate prepare` killed -9 at its rename #2 over an earlier prepare (vocab 300 -> 500), "
    "then a run on it, then prepare again",
)
def test_a_prepare_killed_between_its_renames_is_refused_by_a_run_then_replaced_whole(cli, request, tmp_path):
    assert cli([*PREPARE, "vocab_size=300"], tmp_path, command="prepare").returncode == 0
    killed = cli(
        [*PREPARE, "vocab_size=500"],
        tmp_path,
        command="prepare",
        env={**os.environ, "ABLATE_FAILPOINTS": "files.rename@2"},
    )
    assert killed.returncode in (-9, 137), killed.stderr[-2000:]
    tok = tmp_path / "tok"
    assert not (tok / "meta.json").exists() and (tok / INCOMPLETE).exists()  # no old meta.json beside new files
    run = cli([*SHORT_RUN, "data=tokens", f"data.dir={tok}"], tmp_path)
    line = _one_line(run)
    assert run.returncode == 2 and "incomplete output" in line
    again = cli([*PREPARE, "vocab_size=500"], tmp_path, command="prepare")
    assert again.returncode == 0, again.stderr[-2000:]
    meta = json.loads((tok / "meta.json").read_text())
    vocab = len(json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"])
    assert meta["vocab_size"] == vocab == 500 and _leftovers(tok) == []
    reliability.record(
        request,
        f"killed (exit {killed.returncode}): no meta.json, {INCOMPLETE} there; the run exit 2: {line[:140]}; "
        "prepare again exit 0: meta.json and tokenizer.json both 500, nothing left over",
    )


@pytest.mark.ledger(
    "fault",
    "what killed writers left (`.staging.PID.tmp`, `.fit.json.PID.tmp`) in an out folder, then `ablate {command}`",
)
@pytest.mark.parametrize(
    "command, args, out",
    [
        ("fit", FIT, "exp"),
        ("plan", [*PLAN_ON_FIT, "out=exp"], "exp"),
        ("backtest", ["points=OK", "n_boot=10", "out=exp"], "exp"),
    ],
)
def test_leftovers_of_killed_writers_are_removed_by_the_next_command(cli, request, tmp_path, command, args, out):
    folder = tmp_path / out
    folder.mkdir()
    pid = _dead_pid()
    (folder / f".staging.{pid}.tmp").mkdir()
    (folder / f".staging.{pid}.tmp" / "train.bin").write_bytes(bytes(100))
    (folder / f".fit.json.{pid}.tmp").write_text("{half")
    live = folder / f".notes.md.{os.getppid()}.tmp"  # a live process's: its own
    live.write_text("in progress")
    proc = cli(materialize(args, tmp_path), tmp_path, command=command)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _leftovers(folder) == [live.name]
    reliability.record(
        request, "exit 0; the dead writer's staging folder and temporary file removed, a live one's kept"
    )


# Every command that writes an output folder, with out=OUT.
WRITERS = {
    "fit": ["points=OK", "n_boot=10", "held_out=0"],
    "backtest": ["points=OK", "n_boot=10"],
    "compare": ["points=ARMS", "arm=arm", "baseline=a", "n_boot=10"],
    "plan": PLAN_ON_FIT,
    "prepare": ["paths=stdlib", "max_bytes=200000", "vocab_size=300", "progress=false"],
}


@pytest.mark.ledger("fault", "`ablate {command}` into an out folder another command is writing")
@pytest.mark.parametrize("command", list(WRITERS))
def test_an_output_folder_has_one_writer(cli, request, tmp_path, command):
    out = tmp_path / "out"
    args = [*materialize(WRITERS[command], tmp_path), f"out={out}"]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ablate.run import output_lock; "
         f"output_lock({str(out)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(p.name for p in out.iterdir())
        proc = cli(args, tmp_path, command=command, process=True)
        line = _one_line(proc)
        assert proc.returncode == 75 and line.startswith("busy: ") and f"pid {holder.pid}" in line
        assert sorted(p.name for p in out.iterdir()) == before  # nothing written
    finally:
        holder.kill()
        holder.wait()
    again = cli(args, tmp_path, command=command)
    assert again.returncode == 0, again.stderr[-2000:]
    reliability.record(request, f"exit 75: {line[:170]}; nothing written; once the writer ended, exit 0")


@pytest.mark.ledger("fault", "two `ablate fit` into one out folder at once")
def test_two_fits_into_one_folder_one_is_busy(cli, request, tmp_path):
    args = [f"points={CHINCHILLA}", "held_out=0", "out=exp"]
    first = cli.start(["fit", *args, "n_boot=10"], tmp_path, stderr=tmp_path / "first.err", fresh=True)
    deadline = time.time() + 120
    while not (tmp_path / "exp" / ".output.lock").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.1)
    second = cli([*args, "n_boot=10"], tmp_path, command="fit", process=True)
    line = _one_line(second)
    assert second.returncode == 75 and "busy" in line
    assert first.wait(timeout=600) == 0, (tmp_path / "first.err").read_text()[-2000:]
    assert _leftovers(tmp_path / "exp") == []
    assert json.loads((tmp_path / "exp" / "fit.json").read_text())["data"]["n_points"] == 240  # the first's, whole
    reliability.record(request, f"the second exit 75: {line[:150]}; the first exit 0, fit.json its own")


@pytest.mark.slow
@pytest.mark.ledger("fault", "a sweep whose summary writer is killed -9")
def test_a_sweep_whose_summary_writer_dies_is_not_a_success(cli, request, tmp_path):
    proc = cli(
        ["--multirun", "hydra/launcher=parallel", *SHORT_RUN, *SMALL_DATA, "train.steps=2,3", "hydra.sweep.dir=s"],
        tmp_path,
        env={**os.environ, "ABLATE_FAILPOINTS": "sweep.summary"},
    )
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    assert proc.returncode == 1 and last.startswith("error: ") and "summary" in last, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    found = statuses(tmp_path / "mlflow.db")
    assert "RUNNING" not in found and "FAILED" in found, found
    reliability.record(request, f"exit 1: {last[:160]}; runs {sorted(found)}, the parent FAILED, nothing RUNNING")


@pytest.mark.ledger(
    "fault", "a run killed -9 just after its MLflow run exists, on the user's path (its tracking agent beside it)"
)
def test_a_run_killed_early_leaves_its_agent_quiet(cli, request, tmp_path):
    env = {**os.environ, "ABLATE_FAILPOINTS": "run.started"}
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", *SHORT_RUN, *SMALL_DATA],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode in (-9, 137), proc.stderr[-2000:]
    time.sleep(2)  # the agent notices the run is gone
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "BrokenPipeError" not in text, text[-2000:]
    reliability.record(request, f"exit {proc.returncode}; no traceback and no BrokenPipeError from the agent")
