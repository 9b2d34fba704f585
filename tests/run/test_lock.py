"""One launch per config hash at a time (run/lock.py): a lock another process holds is Busy and names
its owner, a killed owner leaves nothing stale, and the lease used where filesystems have no locks
behaves the same, taking over a lease whose owner is gone or silent."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.run import lock
from ablate.run.lock import Busy, Owner, RunLock, busy_with, holder, owner_tag
from ablate.tracking.tracker import ExistingRun

HOLD = """
import sys, time
from ablate.run.lock import RunLock
RunLock(sys.argv[1], sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def other_process():
    """Start a process that takes the lock of a directory and holds it until killed."""
    procs = []

    def start(directory, mode="flock"):
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(directory), mode], stdout=subprocess.PIPE, text=True, cwd=directory.parent
        )
        assert proc.stdout.readline().strip() == "held"
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", ["flock", "lease"])
def test_a_held_lock_is_busy_naming_its_owner_and_a_killed_owner_leaves_nothing_stale(tmp_path, other_process, mode):
    directory = tmp_path / "hash"
    proc = other_process(directory, mode)
    with pytest.raises(Busy) as busy:
        RunLock(directory, mode).acquire()
    assert busy.value.owner.pid == proc.pid and busy.value.owner.host == socket.gethostname()
    assert f"pid {proc.pid} on {socket.gethostname()}" in str(busy.value) and "\n" not in str(busy.value)
    assert holder(directory).pid == proc.pid  # what a sweep's plan sees
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with RunLock(directory, mode) as taken:  # flock: the kernel dropped it; lease: its owner is gone
        assert Owner.read(taken.path).pid == os.getpid()
    assert holder(directory) is None


@pytest.mark.parametrize("mode", ["flock", "lease"])
def test_a_folder_where_the_lock_file_belongs_is_set_aside_in_one_line(tmp_path, capsys, mode):
    (tmp_path / "run.lock" / "junk").mkdir(parents=True)
    (tmp_path / "run.lease").mkdir()
    assert holder(tmp_path) is None  # a probe neither fails nor calls a folder an owner
    with RunLock(tmp_path, mode) as held:
        assert held.path.is_file() and Owner.read(held.path) == held.owner
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("is a folder; moved aside to" in ln for ln in lines), lines
    assert sorted(p.name.split(".2")[0] for p in (tmp_path / "quarantine").iterdir()) == ["run.lease", "run.lock"]


def test_the_same_process_cannot_take_a_lock_twice(tmp_path):
    with RunLock(tmp_path / "h"):
        with pytest.raises(Busy):
            RunLock(tmp_path / "h").acquire()
        assert holder(tmp_path / "h").pid == os.getpid()  # the probe does not drop our own lock
    RunLock(tmp_path / "h").acquire().release()


def test_a_lease_of_another_host_is_busy_until_its_heartbeat_is_stale(tmp_path):
    directory = tmp_path / "h"
    directory.mkdir()
    lease = directory / lock.LEASE_FILE
    lease.write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": time.time(), "mlflow_run_id": "r1"}))
    with pytest.raises(Busy, match="pid 1 on elsewhere .*MLflow run r1"):
        RunLock(directory, "lease").acquire()
    old = time.time() - lock.STALE_S - 1
    os.utime(lease, (old, old))  # that node died: its heartbeat stopped
    with RunLock(directory, "lease") as taken:
        assert Owner.read(taken.path).host == socket.gethostname()
    assert not lease.exists()  # released: a lease is removed, a flock file stays


def test_a_lease_is_kept_fresh_by_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "HEARTBEAT_S", 0.05)
    with RunLock(tmp_path / "h", "lease") as held:
        before = held.path.stat().st_mtime
        time.sleep(0.5)
        assert held.path.stat().st_mtime > before


WATCHDOG_HOLDING = (
    "import sys, time\nfrom ablate.run.lock import Owner, RunLock\n"
    "l = RunLock(sys.argv[1]); l.owner = Owner(l.owner.host, l.owner.pid, l.owner.since, 'r', 'watchdog')\n"
    "l.acquire(); print('held', flush=True); time.sleep(float(sys.argv[3])); open(sys.argv[2], 'w').close()\n"
    "l.release()\n"
)


def relaunch_beside_a_watchdog(tmp_path: Path, hold_s: float) -> None:
    """A watchdog holds the run's lock for hold_s, marks a file just before it lets go and exits; a
    relaunch meanwhile takes the lock. Shown waited for by order, not timed: a test process held up
    for a second on a loaded machine would find the wait already over."""
    directory, letting_go = tmp_path / "h", tmp_path / "letting-go"
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG_HOLDING, str(directory), str(letting_go), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    RunLock(directory).acquire().release()
    assert letting_go.exists()
    assert proc.wait(60) == 0


def test_a_watchdogs_hold_is_waited_for(tmp_path):
    """A relaunch right after a kill -9 meets the watchdog closing the old run: it waits, not Busy."""
    relaunch_beside_a_watchdog(tmp_path, 1.0)


def test_a_live_watchdog_on_this_host_is_waited_for_past_the_deadline(tmp_path, monkeypatch, capfd):
    """A watchdog whose store calls outlast WATCHDOG_WAIT_S (a tracking outage: each call waits for
    its request timeout and retries) is still waited for while it lives, with one line saying so."""
    monkeypatch.setattr(lock, "WATCHDOG_WAIT_S", 0.1)
    relaunch_beside_a_watchdog(tmp_path, 1.5)
    assert "waiting for the watchdog pid" in capfd.readouterr().err


def test_a_watchdog_on_another_host_is_waited_for_until_the_deadline(tmp_path, monkeypatch):
    """A watchdog named by a lease on another host (a shared state dir), whose life cannot be seen
    from here: waited for up to WATCHDOG_WAIT_S, then Busy naming it."""
    monkeypatch.setattr(lock, "WATCHDOG_WAIT_S", 0.3)
    directory = tmp_path / "h"
    directory.mkdir()
    elsewhere = Owner("another-node", 4242, time.time(), "r", "watchdog")
    (directory / "run.lease").write_text(json.dumps(dataclasses.asdict(elsewhere)))
    started = time.monotonic()
    with pytest.raises(Busy, match="pid 4242 on another-node"):
        RunLock(directory, "lease").acquire()
    assert time.monotonic() - started >= 0.3


def test_busy_with_names_a_live_writer_of_a_running_mlflow_run(tmp_path, other_process):
    me = Owner.me()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        alive = Owner(socket.gethostname(), live.pid, time.time())
        assert "pid" in busy_with(ExistingRun("r", "RUNNING", "", owner_tag(alive)))
        assert busy_with(ExistingRun("r", "KILLED", "", owner_tag(alive))) is None  # not running
        assert busy_with(ExistingRun("r", "RUNNING", "", owner_tag(me))) is None  # this process
        assert busy_with(ExistingRun("r", "RUNNING", "", "elsewhere 1 0")) is None  # another host: the lock decides
    finally:
        live.kill()
        live.wait()
    assert busy_with(ExistingRun("r", "RUNNING", "", owner_tag(alive))) is None  # its writer is gone
    held = other_process(tmp_path / "h")
    assert f"pid {held.pid}" in busy_with(None, tmp_path / "h")


def test_a_launch_with_another_state_dir_is_busy_where_the_store_is(run_config, tmp_path, other_process):
    """Two launches of one config into one sqlite store, with different state dirs: the second finds
    the claim beside the store taken (as the first holds it from before its MLflow run exists) and
    trains nothing, creating no run; once the first is gone, it trains."""
    from mlflow.tracking import MlflowClient

    from ablate.run import train
    from ablate.run.lock import store_claim

    cfg = run_config(tmp_path / "b", tracking="mlflow", **{"state_dir": str(tmp_path / "b" / "state")})
    p = train.prepare(cfg)
    claim = store_claim(cfg.tracking.uri, p.config_hash)
    assert claim.directory.parent == tmp_path / "b" / ".mlflow.db.claims"
    claim.directory.parent.mkdir()
    first = other_process(claim.directory)
    result = train.run(cfg, tmp_path / "b" / "out", prepared=p)
    assert result.status == "busy" and f"pid {first.pid}" in result.reason
    client = MlflowClient(cfg.tracking.uri)
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])
    first.kill()
    first.wait()
    assert train.run(cfg, tmp_path / "b" / "out2", prepared=p).status == "finished"
