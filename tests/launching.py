"""Helpers of the tests that launch a run as an engine would (torchrun, SLURM tasks): its MLflow
runs, its checkpoint's step, the process of one of its ranks."""

import json
import os
import time
from pathlib import Path

from mlflow.tracking import MlflowClient


def runs(cwd: Path) -> list:
    """The runs the command under test recorded so far: none before it made its store (a client
    opened on a missing store would make one itself, racing the command's own making of it:
    "table ... already exists")."""
    if not (cwd / "mlflow.db").is_file():
        return []
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    found = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return [r for r in found if r.data.tags.get("ablate.kind") != "sweep"]


def logged_steps(cwd: Path, run_id: str) -> list[int]:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    return sorted(m.step for m in client.get_metric_history(run_id, "train/loss"))


def checkpoint_step(cwd: Path) -> int:
    found = list((cwd / ".ablate" / "state").glob("*/checkpoint.json"))
    return json.loads(found[0].read_text())["step"] if found else 0


def rank_process(cwd: Path, rank: int, variable: str) -> int | None:
    """The pid of the training process in `cwd` whose environment has `variable`=rank."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = proc.joinpath("environ").read_bytes().split(b"\0")
            cmd = proc.joinpath("cmdline").read_bytes()
            here = Path(os.readlink(proc / "cwd")) == cwd.resolve()
        except OSError:
            continue
        if here and f"{variable}={rank}".encode() in env and (b"ablate" in cmd or b"submitit" in cmd):
            return int(proc.name)
    return None


def wait_for(condition, timeout: float, what: str, process=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        assert process is None or process.poll() is None, f"the command ended before {what}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
