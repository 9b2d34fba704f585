"""The `cli` fixture runs a command inside the test process (tests/inprocess.py): afterwards the
process is as the command found it, as if the command had run in a process of its own."""

import logging
import os
import signal
import sys

import torch
from hydra.core.global_hydra import GlobalHydra

from support import SMALL_DATA

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


def test_module_level_names_a_command_rebinds_are_put_back():
    """What `global` statements change (the last sweep's summary, a job's progress file) would
    otherwise reach the next command run in this process."""
    import inprocess
    from ablate.run import progress
    from ablate.sweep import callback

    summary, status = callback.LAST_SUMMARY, progress._STATUS_FILE
    saved = inprocess._Saved()
    callback.LAST_SUMMARY, progress._STATUS_FILE = object(), object()
    saved.restore()
    assert (callback.LAST_SUMMARY, progress._STATUS_FILE) == (summary, status)
