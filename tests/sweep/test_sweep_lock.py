"""One launch per sweep folder (run/lock.sweep_lock): a second launch into a folder whose sweep is
running stops with one line and exit 75, before it writes anything there, and the first sweep's
records (sweep.json, its parent run, its jobs) are its own when it ends."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ablate.run.lock import EXIT_BUSY, Busy, sweep_lock
from support import SMALL_DATA

SWEEP = [
    "--multirun",
    "model=nano",
    *SMALL_DATA,
    "train.progress=false",
    "train.steps=200",
    "train.eval_interval=50",
    "train.seed=0,1",
    "hydra/launcher=sequential",
    "hydra.sweep.dir=multirun/shared",
]


def test_a_second_claim_on_a_sweep_folder_names_its_holder(tmp_path):
    with sweep_lock(tmp_path / "sweep"):
        with pytest.raises(
            Busy, match=r"^sweep .*sweep is already being run by pid \d+ on .*another hydra.sweep.dir\)$"
        ):
            sweep_lock(tmp_path / "sweep").acquire()
        assert (tmp_path / "sweep" / "sweep.lock").is_file()
    sweep_lock(tmp_path / "sweep").acquire().release()  # free again once released


def test_a_claim_that_wrote_nothing_else_leaves_no_folder_behind(tmp_path):
    sweep_lock(tmp_path / "multirun" / "day" / "time").acquire().release()
    assert not (tmp_path / "multirun").exists()  # every folder it made is gone
    lock = sweep_lock(tmp_path / "multirun" / "day" / "time").acquire()
    (lock.directory / "sweep.json").write_text("{}")
    lock.release()
    assert (tmp_path / "multirun" / "day" / "time" / "sweep.json").is_file()  # a sweep's folder stays
    (tmp_path / "kept").mkdir()
    sweep_lock(tmp_path / "kept").acquire().release()
    assert (tmp_path / "kept").is_dir()  # a folder that was there before stays


@pytest.mark.slow
def test_a_second_launch_into_a_running_sweeps_folder_exits_75_and_leaves_it_alone(cli, tmp_path):
    first = cli.start(SWEEP, tmp_path, stdout=tmp_path / "first.log", stderr=tmp_path / "first.log")
    sweep_file = tmp_path / "multirun" / "shared" / "sweep.json"
    deadline = time.monotonic() + 300
    while not sweep_file.is_file():
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the first sweep never opened"
        time.sleep(0.2)
    opened = json.loads(sweep_file.read_text())
    second = cli([*SWEEP, "train.seed=2,3"], tmp_path, timeout=300)
    assert second.returncode == EXIT_BUSY
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("busy: sweep ") and f"pid {first.pid}" in lines[0], second.stderr
    assert json.loads(sweep_file.read_text())["sweep_id"] == opened["sweep_id"]  # not replaced
    assert first.wait(600) == 0, (tmp_path / "first.log").read_text()[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len([r for r in runs if r.data.tags.get("ablate.kind") == "sweep"]) == 1
    children = [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(r.data.params["train.seed"] for r in children) == ["0", "1"]  # the second's seeds never ran
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(p.name for p in Path(tmp_path / "multirun" / "shared").iterdir() if p.name.isdigit()) == ["0", "1"]
    # Free once the first has ended: the same command launches again.
    again = cli([*SWEEP, "train.steps=2", "train.eval_interval=1"], tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
