"""A recorded study stopped by a signal: its sweep is stopped as the signal would stop it alone, so
every run and the sweep's parent end KILLED, never RUNNING, and the study exits 128 + the signal in
one line."""

from __future__ import annotations

import signal
import time

import pytest
import yaml

from support import SMALL_DATA

TIMEOUT_S = 1800  # an end-to-end sweep on a 2-core machine shared with other work
SWEEP = [
    "hydra.mode=MULTIRUN",
    "model=nano",
    *SMALL_DATA,
    "train.eval_interval=5",
    "train.log_interval=5",
    "train.progress=false",
    "hydra/launcher=parallel",
    "hydra.launcher.workers=2",
    "train.steps=200,201",
    "train.checkpoint_interval=10",
]


@pytest.mark.slow
@pytest.mark.e2e
def test_sigterm_to_a_running_study_closes_every_record_of_its_sweep(tmp_path, cli, run_statuses):
    study = tmp_path / "experiments" / "stopped"
    study.mkdir(parents=True)
    (study / "study.yaml").write_text(yaml.safe_dump({"title": "t", "question": "q", "overrides": SWEEP}))
    stderr = tmp_path / "stderr.txt"
    proc = cli.start(["study", "experiments/stopped", "--run"], tmp_path, stderr=stderr)
    try:
        deadline = time.time() + TIMEOUT_S
        while len(list((study / ".state").glob("*/checkpoint.pt"))) < 2:
            assert proc.poll() is None and time.time() < deadline, "the study ended before it could be stopped"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # to the study's process alone, as `kill PID` does
        code = proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
    printed = stderr.read_text(errors="replace")
    assert code == 128 + signal.SIGTERM, printed[-3000:]
    assert "Traceback" not in printed
    assert printed.rstrip().splitlines()[-1] == "ablate study: stopped by SIGTERM"
    assert sorted(run_statuses(study / "mlflow.db")) == ["KILLED"] * 3  # two runs and the sweep's parent
