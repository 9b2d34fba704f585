"""Security and bounded readers of the tracking side, each case a ledger row through the user's
command line: a password in tracking.uri never recorded or printed, spool records checked against
their run, two syncs at once, stores that are not MLflow's (another application's, cut short, busy),
a link where a run's config belongs, a YAML-bomb preset."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import reliability
from support import SMALL_DATA, free_port

pytestmark = [pytest.mark.reliability]

RUN = ["model=nano", "train.steps=2", "train.progress=false", *SMALL_DATA]
SECRET = "s3cr3t-pw"


def _ablate(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 600):
    """`python -m ablate ARGS` as the user runs it: a fresh interpreter, its tracking agent beside it."""
    return subprocess.run(
        [sys.executable, "-m", "ablate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _files_with(folder: Path, secret: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.ledger("security", "a run with tracking.uri=http://alice:PASSWORD@server (a live MLflow server)")
def test_a_password_in_the_tracking_uri_is_redacted_in_mlflow_and_result_json(request, tmp_path, mlflow_server):
    server = mlflow_server()
    uri = server.uri.replace("http://", f"http://alice:{SECRET}@")
    proc = _ablate([*RUN, f"tracking.uri={uri}", "hydra.run.dir=run"], tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    assert SECRET not in said and "alice:***@" in said, said[-3000:]  # MLflow's "View run at" line, redacted
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert SECRET not in json.dumps(result)
    assert _files_with(tmp_path, SECRET) == []  # result.json, .hydra/*.yaml, the log, the state dir
    client = MlflowClient(tracking_uri=server.uri)
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id) or [None]
    for exp in client.search_experiments():
        for r in client.search_runs([exp.experiment_id]):
            run = r
    assert run.data.params["tracking.uri"] == server.uri.replace("http://", "http://alice:***@")
    got = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "dl")))
    assert _files_with(got, SECRET) == [] and any(p.name == "config.yaml" for p in got.rglob("*"))
    reliability.record(
        request,
        f"exit 0; the param tracking.uri is {run.data.params['tracking.uri']}; the config artifact, result.json, "
        "every file of the run and every line printed (MLflow's View run line too) hold no password",
    )


@pytest.mark.ledger("security", "a run with tracking.uri=http://alice:PASSWORD@a port nobody listens on (an outage)")
def test_a_password_is_redacted_in_what_an_outage_records(request, tmp_path):
    uri = f"http://alice:{SECRET}@127.0.0.1:9"
    proc = _ablate([*RUN, f"tracking.uri={uri}", "hydra.run.dir=run"], tmp_path)
    said = proc.stdout + proc.stderr
    assert SECRET not in said and "Traceback" not in said, said[-3000:]
    assert _files_with(tmp_path, SECRET) == []  # result.json, .hydra/, the log
    reason = json.loads((tmp_path / "run" / "result.json").read_text())["reason"]
    assert "alice:***@127.0.0.1:9" in reason  # MLflow's error names the URL it called
    reliability.record(request, f"exit {proc.returncode}; no file and no line holds the password: {reason[:110]}")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished run (folder `run`, store mlflow.db) that planted spool records claim to be."""
    cwd = tmp_path_factory.mktemp("trained")
    proc = _ablate([*RUN, "hydra.run.dir=run"], cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return cwd


def _plant(cwd: Path, **record) -> Path:
    spool = cwd / ".ablate" / "state" / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    base = {"uri": f"sqlite:///{cwd / 'mlflow.db'}", "run_id": "0" * 32, "status": "FINISHED", "reason": ""}
    path = spool / "planted.json"
    path.write_text(json.dumps({**base, "metrics": [], "last_logged_step": -1, **record}))
    return path


# What a planted spool record claims -> the words its one line must hold.
PLANTED = {
    "an artifact anywhere, no run folder": (lambda c: {"artifacts": ["/etc/hostname"]}, "not its run's folder"),
    "a run folder that is no run's": (
        lambda c: {"artifacts": ["/etc/hostname"], "run_dir": "/etc"},
        "is not a run's or a sweep's folder",
    ),
    "an artifact outside the run's folder": (
        lambda c: {"artifacts": ["/etc/hostname"], "run_dir": str(c / "run")},
        "is outside its run's folder",
    ),
    "a link in the run's folder that leads out": (
        lambda c: (
            (c / "run" / "leak").unlink(missing_ok=True),
            (c / "run" / "leak").symlink_to("/etc/hostname"),
            {"artifacts": [str(c / "run" / "leak")], "run_dir": str(c / "run")},
        )[-1],
        "is outside its run's folder",
    ),
    "another store than the run's": (
        lambda c: {"uri": f"sqlite:///{c / 'other.db'}", "artifacts": [], "run_dir": str(c / "run")},
        "is not the one its run used",
    ),
}


@pytest.mark.ledger("security", "a spool record planted with {name}, then `ablate sync`")
@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_spool_record_is_refused_by_sync(request, trained, name):
    make, words = PLANTED[name]
    _plant(trained, **make(trained))
    before = (trained / "mlflow.db").stat().st_mtime_ns
    proc = _ablate(["sync"], trained)
    lines = _lines(proc.stderr)
    assert proc.returncode == 1 and len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, (
        proc.stderr
    )
    assert (trained / "mlflow.db").stat().st_mtime_ns == before and not (trained / "other.db").exists()
    reliability.record(request, f"exit 1: {lines[0][:170]}; nothing sent to any store")


@pytest.mark.ledger("fault", "two `ablate sync` at once over one spool folder")
def test_two_syncs_at_once_are_not_an_error(request, tmp_path):
    spool = tmp_path / ".ablate" / "state" / "spool"
    spool.mkdir(parents=True)
    for i in range(6):  # records a planted store accepts: no artifacts, runs it does not have
        (spool / f"r{i}.json").write_text(
            json.dumps({"uri": f"sqlite:///{tmp_path / 'gone.db'}", "run_id": f"{i:032d}", "status": "FINISHED",
                        "reason": "", "metrics": [], "artifacts": []})
        )  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda _: _ablate(["sync"], tmp_path), range(2)))
    said = "".join(p.stderr for p in procs)
    assert "FileNotFoundError" not in said and "Traceback" not in said, said
    assert all(len(_lines(p.stderr)) >= 1 for p in procs)
    reliability.record(
        request, f"exits {[p.returncode for p in procs]}; no FileNotFoundError, each file tried by one sync"
    )


def _other_app_db(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("INSERT INTO notes (body) VALUES ('mine')")


def _cut_store(path: Path) -> None:
    from ablate.tracking.store import ensure_experiment

    ensure_experiment(f"sqlite:///{path}", "x")
    os.truncate(path, path.stat().st_size // 2)


# (what is at tracking.uri's file, the command) -> the words its one line must hold.
STORES = {
    "another application's SQLite database, then a run": (_other_app_db, RUN, "another application's SQLite database"),
    "an MLflow store cut to half its size, then `ablate fit experiment=`": (
        _cut_store,
        ["fit", "experiment="],
        "error: ",
    ),
    "an MLflow store cut to half its size, then a run": (_cut_store, RUN, "mlflow.db"),
}


@pytest.mark.ledger("fault", "tracking.uri naming {name}")
@pytest.mark.parametrize("name", list(STORES))
def test_a_store_that_is_not_a_whole_mlflow_store_is_refused_untouched(request, tmp_path, name):
    make, args, words = STORES[name]
    db = tmp_path / "mlflow.db"
    make(db)
    before = db.read_bytes()
    proc = _ablate([*args, f"tracking.uri=sqlite:///{db}"], tmp_path)
    lines = _lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr[-2000:]
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
    reliability.record(request, f"exit 2: {lines[0][:170]}; the file untouched, nothing created")


HOLD_LOCK = (
    "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
    "db.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(float(sys.argv[2]))"
)


@pytest.mark.ledger("fault", "a run on an sqlite store another process holds write-locked for {hold} s")
@pytest.mark.parametrize("hold", [3, 120])
def test_a_busy_store_is_a_bounded_wait_then_one_line(request, tmp_path, hold):
    from ablate.tracking.store import ensure_experiment

    db = tmp_path / "mlflow.db"
    ensure_experiment(f"sqlite:///{db}", "Default")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db), str(hold)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    started = time.time()
    proc = _ablate(
        [*RUN, f"tracking.uri=sqlite:///{db}", "hydra.run.dir=run"], tmp_path, env={"ABLATE_STORE_WAIT_S": "10"}
    )
    took = time.time() - started
    holder.kill()
    holder.wait()
    if hold < 10:  # the wait outlasts the lock: the run goes on
        assert proc.returncode == 0, proc.stderr[-2000:]
        found = f"exit 0 after {took:.0f} s: the lock was let go within the 10 s wait"
    else:
        lines = _lines(proc.stderr)
        assert proc.returncode == 2 and len(lines) == 1 and "write-locked" in lines[0], proc.stderr[-2000:]
        assert not (tmp_path / "run").exists() and took < 100
        found = f"exit 2 after {took:.0f} s: {lines[0][:150]}; no run folder"
    reliability.record(request, found)


@pytest.mark.ledger("security", "a link at a run folder's .hydra/config.yaml to a file outside, then the run")
def test_a_link_where_a_runs_config_belongs_is_left_untouched(request, tmp_path):
    victim = tmp_path / "precious.yaml"
    victim.write_text("mine: true\n")
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    (tmp_path / "run" / ".hydra" / "config.yaml").symlink_to(victim)
    proc = _ablate([*RUN, "hydra.run.dir=run"], tmp_path)
    lines = _lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and "is a link where a file belongs" in lines[0], proc.stderr
    assert victim.read_text() == "mine: true\n" and (tmp_path / "run" / ".hydra" / "config.yaml").is_symlink()
    reliability.record(request, f"exit 2: {lines[0][:160]}; the link and the file it leads to untouched")


@pytest.mark.ledger("security", "a YAML-bomb preset (9 levels of 9 aliases) in --config-dir, then a run with it")
def test_a_yaml_bomb_preset_is_refused_before_composition(request, tmp_path):
    lines = ["# @package _global_", "a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "bomb.yaml").write_text("\n".join([*lines, "boom: *i"]) + "\n")
    started = time.time()
    proc = _ablate(["--config-dir", str(tmp_path / "conf"), "model=bomb"], tmp_path, timeout=120)
    said = _lines(proc.stderr)
    assert proc.returncode == 2 and len(said) == 1 and "YAML bomb" in said[0], proc.stderr[-2000:]
    reliability.record(request, f"exit 2 in {time.time() - started:.0f} s: {said[0][-120:]}")


@pytest.fixture
def plain_http_server(tmp_path):
    """A web server that is not MLflow's (Python's http.server) on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 30
    import socket

    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


@pytest.mark.ledger("fault", "tracking.uri naming a plain web server that is not MLflow's, then {what}")
@pytest.mark.parametrize("what", ["a run", "a sweep"])
def test_a_server_that_is_not_mlflow_is_one_line(request, tmp_path, plain_http_server, what):
    args = RUN if what == "a run" else ["--multirun", *[a for a in RUN if "steps" not in a], "train.steps=2,3"]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = _ablate([*args, f"tracking.uri={plain_http_server}"], cwd)
    lines = [ln for ln in _lines(proc.stderr) if not ln.startswith(("nanobind", " - ", "See https://nanobind"))]
    assert proc.returncode in (1, 2) and len(lines) == 1, proc.stderr[-3000:]
    assert "not as MLflow's" in lines[0] or "not as an MLflow tracking server" in lines[0], lines
    assert "<html" not in proc.stderr.lower() and "Traceback" not in proc.stderr
    reliability.record(request, f"exit {proc.returncode}: {lines[0][:170]}")
