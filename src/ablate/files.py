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


def temporary_path(path: Path) -> Path:
    """A hidden sibling of `path`, unique per process, on the same filesystem (so the rename is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


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
    complete are they renamed into `folder`, `last` (the file that says the folder is finished)
    after the others. The renames need no room; a full or read-only disk, or any error, removes the
    staging folder and leaves `folder` as it was (WriteError, one line, for a disk)."""
    folder = Path(folder)
    made = not folder.exists()
    stage = folder / f".staging.{os.getpid()}.tmp"
    try:
        with disk_errors(folder, key):
            stage.mkdir(parents=True)
            yield stage
            names = sorted(p.name for p in stage.iterdir())
            for name in sorted(names, key=lambda n: n == last):
                os.replace(stage / name, folder / name)
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
    with replacing(path, durable, previous) as tmp, open(tmp, "wb") as f:
        if fault:
            f.write(data[: len(data) // 2])
            failpoint(fault)
            f.write(data[len(data) // 2 :])
        else:
            f.write(data)
    return Path(path)


def write_files(files: dict[Path, bytes], key: str = "out") -> list[Path]:
    """Every file of one command's output, written as a set: each to a temporary sibling first, and
    only when all of them are complete renamed into place, so a full or read-only disk leaves every
    file as it was (none of the new ones beside old ones). The renames need no new space. WriteError
    (one line naming `key` and the file) when any write fails."""
    for path in files:
        refuse_folder(path, key)
    written: list[Path] = []
    try:
        for path, data in files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary_path(Path(path))
            written.append(tmp)
            tmp.write_bytes(data)
    except OSError as exc:
        for tmp in written:
            tmp.unlink(missing_ok=True)
        raise write_error(exc, path, key) from None
    for path in files:
        os.replace(temporary_path(Path(path)), path)
    return [Path(p) for p in files]


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_json(path: Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


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
    except (OSError, ValueError):
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
        if path.exists() and not path.is_file():
            kind = "a folder" if path.is_dir() else "not a regular file"
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
