"""Shared set-up as fixtures: configs built from the real presets, the command line, MLflow stores
and servers, a PostgreSQL cluster, the local SLURM cluster. Test files take these as arguments and
never import this file or each other; constants live in tests/support.py."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import itertools
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from support import DATA, TRUE_LAW, environ_now, free_port
from support import run_config as support_run_config

# -- the session: threads, xdist groups, order ---------------------------------------------------


def pytest_configure(config):
    """One share of the cores per test process. torch's OpenMP threads spin while they wait: on 2
    busy cores a 20-step nano run with 2 threads took 20x the CPU time of the same run with 1. Set
    here, before any test module imports torch, in the process that starts the xdist workers (they
    inherit it, as does every process a test starts; a sweep's launcher sets its jobs' own).
    OMP_WAIT_POLICY=PASSIVE: a waiting thread sleeps instead of spinning, for the jobs that get 2."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or getattr(config.option, "numprocesses", None) or 1)
    threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
    for key, value in (("OMP_NUM_THREADS", threads), ("MKL_NUM_THREADS", threads), ("OMP_WAIT_POLICY", "PASSIVE")):
        os.environ.setdefault(key, value)


# Where tests run under pytest-xdist (`make test`: two worker processes, --dist loadgroup):
# - `slurm`: one after another on one worker (the xdist group "slurm"): the local cluster has 2 CPUs
#   for all of them, and they time its scheduling. Tests of other kinds run beside them.
# - `alone` and `load`: nothing else runs while one of these does, on any worker (a file lock, below):
#   tests that measure speed, bandwidth or latency, and tests that start 8 to 16 training processes
#   (beside those, another test would only crawl and its timeouts would be what fails).
# - a test that uses a module-scoped fixture runs on the same worker as the other tests of its
#   module that do (the group "module:PATH"): the fixture (a
#   finished sweep, a reference run, a store) is made once, not once per worker.
# A test file never sets xdist_group itself: pytest-xdist joins every group name an item carries
# into a new group, which would take a `slurm` test out of the one the others share.
ALONE = ("alone", "load")


def xdist_group(item) -> str | None:
    if item.get_closest_marker("slurm"):
        return "slurm"
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        if any(fixturedef.scope in ("module", "class", "package") for fixturedef in defs):
            return f"module:{item.nodeid.split('::')[0]}"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Groups as above; then the order: SLURM tests (the longest group), tests that run alone, the
    other slow ones, the rest, each in collection order, so that 2 workers finish together. Every
    test marked `ledger(section, case)` has its row from here on (tests/reliability.py), before -m
    and -k deselect: a deselected row reads "not run"."""
    import reliability

    for item in items:
        reliability.register(item)
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))

    def rank(item) -> int:
        if item.get_closest_marker("slurm"):
            return 0
        if any(item.get_closest_marker(m) for m in ALONE):
            return 1
        return 2 if item.get_closest_marker("slow") else 3

    items.sort(key=rank)  # stable


class _Room:
    """Two flock(2) files that all the workers of one session share. Every test passes the gate,
    then holds the room shared; a test that runs alone holds the gate and the room exclusively, so
    that the other workers stop at the gate before their next test (they do not starve it) and it
    starts once the tests already running have ended. The kernel drops the locks of a process that
    dies, so a crashed worker blocks nobody."""

    def __init__(self, folder: Path):
        self.gate = open(folder / "ablate-gate.lock", "a+")  # noqa: SIM115 (held for the session)
        self.room = open(folder / "ablate-room.lock", "a+")  # noqa: SIM115

    @contextlib.contextmanager
    def enter(self, alone: bool):
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.room, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(self.gate, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the wait is not part of the test's timeout
def pytest_runtest_protocol(item, nextitem):
    config = item.config
    if not hasattr(config, "workerinput"):  # one process: nothing runs beside anything
        return (yield)
    room = getattr(config, "_ablate_room", None)
    if room is None:
        # basetemp of an xdist worker is SESSION/popen-gwN: the session's folder is shared by its workers
        room = config._ablate_room = _Room(config._tmp_path_factory.getbasetemp().parent)
    with room.enter(alone=any(item.get_closest_marker(m) for m in ALONE)):
        return (yield)


# -- configs and the command line ---------------------------------------------------------------


@pytest.fixture(scope="session")
def torch_threads():
    """torch_threads(n): a context manager that sets torch's intra-op threads to n for a block."""

    @contextmanager
    def threads(n: int):
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    return threads


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def mlflow_store_template(tmp_path_factory) -> Path:
    """An empty sqlite MLflow store with its schema made, once per test process: creating the schema
    (MLflow's migrations) costs about 2 s of CPU, a copy of the file a few milliseconds."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("store-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture(scope="session")
def run_config(mlflow_store_template):
    """run_config(path, tracking="none", **overrides): a RunConfig from the real presets, tiny by
    default (support.run_config, which the benchmarks use too). With tracking="mlflow" its store is
    path/mlflow.db, an empty store with its schema made unless the file is there already (tests of a
    store's creation run the command line on a fresh directory)."""

    def build(path: Path, tracking: str = "none", **overrides):
        if tracking == "mlflow" and not (path / "mlflow.db").exists():
            path.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(mlflow_store_template, path / "mlflow.db")
        return support_run_config(path, tracking, **overrides)

    return build


# Commands that start processes of their own: these run as a user runs them, in a subprocess.
OWN_PROCESSES = {"study", "submit", "ui"}
# ABLATE_TESTS_CLI=process: every command in a subprocess (to tell a test's failure from in-process state).
ALWAYS_A_PROCESS = os.environ.get("ABLATE_TESTS_CLI") == "process"


def starts_processes(args: list[str], command: str | None) -> bool:
    """A sweep (its launcher starts the jobs), a study, `ablate ui`, or DDP ranks."""
    if command in OWN_PROCESSES:
        return True
    for arg in args:
        key, _, value = arg.lstrip("+~").partition("=")
        if arg in ("--multirun", "-m") or key in ("sweep", "hydra/launcher", "hydra/sweeper"):
            return True
        if key == "hardware.gpus_per_node" and value.isdigit() and int(value) > 1:
            return True
    return False


class ForkServer:
    """`python -m ablate ARGV` as a process forked from the product's warm worker (its `run_argv`
    call, src/ablate/sweep/launch/command.py), started through the child entry point as a sweep's
    is, with the command line, MLflow's sqlite store and torch imported once. Thread-safe: several
    commands may run at once; a thread reads the worker's answers."""

    def __init__(self):
        from ablate.sweep.launch.pool import Worker

        self.worker = Worker.start("sqlite://", True, ["ablate.cli.main", "mlflow"])
        assert self.worker.ready() is not None, "the fork server did not start"
        self.lock, self.pending, self.nums = threading.Lock(), {}, itertools.count()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while not self.worker.channel.closed:
            replies = self.worker.channel.read()
            with self.lock:
                for reply in replies:
                    state = self.pending.pop(reply.id, None)
                    if state is None:  # a command given up on (its timeout): it was killed
                        continue
                    if reply.failed:
                        state.update(code=-1, error=reply.message["error"])
                        state["forked"].set()
                        state["done"].set()
                    elif "code" in reply.message["ok"]:
                        state.update(reply.message["ok"])
                        state["done"].set()
                    else:
                        state.update(reply.message["ok"])
                        state["forked"].set()

    def start(self, argv: list[str], cwd: Path, env: dict, stdout: Path, stderr: Path) -> dict:
        """Fork the command and return at once: its state, which the reader thread fills in."""
        command = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(stdout), "stderr": str(stderr)}
        state = {"forked": threading.Event(), "done": threading.Event()}
        with self.lock:
            state["num"] = num = next(self.nums)
            self.pending[self.worker.channel.send("run_argv", num=num, **command)] = state
            self.pending[self.worker.channel.send("wait", num=num)] = state
        return state

    def forget(self, state: dict) -> None:
        with self.lock:
            for call_id in [i for i, s in self.pending.items() if s is state]:
                del self.pending[call_id]

    def run(self, argv: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "ablate", *argv]
        with tempfile.TemporaryDirectory(prefix="ablate-cli-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            state = self.start(argv, cwd, env, out, err)
            try:
                if not state["done"].wait(timeout):
                    assert state["forked"].wait(10), "the fork server did not start the command"
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(state["pid"], signal.SIGKILL)
                    state["done"].wait(30)
                    raise subprocess.TimeoutExpired(args, timeout, out.read_bytes(), err.read_bytes())
            finally:
                self.forget(state)
            assert "error" not in state, state.get("error")
            read = (p.read_bytes().decode("utf-8", errors="replace") for p in (out, err))
            return subprocess.CompletedProcess(args, state["code"], *read)

    def close(self) -> None:
        self.worker.close(30)


class Forked:
    """A command that cli.start forked and did not wait for, with the part of Popen's interface the
    tests use: pid, poll, wait, send_signal, kill. Its process group is its own (command.py), as
    with Popen(start_new_session=True). A signal is sent only while the command has not been reaped,
    so that it never reaches a process that took its pid afterwards."""

    def __init__(self, server: ForkServer, state: dict, args: list[str]):
        self.server, self.state, self.args = server, state, args
        assert state["forked"].wait(60), "the fork server did not start the command"
        self.pid: int = state["pid"]

    @property
    def returncode(self) -> int | None:
        return self.state["code"] if self.state["done"].is_set() else None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.state["done"].wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.server.forget(self.state)
        return self.state["code"]

    def send_signal(self, sig: int) -> None:
        if not self.state["done"].is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@pytest.fixture(scope="session")
def cli():
    """cli(args, cwd, timeout=600, env=None, command=None, process=None): `ablate [COMMAND] ARGS` in cwd;
    returns the CompletedProcess (text), as `subprocess.run(["python", "-m", "ablate", ...])` would.

    Runs in this process (tests/inprocess.py: the same entry point, output captured at the file
    descriptors, the process's state put back) unless the command starts processes of its own
    (a sweep, --multirun, a study, `ablate ui`, DDP ranks), env is given or process=True: those run
    as processes of their own, forked from a warm fork server (ForkServer). ABLATE_TESTS_CLI=process
    runs every command as `python -m ablate` in a fresh interpreter. timeout applies to a process only.

    cli.start(args, cwd, stdout=None, stderr=None, fresh=False): the command forked from the same
    server and not waited for (Forked: pid, poll, wait, send_signal), for a test that signals or
    kills it midway; fresh=True starts it as `python -m ablate` in a fresh interpreter, the user's
    path: the server has MLflow imported, so a run forked from it makes its MLflow calls itself,
    where a user's run makes them through its tracking agent.

    cli.new_server(): a ForkServer of its own, started as the shared one is (tests of the fixture)."""
    import inprocess

    server: list[ForkServer] = []
    # The fork server is started by a thread kept for the session: it dies with its parent through
    # prctl(PR_SET_PDEATHSIG) (ablate/host.die_with_parent), which fires when the *thread* that
    # started it ends (prctl(2)), and the first command of a worker may come from a pool's thread
    # (the bad-input cases, the concurrent-runs tests) that ends with its pool.
    starter = ThreadPoolExecutor(1, thread_name_prefix="fork-server-parent")

    def new_server() -> ForkServer:
        return starter.submit(ForkServer).result()

    def warm_server() -> ForkServer:
        with lock:
            if not server:
                server.append(new_server())
        return server[0]

    def command_env(extra: dict | None = None) -> dict:
        env = {**environ_now(), **(extra or {})}  # taken from pool threads too
        env.pop("HYDRA_FULL_ERROR", None)  # its tracebacks would break the one-line errors
        return env

    def run(
        args: list[str],
        cwd: Path,
        timeout: float = 600,
        env: dict | None = None,
        command: str | None = None,
        process: bool | None = None,
    ):
        argv = [*([command] if command else []), *args]
        if process is None:
            process = env is not None or starts_processes(args, command) or ALWAYS_A_PROCESS
        if not process:
            return inprocess.run(argv, cwd)
        full_env = command_env(env)
        if not ALWAYS_A_PROCESS:
            return warm_server().run(argv, Path(cwd).resolve(), full_env, timeout)
        return subprocess.run(
            [sys.executable, "-m", "ablate", *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
        )

    def start(args: list[str], cwd: Path, stdout: Path | None = None, stderr: Path | None = None, fresh: bool = False):
        """`ablate ARGS` as a process of its own that runs on while the test goes on (a Popen where
        ABLATE_TESTS_CLI=process or `fresh`); its output goes to the files named, else nowhere."""
        full_env = command_env()
        out, err = str(stdout or os.devnull), str(stderr or os.devnull)
        if ALWAYS_A_PROCESS or fresh:
            with open(out, "ab") as o, open(err, "ab") as e:
                return subprocess.Popen(
                    [sys.executable, "-m", "ablate", *args],
                    cwd=cwd,
                    stdout=o,
                    stderr=e,
                    env=full_env,
                    start_new_session=True,
                )
        forks = warm_server()
        state = forks.start(list(args), Path(cwd).resolve(), full_env, Path(out), Path(err))
        return Forked(forks, state, [sys.executable, "-m", "ablate", *args])

    lock = threading.Lock()
    run.start = start
    run.new_server = new_server
    yield run
    if server:
        server[0].close()
    starter.shutdown()


@pytest.fixture(scope="session")
def run_statuses():
    """run_statuses(db): the status of every run in a sqlite MLflow store, read from the database."""

    def read(db: Path) -> list[str]:
        if not db.exists():
            return []
        with sqlite3.connect(db) as con:
            return [row[0] for row in con.execute("SELECT status FROM runs")]

    return read


# -- services ---------------------------------------------------------------------------------------


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class MlflowServer:
    """`mlflow server` (or `ablate ui`) on loopback over one store, stoppable and restartable on its port."""

    def __init__(self, store: str, port: int, log: Path, ui: bool = False):
        self.store, self.port, self.log, self.ui, self.proc = store, port, log, ui, None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 600.0) -> None:
        """Until it answers /health (its start-up imports take a while on a loaded machine)."""
        from ablate.cli.ui import server_command, server_env

        if self.ui:
            cmd, env = [sys.executable, "-m", "ablate", "ui", "--store", self.store, "--port", str(self.port)], None
        else:
            cmd, env = server_command(self.store, port=self.port), server_env()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        deadline = time.time() + timeout
        while not _healthy(self.uri):
            assert self.proc.poll() is None, f"mlflow server exited: {self.log.read_text()[-2000:]}"
            assert time.time() < deadline, f"not healthy after {timeout:.0f} s: {self.log.read_text()[-2000:]}"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # the server and its workers
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        deadline = time.time() + 30
        while _healthy(self.uri):
            assert time.time() < deadline, "mlflow server did not stop"
            time.sleep(0.2)


@pytest.fixture
def mlflow_server(tmp_path, mlflow_store_template):
    """mlflow_server(store=None, ui=False): a started MLflow tracking server over `store` (an MLflow
    backend URI; a fresh sqlite file by default), through `ablate ui` with ui=True. Stopped at the
    end of the test; .stop() and .start() in between restart it on the same port. A sqlite store
    that does not exist yet starts as a copy of mlflow_store_template: the server would otherwise
    spend seconds of CPU on MLflow's migrations before it answers."""
    started: list[MlflowServer] = []

    def start(store: str | None = None, ui: bool = False) -> MlflowServer:
        n = len(started)
        store = store or f"sqlite:///{tmp_path / f'server{n}.db'}"
        if store.startswith("sqlite:///") and not Path(store[len("sqlite:///") :]).exists():
            shutil.copyfile(mlflow_store_template, store[len("sqlite:///") :])
        server = MlflowServer(store, free_port(), tmp_path / f"server{n}.log", ui)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def tmpfs(tmp_path):
    """tmpfs(options): a filesystem of its own at tmp_path/disk (tmpfs mount options, e.g. "size=128k",
    "size=1m,ro"), unmounted at the end of the test; needs root (see _require)."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        where = tmp_path / "disk"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
        _require(done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


@pytest.fixture
def postgres():
    """A throwaway PostgreSQL cluster on loopback, run as the postgres user; yields its URI."""
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
        return subprocess.run(
            ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(str, cmd))],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    as_postgres(bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres")
    as_postgres(
        bin_dir / "pg_ctl",
        "-D",
        data,
        "-w",
        "-l",
        data / "log",
        "-o",
        f"'-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200'",
        "start",
    )
    try:
        as_postgres(bin_dir / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "mlflow")
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow"
    finally:
        as_postgres(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


# A missing service skips its tests when they are run by hand, and fails them under `make test`
# (ABLATE_REQUIRE_SERVICES=1), where a skip would let the suite pass without testing what it claims.
REQUIRE_SERVICES = os.environ.get("ABLATE_REQUIRE_SERVICES") == "1"


def _require(available, reason: str) -> None:
    if not available:
        if REQUIRE_SERVICES:
            pytest.fail(f"{reason} (ABLATE_REQUIRE_SERVICES=1: a missing service is a failure)")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def require_service():
    """require_service(available, reason): skip the test when run by hand, fail it under `make test`."""
    return _require


SLURM_DIR = Path(os.environ.get("ABLATE_SLURM_DIR", "/tmp/ablate-slurm"))


@pytest.fixture(scope="session")
def slurm_cluster():
    """The local SLURM cluster (scripts/slurm_cluster.sh; `make test` starts it): skips when the SLURM
    client tools are not installed at all (fails under `make test`, see _require); fails, saying how to
    start it, when the node does not answer. Points the client tools at the script's config if nothing
    else does."""
    _require(shutil.which("sinfo"), "SLURM client tools (sinfo) not on PATH: run `scripts/slurm_cluster.sh start`")
    with pytest.MonkeyPatch.context() as mp:
        conf = SLURM_DIR / "etc" / "slurm.conf"
        if "SLURM_CONF" not in os.environ and conf.exists():
            mp.setenv("SLURM_CONF", str(conf))  # /etc/slurm/slurm.conf normally links there anyway
        probe = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
        states = probe.stdout.split()
        if probe.returncode != 0 or not {"idle", "mixed", "allocated"} & set(states):
            pytest.fail(
                "local SLURM cluster is not usable "
                f"(sinfo rc={probe.returncode}, states={states}, {probe.stderr.strip()!r}); "
                "start it with `scripts/slurm_cluster.sh start`, inspect with `scripts/slurm_cluster.sh status`, "
                f"logs in {SLURM_DIR / 'log'}"
            )
        yield SLURM_DIR


@pytest.fixture(autouse=True)
def _slurm_marker_needs_the_cluster(request):
    """A test marked `slurm` runs against the cluster: the marker brings the slurm_cluster fixture."""
    if request.node.get_closest_marker("slurm"):
        request.getfixturevalue("slurm_cluster")


# -- scaling laws: points and curves drawn from a known law, a coarse start grid, Epoch's CSV ------------


@pytest.fixture(scope="session")
def coarse_grid():
    """72 starts (Hoffmann's layout [e, a, alpha, b, beta]) around the right region: enough for data
    drawn from TRUE_LAW, quick."""
    import itertools

    import numpy as np

    return np.array(list(itertools.product([0.0, 0.5], [0, 10, 20], [0.2, 0.8], [0, 10, 20], [0.2, 0.8])))


@pytest.fixture(scope="session")
def chinchilla_csv() -> Path:
    return DATA / "chinchilla.csv"


@pytest.fixture(scope="session")
def iso_flop_design():
    """iso_flop_design(budgets, sizes=9, noise=3e-3, seed=5): `sizes` sizes per budget from N_opt/4 to
    4 N_opt of TRUE_LAW, D = C/(6N), log-normal noise."""
    import numpy as np

    from ablate.scaling.laws.chinchilla import ChinchillaLaw
    from ablate.scaling.points import Points

    law = ChinchillaLaw(**TRUE_LAW)

    def make(budgets, sizes: int = 9, noise: float = 3e-3, seed: int = 5):
        rng = np.random.default_rng(seed)
        N = np.concatenate([law.n_opt(C) * np.geomspace(0.25, 4, sizes) for C in budgets])
        C = np.repeat(budgets, sizes)
        D = C / (6 * N)
        return Points(N, D, law.loss(N, D) * np.exp(rng.normal(0, noise, N.size)), C)

    return make


@pytest.fixture(scope="session")
def iso_flop(iso_flop_design):
    """6 iso-FLOP budgets from 1e18 to 1e21 x 9 sizes from TRUE_LAW with 0.3% noise: every method has
    something to fit."""
    import numpy as np

    return iso_flop_design(np.geomspace(1e18, 1e21, 6))


@pytest.fixture(scope="session")
def law_curves():
    """10 training curves of TRUE_LAW, 1e7 to 1e10 parameters, 1e8 to 1e11 tokens (approach 1)."""
    import numpy as np

    from ablate.scaling.laws.chinchilla import ChinchillaLaw
    from ablate.scaling.points import RunCurve

    law = ChinchillaLaw(**TRUE_LAW)
    tokens = np.geomspace(1e8, 1e11, 40)
    return [RunCurve(n, 6 * n * tokens, tokens, law.loss(n, tokens)) for n in np.geomspace(1e7, 1e10, 10)]


@pytest.fixture(scope="session")
def grid_points():
    """12 sizes x 10 token budgets from TRUE_LAW, with 0.5% multiplicative noise."""
    import numpy as np

    from ablate.scaling.laws.chinchilla import ChinchillaLaw
    from ablate.scaling.points import Points

    law = ChinchillaLaw(**TRUE_LAW)
    rng = np.random.default_rng(1)
    N, D = (g.ravel() for g in np.meshgrid(np.geomspace(1e7, 1e10, 12), np.geomspace(1e9, 1e12, 10)))
    return Points(N, D, law.loss(N, D) * np.exp(rng.normal(0, 0.005, N.size)))


# -- the reliability ledger (docs/RELIABILITY.md) ------------------------------------------------------
# A test records its row in the process that runs it (an xdist worker, or this one); a worker's rows
# travel to the controller, which writes the doc, in its workeroutput at the end.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The row's result is pytest's outcome of each phase: set-up, call, tear-down."""
    import reliability

    report = yield
    reliability.outcome(item.nodeid, report)
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Under xdist: a worker's rows and outcomes join the controller's, which writes the doc."""
    import reliability

    reliability.merge(getattr(node, "workeroutput", {}).get("reliability"))


def pytest_sessionfinish(session, exitstatus):
    """`make test` (the whole suite) rewrites docs/RELIABILITY.md, once, from the process that ran
    the session (not from each xdist worker); ad-hoc subsets leave it alone."""
    import reliability

    if hasattr(session.config, "workerinput"):  # an xdist worker: its rows go to the controller
        session.config.workeroutput["reliability"] = {"ledger": reliability.LEDGER, "outcomes": reliability.OUTCOMES}
        return
    if os.environ.get("ABLATE_WRITE_RELIABILITY") == "1":
        opt = session.config.option
        reliability.write_doc(
            " ".join(f"{flag} {expr!r}" for flag, expr in (("-m", opt.markexpr), ("-k", opt.keyword)) if expr)
        )
