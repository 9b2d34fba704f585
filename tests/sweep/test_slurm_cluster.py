"""The local SLURM cluster from scripts/slurm_cluster.sh: jobs run, accounting records how they ended,
a running job can be requeued, and submitit can run a Python function on it.

Needs the cluster up (`scripts/slurm_cluster.sh start`; `make test` starts it first). Skipped when the
SLURM client tools are not installed at all; fails, saying how to start it, when they are but the
cluster does not answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm  # brings the slurm_cluster fixture (tests/conftest.py)

TERMINAL = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED",
    "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT",
}  # fmt: skip
WAIT_S = 90.0


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def sbatch(workdir: Path, script: str, *extra: str) -> str:
    out = _run(
        "sbatch", "--parsable", f"--chdir={workdir}", f"--output={workdir}/%j.out",
        "--time=2", "--ntasks=1", *extra, "--wrap", script,
    )  # fmt: skip
    return out.strip().split(";")[0]


def sacct_rows(job_id: str, *extra: str) -> list[list[str]]:
    """[State, ExitCode] for each allocation record of the job (several after a requeue, with -D)."""
    out = _run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode", *extra)
    # "CANCELLED by 0" -> "CANCELLED"
    return [[row.split("|")[0].split()[0], row.split("|")[1]] for row in out.splitlines() if row.strip()]


def wait_for_end(job_id: str, timeout: float = WAIT_S) -> tuple[str, str]:
    """Poll accounting until the job reaches a terminal state; returns (state, exit code)."""
    deadline = time.monotonic() + timeout
    rows: list[list[str]] = []
    while time.monotonic() < deadline:
        rows = sacct_rows(job_id)
        if rows and rows[-1][0] in TERMINAL:
            return rows[-1][0], rows[-1][1]
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish within {timeout:.0f}s; last sacct rows: {rows}")


def wait_running(job_id: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = _run("squeue", "-h", "-j", job_id, "-o", "%T").strip()
        if state == "RUNNING":
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} not RUNNING within {timeout:.0f}s (last state {state!r})")


def test_finished_job_is_completed_in_sacct(tmp_path: Path) -> None:
    job = sbatch(tmp_path, "echo hello from $SLURM_JOB_ID")
    assert wait_for_end(job) == ("COMPLETED", "0:0")
    assert (tmp_path / f"{job}.out").read_text().strip() == f"hello from {job}"


def test_failing_job_is_failed_in_sacct(tmp_path: Path) -> None:
    job = sbatch(tmp_path, "echo about to fail; exit 3")
    assert wait_for_end(job) == ("FAILED", "3:0")


@pytest.mark.slow
def test_running_job_can_be_requeued(tmp_path: Path) -> None:
    # First run: counts itself and sleeps (longer than the test waits). After `scontrol requeue`
    # the job runs again from the start, sees the count, and exits 0.
    script = "n=$(cat runs 2>/dev/null || echo 0); echo $((n + 1)) > runs; if [ $n -ge 1 ]; then exit 0; fi; sleep 300"
    job = sbatch(tmp_path, script)
    wait_running(job)
    while not (tmp_path / "runs").exists():  # the script itself has started
        time.sleep(0.2)
    started = time.monotonic()
    _run("scontrol", "requeue", job)
    assert wait_for_end(job) == ("COMPLETED", "0:0")
    requeue_to_done = time.monotonic() - started
    assert (tmp_path / "runs").read_text().strip() == "2"
    # -D: every run of the job, not just the last.
    assert [state for state, _ in sacct_rows(job, "-D")] == ["REQUEUED", "COMPLETED"]
    assert "Restarts=1" in _run("scontrol", "show", "job", job)
    assert requeue_to_done < 60, f"requeued job took {requeue_to_done:.0f}s to run again and finish"


def test_submitit_runs_a_function(tmp_path: Path) -> None:
    submitit = pytest.importorskip("submitit")

    def work(x: int) -> tuple[int, str]:  # nested, so cloudpickle ships it by value

        return x * x, os.environ.get("SLURM_JOB_ID", "")

    # The folder must be visible to the compute node: on this one-node cluster, any local path.
    # slurm_python is a constructor argument (update_parameters rejects it): the venv's python.
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm", slurm_python=sys.executable)
    # submitit asks for USR2 90 s before the time limit (--signal=USR2@90), and SLURM may send it up to
    # 60 s early (sbatch(1), --signal): under a 2-minute limit a job could get it as it started.
    executor.update_parameters(timeout_min=10, cpus_per_task=1)
    started = time.monotonic()
    job = executor.submit(work, 7)
    deadline = started + WAIT_S
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.done(), f"submitit job {job.job_id} not done within {WAIT_S:.0f}s; see {tmp_path / 'submitit'}"
    assert job.result() == (49, str(job.job_id))
    latency = time.monotonic() - started
    assert job.done(force_check=True)  # job.state lags right after the result file appears
    assert wait_for_end(str(job.job_id)) == ("COMPLETED", "0:0")
    print(f"submitit submit -> result: {latency:.2f}s")
    assert latency < 60, f"submit -> result took {latency:.1f}s"
