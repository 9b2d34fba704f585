"""A run's MLflow calls served by a process of its own, so that a run does not wait for MLflow.

Importing MLflow's client costs a fresh `python -m ablate` seconds of CPU (its package pulls in
pandas, SQLAlchemy, alembic and more), and opening a sqlite store more, one after the other on the
path to its first step (docs/benchmarks.md has the figures). For one run that tracks, the command
starts this agent (`start`) as soon as its config is parsed: the agent imports the store's code on
another core while the run imports torch and prepares; it opens the store (`Agent.open`) once every
check has passed, so that nothing is created for a run that fails its checks. The command passes
the agent to the run, whose tracker makes its calls through it (`Agent.store_for`), one request
and one reply at a time, exactly the calls a RunStore would make here; the command closes it.

Only where MLflow is not imported yet: a process that has it (a sweep's warm worker, a test that
runs commands in its own process) calls MLflow directly.

The agent ignores the signals meant for the run (a terminal's Ctrl-C reaches its whole process
group, SLURM signals every process of a job), so that the run can still close its MLflow run
after one; it exits when its input ends, which is when the run closes it or the run's process is
gone, however it went (run/watchdog.py marks a run that died without closing it KILLED). If the
agent itself dies, each call fails like an unreachable store: the tracker buffers and spools.

Started through ablate/child.py (target `serve`); then calls on the child's channel (child.py):
    use(uri)                 -> the modules imported for that store
    open(experiment)         -> the experiment's id
    METHOD(**its arguments)  -> its value, or {"error": "Type: message"} (runstore.CALLS; the line
                                redacted, never the exception itself: it may quote a password)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import signal
import subprocess
import sys
import threading

from ablate.child import Call, Calls, Channel, ChannelClosed, RemoteError, error, ok
from ablate.host import RUN_SIGNALS, import_available
from ablate.redact import redact
from ablate.streams import SteadyStream
from ablate.tracking.runstore import CALLS, RunStore

CLOSE_TIMEOUT_S = 30.0


class StoreError(RemoteError):
    """A call the agent could not make (the store refused it, or could not be reached): "Type: message"."""


class AgentGone(ConnectionError):
    """The agent process has ended: every later call fails like an unreachable store."""


CLIENT_MODULES = ("mlflow.tracking", "mlflow.entities", "netrc")


def mlflow_modules(uri: str) -> list[str]:
    """What a process that will call the store `uri` imports: MLflow's client, and the store the URI
    names (a server, or a database through SQLAlchemy's dialect for it, whose schema MLflow checks
    with alembic)."""
    names = list(CLIENT_MODULES)
    scheme = uri.split(":", 1)[0].split("+", 1)[0]  # postgresql+psycopg2 -> postgresql
    if scheme in ("http", "https"):
        return [*names, "mlflow.store.tracking.rest_store"]
    return [
        *names,
        "mlflow.store.tracking.sqlalchemy_store",
        "mlflow.store.tracking.sqlalchemy_workspace_store",
        "alembic.command",
        "alembic.config",
        f"sqlalchemy.dialects.{scheme}",
    ]


# -- the run's side ------------------------------------------------------------------------------------


class Agent:
    """The agent process, and the store calls made through it (thread-safe: one call at a time)."""

    def __init__(self):
        self.uri: str | None = None
        self.owner = os.getpid()
        self.experiment: str | None = None
        self.owed: list[int] = []  # calls sent without waiting (use, open): the next call reads their answers
        self.lock = threading.Lock()
        # Its own session: a terminal's Ctrl-C, meant for the run, does not reach it. It ends when
        # its input does, having made every call the run sent, not with the run's process.
        self.channel = Channel.spawn("ablate.tracking.agent:serve", dies_with_parent=False, start_new_session=True)
        self.proc = self.channel.proc

    def use(self, uri: str) -> None:
        """Have the agent import the code of the store `uri` now; its reply is read by the next call."""
        self._send_ahead("use", uri=uri)
        self.uri = uri

    def open(self, experiment: str) -> None:
        """Have the agent open the store and the experiment now; its reply is read by the next call."""
        self._send_ahead("open", experiment=experiment)
        self.experiment = experiment

    def _send_ahead(self, name: str, **args) -> None:
        with self.lock:
            self.owed.append(self.channel.send(name, **args))

    def call(self, name: str, *args):
        """The store's method `name` (runstore.CALLS) called with `args`, made by the agent."""
        keywords = _keywords(name, args)
        with self.lock:
            while self.owed:
                self._value(self.owed.pop(0))  # an open that failed fails the first call after it
            return self._value(self.channel.send(name, **keywords))

    def store_for(self, uri: str, experiment: str) -> AgentStore | None:
        """The store calls for a run of `experiment` in `uri` through this agent (whose opening is
        awaited by the first call), or None where it serves another store, or another process
        (a child forked from its owner)."""
        if self.uri != uri or self.owner != os.getpid() or not self.alive():
            return None
        if self.experiment is None:
            self.open(experiment)
        elif self.experiment != experiment:
            return None
        return AgentStore(self)

    def close(self) -> None:
        """End of input: the agent exits once it has answered everything sent (every call but an
        open waits for its reply). An agent that was never asked to open the store holds nothing
        and is killed at once, still importing perhaps: a command that fails its checks fails fast.
        Only its owner closes it; closing it twice does nothing."""
        if self.owner != os.getpid() or self.proc.stdout.closed:
            return
        self.channel.close()
        if self.experiment is None:
            self.proc.kill()
        try:
            self.proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()

    def _value(self, call_id: int):
        try:
            reply = self.channel.reply(call_id)
        except (ChannelClosed, OSError):
            raise AgentGone(self._gone()) from None
        if reply.failed:
            raise StoreError(reply.message["error"])
        return reply.value()

    def _gone(self) -> str:
        code = self.proc.poll()
        return f"the tracking agent for {self.uri} has ended" + (f" (exit status {code})" if code is not None else "")

    def alive(self) -> bool:
        return self.proc.poll() is None


class AgentStore:
    """A RunStore's methods (runstore.CALLS), each made by the agent."""

    def __init__(self, agent: Agent):
        self.agent = agent

    def __getattr__(self, name: str):
        if name not in CALLS:
            raise AttributeError(name)
        return lambda *args: self.agent.call(name, *args)


@functools.cache
def _signature(name: str) -> inspect.Signature:
    return inspect.signature(getattr(RunStore, name))


def _keywords(name: str, args: tuple) -> dict:
    """A RunStore method's positional arguments by name, as its call on the channel carries them."""
    _, *named = _signature(name).bind(None, *args).arguments.items()  # the first is the store itself
    return dict(named)


def start(uri: str) -> Agent | None:
    """An agent for a run about to track into `uri`, importing that store's code from now on; None
    where this process has imported MLflow already (a RunStore here then costs nothing to start).
    The command that starts it owns it, passes it to the run, and closes it."""
    if "mlflow.tracking" in sys.modules:
        return None
    agent = Agent()
    agent.use(uri)
    return agent


# -- the agent's side ----------------------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """A store's error as one line: MLflow quotes a server's whole answer (a web page, for a server
    that is not MLflow's) after "Response body:"; that is cut, and said for what it means."""
    text = redact(f"{type(exc).__name__}: {exc}")  # MLflow names the URL it called, password and all
    head, cut, _ = text.partition(". Response body:")
    line = " ".join(head.split())[:300]
    if cut and " 404 " in f"{head} ":
        line += " (the server at tracking.uri answered, but not as MLflow's; valid: `mlflow server`'s URL)"
    return line


def serve() -> None:
    for signum in RUN_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)  # the pipe to the run
    os.dup2(2, 1)  # anything MLflow prints goes to stderr, not into the replies
    sys.stdout = SteadyStream(os.fdopen(1, "w", buffering=1, closefd=False), 1)  # MLflow's "View run at": redacted
    import_available(CLIENT_MODULES)
    calls, served = Calls(), _Served()
    while not calls.eof:
        for call in calls.read_calls():
            try:
                replies.write(served.answer(call))
            except (BrokenPipeError, OSError):  # the run is gone (kill -9): nobody reads the reply
                os._exit(0)
    # Every call has been answered, so everything the run sent is in the store: exit now, without
    # the interpreter's clean-up of MLflow's modules (about 0.5 s the run would wait for).
    with contextlib.suppress(OSError):
        replies.close()
    os._exit(0)


class _Served:
    """The agent's side: the store it opened, and the calls made on it."""

    def __init__(self):
        self.uri: str | None = None
        self.store: RunStore | None = None

    def answer(self, call: Call) -> bytes:
        """The line answering `call`. The run decides what a failure means (an outage: buffer,
        retry); it gets the failure's one line."""
        try:
            return ok(call.id, self._make(call))
        except Exception as exc:
            return error(call.id, one_line(exc))

    def _make(self, call: Call):
        if call.name == "use":
            self.uri = call.args["uri"]
            return import_available(mlflow_modules(self.uri))
        if call.name == "open" and self.uri is not None:
            self.store = RunStore(self.uri, call.args["experiment"])
            return self.store.experiment_id
        if call.name in CALLS and self.store is not None:
            return getattr(self.store, call.name)(**call.args)
        raise StoreError(f"{call.name}: not a store call, or the store is not open")
