"""The process launchers' warm worker (sweep/launch/worker.py, pool.py, process.py): jobs forked from a
process that has imported everything once, each still its own process; results handed back as JSON;
Ctrl-C that stops a sweep in one line, resumably."""

import gc
import json
import operator
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from ablate.config import ConfigError
from ablate.perf import peak
from ablate.sweep.launch import returns
from ablate.sweep.launch.pool import Pool
from ablate.sweep.launch.worker import NO_FORK_ENV
from ablate.tracking.store import check_store
from support import SMALL_DATA

TIMEOUT_S = 1800  # end-to-end sweeps on a 2-core machine shared with other work
SWEEP = [
    "--multirun",
    "model=nano",
    *SMALL_DATA,
    "train.eval_interval=5",
    "train.log_interval=5",
    "train.progress=false",
    "hydra/launcher=parallel",
    "hydra.launcher.workers=2",
    "hydra.sweep.dir=sweep",
]
# A warm job imports none of these (a cold one: ~800 modules); MLflow still loads two of its own
# modules by file each time it opens a store.
COLD = {"torch", "numpy", "hydra", "omegaconf", "sqlalchemy", "alembic", "sympy"}
WARM_IMPORTS = 10


# -- results as JSON ----------------------------------------------------------------------------


def _job_return(status: JobStatus, value) -> JobReturn:
    ret = JobReturn(
        overrides=["model=nano", "train.steps=5"],
        cfg=OmegaConf.create({"model": {"name": "nano"}, "state_dir": "${hydra:runtime.cwd}/.ablate"}),
        hydra_cfg=OmegaConf.create({"hydra": {"job": {"num": 3}}}),
        working_dir="/tmp/x",
        task_name="train",
        status=status,
    )
    ret.return_value = value
    return ret


def test_a_finished_jobs_return_survives_json():
    value = {"status": "finished", "final_val_loss": 1.25, "mfu": None, "steps": [1, 2]}
    back = returns.from_json(json.loads(json.dumps(returns.to_json(_job_return(JobStatus.COMPLETED, value)))))
    assert back.status == JobStatus.COMPLETED and back.return_value == value
    assert back.overrides == ["model=nano", "train.steps=5"] and back.task_name == "train"
    assert OmegaConf.to_container(back.cfg, resolve=False)["state_dir"] == "${hydra:runtime.cwd}/.ablate"
    assert back.hydra_cfg.hydra.job.num == 3 and back.working_dir == "/tmp/x"


def test_a_failed_jobs_exception_comes_back_described_not_unpickled():
    try:
        raise ValueError("model.n_embd=50 is odd")
    except ValueError as exc:
        doc = returns.to_json(_job_return(JobStatus.FAILED, exc))
    back = returns.from_json(json.loads(json.dumps(doc)))
    assert back.status == JobStatus.FAILED
    with pytest.raises(returns.JobFailed, match=r"ValueError: model.n_embd=50 is odd") as err:
        back.return_value  # noqa: B018  (Hydra raises a failed job's exception when its value is read)
    assert "Traceback" in err.value.traceback and err.value.type_name == "ValueError"


def test_a_value_json_cannot_carry_is_described_in_one_string():
    doc = returns.to_json(_job_return(JobStatus.COMPLETED, {"when": object()}))
    assert doc["return_value"].startswith("dict (not JSON: ")
    assert returns.from_json(doc).status == JobStatus.COMPLETED


# -- the sweep's own work, called in the worker -----------------------------------------------------


@pytest.mark.slow
def test_a_call_runs_in_a_process_forked_from_the_worker_and_raises_here():
    """Pool.call: values go and come back through the pipes (3 MB each way, more than a pipe
    holds), computed in a process that is neither this one nor the worker; a ConfigError stays one
    line, any other error keeps the forked process's traceback; with the worker gone, the call runs
    here."""
    pool = Pool(None).start()
    try:
        assert pool.call(len, b"x" * 3_000_000) == 3_000_000
        assert pool.call(bytes, 3_000_000) == bytes(3_000_000)
        pid, worker_pid = pool.call(os.getpid), pool.workers[0].proc.pid
        assert pid not in (os.getpid(), worker_pid) and not psutil.pid_exists(pid)
        # the worker froze what it preloaded: a forked process's collections do not walk torch's objects
        assert pool.call(gc.get_freeze_count) > 100_000
        with pytest.raises(ConfigError, match=r"^tracking.uri='ftp://x' is not an MLflow store") as err:
            pool.call(check_store, "ftp://x")
        assert not getattr(err.value, "__notes__", None)
        with pytest.raises(KeyError) as err:
            pool.call(operator.getitem, {}, "missing")
        assert "forked from the sweep's worker" in err.value.__notes__[0] and "Traceback" in err.value.__notes__[0]
    finally:
        pool.close()
    assert pool.call(os.getpid) == os.getpid()


def test_a_sweep_whose_plan_fails_kills_its_worker_at_once_not_waited_for(monkeypatch, workdir):
    """A sweep whose plan fails its checks after the launcher had the sweep callback start the warm
    worker (bad input) must not wait for the worker to finish importing torch and MLflow before it
    exits, and creates nothing."""
    from ablate.cli import common
    from ablate.sweep import callback

    monkeypatch.chdir(workdir)
    cfg = common._compose("config", ["hydra/launcher=parallel", "hydra.mode=MULTIRUN", *SMALL_DATA])

    def bad_plan(loader, config, batch, first_num):
        raise ConfigError("sweep job #0 (x=1): bad")

    monkeypatch.setattr(callback.sweep_plan, "compose", bad_plan)
    sweep = callback.SweepCallback()
    sweep.on_multirun_start(cfg)
    pool = sweep.start_worker(None)
    proc = pool.workers[0].proc
    with pytest.raises(ConfigError, match="bad"):
        sweep.plan(None, [["x=1"]], 0)
    assert proc.returncode == -signal.SIGKILL, "killed while it still imports, not waited for"
    assert pool.workers == [] and sweep._pool is None
    assert not list(workdir.glob("multirun"))


@pytest.mark.slow
@pytest.mark.e2e
def test_the_launching_process_imports_neither_torch_nor_mlflow(tmp_path, run_statuses):
    """A tracked sweep under the parallel launcher: its plan, parent run and summary are made in
    processes forked from the warm worker, so the launching process (whose sys.modules it writes
    at exit: `-X importtime` misses what a package's lazy API loads through importlib) never
    imports torch, MLflow or matplotlib, and the store still holds every run FINISHED, with the
    summary logged to the parent run. The same command again skips both runs, which are run in a
    forked process too: the relaunch imports none of them either."""
    args = [*SWEEP, "train.steps=1", "train.seed=1,2"]
    listing = tmp_path / "modules.json"
    launcher = (
        "import atexit, json, runpy, sys; "
        f"atexit.register(lambda: open({str(listing)!r}, 'w').write(json.dumps(sorted(sys.modules)))); "
        "sys.argv[0] = 'ablate'; runpy.run_module('ablate', run_name='__main__', alter_sys=True)"
    )
    for launch, planned in ((1, "2 to run, 0 to resume, 0 skipped"), (2, "0 to run, 0 to resume, 2 skipped")):
        proc = subprocess.run(
            [sys.executable, "-c", launcher, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert planned in proc.stderr, (launch, proc.stderr[-3000:])
        imported = set(json.loads(listing.read_text()))
        assert "hydra" in imported and "ablate.sweep.callback" in imported  # the listing is this process's
        unwanted = imported & {"torch", "mlflow", "matplotlib", "sqlalchemy"}
        assert not unwanted, (launch, sorted(unwanted))
        assert "| train.seed=2 | " in proc.stderr  # the summary came back and was printed
    assert "| train.seed=2 | skipped |" in proc.stderr
    assert sorted(run_statuses(tmp_path / "mlflow.db")) == ["FINISHED"] * 4  # 2 runs, 2 parent runs
    with sqlite3.connect(tmp_path / "mlflow.db") as con:
        parents = con.execute("SELECT artifact_uri FROM runs WHERE name LIKE 'sweep:%'").fetchall()
    assert len(parents) == 2
    for (parent,) in parents:
        assert (Path(parent.removeprefix("file://")) / "summary.json").is_file()


# -- the warm worker, end to end ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.e2e
def test_a_killed_job_is_one_failed_row_and_the_worker_goes_on(tmp_path):
    """Three jobs, two at a time, from one worker. The worker has no thread pool when it forks; the
    longest job is killed with SIGKILL: it is one failed row naming the signal, the two others
    finish, warm (they import none of torch, numpy, Hydra), and nothing is left running."""
    args = [*SWEEP, "train.steps=600,10,12", "tracking=none"]
    out = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ablate", *args], cwd=tmp_path, stdout=out, stderr=out)
    try:
        worker, job0 = _worker_and_job(proc.pid, tmp_path / "sweep" / ".launcher" / "0.log")
        main = psutil.Process(worker.pid).name()
        threads = _thread_names(worker.pid)
        assert threads.count(main) == 1 and set(threads) <= {main, "jemalloc_bg_thd"}, threads
        os.kill(job0.pid, signal.SIGKILL)
        assert proc.wait(TIMEOUT_S) == 1  # a sweep with a failed row exits 1
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    rows = {r["job"]: r for r in summary["runs"]} if "job" in summary["runs"][0] else dict(enumerate(summary["runs"]))
    statuses = sorted(r["status"] for r in rows.values())
    assert statuses == ["failed", "finished", "finished"], rows
    assert "killed by SIGKILL" in (tmp_path / "stderr.txt").read_text()
    for num in (1, 2):
        usage = json.loads((tmp_path / "sweep" / str(num) / "usage.json").read_text())
        assert usage["imported"] <= WARM_IMPORTS and not COLD & set(usage["packages"]), usage
        returned = json.loads((tmp_path / "sweep" / ".launcher" / f"{num}.return.json").read_text())
        assert returned["status"] == "COMPLETED"
    assert not list((tmp_path / "sweep").rglob("*.pkl"))  # nothing in the sweep dir is a pickle
    assert not psutil.pid_exists(job0.pid) and not psutil.pid_exists(worker.pid)


def stop_two_training_runs(cli, tmp_path, args: list[str], send) -> tuple[int, list[str], bytes]:
    """Start the sweep `args` in its own process group (like a shell's foreground job), wait until both
    runs have their first checkpoint, then `send(proc)` a signal: the exit status, the lines printed
    after the signal, and all of stderr."""
    stderr = tmp_path / "stderr.txt"
    proc = cli.start(args, tmp_path, stderr=stderr)
    try:
        deadline = time.time() + TIMEOUT_S
        while len(list((tmp_path / ".ablate" / "state").glob("*/checkpoint.pt"))) < 2:
            assert proc.poll() is None and time.time() < deadline, "the sweep ended before it could be stopped"
            time.sleep(0.5)
        sent = stderr.stat().st_size  # what the launcher printed before the signal
        send(proc)
        code = proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
    printed = stderr.read_bytes()
    return code, [ln.rstrip() for ln in printed[sent:].decode(errors="replace").splitlines()], printed


@pytest.mark.slow
@pytest.mark.e2e
def test_ctrl_c_stops_a_sweep_in_one_line_and_the_same_command_resumes_it(tmp_path, cli, run_statuses):
    """Ctrl-C (SIGINT to the launcher's process group, as a terminal sends it) while two runs train:
    one line on stderr, exit 130, every MLflow run KILLED and none RUNNING, checkpoints kept; the
    same command again resumes both runs and finishes them, warm (no MLflow import in a job)."""
    # Interrupted once both runs have their first checkpoint (step 10): 200 steps keep them well
    # short of their end on a loaded machine, and the relaunch trains the rest of both.
    steps = 200
    args = [*SWEEP, f"train.steps={steps},{steps + 1}", "train.checkpoint_interval=10"]
    code, after, printed = stop_two_training_runs(cli, tmp_path, args, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert code == 130
    assert len(after) == 1 and after[0].startswith("interrupted: 2 running job(s) stopped"), after
    assert b"Traceback" not in printed
    assert sorted(run_statuses(tmp_path / "mlflow.db")) == ["KILLED"] * 3  # two runs and the sweep's parent
    killed = [json.loads((tmp_path / "sweep" / n / "result.json").read_text()) for n in "01"]
    assert all(r["status"] == "killed" and 0 < r["steps"] < steps for r in killed), killed

    again = cli(args, tmp_path, timeout=TIMEOUT_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 jobs: 0 to run, 2 to resume, 0 skipped" in again.stderr
    assert sorted(run_statuses(tmp_path / "mlflow.db")) == ["FINISHED"] * 3 + ["KILLED"]  # the first launch's parent
    for n, before in zip("01", killed, strict=True):
        result = json.loads((tmp_path / "sweep" / n / "result.json").read_text())
        assert result["status"] == "finished" and result["mlflow_run_id"] == before["mlflow_run_id"]
        usage = json.loads((tmp_path / "sweep" / n / "usage.json").read_text())
        assert usage["imported"] <= WARM_IMPORTS and not COLD & set(usage["packages"]), usage


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_to_the_launcher_alone_closes_every_record(tmp_path, cli, run_statuses, signum):
    """kill PID (a scheduler, a container stopping) or a closed terminal, sent to the launcher's
    process only, not its group: it stops its jobs as Ctrl-C does, one line, exit 128 + the signal,
    every MLflow run KILLED (the two runs and the sweep's parent), none left RUNNING."""
    args = [*SWEEP, "train.steps=200,201", "train.checkpoint_interval=10"]
    code, after, printed = stop_two_training_runs(cli, tmp_path, args, lambda p: p.send_signal(signum))
    assert code == 128 + signum
    assert len(after) == 1 and after[0].startswith("interrupted: 2 running job(s) stopped"), after
    assert b"Traceback" not in printed
    assert sorted(run_statuses(tmp_path / "mlflow.db")) == ["KILLED"] * 3


@pytest.mark.slow
@pytest.mark.e2e
def test_without_fork_each_job_gets_a_fresh_worker(tmp_path, cli):
    """Where fork is not available (or ABLATE_WORKER_FORK=0), each job runs in a worker of its own
    and the results come back the same way."""
    done = cli([*SWEEP, "train.steps=4,5", "tracking=none"], tmp_path, env={NO_FORK_ENV: "0"}, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    launcher = tmp_path / "sweep" / ".launcher"
    assert sorted(p.name for p in launcher.glob("worker*.log")) == ["worker-0.log", "worker-1.log"]
    for n in "01":
        assert json.loads((tmp_path / "sweep" / n / "result.json").read_text())["status"] == "finished"
        assert json.loads((launcher / f"{n}.return.json").read_text())["return_value"]["status"] == "finished"


def _worker_and_job(launcher_pid: int, log: Path, timeout: float = TIMEOUT_S):
    """The launcher's worker process, and the job process that writes `log` (job 0)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in psutil.Process(launcher_pid).children():
            if "ablate.sweep.launch.worker" not in " ".join(child.cmdline()):
                continue
            for job in child.children():
                try:
                    if any(f.path == str(log) for f in job.open_files()):
                        return child, job
                except psutil.Error:
                    pass
        time.sleep(0.2)
    raise AssertionError(f"no job process writing {log}")


def _thread_names(pid: int) -> list[str]:
    names = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            pass
    return names


@pytest.mark.slow
@pytest.mark.e2e
def test_a_parallel_sweep_reports_no_mfu_above_100_percent_after_a_peak_measured_under_load(tmp_path, monkeypatch, cli):
    """The sweep that showed MFUs of 127% (two workers, one thread each, micro runs) after
    the CPU's peak was measured while four spinning processes per core kept the machine busy (a
    wall-clock measurement then reads a fifth of the truth). No MFU above 1 in the table,
    summary.json, any result.json or any MLflow metric."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cores = len(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4 * cores)]
    try:
        under_load = peak.per_core("fp32")
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    # micro as in the sweep that showed 127%, and small with larger batches: its matmuls attain a
    # larger share of the core, so that a peak read 10x low shows as an MFU well above 1.
    args = [*SWEEP, "model=micro,small", "train.batch_size=64", "train.steps=8", "hydra.launcher.threads_per_job=1"]
    done = cli(args, tmp_path, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = [json.loads((tmp_path / "sweep" / n / "result.json").read_text())["mfu"] for n in "01"]
    figures += [r["mfu"] for r in json.loads((tmp_path / "sweep" / "summary.json").read_text())["runs"]]
    with sqlite3.connect(tmp_path / "mlflow.db") as con:
        figures += [v for (v,) in con.execute("SELECT value FROM metrics WHERE key IN ('mfu', 'final/mfu')")]
    assert len(figures) > 4 and all(0 < f <= 1.0 for f in figures), (figures, under_load)
    shown = [float(p) for p in re.findall(r"\| ([0-9.]+)% \|", (tmp_path / "sweep" / "summary.md").read_text())]
    assert len(shown) == 2 and all(0 < p <= 100 for p in shown), shown


def test_the_worker_answers_every_call_by_its_id_and_a_call_it_cannot_make_with_its_line(monkeypatch):
    """The worker's side of its channel, without a fork: an unknown call, a wait for a job it never
    started and a spec that does not unpickle each get their error; the worker goes on to answer
    the next call, and exits when its input ends."""
    from ablate import child
    from ablate.sweep.launch import worker

    calls_read, calls_write = os.pipe()
    replies_read, replies_write = os.pipe()
    monkeypatch.setattr(worker, "Calls", lambda: child.Calls(calls_read))
    lines = [
        child.call_line(1, "nope", {}),
        child.call_line(2, "wait", {"num": 5}),
        child.call_line(3, "spec", {"payload": b"not a pickle"}),
        child.call_line(4, "ready", {}),
    ]
    os.write(calls_write, b"".join(lines))
    os.close(calls_write)
    stderr = os.dup(2)
    server = worker._Server(True, os.fdopen(replies_write, "wb", buffering=0), stderr, os.getpid(), {"pid": 1})
    server.loop()
    server.replies.close()
    os.close(stderr)
    answers = {r["id"]: r for r in (json.loads(line) for line in os.read(replies_read, 1 << 16).splitlines())}
    os.close(replies_read)
    assert answers[1]["error"] == "ValueError: no call 'nope'"
    assert answers[2]["error"] == "KeyError: 'no job 5'"
    assert answers[3]["error"].startswith("UnpicklingError") and "Traceback" in answers[3]["trace"]
    assert answers[4] == {"id": 4, "ok": {"pid": 1}}
