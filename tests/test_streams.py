"""A command started with a standard stream closed (cron, a daemon) or whose reader goes away
(`| head`, a dropped terminal) is quiet: the exit status it would have had, no traceback, and its
run's status unaffected. Each case is a ledger row, run as the user runs it (`python -m ablate`)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import reliability
from bad_inputs import materialize
from support import SMALL_DATA

pytestmark = [pytest.mark.reliability]

RUN = ["model=nano", "train.steps=2", "train.progress=true", *SMALL_DATA]
# (command line, what has no reader): "stdout"/"stderr" a pipe whose reader has gone, "closed-..." not open at all
CASES = {
    "plan, stdout's reader gone": (["plan", "model=gpt_1p5b", "budget.tokens=1e11", "out=p"], "stdout"),
    "backtest, stdout's reader gone": (["backtest", "points=OK", "n_boot=10", "out=b"], "stdout"),
    "fit, stdout's reader gone": (["fit", "points=OK", "n_boot=10", "held_out=0", "out=f"], "stdout"),
    "--help, stdout's reader gone": (["--help"], "stdout"),
    "plan --help, stdout's reader gone": (["plan", "--help"], "stdout"),
    "a run, stdout's reader gone": (RUN, "stdout"),
    "a run, stderr's reader gone": (RUN, "stderr"),
    "a run started with stderr closed": (RUN, "closed-stderr"),
    "a run started with stdout and stderr closed": (RUN, "closed-both"),
}


def _run(args: list[str], cwd: Path, gone: str) -> tuple[int, str]:
    """`python -m ablate ARGS` with the stream named `gone` without a reader (or closed); returns
    its exit status and what the other stream said."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads this pipe: every write to it is EPIPE
    closed = {"closed-stderr": (2,), "closed-both": (1, 2)}.get(gone, ())
    said = cwd / "said.txt"
    with open(said, "w") as other:
        streams = {
            "stdout": write_end if gone == "stdout" else other,
            "stderr": write_end if gone == "stderr" else other,
        }
        proc = subprocess.run(
            [sys.executable, "-m", "ablate", *args],
            cwd=cwd,
            preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed else None,
            timeout=600,
            **streams,
        )
    os.close(write_end)
    return proc.returncode, said.read_text()


@pytest.mark.ledger("fault", "{name}")
@pytest.mark.parametrize("name", list(CASES))
def test_a_stream_without_a_reader_is_quiet(request, tmp_path, name):
    args, gone = CASES[name]
    code, said = _run(materialize(args, tmp_path), tmp_path, gone)
    assert code == 0 and "Traceback" not in said and "BrokenPipe" not in said, said[-3000:]
    found = ""
    if (tmp_path / "mlflow.db").exists():
        with sqlite3.connect(tmp_path / "mlflow.db") as con:
            statuses = [r[0] for r in con.execute("SELECT status FROM runs")]
        assert statuses == ["FINISHED"], statuses
        found = "; its MLflow run FINISHED"
    reliability.record(request, f"exit 0, no traceback{found}")
