"""Reliability suite: bad input across commands, kill -9 at chosen and random moments, out of
memory, a full disk, and concurrent load on sqlite and on a PostgreSQL-backed MLflow server.
Every case lands in docs/RELIABILITY.md."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import reliability
from conftest import SMALL_DATA, cli, run_statuses

pytestmark = [pytest.mark.reliability]

TRAIN_BAD = [
    (["model=doesnotexist"], "model=doesnotexist"),
    (["model.n_embd=100", "model.n_head=3"], "model.n_embd=100"),
    (["model.n_layer=0"], "model.n_layer=0"),
    (["model.n_layer=two"], "model.n_layer='two'"),
    (["model.attention=flash"], "model.attention='flash'"),
    (["optim.lr=-0.001"], "optim.lr=-0.001"),
    (["optim.weight_decay=-1"], "optim.weight_decay=-1"),
    (["train.steps=0"], "train.steps=0"),
    (["train.steps=-5"], "train.steps=-5"),
    (["train.tokens=1e6", "train.steps=100"], "exactly one training budget"),
    (["train.steps=null"], "exactly one training budget"),
    (["train.batch_size=0"], "train.batch_size=0"),
    (["model.block_size=300000"], "model.block_size=300000"),
    (["hardware=tpu"], "hardware=tpu"),
    (["hardware=h100"], "hardware=h100"),
    (["precision=fp8"], "precision=fp8"),
    (["precision=int4"], "precision=int4"),
    (["model.widht=3"], "unknown key model.widht"),
    (["+model.widht=3"], "unknown key model.widht"),
    (["data=text", "data.paths=[/nonexistent/corpus]"], "/nonexistent/corpus"),
    (["data=text", "data.paths=[EMPTY]"], "empty"),
    (["data=tokens", "data.train_bin=/nonexistent.bin", "data.val_bin=/nonexistent.bin"], "does not exist"),
    (["data=tokens", "data.train_bin=SHORT", "data.val_bin=SHORT"], "longer than"),
    (["model.vocab_size=10"], "model.vocab_size=10"),
    (["tracking.backend=wandb"], "tracking.backend='wandb'"),
    (["train.steps=="], "Error parsing override"),
    (["+sweep=precision", "model=nope"], "model=nope"),
    (["+sweep=nope"], "sweep=nope"),
    (["--multirun", "precision=fp32,fp9"], "precision=fp9"),
]


def _materialize(args: list[str], tmp: Path) -> list[str]:
    """Placeholders for data files the bad-input cases need: an empty file, a too-short token file."""
    empty = tmp / "empty.txt"
    empty.write_bytes(b"")
    short = tmp / "short.bin"
    short.write_bytes(bytes(40))  # 20 uint16 tokens: shorter than any context
    return [a.replace("EMPTY", str(empty)).replace("SHORT", str(short)) for a in args]


@pytest.mark.parametrize("args, words", TRAIN_BAD, ids=[" ".join(a) for a, _ in TRAIN_BAD])
def test_bad_input(request, tmp_path, args, words):
    inputs, cwd = tmp_path / "inputs", tmp_path / "cwd"
    inputs.mkdir(), cwd.mkdir()
    full = _materialize(args, inputs)
    reliability.record(request, "bad_input", f"`python -m ablate {' '.join(args)}`", "")
    proc = cli([*full, "train.progress=false"], cwd)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    reliability.record(request, "bad_input", f"`python -m ablate {' '.join(args)}`",
                       f"exit {proc.returncode}: {lines[-1] if lines else '(nothing)'}")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr
    assert "RUNNING" not in run_statuses(cwd / "mlflow.db")
    # the only thing a rejected command may leave is its own Hydra run dir
    assert {p.name for p in cwd.iterdir()} <= {"outputs", "multirun"}
    assert not (cwd / "mlflow.db").exists()


# The fit and plan commands: the same rules. CSV placeholders are written by _points_files.
CSV_OK = "params,tokens,loss\n" + "".join(f"{n:g},{d:g},{2 + 1e3 / n**0.3 + 1e3 / d**0.3:.4f}\n"
                                          for n in (1e6, 4e6, 1.6e7) for d in (1e8, 4e8))
OTHER_BAD = [
    ("ablate.fit", [], "neither given"),
    ("ablate.fit", ["experiment=x", "points=OK"], "both given"),
    ("ablate.fit", ["points=/nonexistent/points.csv"], "no such file"),
    ("ablate.fit", ["points=NOCOLUMN"], "missing column(s) tokens"),
    ("ablate.fit", ["points=NEGATIVE"], "is -1000000.0"),
    ("ablate.fit", ["points=ONESIZE"], "all points at one N"),
    ("ablate.fit", ["points=OK", "n_boot=-1"], "n_boot=-1"),
    ("ablate.fit", ["points=OK", "nboot=10"], "unknown key nboot"),
    ("ablate.fit", ["experiment=nonexistent", "tracking.uri=sqlite:///STORE"], "nonexistent"),
    ("ablate.plan", ["model=gpt_1p5b", "budget.tokens=-5"], "budget.tokens=-5.0 must be positive"),
    ("ablate.plan", ["model=gpt_1p5b", "budget.flops=1e21", "budget.dollars=100"], "conflict"),
    ("ablate.plan", ["model=gpt_1p5b", "hardware=tpu", "budget.tokens=1e11"], "hardware=tpu"),
    ("ablate.plan", ["model=gpt_1p5b", "precision=fp8", "hardware=a100", "budget.tokens=1e11"], "8.9"),
    ("ablate.plan", ["model=gpt_1p5b", "budget.tokens=1e11", "gpus=0"], "gpus=0"),
    ("ablate.plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=/nonexistent/fit.json"], "/nonexistent/fit.json"),
]


def _points_files(args: list[str], tmp: Path) -> list[str]:
    files = {
        "OK": CSV_OK,
        "NOCOLUMN": "params,loss\n1e6,3.0\n",
        "NEGATIVE": CSV_OK.replace("\n1e+06,", "\n-1e+06,", 1),
        "ONESIZE": "params,tokens,loss\n" + "".join(f"1e6,{d:g},{2 + 1e3 / d**0.3:.4f}\n" for d in 2.0 ** np.arange(20, 28)),
    }
    out = []
    for a in args:
        key, _, value = a.partition("=")
        if value in files:
            (tmp / f"{value.lower()}.csv").write_text(files[value])
            a = f"{key}={tmp / (value.lower() + '.csv')}"
        out.append(a.replace("STORE", str(tmp / "store.db")))
    return out


@pytest.mark.parametrize("module, args, words", OTHER_BAD, ids=[f"{m} {' '.join(a)}" for m, a, _ in OTHER_BAD])
def test_bad_input_to_fit_and_plan(request, tmp_path, module, args, words):
    inputs, cwd = tmp_path / "inputs", tmp_path / "cwd"
    inputs.mkdir(), cwd.mkdir()
    if module == "ablate.fit" and any("STORE" in a for a in args):
        MlflowClient(f"sqlite:///{inputs / 'store.db'}").create_experiment("scaling")  # a store, without that experiment
    case = f"`python -m {module} {' '.join(args)}`"
    reliability.record(request, "bad_input", case, "")
    proc = cli(_points_files(args, inputs), cwd, module=module)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    reliability.record(request, "bad_input", case, f"exit {proc.returncode}: {lines[-1] if lines else '(nothing)'}")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr
    assert not list(cwd.iterdir())  # no export, no plan, no store


# -- kill -9 ------------------------------------------------------------------------------------

RUN = ["model=nano", "train.steps=120", "train.log_interval=2", "train.eval_interval=20",
       "train.checkpoint_interval=25", "train.flush_interval_s=0.3", "train.progress=false", *SMALL_DATA]


def history(cwd: Path) -> tuple[str, dict]:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    keys = ("train/loss", "val/loss", "flops", "tokens", "lr", "tokens_per_s")
    return run.info.status, {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)) for k in keys}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("reference")
    proc = cli(RUN, cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return history(cwd)[1]


def _compare(request, case: str, cwd: Path, reference: dict) -> None:
    status, found = history(cwd)
    expected = sum(len(v) for v in reference.values())
    got = sum(len(v) for v in found.values())
    reliability.record(request, "points", case, f"{got} of {expected} points; status {status}")
    assert status == "FINISHED"
    for key, ref in reference.items():
        steps = [s for s, _ in found[key]]
        assert steps == sorted(set(steps)), f"duplicate steps in {key}"
        assert steps == [s for s, _ in ref], f"missing steps in {key}"
        if key not in ("tokens_per_s",):  # throughput depends on the machine, not the seed
            for (_, a), (_, b) in zip(found[key], ref):
                assert a == pytest.approx(b, rel=1e-5, abs=1e-6), key


def _kill_at(cwd: Path, env: dict | None = None, after_s: float | None = None) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "ablate", *RUN], cwd=cwd, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if after_s is not None:
        deadline = time.time() + 600
        while not (cwd / "mlflow.db").exists() or not list((cwd / ".ablate" / "state").glob("*")):
            assert proc.poll() is None and time.time() < deadline, "run ended before training started"
            time.sleep(0.05)
        time.sleep(after_s)
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(600)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["checkpoint.write@2", "tracking.flush@3"])
def test_kill_at_a_failpoint_then_resume(request, tmp_path, reference, point):
    case = f"SIGKILL at failpoint `{point}`, then relaunch"
    reliability.record(request, "fault", case, "")
    rc = _kill_at(tmp_path, {"ABLATE_FAILPOINTS": point})
    assert rc == -signal.SIGKILL
    import torch

    for ckpt in (tmp_path / ".ablate" / "state").glob("*/checkpoint.pt"):
        torch.load(ckpt, weights_only=True)  # whatever checkpoint exists is a complete one
    assert cli(RUN, tmp_path).returncode == 0
    _compare(request, case, tmp_path, reference)
    reliability.record(request, "fault", case, "killed, resumed from the last complete checkpoint, history complete")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_at_a_random_moment_then_resume(request, tmp_path, reference, seed):
    delay = random.Random(seed).uniform(0.5, 4.0)
    case = f"SIGKILL {delay:.2f} s into training (seed {seed}), then relaunch"
    reliability.record(request, "fault", case, "")
    rc = _kill_at(tmp_path, after_s=delay)
    relaunch = cli(RUN, tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    _compare(request, case, tmp_path, reference)
    reliability.record(request, "fault", case, f"exit {rc} then resumed; history equal to an uninterrupted run")


# -- out of memory, full disk -------------------------------------------------------------------


@pytest.mark.slow
def test_out_of_memory_is_a_failed_run_and_the_sweep_goes_on(request, workdir):
    case = "gpt2_124m on the CPU under a 4 GiB address-space cap, in a sweep with nano"
    reliability.record(request, "fault", case, "")
    cap = "import resource,runpy,sys; resource.setrlimit(resource.RLIMIT_AS,(4<<30,4<<30)); " \
          "sys.argv=['ablate']+sys.argv[1:]; runpy.run_module('ablate', run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", cap, "--multirun", "model=gpt2_124m,nano", "train.steps=4",
                           "train.batch_size=2", "train.eval_interval=2", "train.progress=false", *SMALL_DATA],
                          cwd=workdir, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    runs = {r.data.params.get("model.name"): r for r in client.search_runs([client.get_experiment_by_name("ablate").experiment_id])}
    assert runs["nano"].info.status == "FINISHED"
    assert runs["gpt2_124m"].info.status == "FAILED"
    reason = runs["gpt2_124m"].data.tags["ablate.status_reason"]
    assert "memory" in reason.lower() or "alloc" in reason.lower()
    reliability.record(request, "fault", case, f"FAILED with reason `{reason[:90]}`; nano FINISHED; exit 1")


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_full_disk_for_checkpoints_is_a_failed_run(request, workdir, tiny_disk):
    case = "checkpoints on a full 128 KiB filesystem"
    reliability.record(request, "fault", case, "")
    proc = cli([*RUN[:-len(SMALL_DATA)], *SMALL_DATA, f"state_dir={tiny_disk}"], workdir)
    assert proc.returncode == 1
    (status,) = run_statuses(workdir / "mlflow.db")
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    reason = run.data.tags["ablate.status_reason"]
    assert status == "FAILED" and "No space left" in reason
    leftovers = [p.name for p in tiny_disk.rglob("*") if p.is_file()]
    assert not any(name.endswith(".tmp") for name in leftovers), leftovers  # no torn temporary files
    reliability.record(request, "fault", case, f"FAILED with reason `{reason[:80]}`; no temporary file left")


# -- load ---------------------------------------------------------------------------------------

LOAD_RUN = ["model=nano", "train.steps=20", "train.log_interval=1", "train.eval_interval=10",
            "train.flush_interval_s=0.5", "train.progress=false", *SMALL_DATA]
N_CONCURRENT = 16


def _concurrent(cwd: Path, uri: str) -> list[subprocess.CompletedProcess]:
    from ablate.tracking import ensure_experiment

    ensure_experiment(uri, "load")  # the store and experiment exist before the fan-out
    procs = [subprocess.Popen([sys.executable, "-m", "ablate", *LOAD_RUN, f"train.seed={i}", f"tracking.uri={uri}",
                               "tracking.experiment=load", f"hydra.run.dir=outputs/{i}"],
                              cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
             for i in range(N_CONCURRENT)]
    return [(p.wait(900), p.stderr.read()) for p in procs]


def _check_load(request, case: str, uri: str, outcomes) -> None:
    reliability.record(request, "points", case, "")
    assert all(rc == 0 for rc, _ in outcomes), [err[-500:] for rc, err in outcomes if rc]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("load")
    runs = client.search_runs([exp.experiment_id])
    others = [e for e in client.search_experiments() if e.experiment_id != exp.experiment_id]
    stray = sum(len(client.search_runs([e.experiment_id])) for e in others)
    expected = N_CONCURRENT * 20 * 6  # six metrics at each of 20 steps per run
    found = sum(len(client.get_metric_history(r.info.run_id, k)) for r in runs
                for k in ("train/loss", "lr", "tokens", "flops", "tokens_per_s", "mfu"))
    reliability.record(request, "points", case, f"{len(runs)} runs, {found} of {expected} points, {stray} runs in other experiments")
    assert len(runs) == N_CONCURRENT and all(r.info.status == "FINISHED" for r in runs)
    assert stray == 0
    assert found == expected


@pytest.mark.slow
def test_16_concurrent_runs_on_sqlite(request, workdir):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    _check_load(request, f"{N_CONCURRENT} concurrent runs, sqlite store", uri, _concurrent(workdir, uri))


@pytest.mark.slow
def test_16_concurrent_runs_on_a_postgres_backed_server(request, workdir, postgres):
    from test_tracking_outage import Server, free_port

    server = Server(None, free_port(), store=postgres)
    server.start()
    try:
        _check_load(request, f"{N_CONCURRENT} concurrent runs, `mlflow server` on PostgreSQL",
                    server.uri, _concurrent(workdir, server.uri))
    finally:
        server.stop()


# -- security -----------------------------------------------------------------------------------


def test_checkpoints_load_with_weights_only(request, tmp_path):
    from ablate import checkpoint

    reliability.record(request, "security", "a checkpoint holding a pickled object is refused", "")

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    import torch

    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with open(tmp_path / "checkpoint.pt", "wb") as f:
        torch.save({"step": 1, "evil": Payload()}, f)
    with pytest.raises(Exception, match="[Ww]eights only"):
        checkpoint.load(tmp_path)
    reliability.record(request, "security", "a checkpoint holding a pickled object is refused",
                       "torch.load(weights_only=True) raised UnpicklingError")


def test_ui_binds_to_loopback_by_default(request):
    from ablate.ui import server_command

    cmd = server_command("sqlite:////tmp/x.db")
    reliability.record(request, "security", "`python -m ablate.ui` binds 127.0.0.1 unless --host is given",
                       " ".join(cmd[cmd.index("--host"):cmd.index("--host") + 2]))
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"


@pytest.fixture
def postgres(tmp_path):
    """A throwaway PostgreSQL cluster on loopback, run as the postgres user; yields its URI."""
    import glob
    import pwd

    from test_tracking_outage import free_port

    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        pytest.fail("PostgreSQL is not installed: scripts/install_test_deps.sh installs it (make test runs it)")
    # pytest's own temporary root is private to root; the postgres user needs a path it can reach.
    base = Path(tempfile.mkdtemp(prefix="ablate-pg-"))
    bin_dir, data, port = Path(bins[-1]), base / "pg", free_port()
    data.mkdir()
    user = pwd.getpwnam("postgres")
    for path in (base, data):
        os.chown(path, user.pw_uid, user.pw_gid)

    def as_postgres(*cmd):
        return subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(str, cmd))],
                              capture_output=True, text=True, timeout=120, check=True)

    as_postgres(bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres")
    as_postgres(bin_dir / "pg_ctl", "-D", data, "-w", "-l", data / "log", "-o",
                f"'-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200'", "start")
    try:
        as_postgres(bin_dir / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "mlflow")
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow"
    finally:
        as_postgres(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)
