"""A sweep folder's own files, checked by a launch into it before it writes there (`set_aside`).

A relaunch into a sweep's folder reads what the earlier launches left there (each job's result.json,
usage.json and progress.json, the summary's record, the SLURM launcher's jobs.json) and writes over or
appends to the rest (sweep.json, launches.jsonl, Hydra's multirun.yaml, each job's .hydra/ files and
log, the process launcher's logs in .launcher/). One of them that is not what it should be would hang
the launch (a FIFO: an open, a read or an append waits for ever for its other end), fail it once its
runs have trained (a folder where a file belongs), lead a write out of the folder (a link), crash a
reader (a record of another shape) or be replaced without a word (a record truncated or not JSON).
Each is moved into quarantine/ beside it with one line naming it and what it is, as a checkpoint or a
lock file that is not what it should be is (files.quarantine), before this launch writes anything
there; the launch then goes on as it would without it. The summary's outputs (summary.md, points.csv,
the plots) are the command's output: one that is not a file is refused before the launch
(cli/common.check_sweep).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ablate.files import not_a_file, quarantine, read_regular
from ablate.run import BRANCHES_DIR, RESULT_FILE
from ablate.sweep.context import LAUNCHES_FILE, PROGRESS_FILE, SWEEP_FILE, USAGE_FILE
from ablate.sweep.launch.process import RETURN_SUFFIX, WORK_DIR
from ablate.sweep.launch.slurm import JOBS_FILE
from ablate.sweep.summary import RECORD

HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")  # Hydra writes them per job
SWEEP_FILES = (LAUNCHES_FILE, "multirun.yaml")


def _sweep(doc: dict) -> bool:
    return isinstance(doc.get("sweep_id"), str) and isinstance(doc.get("plan", []), list)


def _summary(doc: dict) -> bool:
    runs = doc.get("runs")
    return isinstance(runs, list) and all(isinstance(r, dict) and {"label", "job"} <= r.keys() for r in runs)


def _keyed(key: str, *types: type) -> Callable[[dict], bool]:
    return lambda doc: isinstance(doc.get(key), types)


def _progress(doc: dict) -> bool:
    return all(isinstance(doc.get(key, 0), (int, float)) for key in ("step", "total", "start"))


# A record -> (what it holds, its test on the JSON object read back): what its readers take from it.
RECORDS: dict[str, tuple[str, Callable[[dict], bool]]] = {
    SWEEP_FILE: ("the sweep's record (sweep_id, plan)", _sweep),
    RECORD: ("the summary's record (runs, each with label and job)", _summary),
    JOBS_FILE: ("the SLURM launcher's record (arrays)", _keyed("arrays", list)),
}
JOB_RECORDS: dict[str, tuple[str, Callable[[dict], bool]]] = {
    RESULT_FILE: ("a run's result (status)", _keyed("status", str)),
    USAGE_FILE: ("a job's usage (cpu_s)", _keyed("cpu_s", int, float)),
    PROGRESS_FILE: ("a run's progress (step, total)", _progress),
}


FOLDER = "folder"  # a slot where a folder belongs (a job's, its .hydra/, the launcher's)


def set_aside(sweep_dir: Path, job_log: str) -> list[Path]:
    """Each file (or folder) of the sweep folder that is not what it should be (module doc) moved
    into quarantine/ beside it, with one line on stderr; where each went. `job_log`: the name of
    each job's log (Hydra's JOB_NAME.log)."""
    moved = []
    for path, expected in _slots(Path(sweep_dir), job_log):
        what = _wrong(path, expected)
        if what:
            target = quarantine(path)
            print(f"ablate: {path} is {what}; moved aside to {target}", file=sys.stderr)
            moved.append(target)
    return moved


def _slots(sweep_dir: Path, job_log: str) -> Iterator[tuple[Path, object]]:
    """(path, what belongs there) for each entry of the folder a launch reads or writes: FOLDER, a
    record's description and test, or None for a file of any bytes (a log, a file Hydra writes
    over). Lazy: a folder is looked into once its own slot has been checked (and set aside)."""
    if not_a_file(sweep_dir) != "a folder":
        return
    for name, record in RECORDS.items():
        yield sweep_dir / name, record
    for name in SWEEP_FILES:
        yield sweep_dir / name, None
    work = sweep_dir / WORK_DIR
    yield work, FOLDER
    if work.is_dir():
        yield from ((p, None) for p in sorted(work.iterdir()) if p.name.endswith((".log", RETURN_SUFFIX)))
    for job in sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        yield job, FOLDER
        if not job.is_dir():
            continue
        for name, record in JOB_RECORDS.items():
            yield job / name, record
        yield job / ".hydra", FOLDER
        for name in (*HYDRA_FILES, job_log):
            yield job / name, None
        branches = job / BRANCHES_DIR
        yield branches, FOLDER
        if branches.is_dir():
            for branch in sorted(branches.iterdir()):
                yield branch, FOLDER
                yield branch / RESULT_FILE, JOB_RECORDS[RESULT_FILE]


def _wrong(path: Path, expected) -> str | None:
    """What is wrong with what is at `path`, in words; None when it is what belongs there or absent."""
    kind = not_a_file(path)
    if expected == FOLDER:
        if kind is None and os.path.lexists(path):
            return "a file where a folder belongs"
        return None if kind in (None, "a folder") else f"{kind} where a folder belongs"
    if kind:
        return f"{kind} where a file belongs"
    if expected is None or not path.exists():
        return None
    holds, test = expected
    try:
        doc = json.loads(read_regular(path))
    except ValueError:
        return f"not JSON (truncated, or not this tool's) where {holds} belongs"
    except OSError:
        return None  # unreadable (a permission): its reader says so
    if not isinstance(doc, dict) or not test(doc):
        return f"JSON of another shape where {holds} belongs"
    return None
