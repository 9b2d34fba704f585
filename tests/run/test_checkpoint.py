"""Corrupt or foreign checkpoints (run/checkpoint.py load_good): moved aside with one line naming the
file, the run goes on from the one before or from step 0; a run whose process dies without closing
its MLflow run is closed by its watchdog (run/watchdog.py)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.model.gpt import GPT
from ablate.run import checkpoint, train
from ablate.run.lock import RunLock
from ablate.run.prepare import prepare
from ablate.run.trainer import state_mismatch
from ablate.run.watchdog import watch
from ablate.tracking.tags import REASON_TAG

STATE = {"model": {}, "optimizer": {}, "rng": torch.zeros(4), "train_time": 0.0, "pending": [], "config_hash": "h"}


def saved(directory, *steps):
    for step in steps:
        checkpoint.save({**STATE, "step": step}, directory)


def test_a_truncated_latest_is_quarantined_and_the_one_before_takes_its_place(tmp_path, capsys):
    saved(tmp_path, 10, 20)
    data = (tmp_path / "checkpoint.pt").read_bytes()
    (tmp_path / "checkpoint.pt").write_bytes(data[: len(data) // 3])
    state = checkpoint.load_good(tmp_path, "h")
    assert state["step"] == 10
    (line,) = capsys.readouterr().err.splitlines()
    assert str(tmp_path / "checkpoint.pt") in line and "does not load" in line and "quarantine" in line
    (moved,) = (tmp_path / "quarantine").iterdir()
    assert moved.read_bytes() == data[: len(data) // 3]  # kept, not deleted
    assert checkpoint.load(tmp_path)["step"] == 10 and checkpoint.meta(tmp_path).step == 10  # promoted


def test_a_write_that_dies_halfway_leaves_the_two_checkpoints_before_it_apart(tmp_path, monkeypatch):
    """After a crash mid-write the latest and the one before are separate files: damage to one (a
    truncation in place) leaves the other loadable."""
    from ablate import files

    saved(tmp_path, 10, 20)

    def die(name):
        raise KeyboardInterrupt(name)

    monkeypatch.setattr(files, "failpoint", die)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save({**STATE, "step": 30}, tmp_path)
    latest, before = tmp_path / "checkpoint.pt", tmp_path / "checkpoint.prev.pt"
    assert (checkpoint.read(latest)["step"], checkpoint.read(before)["step"]) == (20, 10)
    assert not os.path.samefile(latest, before)
    with open(latest, "r+b") as f:
        f.truncate(1000)
    assert checkpoint.load_good(tmp_path, "h")["step"] == 10


def test_when_no_checkpoint_is_good_there_is_none(tmp_path, capsys):
    saved(tmp_path, 10, 20)
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        (tmp_path / name).write_bytes(b"not a zip")
    assert checkpoint.load_good(tmp_path, "h") is None
    assert len(capsys.readouterr().err.splitlines()) == 2
    assert checkpoint.meta(tmp_path) is None and len(list((tmp_path / "quarantine").iterdir())) == 2
    (tmp_path / "checkpoint.pt").write_bytes(b"torn")  # no sidecar, unreadable: still a checkpoint to look at
    assert checkpoint.meta(tmp_path) == checkpoint.CheckpointMeta(0, "", "")


def test_a_checkpoint_of_another_config_or_missing_keys_is_foreign(tmp_path, capsys):
    checkpoint.save({**STATE, "step": 5, "config_hash": "other"}, tmp_path)
    assert checkpoint.load_good(tmp_path, "h") is None
    assert "belongs to config other, not h" in capsys.readouterr().err
    checkpoint.save({"step": 5, "config_hash": "h"}, tmp_path)
    assert checkpoint.load_good(tmp_path, "h") is None
    assert "lacks model, optimizer, rng, train_time, pending" in capsys.readouterr().err


def test_a_checkpoint_whose_shapes_are_not_the_models_is_named(run_config, tmp_path):
    big = prepare(run_config(tmp_path, **{"model.n_embd": 64})).cfg.model
    small = prepare(run_config(tmp_path)).cfg.model

    weights = GPT(big).state_dict()
    assert state_mismatch(small, {"model": weights}).startswith("has ")
    assert "shape" in state_mismatch(small, {"model": weights})
    assert state_mismatch(big, {"model": weights}) is None
    assert state_mismatch(big, {"model": {k: v for k, v in weights.items() if k != "ln_f.weight"}}) == (
        "lacks the weight ln_f.weight"
    )
    assert state_mismatch(big, {"model": {**weights, "extra": torch.zeros(1)}}).startswith("has a weight extra")


@pytest.mark.parametrize("mup", [False, True])
def test_the_checked_shapes_are_the_models_and_checking_them_stays_warm(run_config, tmp_path, mup):
    """A resume checks a checkpoint against the model's shapes without importing torch._dynamo (a
    model on the meta device would: seconds, in a worker that was warm)."""
    cfg = prepare(run_config(tmp_path, **{"model.mup": mup})).cfg.model
    code = f"""
import sys
from ablate.config import ModelConfig
from ablate.model.gpt import GPT, weight_shapes
from ablate.run.trainer import state_mismatch
from ablate.run.watchdog import watch
cfg = ModelConfig(**{vars(cfg)!r})
real = GPT(cfg).state_dict()
assert weight_shapes(cfg) == {{k: tuple(v.shape) for k, v in real.items()}}
assert state_mismatch(cfg, {{"model": real}}) is None
print("torch._dynamo" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_run_resumes_past_a_truncated_checkpoint_and_finishes_complete(run_config, tmp_path, capsys):
    cfg = run_config(tmp_path, tracking="mlflow", **{"train.steps": 30, "train.checkpoint_interval": 10})
    (tmp_path / "ref").mkdir()
    reference = train.run(run_config(tmp_path / "ref", tracking="mlflow", **{"train.steps": 30}), tmp_path / "r")
    first = train.run(cfg, tmp_path / "first")
    state_dir = tmp_path / "state" / first.config_hash
    client = MlflowClient(cfg.tracking.uri)
    client.update_run(first.mlflow_run_id, status="KILLED")  # as if it had been interrupted at step 30
    (state_dir / "checkpoint.pt").write_bytes((state_dir / "checkpoint.pt").read_bytes()[:100])
    again = train.run(cfg, tmp_path / "again")
    assert again.status == "finished" and again.mlflow_run_id == first.mlflow_run_id
    assert "checkpoint.pt does not load" in capsys.readouterr().err
    steps = [m.step for m in client.get_metric_history(first.mlflow_run_id, "train/loss")]
    assert steps == sorted(set(steps)) == [5, 10, 15, 20, 25, 30]  # complete, nothing twice
    assert again.final_val_loss == pytest.approx(reference.final_val_loss, rel=1e-5)


def test_another_configs_checkpoint_in_a_fresh_store_is_moved_aside(run_config, tmp_path, capsys):
    """A checkpoint copied in from another config and another store: the store has no run for it, so
    the run starts from step 0, and the foreign file is moved aside with one line, not overwritten."""
    (tmp_path / "theirs").mkdir(), (tmp_path / "ours").mkdir()
    theirs = train.run(run_config(tmp_path / "theirs", tracking="mlflow", **{"train.steps": 2}), tmp_path / "t")
    cfg = run_config(tmp_path / "ours", tracking="mlflow", **{"train.steps": 2, "train.seed": 7})
    ours = tmp_path / "ours" / "state" / prepare(cfg).config_hash
    ours.mkdir(parents=True)
    for name in ("checkpoint.pt", "checkpoint.json"):
        shutil.copy(tmp_path / "theirs" / "state" / theirs.config_hash / name, ours / name)
    result = train.run(cfg, tmp_path / "o")
    assert result.status == "finished" and result.config_hash != theirs.config_hash
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "moved aside" in ln]
    assert f"belongs to config {theirs.config_hash}" in line and str(ours / "checkpoint.pt") in line
    assert len(list((ours / "quarantine").iterdir())) == 1


WATCHED = """
import sys, time
from mlflow.tracking import MlflowClient
from ablate.run.lock import RunLock
from ablate.run.watchdog import watch
uri, lock_dir = sys.argv[1], sys.argv[2]
client = MlflowClient(uri)
run = client.create_run(client.create_experiment("w"))
held = RunLock(lock_dir).acquire()
guard = watch(uri, run.info.run_id, lock_dir)
if sys.argv[3] == "close":
    client.set_terminated(run.info.run_id, "FINISHED")
    guard.done()
print(run.info.run_id, flush=True)
time.sleep(600)
"""


def _watched(tmp_path, how: str):
    uri = f"sqlite:///{tmp_path / 'w.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHED, uri, str(tmp_path / "lock"), how], stdout=subprocess.PIPE, text=True
    )
    run_id = proc.stdout.readline().strip()
    return proc, MlflowClient(uri), run_id


def _status_after_kill(proc, client, run_id, wait_s: float = 60.0) -> str:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + wait_s
    while client.get_run(run_id).info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    return client.get_run(run_id).info.status


def test_kill_9_leaves_no_running_run_behind(tmp_path):
    proc, client, run_id = _watched(tmp_path, "open")
    assert client.get_run(run_id).info.status == "RUNNING"
    assert _status_after_kill(proc, client, run_id) == "KILLED"
    assert "SIGKILL" in client.get_run(run_id).data.tags[REASON_TAG]


def test_the_watchdog_leaves_a_closed_run_alone(tmp_path):
    proc, client, run_id = _watched(tmp_path, "close")
    assert _status_after_kill(proc, client, run_id, wait_s=3) == "FINISHED"


def test_the_watchdog_leaves_a_run_that_a_relaunch_took_over_alone(tmp_path):
    proc, client, run_id = _watched(tmp_path, "open")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # The relaunch takes the lock the kernel just dropped; the watchdog first imports MLflow (seconds)
    # and then finds the lock held, so it leaves the run to the relaunch, which resumes it.
    with RunLock(tmp_path / "lock"):
        time.sleep(8)
        assert client.get_run(run_id).info.status == "RUNNING"


def test_the_signals_a_scheduler_sends_to_every_process_of_a_job_do_not_end_the_watchdog(tmp_path):
    """scancel --signal=USR2 reaches every process of a job, the watchdog included: it stays, so that
    the run can still tell it it closed the run, and a later SIGKILL of the run is still caught."""

    proc, client, run_id = _watched(tmp_path, "open")
    (dog,) = [c for c in psutil.Process(proc.pid).children() if "ablate.run.watchdog" in " ".join(c.cmdline())]
    deadline = time.monotonic() + 60
    while not _ignores(dog.pid, signal.SIGUSR2) and time.monotonic() < deadline:  # it has set up
        time.sleep(0.05)
    for signum in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.kill(dog.pid, signum)
    time.sleep(0.5)
    assert dog.is_running() and dog.status() != psutil.STATUS_ZOMBIE
    assert _status_after_kill(proc, client, run_id) == "KILLED"


def _ignores(pid: int, signum: int) -> bool:
    """Whether process `pid` ignores `signum` (the SigIgn mask of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_telling_a_watchdog_that_is_gone_is_not_an_error(tmp_path):
    uri = f"sqlite:///{tmp_path / 'w.db'}"
    guard = watch(uri, "no-such-run")
    guard.proc.kill()
    guard.proc.wait()
    guard.done()  # the pipe's reader is gone: nothing to tell, and no BrokenPipeError


# -- off the step path ---------------------------------------------------------------------------


def test_a_background_save_writes_the_state_as_it_was_when_saved(tmp_path):
    weights = torch.arange(6.0)
    saver = checkpoint.BackgroundSaver()
    saver.save({**STATE, "step": 7, "model": {"w": weights}}, tmp_path)
    weights.add_(100.0)  # training goes on updating its tensors in place
    saver.wait()
    saved = checkpoint.load(tmp_path)
    assert saved["step"] == 7 and torch.equal(saved["model"]["w"], torch.arange(6.0))
    assert checkpoint.meta(tmp_path).step == 7


def test_a_failed_background_write_is_raised_at_the_next_save(tmp_path, monkeypatch):
    saver = checkpoint.BackgroundSaver()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write_bytes", full)
    saver.save({**STATE, "step": 1}, tmp_path)
    with pytest.raises(OSError, match="No space left"):
        saver.save({**STATE, "step": 2}, tmp_path)
    saver.wait()  # raised once: the saver is usable again
    assert checkpoint.load(tmp_path) is None
