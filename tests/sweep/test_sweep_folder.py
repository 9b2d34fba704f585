"""What earlier launches left in a sweep's folder that is not what it should be (sweep/folder.py):
each file a relaunch reads or writes there that is a folder, a FIFO or a link where a file belongs, or
a record truncated, not JSON or of another shape, is named in one line and moved into quarantine/
beside it before the relaunch writes anything, never replaced without a word, never read blocking;
the relaunch then completes the sweep, each step logged once."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import reliability
from ablate.faults import ENV
from ablate.sweep import set_aside
from ablate.sweep.rows import read_rows
from support import nano_pair

# -- each file, each way it can be wrong ----------------------------------------------------------

SWEEP_RECORD = {"sweep_id": "s-1", "name": "s", "started": 0.0, "plan": []}
RESULT = {"status": "finished", "reason": ""}


def finished_folder(root: Path) -> Path:
    """A sweep folder as a finished launch leaves it: two jobs, each file a launch reads or writes."""
    sweep = root / "sweep"
    files = {
        "sweep.json": json.dumps(SWEEP_RECORD),
        "summary.json": json.dumps({"sweep_id": "s-1", "runs": [{"label": "a", "job": "0"}]}),
        "launches.jsonl": json.dumps({"sweep_id": "s-1"}) + "\n",
        "multirun.yaml": "hydra: {}\n",
        "jobs.json": json.dumps({"arrays": []}),
        ".launcher/0.log": "",
        ".launcher/0.return.json": "{}",
    }
    for job in ("0", "1"):
        files |= {
            f"{job}/result.json": json.dumps(RESULT),
            f"{job}/usage.json": json.dumps({"cpu_s": 1.5}),
            f"{job}/progress.json": json.dumps({"step": 3, "total": 3}),
            f"{job}/train.log": "step 3\n",
            **{f"{job}/.hydra/{name}.yaml": "{}\n" for name in ("config", "hydra", "overrides")},
        }
    files["0/branches/steps=10/result.json"] = json.dumps(RESULT)
    for name, text in files.items():
        (sweep / name).parent.mkdir(parents=True, exist_ok=True)
        (sweep / name).write_text(text)
    (sweep / "1" / "slurm.log").symlink_to("../.launcher/0.log")  # the SLURM launcher's link: not ours to move
    return sweep


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def folder(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("kept")


def link(path: Path) -> None:
    path.unlink()
    path.symlink_to("/etc/hostname")


def truncated(path: Path) -> None:
    os.truncate(path, len(path.read_bytes()) // 2)


DAMAGE = {
    "truncated": (truncated, "is not JSON"),
    "not JSON": (lambda p: p.write_bytes(b"\x00\xffnot json"), "is not JSON"),
    "a list": (lambda p: p.write_text("[1, 2]"), "is JSON of another shape"),
    "an object of other fields": (lambda p: p.write_text('{"step": "three"}'), "is JSON of another shape"),
    "a folder": (folder, "is a folder where a file belongs"),
    "a FIFO": (fifo, "is not a regular file where a file belongs"),
    "a link": (link, "is a link where a file belongs"),
}
RECORDS = ["sweep.json", "summary.json", "jobs.json", "0/result.json", "1/usage.json", "0/progress.json"]
RECORDS += ["0/branches/steps=10/result.json"]
OTHER_FILES = ["launches.jsonl", "multirun.yaml", "1/train.log", "0/.hydra/overrides.yaml", ".launcher/0.log"]
OTHER_FILES += [".launcher/0.return.json"]


def folder_as(make):
    def damage(path: Path) -> None:
        shutil.rmtree(path)
        make(path)

    return damage


FOLDER_DAMAGE = {
    "a file": (folder_as(lambda p: p.write_text("x")), "is a file where a folder belongs"),
    "a FIFO": (folder_as(os.mkfifo), "is not a regular file where a folder belongs"),
    "a link": (folder_as(lambda p: p.symlink_to(p.parent)), "is a link where a folder belongs"),
}
FOLDERS = ["1", ".launcher", "0/.hydra", "0/branches", "0/branches/steps=10"]


# (entry, damage, the words its line must hold): every file and every folder, each way it can be wrong
CASES = [(name, damage, says) for name in RECORDS for damage, says in DAMAGE.values()]
CASES += [(name, *DAMAGE[how]) for name in OTHER_FILES for how in ("a folder", "a FIFO", "a link")]
CASES += [(name, damage, says) for name in FOLDERS for damage, says in FOLDER_DAMAGE.values()]


@pytest.mark.parametrize(("name", "damage", "says"), CASES)
def test_what_is_not_what_it_should_be_in_a_sweep_folder_is_named_and_set_aside(tmp_path, capsys, name, damage, says):
    sweep = finished_folder(tmp_path)
    damage(sweep / name)
    (moved,) = set_aside(sweep, "train.log")
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"ablate: {sweep / name} {says}") and line.endswith(f"; moved aside to {moved}"), line
    assert moved.parent == (sweep / name).parent / "quarantine" and moved.name.startswith(Path(name).name + ".")
    assert not os.path.lexists(sweep / name)
    assert set_aside(sweep, "train.log") == []  # the rest is what it should be


def test_a_folder_a_finished_launch_left_is_left_as_it_is(tmp_path, capsys):
    sweep = finished_folder(tmp_path)
    before = sorted(str(p) for p in sweep.rglob("*"))
    assert set_aside(sweep, "train.log") == []
    assert capsys.readouterr().err == ""
    assert sorted(str(p) for p in sweep.rglob("*")) == before
    assert set_aside(tmp_path / "none", "train.log") == []  # a first launch: no folder yet


def test_a_fifo_where_a_jobs_records_belong_is_a_missing_row_not_a_read_that_waits(tmp_path):
    job = finished_folder(tmp_path) / "0"
    fifo(job / "result.json")
    fifo(job / "usage.json")
    (row,) = read_rows(job, "a", {})
    assert row.status == "missing" and row.job_cpu_s is None


# -- the relaunch, end to end -----------------------------------------------------------------------

STEPS, LOG_EVERY = 16, 2
SWEEP = [*nano_pair(STEPS, LOG_EVERY, eval_every=8, checkpoint_every=4), "hydra.sweep.dir=multirun/s"]


@pytest.fixture(scope="module")
def killed_sweep(cli, tmp_path_factory) -> Path:
    """A working directory whose sweep had both jobs killed (SIGKILL at their second checkpoint's
    write): its folder holds every file a launch leaves, its runs are KILLED, resumable."""
    cwd = tmp_path_factory.mktemp("killed")
    killed = cli(SWEEP, cwd, env={ENV: "checkpoint.write@2"}, timeout=900)
    assert killed.returncode == 1 and "killed by SIGKILL" in killed.stderr, killed.stderr[-3000:]
    return cwd


def copy_of(cwd: Path, to: Path) -> Path:
    """The working directory copied, its store's artifact paths moved with it."""
    shutil.copytree(cwd, to, symlinks=True)
    with sqlite3.connect(to / "mlflow.db") as con:
        con.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (str(cwd), str(to)))
        con.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (str(cwd), str(to)))
    return to


def garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xffnot json")


def a_list(path: Path) -> None:
    path.write_text("[1, 2, 3]")


def make(path: Path) -> Path:
    """An empty file at `path` (for a damage that replaces a file the killed launch did not leave)."""
    path.touch()
    return path


# A case -> the files it damages and how, each in the folder of the killed sweep.
RELAUNCH_CASES = {
    "sweep.json truncated": {"sweep.json": truncated},
    "sweep.json not JSON": {"sweep.json": garbage},
    "sweep.json a JSON list": {"sweep.json": a_list},
    "sweep.json a folder": {"sweep.json": folder},
    "sweep.json a FIFO": {"sweep.json": fifo},
    "every other file the relaunch reads or writes, each wrong in its own way": {
        "summary.json": lambda p: p.write_text('{"runs": 3}'),
        "0/result.json": a_list,
        "1/result.json": truncated,
        "0/progress.json": folder,
        "1/usage.json": lambda p: fifo(make(p)),
        "launches.jsonl": fifo,
        "multirun.yaml": folder,
        "1/train.log": fifo,
        "0/.hydra/overrides.yaml": fifo,
        ".launcher/0.log": fifo,
        "jobs.json": lambda p: make(p).write_text('{"arrays": 3}'),
    },
}


def kind(path: Path) -> str:
    return "FIFO" if path.is_fifo() else "folder" if path.is_dir() else "file"


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.ledger("fault", "a killed sweep's folder with {case}, then the same command")
@pytest.mark.parametrize("case", list(RELAUNCH_CASES))
def test_a_relaunch_sets_aside_what_is_wrong_in_its_folder_and_completes_the_sweep(
    cli, request, tmp_path, killed_sweep, case
):
    cwd = copy_of(killed_sweep, tmp_path / "work")
    sweep = cwd / "multirun" / "s"
    damaged = RELAUNCH_CASES[case]
    for name, damage in damaged.items():
        damage(sweep / name)
    kinds = {name: kind(sweep / name) for name in damaged}
    content = {name: (sweep / name).read_bytes() for name, k in kinds.items() if k == "file"}
    again = cli(SWEEP, cwd, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    said = [ln for ln in again.stderr.splitlines() if "moved aside to" in ln]
    assert len(said) == len(damaged), said
    for name in damaged:
        (line,) = [ln for ln in said if ln.startswith(f"ablate: multirun/s/{name} is ")]
        moved = Path(line.rsplit("moved aside to ", 1)[1])
        assert moved.parent == Path("multirun/s", name).parent / "quarantine", line
        assert kind(cwd / moved) == kinds[name]  # the thing itself, kept as it was
        if name in content:
            assert (cwd / moved).read_bytes() == content[name]
    assert json.loads((sweep / "sweep.json").read_text())["sweep_id"]  # this launch's record, whole
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    trained = [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(r.data.params["train.seed"] for r in trained) == ["0", "1"]  # resumed, not run again
    assert {r.info.status for r in trained} == {"FINISHED"}
    for r in trained:
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "train/loss")]
        assert steps == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY)), steps
    assert "RUNNING" not in {r.info.status for r in runs}
    names = ", ".join(f"`{n}`" for n in damaged)
    reliability.record(
        request,
        f"exit 0, no traceback; one line for each of {names} naming it and what it is, each moved into "
        "quarantine/ beside it as it was; both killed runs FINISHED in their first MLflow runs, "
        f"{STEPS // LOG_EVERY} of {STEPS // LOG_EVERY} train/loss steps each, each once, none RUNNING",
    )
