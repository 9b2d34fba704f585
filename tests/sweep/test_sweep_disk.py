"""The filesystem a sweep writes to (its folder and its state dir, not the MLflow store) fills while
the sweep's two jobs train, and stays full until the sweep has ended: the sweep says in one line that
its summary was not written and exits 1, every MLflow run and the sweep's parent run has ended, no
file on that disk is half-written, and once the space is freed the same command resumes both runs
into their first MLflow runs, each step logged once."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import reliability
from support import nano_pair

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

STEPS, LOG_EVERY = 60, 2  # the disk fills at step 8: every run has most of its steps still to go


def sweep(disk: Path) -> list[str]:
    return [
        *nano_pair(STEPS, LOG_EVERY, eval_every=20, checkpoint_every=8),
        f"hydra.sweep.dir={disk / 'sweep'}",
        f"state_dir={disk / 'state'}",
    ]


class Filler:
    """Keeps the filesystem at `disk` full from start() to stop(), as another writer on a shared disk
    would: whatever room a write that failed frees (its temporary file removed) is taken back within
    a few milliseconds."""

    def __init__(self, disk: Path):
        self.path, self.done = disk / "filler", threading.Event()
        self.thread = threading.Thread(target=self._fill, daemon=True)

    def _fill(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while not self.done.is_set():
                for size in (1 << 16, 1 << 12):
                    try:
                        while os.write(fd, bytes(size)) == size:
                            pass
                    except OSError:
                        pass
                self.done.wait(0.005)
        finally:
            os.close(fd)

    def start(self) -> Filler:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


def statuses(db: Path) -> list[tuple[str, str, str]]:
    """(name, status, reason) of every run in the store."""
    with sqlite3.connect(db) as con:
        return sorted(
            con.execute(
                "SELECT r.name, r.status, COALESCE(t.value, '') FROM runs r LEFT JOIN tags t "
                "ON t.run_uuid = r.run_uuid AND t.key = 'ablate.status_reason'"
            )
        )


def half_written(disk: Path) -> list[str]:
    """Files on the disk that are not whole: a temporary file left, or a JSON record that does not parse."""
    bad = []
    for path in disk.rglob("*"):
        if path.name == "filler" or not path.is_file():
            continue
        if path.name.endswith(".tmp") or ".staging." in str(path):
            bad.append(str(path.relative_to(disk)))
        elif path.suffix == ".json":
            try:
                json.loads(path.read_bytes())
            except ValueError:
                bad.append(str(path.relative_to(disk)))
    return bad


@pytest.mark.ledger(
    "fault",
    "the filesystem of a parallel sweep's folder and state dir full from a run's first checkpoint to the "
    "sweep's end, then the same command with room",
)
def test_a_disk_that_fills_mid_sweep_ends_it_in_one_line_and_a_relaunch_resumes_it(cli, request, tmp_path, tmpfs):
    disk = tmpfs("size=16m")
    log = tmp_path / "sweep.log"
    proc = cli.start(sweep(disk), tmp_path, stdout=log, stderr=log)
    deadline = time.monotonic() + 600
    while not list((disk / "state").glob("*/checkpoint.pt")):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no run wrote a checkpoint"
        time.sleep(0.05)
    filler = Filler(disk).start()
    try:
        code = proc.wait(600)
    finally:
        filler.stop()
        proc.kill()
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert code == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert lines[-1].startswith("error: hydra.sweep.dir: cannot write ") and "No space left on device" in lines[-1]
    assert "summary.json" in lines[-1]
    ended = statuses(tmp_path / "mlflow.db")
    trained = [(s, why) for name, s, why in ended if not name.startswith("sweep:")]
    (parent,) = [(s, why) for name, s, why in ended if name.startswith("sweep:")]
    assert [s for s, _ in trained] == ["KILLED", "KILLED"], ended  # stopped by the disk: resumable
    assert all("No space left on device" in why and "resumes it" in why for _, why in trained), ended
    assert parent[0] == "FAILED" and parent[1].startswith("the sweep's summary was not written"), parent
    assert half_written(disk) == []
    assert not (disk / "sweep" / "summary.json").exists()
    results = sorted((disk / "sweep").glob("*/result.json"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first = {r.info.run_id for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}

    (disk / "filler").unlink()
    again = cli(sweep(disk), tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    trained_runs = [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(r.data.params["train.seed"] for r in trained_runs) == ["0", "1"]
    assert {r.info.run_id for r in trained_runs} <= first  # resumed into the runs the disk stopped
    assert {r.info.status for r in trained_runs} == {"FINISHED"}
    for r in trained_runs:
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "train/loss")]
        assert steps == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY)), steps
    assert sorted(s for name, s, _ in statuses(tmp_path / "mlflow.db") if name.startswith("sweep:")) == [
        "FAILED",
        "FINISHED",
    ]
    assert json.loads((disk / "sweep" / "summary.json").read_text())["runs"]
    reliability.record(
        request,
        f"exit 1, the last line `{lines[-1][:60]}... (No space left on device)...`, no traceback; both runs KILLED "
        "with the disk's reason, the sweep's parent FAILED (its summary not written), none RUNNING; on the disk no "
        f"temporary file, every JSON file whole ({len(results)} result.json), no summary.json; the filler removed, "
        f"the same command: exit 0, both runs FINISHED in their first MLflow runs, {STEPS // LOG_EVERY} of "
        f"{STEPS // LOG_EVERY} train/loss steps each, each once, the new parent FINISHED",
    )
