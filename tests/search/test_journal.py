"""An Optuna study's journal cut mid-line by a killed launch is repaired by the next launch, and a
journal with a line that is not an entry is refused in one line, before anything is created."""

from __future__ import annotations

import sqlite3

import optuna
import pytest

import reliability
from ablate.search import storage as study_storage
from support import SMALL_DATA

pytestmark = [pytest.mark.reliability]

STUDY = [
    "+sweep=lr",
    "hydra.sweeper.n_jobs=1",
    "train.steps=4",
    "train.eval_interval=2",
    "train.progress=false",
    "model.block_size=32",
    *SMALL_DATA,
]


def _journal(cwd):
    return cwd / "studies" / "lr" / "journal.log"


@pytest.mark.slow
@pytest.mark.ledger("fault", "an Optuna study whose journal a killed launch cut mid-line, launched again")
def test_a_journal_cut_mid_line_is_repaired_and_the_study_goes_on(cli, request, tmp_path):
    first = cli([*STUDY, "hydra.sweeper.n_trials=1"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    journal = _journal(tmp_path)
    with open(journal, "ab") as f:
        f.write(b'{"op_code": 4, "worker_id": "x", "trial_id": 9, "sta')  # a line cut by a kill
    again = cli([*STUDY, "hydra.sweeper.n_trials=2"], tmp_path)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert "cut short" in again.stderr
    study = optuna.load_study(study_name="lr", storage=study_storage.open_storage(str(journal)))
    states = [t.state.name for t in study.get_trials(deepcopy=False)]
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        running = [r[0] for r in db.execute("SELECT status FROM runs WHERE status = 'RUNNING'")]
    assert states.count("COMPLETE") == 2 and running == [], (states, running)
    reliability.record(request, f"exit 0, the torn line removed with one line; trials {states}; nothing RUNNING")


@pytest.mark.ledger("fault", "an Optuna study whose journal holds a line that is not an entry, launched again")
def test_a_journal_with_a_garbage_line_is_refused_in_one_line(cli, request, tmp_path):
    journal = _journal(tmp_path)
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b'{"op_code": 0, "worker_id": "w", "study_name": "lr", "directions": [1]}\nGARBAGE\n{}\n')
    before = journal.read_bytes()
    proc = cli([*STUDY, "hydra.sweeper.n_trials=1"], tmp_path, process=True)
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith("error: ") and "line 2 is not a journal entry" in last, proc.stderr
    statuses = []
    if (tmp_path / "mlflow.db").exists():
        with sqlite3.connect(tmp_path / "mlflow.db") as db:
            statuses = [r[0] for r in db.execute("SELECT status FROM runs")]
    assert journal.read_bytes() == before and "RUNNING" not in statuses, statuses
    reliability.record(request, f"exit 2: {last[:160]}; the journal untouched; runs {statuses}, none RUNNING")


@pytest.mark.slow
@pytest.mark.ledger("fault", "an Optuna study relaunched where an earlier launch left a killed trial")
def test_a_relaunched_study_sets_aside_its_predecessors_stale_trials(cli, request, tmp_path):
    args = [*STUDY, "hydra.sweep.dir=s"]
    first = cli([*args, "hydra.sweeper.n_trials=1"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    stale = tmp_path / "s" / "7"  # what a launch stopped mid-trial leaves: its job folder, its run killed
    (stale / ".hydra").mkdir(parents=True)
    (stale / ".hydra" / "overrides.yaml").write_text("- optim.lr=0.001\n")
    (stale / "result.json").write_text('{"status": "killed", "reason": "SIGINT"}')
    again = cli([*args, "hydra.sweeper.n_trials=2"], tmp_path)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert (tmp_path / "s" / "superseded" / "7" / "result.json").exists() and not stale.exists()
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        statuses = [r[0] for r in db.execute("SELECT status FROM runs")]
    assert "RUNNING" not in statuses and "FAILED" not in statuses, statuses
    reliability.record(request, f"exit 0; the stale folder moved to superseded/, runs {sorted(set(statuses))}")
