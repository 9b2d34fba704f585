"""One launch per config hash at a time, on one machine and across the nodes that share a state dir.

A launch holds STATE_DIR/<hash>/run.lock from before it decides whether to train, resume or skip
until its MLflow run is closed, so a second launch of the same config never finds a RUNNING run that
is still training and "resumes" it: it stops with one line naming the owner (`Busy`).

The lock is flock(2) on that file: the kernel drops it when its holder dies, however it dies
(kill -9, the OOM killer), so a killed owner leaves nothing stale. On NFS, Linux implements flock as
a POSIX lock on the whole file, which the server keeps under the client's lease (NFSv4, RFC 7530
section 9.6; lockd for v3): a node that dies loses it when its lease expires (90 s by default).

Where the filesystem has no working locks (flock fails, or an NFS mount with `nolock` makes them
local to each node: set ABLATE_RUN_LOCK=lease there) the lock is a lease instead: the file
STATE_DIR/<hash>/run.lease, created with O_EXCL, holding its owner, and touched by a heartbeat
thread every HEARTBEAT_S. A lease whose heartbeat is older than STALE_S, or whose owner on this
host is gone, is taken over.

Either way the file names its owner (host, pid, since when, and the MLflow run once there is one).

A sweep is claimed the same way, in its own folder (SWEEP_DIR/sweep.lock, sweep_lock), by the
process that launches it, from before it writes anything there until its summary: a second launch
into that folder would replace the first's sweep.json and parent run, and number its jobs over them.

The same lock is also taken where the run's record is, so that two launches with different state
dirs cannot both write one run: for a store in a file (sqlite), DB_FOLDER/.DB_NAME.claims/<hash>
(store_claim). A tracking server has no folder to lock; there the run's owner tag names the live
writer, and a launch that finds it alive on this host leaves the run alone (busy_with).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ablate.files import not_a_file, quarantine
from ablate.host import process_alive
from ablate.tracking import sqlite_path

LOCK_FILE = "run.lock"
LEASE_FILE = "run.lease"
# sysexits' EX_TEMPFAIL, "try again later": the exit status of a launch that finds its run or its
# sweep held by another.
EXIT_BUSY = 75
MODE_ENV = "ABLATE_RUN_LOCK"  # "flock" (default) or "lease"
HEARTBEAT_S = 10.0
STALE_S = 60.0
# A watchdog holds a dead launch's lock only while it marks the run KILLED: a relaunch waits for it,
# as long as it lives if it is on this host, else this long.
WATCHDOG_WAIT_S = 30.0
# flock errors that mean "this filesystem has no locks", as opposed to "someone holds it".
NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    since: float
    mlflow_run_id: str = ""
    role: str = "train"  # or "watchdog": closing the run of a launch that died (run/watchdog.py)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        run = f", MLflow run {self.mlflow_run_id}" if self.mlflow_run_id else ""
        return f"pid {self.pid} on {self.host} since {when}{run}"

    @classmethod
    def me(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), time.time())

    @classmethod
    def read(cls, path: Path) -> Owner | None:
        try:
            doc = json.loads(path.read_text())
            return cls(
                str(doc["host"]),
                int(doc["pid"]),
                float(doc["since"]),
                str(doc.get("mlflow_run_id", "")),
                str(doc.get("role", "train")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


class Busy(Exception):
    """Another launch holds the run (or the sweep): one line naming it and its owner."""

    def __init__(self, directory: Path, owner: Owner | None, what: str = "run"):
        self.directory, self.owner = directory, owner
        who = owner.describe() if owner else "another process (its owner file is unreadable)"
        if what == "output":
            message = (
                f"{directory} is being written by {who}; this command leaves it alone "
                "(wait for it to end, or write into another out=)"
            )
        elif what == "sweep":
            message = (
                f"sweep {directory} is already being run by {who}; this launch leaves it alone "
                "(wait for it to end, or launch into another hydra.sweep.dir)"
            )
        else:
            message = f"run {directory.name} is already being trained by {who}; this launch leaves it alone"
        super().__init__(message)


# Locks this process holds, by directory: a second acquire in the same process must not open and
# close the file again (closing any descriptor of a file drops the POSIX locks NFS emulates flock with).
_HELD: dict[str, RunLock] = {}


class RunLock:
    """Held from `acquire` to `release`; `acquire` raises Busy when another launch holds it."""

    def __init__(self, directory: Path, mode: str | None = None, what: str = "run"):
        self.directory = Path(directory)
        self.mode = mode or os.environ.get(MODE_ENV, "flock")
        self.what = what  # "run": STATE_DIR/<hash>/run.lock; "sweep": SWEEP_DIR/sweep.lock
        self.owner = Owner.me()
        self._fd: int | None = None
        self._beat: threading.Event | None = None

    @property
    def path(self) -> Path:
        return self.directory / (self._lease_file if self.mode == "lease" else self._lock_file)

    @property
    def _lock_file(self) -> str:
        return f"{self.what}.lock"  # LOCK_FILE for a run

    @property
    def _lease_file(self) -> str:
        return f"{self.what}.lease"  # LEASE_FILE for a run

    def acquire(self) -> RunLock:
        key = str(self.directory.resolve())
        if key in _HELD:
            raise Busy(self.directory, _HELD[key].owner, self.what)
        self.directory.mkdir(parents=True, exist_ok=True)
        deadline, told = time.monotonic() + WATCHDOG_WAIT_S, False
        while True:
            try:
                self._take()
                break
            except Busy as exc:
                if not _wait_for(exc.owner, deadline):
                    raise
                if not told and time.monotonic() > deadline and exc.owner is not None:
                    told = True
                    print(f"ablate: waiting for the watchdog {exc.owner.describe()} to close its run", file=sys.stderr)
                time.sleep(0.2)
        _HELD[key] = self
        return self

    def _take(self) -> None:
        for name in (self._lock_file, self._lease_file):
            _set_aside_if_not_a_file(self.directory / name)
        if self.mode != "lease" and not self._flock():
            self.mode = "lease"  # this filesystem has no locks
        if self.mode == "lease":
            self._lease()

    def _flock(self) -> bool:
        fd = os.open(self.directory / self._lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in NO_LOCKS:
                return False
            raise Busy(self.directory, Owner.read(self.directory / self._lock_file), self.what) from None
        self._fd = fd
        self._write_owner()
        return True

    def _lease(self) -> None:
        path = self.directory / self._lease_file
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.close(fd)
                self._write_owner()
                self._start_heartbeat()
                return
            except FileExistsError:
                holder = Owner.read(path)
                if not _stale(path, holder):
                    raise Busy(self.directory, holder, self.what) from None
                # Move the stale lease aside: of several launches racing here, one rename succeeds.
                aside = path.with_name(f"{path.name}.stale.{os.getpid()}")
                try:
                    os.rename(path, aside)
                    aside.unlink()
                except FileNotFoundError:
                    pass
        raise Busy(self.directory, Owner.read(path), self.what)

    def _start_heartbeat(self) -> None:
        stop = threading.Event()
        path = self.directory / self._lease_file

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                try:
                    os.utime(path)
                except OSError:
                    return

        threading.Thread(target=beat, name="ablate-lease", daemon=True).start()
        self._beat = stop

    def set_run(self, mlflow_run_id: str | None) -> None:
        """Name the MLflow run in the owner file, for the line a second launch prints."""
        if mlflow_run_id and mlflow_run_id != self.owner.mlflow_run_id:
            self.owner = Owner(self.owner.host, self.owner.pid, self.owner.since, mlflow_run_id)
            self._write_owner()

    def _write_owner(self) -> None:
        # In place, not by rename: the lock belongs to this inode (and a lease to its name).
        data = json.dumps(self.owner.__dict__).encode()
        fd = self._fd if self._fd is not None else os.open(self.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            if fd != self._fd:
                os.close(fd)

    def release(self) -> None:
        _HELD.pop(str(self.directory.resolve()), None)
        if self._beat is not None:
            self._beat.set()
            self._beat = None
            if Owner.read(self.path) == self.owner:
                self.path.unlink(missing_ok=True)
        if self._fd is not None:
            os.close(self._fd)  # the kernel drops the flock; the file stays for the next launch
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _set_aside_if_not_a_file(path: Path) -> None:
    """A folder (or a link, a FIFO) where the lock or lease file belongs would fail every launch:
    moved into quarantine/ beside it with one line, as a checkpoint that is not a file is."""
    kind = not_a_file(path)
    if kind:
        print(f"ablate: lock file {path} is {kind}; moved aside to {quarantine(path)}", file=sys.stderr)


def _wait_for(owner: Owner | None, deadline: float) -> bool:
    """Whether a launch that finds `owner` holding its lock tries again. Only a watchdog lets go by
    itself, once it has closed a dead launch's run: one on this host is waited for while it lives (its
    three store calls end by MLflow's request timeout and retries, which a tracking outage stretches
    past WATCHDOG_WAIT_S); one on another host, whose life cannot be seen here, until the deadline."""
    if owner is None or owner.role != "watchdog":
        return False
    if owner.host == socket.gethostname() and process_alive(owner.pid, started_before=owner.since):
        return True
    return time.monotonic() <= deadline


def _stale(path: Path, holder: Owner | None) -> bool:
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return True
    if age > STALE_S:
        return True
    if holder is not None and holder.host == socket.gethostname():
        return not process_alive(holder.pid, started_before=holder.since)
    return False


def holder(directory: Path) -> Owner | None:
    """The launch holding `directory`'s lock now, or None (a probe: takes and drops it at once)."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    key = str(directory.resolve())
    if key in _HELD:
        return _HELD[key].owner
    lease = directory / LEASE_FILE
    if lease.is_file():
        owner = Owner.read(lease)
        if not _stale(lease, owner):
            return owner or Owner("?", 0, 0.0)
    if not (directory / LOCK_FILE).is_file():
        return None  # nobody has ever locked it here (or a folder stands there, set aside at the launch)
    probe = RunLock(directory, "flock")
    try:
        if not probe._flock():
            return None  # no locks on this filesystem: only a lease could hold it
    except Busy as exc:
        return exc.owner or Owner("?", 0, 0.0)
    probe.release()
    return None


class SweepLock(RunLock):
    """The claim on a sweep's folder, held by the process that launches it (acquire raises Busy).
    A launch that writes nothing else there (its input refused while its jobs are planned) leaves
    no folder behind: release removes the lock file and the folders acquire had to create."""

    def __init__(self, sweep_dir: Path | str, mode: str | None = None):
        super().__init__(sweep_dir, mode, what="sweep")
        self.created: list[Path] = []  # the folders acquire made, deepest first

    def acquire(self) -> SweepLock:
        missing, folder = [], self.directory.absolute()
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        super().acquire()
        self.created = missing
        return self

    def release(self) -> None:
        super().release()
        if not self.created or not self.directory.is_dir():
            return
        if {p.name for p in self.directory.iterdir()} - {self._lock_file}:
            return  # the sweep wrote there: its folder stays
        (self.directory / self._lock_file).unlink(missing_ok=True)
        for folder in self.created:
            try:
                folder.rmdir()
            except OSError:  # another launch's folder by now, or not empty
                return


class OutputLock(SweepLock):
    """The claim on a command's output folder (out= of fit, backtest, compare, plan, prepare), held
    from before its work until its files are written: two commands writing one folder would leave
    one's fit.json beside the other's plots. Hidden, so that the folder lists only the output."""

    def __init__(self, folder: Path | str, mode: str | None = None):
        RunLock.__init__(self, folder, mode, what="output")
        self.created = []

    @property
    def _lock_file(self) -> str:
        return ".output.lock"

    @property
    def _lease_file(self) -> str:
        return ".output.lease"


def output_lock(folder: Path | str) -> OutputLock:
    """The claim on a command's output folder (OutputLock)."""
    return OutputLock(folder)


def sweep_lock(sweep_dir: Path | str) -> SweepLock:
    """The claim on a sweep's folder (SweepLock)."""
    return SweepLock(sweep_dir)


def store_claim(uri: str, config_hash: str) -> RunLock | None:
    """The lock on a run where its record is: beside a sqlite store; None for a server or no store."""
    path = sqlite_path(uri) if uri else None
    if path is None:
        return None
    return RunLock(path.resolve().parent / f".{path.name}.claims" / config_hash)


def acquire_all(locks: list[RunLock]) -> None:
    """Each lock in turn, or none: on Busy the ones already taken are released before it is raised."""
    taken: list[RunLock] = []
    try:
        for lock in locks:
            taken.append(lock.acquire())
    except Busy:
        for lock in reversed(taken):
            lock.release()
        raise


def owner_tag(owner: Owner) -> str:
    """The MLflow tag (tags.OWNER_TAG) naming the process that writes a run."""
    return f"{owner.host} {owner.pid} {owner.since:.3f}"


def busy_with(existing=None, directory: Path | None = None) -> str | None:
    """Who is training a run now, in words, or None: the holder of `directory`'s lock (when given),
    else the live process on this host that owns `existing`, a RUNNING MLflow run (a launch with
    another state dir writing to the same store). A RUNNING run owned elsewhere or by a process
    that is gone is not busy: it was interrupted, and is resumed."""
    if directory is not None:
        held = holder(directory)
        if held is not None:
            return held.describe()
    if existing is None or existing.status != "RUNNING" or not existing.owner:
        return None
    try:
        host, pid, since = existing.owner.split()
        owner = Owner(host, int(pid), float(since), existing.run_id)
    except ValueError:
        return None
    if owner.host != socket.gethostname() or owner.pid == os.getpid():
        return None
    return owner.describe() if process_alive(owner.pid, started_before=owner.since) else None
