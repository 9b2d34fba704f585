"""Atomic file writes: a reader (another process, a relaunch, a crash's survivor) sees the old file
or the new one, never half of either.

Every file this project writes as a result (result.json, summaries, plots, plans, fits, caches,
checkpoints) goes through `write_bytes`: write a temporary file in the same directory, optionally
fsync it, then os.replace it over the target (atomic within one POSIX filesystem, rename(2)).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ablate.errors import ConfigError
from ablate.faults import failpoint
from ablate.redact import redact


def temporary_path(path: Path) -> Path:
    """A hidden sibling of `path`, unique per process, on the same filesystem (so the rename is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


# What a writer stopped midway leaves: its temporary files (temporary_path) and staging folders
# (staged_folder), each named with the pid of the process that made it.
LEFTOVER = re.compile(r"^\..*\.(\d+)\.tmp$")
# Written in a folder before the first file of a set is renamed into it, removed after the last: a
# folder that holds it holds a mix of two outputs (the writer was stopped between renames), which
# readers refuse (check_complete) and the next writer of the folder replaces whole.
INCOMPLETE = ".incomplete.json"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clear_leftovers(folder: Path) -> list[Path]:
    """Remove from `folder` the temporary files and staging folders of writers that are gone (a
    killed prepare's `.staging.PID.tmp`, a killed fit's `.fit.json.PID.tmp`); those of a live
    process are its own. Returns what was removed."""
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = LEFTOVER.match(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
    return removed


def check_complete(path: str | Path, key: str) -> None:
    """ConfigError (one line naming `key`) when the folder of the output `path` (a fit.json, a
    prepared folder) holds INCOMPLETE: a writer was stopped between renames, so its files are a mix
    of two outputs (or another writer is renaming them now)."""
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    marker = folder / INCOMPLETE
    if not os.path.lexists(marker):
        return
    doc = read_json(marker, {})
    pid = doc.get("pid") if isinstance(doc, dict) else None
    how = (
        f"pid {pid} is writing it now"
        if isinstance(pid, int) and _alive(pid)
        else "the command that wrote it was stopped before its last file"
    )
    raise ConfigError(
        f"{key}={path}: {folder} holds an incomplete output ({how}; {INCOMPLETE} is there) "
        "(valid: run the command that writes it again, which replaces it whole)"
    )


def _open_new(path: Path):
    """`path` created anew for writing, never through a link planted at its name (O_NOFOLLOW,
    O_EXCL): whatever stood there is removed first, so a link's target is left as it was."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    return os.fdopen(fd, "wb")


def _switch(moves: list[tuple[Path, Path]], folder: Path, last: str | None) -> None:
    """Rename each (temporary, target) of one output into `folder`: INCOMPLETE first, the file
    named `last` (the one readers look for: meta.json, fit.json) removed before the others are
    renamed and renamed after them, INCOMPLETE removed at the end. A kill at any point leaves either
    the old set whole, the new set whole, or a folder that says it is incomplete."""
    marker = folder / INCOMPLETE
    if len(moves) > 1:
        with _open_new(temporary_path(marker)) as f:
            f.write(json.dumps({"pid": os.getpid(), "files": [t.name for _, t in moves]}).encode())
        os.replace(temporary_path(marker), marker)
    ordered = sorted(moves, key=lambda m: m[1].name == last)
    if last is not None and len(moves) > 1:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / last)
    for tmp, target in ordered:
        failpoint("files.rename")
        os.replace(tmp, target)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker)


# What a disk says when it cannot take a file: full, over quota, read-only, past the largest file.
QUARANTINE = "quarantine"  # the folder, beside a bad file, it is moved into
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


class WriteError(ConfigError):
    """A command's output could not be written (a full or read-only disk); its message is one line
    that says nothing of the set was written. `errno`: why the disk refused it, where it did."""

    errno: int | None = None


def write_error(exc: OSError, path: Path, key: str = "out") -> WriteError:
    """The one line for a disk that refused `path`: which file, why, and that none of it stayed."""
    error = WriteError(
        f"{key}: cannot write {path} ({exc.strerror or exc}); nothing of this output was written "
        "(valid: a folder you can write on a disk with room)"
    )
    error.errno = exc.errno
    return error


def disk_refused(exc: BaseException) -> bool:
    """Whether `exc` is a disk that refused a write (DISK_ERRNOS), raised as it is or as WriteError:
    what it stopped was stopped by where it writes, not by what it is, and can go on there once the
    disk has room."""
    return isinstance(exc, (OSError, WriteError)) and exc.errno in DISK_ERRNOS


@contextmanager
def disk_errors(path: Path, key: str = "out") -> Iterator[None]:
    """A full or read-only disk met while writing `path` becomes WriteError (one line); any other
    OSError (a file that is not there, a permission) stays what it is."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_ERRNOS:
            raise write_error(exc, path, key) from None
        raise


def read_regular(path, limit: int = -1) -> bytes:
    """The bytes of the regular file at `path` (the first `limit`, when given). A FIFO, socket or
    device named where a file belongs would block the read for ever (a FIFO with no writer) or never
    end (/dev/zero): opened without blocking and refused, OSError EINVAL 'not a regular file'."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def refuse_folder(path: Path, key: str = "out") -> None:
    """WriteError when a folder stands where the file `path` will be renamed to (the rename would fail
    after the work is done)."""
    if Path(path).is_dir():
        raise WriteError(f"{key}: {path} is a folder where a file belongs; nothing of this output was written")


@contextmanager
def replacing(path: Path, durable: bool = False, previous: Path | None = None) -> Iterator[Path]:
    """Write to the yielded temporary path; on success it replaces `path` in one rename, on any
    error it is removed and `path` is untouched. For files written piece by piece (token files).

    durable: fsync the file before the rename and the directory after it, so that after a power
    loss the name points at complete data (checkpoints).
    previous: where the old `path` is renamed once the new file is complete, so that two complete
    files (old and new) exist at every moment but between the two renames, when `previous` is one.
    """
    path = Path(path)
    refuse_folder(path)
    tmp = temporary_path(path)
    try:
        with disk_errors(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):  # a link planted there is removed, not followed
                os.unlink(tmp)
            yield tmp
            _place(tmp, path, durable, previous)
    finally:
        with contextlib.suppress(OSError):  # a read-only disk refuses even this unlink of nothing
            tmp.unlink(missing_ok=True)


def _place(tmp: Path, path: Path, durable: bool, previous: Path | None) -> None:
    if durable:
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    if previous is not None and path.exists():
        os.replace(path, previous)
    os.replace(tmp, path)
    if durable:
        _fsync_dir(path.parent)


@contextmanager
def staged_folder(folder: Path, last: str, key: str = "out") -> Iterator[Path]:
    """Files written piece by piece into `folder` as one output (token files and their meta.json):
    each is written into the yielded hidden staging folder inside it, and only once every one is
    complete are they renamed into `folder` (`_switch`: `last`, the file that says the folder is
    finished, removed first and renamed last, INCOMPLETE there in between). What a writer killed
    earlier left (its staging folder, a temporary file) is removed first. The renames need no room;
    a full or read-only disk, or any error, removes the staging folder and leaves `folder` as it was
    (WriteError, one line, for a disk)."""
    folder = Path(folder)
    made = not folder.exists()
    stage = folder / f".staging.{os.getpid()}.tmp"
    try:
        with disk_errors(folder, key):
            clear_leftovers(folder)
            stage.mkdir(parents=True)
            yield stage
            names = sorted(p.name for p in stage.iterdir())
            _switch([(stage / n, folder / n) for n in names], folder, last)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    stage.rmdir()


def write_bytes(
    path: Path, data: bytes, durable: bool = False, fault: str | None = None, previous: Path | None = None
) -> Path:
    """Write `data` to `path` atomically (see `replacing`, which also says what `previous` keeps).

    fault: a failpoint name (faults.py) hit halfway through the write, where a kill leaves a torn
    temporary file and the old `path` intact.
    """
    with replacing(path, durable, previous) as tmp, _open_new(tmp) as f:
        if fault:
            f.write(data[: len(data) // 2])
            failpoint(fault)
            f.write(data[len(data) // 2 :])
        else:
            f.write(data)
    return Path(path)


def write_files(files: dict[Path, bytes], key: str = "out", last: str | None = None) -> list[Path]:
    """Every file of one command's output, written as a set: each to a temporary sibling first, and
    only when all of them are complete renamed into place, so a full or read-only disk leaves every
    file as it was (none of the new ones beside old ones). The renames need no new space and go
    through `_switch`, so a kill between two of them leaves a folder that says it is incomplete,
    never a mix that looks whole. `last`: the file readers take as the output (default: the first
    .json of the set). What killed writers left in the folders is removed first. WriteError (one
    line naming `key` and the file) when any write fails."""
    for path in files:
        refuse_folder(path, key)
    folders: dict[Path, list[Path]] = {}
    for path in files:
        folders.setdefault(Path(path).parent, []).append(Path(path))
    written: list[Path] = []
    try:
        for path, data in files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            clear_leftovers(Path(path).parent)
            tmp = temporary_path(Path(path))
            written.append(tmp)
            with _open_new(tmp) as f:
                f.write(data)
    except OSError as exc:
        for tmp in written:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise write_error(exc, path, key) from None
    for folder, paths in folders.items():
        name = last or next((p.name for p in paths if p.suffix == ".json"), None)
        with disk_errors(folder, key):
            _switch([(temporary_path(p), p) for p in paths], folder, name)
    return [Path(p) for p in files]


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_json(path: Path, obj: Any) -> Path:
    """A record as JSON, passwords in URIs hidden (redact.py): a record is read by others."""
    return write_text(path, redact(json.dumps(obj, indent=2, default=str)) + "\n")


def figure_bytes(fig, fmt: str = "png", dpi: int = 120, **savefig_kwargs) -> bytes:
    """A matplotlib figure rendered in memory, ready for write_bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format=fmt, **savefig_kwargs)
    return buffer.getvalue()


def save_figure(fig, path: Path, dpi: int = 120, **savefig_kwargs) -> Path:
    """A matplotlib figure as an image file (format from the suffix), atomically."""
    return write_bytes(path, figure_bytes(fig, Path(path).suffix.lstrip(".") or "png", dpi, **savefig_kwargs))


def cache_dir() -> Path:
    """Where this machine's measurements and generated data are kept between runs (ABLATE_CACHE,
    else ~/.cache/ablate). Everything in it can be deleted: it is made again when needed."""
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON document at `path`, or `default` when it is missing or not JSON."""
    try:
        return json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser's stack
        return default


def read_json_object(path: Path) -> dict:
    """The JSON object at `path`; empty when the file is missing, is not JSON or holds another type
    (a cache or a record that another process may be rewriting, or that a person edited)."""
    doc = read_json(path, {})
    return doc if isinstance(doc, dict) else {}


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PROBE_BYTES = 64 * 1024


def check_writable_dir(path, key: str) -> Path:
    """`path` is a directory this process can write, or can create (its nearest existing ancestor is
    a writable directory); checked without creating anything. ConfigError (one line) otherwise."""
    if not str(path).strip():
        raise ConfigError(f"{key} is empty (valid: a directory path)")
    path = Path(path).expanduser()
    probe = path if path.is_absolute() else Path.cwd() / path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        where = "" if probe == path else f" ({probe} is a file)"
        raise ConfigError(f"{key}={str(path)!r} is not a directory{where} (valid: a directory path)")
    try:  # os.access says yes to root on a read-only mount: ask the filesystem (an unnamed file)
        with tempfile.TemporaryFile(dir=probe) as f:
            # Room for the small files a command writes first (a run's config and log, a result):
            # a full disk takes an empty file but not these bytes.
            f.write(bytes(PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        where = "" if probe == path else f" ({probe}: {exc.strerror})"
        raise ConfigError(f"{key}={str(path)!r} cannot be written{where} (valid: a directory you can write)") from None
    return path


def check_file_slots(folder, names, key: str) -> None:
    """Each of `names` under `folder` (the files a command will write there) is a file or absent: a
    folder or a socket where one belongs would make that write fail after the work is done.
    ConfigError (one line) otherwise; checked before anything is created."""
    for name in names:
        path = Path(folder) / name
        kind = not_a_file(path) or next(
            ("a link" for p in list(path.parents)[: len(Path(name).parts) - 1] if p.is_symlink()), None
        )
        if kind:
            # a link is not followed: what it points to (a file of the user's elsewhere) stays untouched
            raise ConfigError(f"{key}: {path} is {kind} where a file belongs (valid: remove it, or another {key})")


def not_a_file(path: Path) -> str | None:
    """What stands at `path` where a regular file belongs: "a link", "a folder" or "not a regular
    file" (a FIFO, a socket, a device); None for a regular file, or for nothing there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return "a link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"


def quarantine(path: Path) -> Path:
    """Move `path` (state that is not what it should be: a torn checkpoint, a folder where a file
    belongs, an unreadable record) into quarantine/ beside it, under a name that keeps every earlier one."""
    folder = Path(path).parent / QUARANTINE
    folder.mkdir(exist_ok=True)
    target = folder / f"{Path(path).name}.{time.strftime('%Y%m%d-%H%M%S')}.{os.getpid()}"
    os.replace(path, target)
    return target


def safe_name(text: str) -> str:
    """`text` as one path component: letters, digits, '.', '-' and '_' kept, anything else (a '/',
    '..', a space) replaced by '_', so a name from a config cannot climb out of the folder it names
    something in."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in str(text))
    name = name.lstrip(".")
    return name or "_"


def within(root: str | Path, relative: str | Path, key: str) -> Path:
    """root/relative, required (every link resolved) to stay inside root resolved: OWASP's
    path-traversal rule, so that neither a '..' nor a link under root that leads out of it writes
    elsewhere. ConfigError (one line naming `key`) otherwise."""
    path = Path(root) / relative
    base, resolved = Path(root).resolve(), path.resolve()
    if not resolved.is_relative_to(base):
        raise ConfigError(f"{key}={str(relative)!r} leads to {resolved}, outside {base} (valid: a path inside {root})")
    return path


def inside(root: str | Path, *names: str) -> Path:
    """root/NAME/...: each name (from a run, an experiment, a CSV column, a config) made one safe path
    component, then kept inside root (`within`): a link under root cannot lead it out either."""
    return within(root, Path(*(safe_name(n) for n in names)), "name")


def output_dir(out: str | None, root: str | Path, *names: str) -> Path:
    """Where a command writes: out= when given (the user's own choice of folder), else
    root/NAME/... kept inside root (`inside`)."""
    return Path(out) if out else inside(root, *names)


def redact_files(folder: Path, pattern: str = "*.yaml") -> None:
    """Each file matching `pattern` in `folder` rewritten with its passwords hidden (a run's .hydra/
    files, which Hydra writes with the overrides as given)."""
    for path in Path(folder).glob(pattern):
        if not_a_file(path):
            continue
        text = path.read_text(errors="replace")
        if redact(text) != text:
            write_text(path, redact(text))
