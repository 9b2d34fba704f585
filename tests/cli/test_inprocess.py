"""The `cli` fixture runs a command inside the test process (tests/inprocess.py): afterwards the
process is as the command found it, as if the command had run in a process of its own. A command
that must be a process is forked from the product's warm worker (its `run_argv` call,
src/ablate/sweep/launch/command.py): it is one, with its own pid, exit status, output, working
directory and environment."""

import logging
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from hydra.core.global_hydra import GlobalHydra

from ablate.sweep.launch.pool import Worker
from support import SMALL_DATA, environ_now

RUN = ["model=nano", "train.steps=2", "train.eval_interval=1", "train.progress=false", *SMALL_DATA]


def state() -> dict:
    return {
        "cwd": os.getcwd(),
        "argv": list(sys.argv),
        "environ": dict(os.environ),
        "root handlers": list(logging.root.handlers),
        "root level": logging.root.level,
        "signals": {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)},
        "threads": torch.get_num_threads(),
        "hydra": GlobalHydra.instance().is_initialized(),
    }


def test_a_finished_and_a_failed_command_leave_the_process_as_they_found_it(cli, tmp_path):
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    before = state()
    finished = cli(RUN, tmp_path)  # tracking into tmp_path/mlflow.db, in a Hydra output folder
    assert finished.returncode == 0, finished.stderr
    assert list(tmp_path.glob("outputs/*/*/result.json"))
    assert state() == before
    # MLflow's engine for the run's store is closed and forgotten, as the end of a process would do.
    assert not [uri for uri in SqlAlchemyStore._engine_map if str(tmp_path) in uri]

    failed = cli([*RUN, "optim.lr=-1"], tmp_path)
    assert failed.returncode == 2 and failed.stderr.startswith("error: "), failed.stderr
    assert state() == before


def test_a_command_run_again_after_its_data_changed_sees_the_change(cli, tmp_path):
    """A `data=tokens` run in this process, its token file then cut to 20 tokens: the same command
    again fails as a fresh `python -m ablate` does. A command passes what it prepared to its run
    and keeps nothing, so the second finds nothing of the first's."""
    path = tmp_path / "tokens.bin"
    (np.arange(20_000, dtype=np.uint16) % 100).tofile(path)
    args = ["model=nano", "train.steps=1", "train.progress=false", "tracking=none", "data=tokens"]
    args += [f"data.train_bin={path}", f"data.val_bin={path}", f"state_dir={tmp_path / 'state'}"]
    first = cli(args, tmp_path)
    assert first.returncode == 0, first.stderr
    path.write_bytes(bytes(40))
    again = cli(args, tmp_path)
    assert again.returncode == 2 and "longer than" in again.stderr, again.stderr


def test_a_forked_command_is_a_process_of_its_own(cli, tmp_path):
    """The command's own pid and cwd, the environment it was given, its exit status and its output;
    the test process's cwd and environment untouched."""
    before = state()
    done = cli(["plan", "model=gpt_1p5b", "budget.tokens=1e11", "gpus=0"], tmp_path, process=True)
    assert done.returncode == 2 and done.stderr == "error: gpus=0 must be positive (valid: > 0)\n"
    assert done.args[1:3] == ["-m", "ablate"]
    ok = cli([*RUN, "tracking=none"], tmp_path, env={"ABLATE_PROBE": "1", "OMP_NUM_THREADS": "1"})
    assert ok.returncode == 0, ok.stderr
    (result,) = tmp_path.glob("outputs/*/*/result.json")
    assert result.is_file()
    assert state() == before and "ABLATE_PROBE" not in os.environ


def test_a_forked_command_that_runs_past_its_timeout_is_killed(cli, tmp_path):
    import subprocess

    import pytest

    # Watched until it is seen in its folder, not sampled at a fixed moment: the first forked command
    # of a test process waits for the fork server's start (seconds), and a loaded machine stretches it.
    seen: list[int] = []
    returned = threading.Event()

    def watch() -> None:
        while not seen and not returned.is_set():
            seen.extend(_working_in(tmp_path))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            cli([*RUN, "train.steps=100000", "tracking=none"], tmp_path, timeout=3, process=True)
    finally:
        returned.set()
        watcher.join()
    assert seen, "the command was not running in its folder"
    deadline = time.monotonic() + 60  # its process group was sent SIGKILL; an exit takes its time on a busy machine
    while _working_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _working_in(tmp_path), "the command outlived its timeout"


def _working_in(folder: Path) -> list[int]:
    """The pids of this machine's processes whose working directory is `folder` (Linux)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == folder:
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def test_a_commands_environment_is_copied_whole_while_another_thread_changes_it():
    """The bad-input cases start their commands from a pool while pytest sets and deletes
    PYTEST_CURRENT_TEST in the main thread: a plain copy of os.environ from a thread then fails about
    once in a thousand (KeyError, or the mapping resized); with threads switching every microsecond, at
    once. environ_now, which the cli fixture copies, takes such a copy again."""
    stop = threading.Event()

    def toggle():
        while not stop.is_set():
            os.environ["ABLATE_TEST_TOGGLE"] = "1"
            os.environ.pop("ABLATE_TEST_TOGGLE", None)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    toggler = threading.Thread(target=toggle, daemon=True)
    toggler.start()
    try:
        copies = [environ_now() for _ in range(5000)]
    finally:
        stop.set()
        toggler.join()
        sys.setswitchinterval(interval)
    assert all(c.get("PATH") == os.environ["PATH"] for c in copies)


def _serves(server) -> bool:
    """Whether the fork server still forks a command and reports its exit."""
    if not server.worker.alive():
        return False
    with tempfile.TemporaryDirectory() as cwd:
        done = server.run(["--version"], Path(cwd), environ_now(), 120)
    return done.returncode == 0


def _ready(start, *args):
    """A worker started, and ready (its prctl set) before the calling thread goes on."""
    worker = start(*args)
    assert worker.ready() is not None
    return worker


def test_the_fork_server_outlives_the_thread_that_first_asked_for_it(cli):
    """A worker's first forked command may come from a pool's thread (the bad-input cases) that ends
    with its pool. The server dies with its parent through prctl(PR_SET_PDEATHSIG), which fires when
    the thread that started it ends: started from such a thread, it got SIGTERM at the pool's end and
    every later command on that worker waited out its timeout. The fixture starts it from a thread
    kept for the session; a server started in the pool's own thread shows the hazard."""
    with ThreadPoolExecutor(1) as pool:
        kept = pool.submit(cli.new_server).result()
        tied = pool.submit(_ready, Worker.start, "sqlite://", True, ["ablate.cli.main"]).result()
    try:
        tied.proc.wait(60)  # SIGTERM when the pool's thread ended
        assert tied.proc.returncode == -signal.SIGTERM
        assert _serves(kept)
    finally:
        kept.close()
        tied.close(5)
