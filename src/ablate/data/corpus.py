"""Your text files as one byte stream: which files, in which order, and where validation starts.

The files are read in sorted order (reproducible) up to `max_bytes`. The validation split is either
the last `val_fraction` of the bytes (`val_split=tail`), or whole files drawn across the corpus
(`val_split=files`): the files ranked first by a hash of their path, until they hold val_fraction of
the bytes. A tail is one stretch of the text (in a corpus read package by package, the end of the
last package); files drawn by hash are a sample of every part of it. Byte-level runs and tokenized
runs split the text the same way, so their validation text is the same and bits per byte compare them.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ablate.config import ConfigError


@dataclass(frozen=True)
class Corpus:
    files: tuple[Path, ...]
    chunks: tuple[bytes, ...]  # one per file read (the last one cut at max_bytes)

    @property
    def size(self) -> int:
        return sum(map(len, self.chunks))

    def split(self, val_fraction: float, val_split: str = "tail") -> tuple[list[bytes], list[bytes]]:
        """(train chunks, val chunks), by `val_split` (module doc): at least one byte is val."""
        if val_split == "files":
            return self._split_files(val_fraction)
        n_val = max(1, int(self.size * val_fraction))
        cut = self.size - n_val
        train, val, seen = [], [], 0
        for chunk in self.chunks:
            if seen + len(chunk) <= cut:
                train.append(chunk)
            elif seen >= cut:
                val.append(chunk)
            else:
                train.append(chunk[: cut - seen])
                val.append(chunk[cut - seen :])
            seen += len(chunk)
        return [c for c in train if c], [c for c in val if c]

    def val_files(self, val_fraction: float) -> set[int]:
        """The indices of the files `val_split=files` holds out: ranked by sha256 of the path, taken
        until they hold at least val_fraction of the bytes, never every file."""
        if len(self.files) < 2:
            raise ConfigError(
                f"data.val_split=files needs at least 2 files and the corpus has {len(self.files)} "
                "(valid: more files, or val_split=tail)"
            )
        order = sorted(range(len(self.files)), key=lambda i: hashlib.sha256(str(self.files[i]).encode()).hexdigest())
        need, held, got = max(1, int(self.size * val_fraction)), set(), 0
        for i in order[:-1]:
            held.add(i)
            got += len(self.chunks[i])
            if got >= need:
                break
        return held

    def _split_files(self, val_fraction: float) -> tuple[list[bytes], list[bytes]]:
        held = self.val_files(val_fraction)
        train = [c for i, c in enumerate(self.chunks) if i not in held and c]
        val = [c for i, c in enumerate(self.chunks) if i in held and c]
        return train, val

    def unsplit_text(self, val_fraction: float) -> list[bytes]:
        """The text no split holds out at `val_fraction`: neither the tail nor the files drawn by
        hash (the whole tail split's training text where the corpus is one file). A tokenizer
        trained on it serves every split of the corpus without having seen validation text."""
        held = self.val_files(val_fraction) if len(self.files) > 1 else set()
        cut = self.size - max(1, int(self.size * val_fraction))
        out, seen = [], 0
        for i, chunk in enumerate(self.chunks):
            if i not in held and seen < cut:
                out.append(chunk[: cut - seen])
            seen += len(chunk)
        return [c for c in out if c]

    def fingerprint(self) -> str:
        """Which files and how much of each: a change of either means new tokens."""
        h = hashlib.sha256()
        for path, chunk in zip(self.files, self.chunks, strict=True):
            stat = path.stat()
            h.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0{len(chunk)}\n".encode())
        return h.hexdigest()[:16]


def resolve(entry: str) -> Path:
    """A data.paths entry: "stdlib" is the Python standard library's own source."""
    return Path(sysconfig.get_paths()["stdlib"]) if entry == "stdlib" else Path(str(entry)).expanduser()


def corpus_files(paths, glob: str) -> Iterator[Path]:
    for entry in paths:
        path = resolve(str(entry))
        if path.is_file():
            yield path
        elif path.is_dir():
            try:
                yield from (p for p in path.glob(glob) if p.is_file())
            except (ValueError, NotImplementedError) as exc:  # pathlib rejects e.g. '' and 'a/**b'
                raise ConfigError(f"data.glob={glob!r} is invalid: {exc} (valid: e.g. '**/*.txt')") from None
        else:
            # a packaged corpus (data=debian_docs) is missing when its packages are
            packaged = "; `make corpus` installs data=debian_docs's packages" if str(path).startswith("/usr/") else ""
            raise ConfigError(
                f"data.paths has {str(entry)!r}, which does not exist "
                f"(valid: existing files or folders, or stdlib{packaged})"
            )


def read_corpus(paths, glob: str, max_bytes: int) -> Corpus:
    files = sorted(corpus_files(paths, glob))
    if not files:
        raise ConfigError(
            f"data.paths={list(paths)} with data.glob={glob!r} matched no files (valid: existing files or folders)"
        )
    used, chunks, total = [], [], 0
    for f in files:
        try:
            b = f.read_bytes()
        except OSError:
            continue
        chunk = b[: max_bytes - total]
        if not chunk:
            continue
        used.append(f)
        chunks.append(chunk)
        total += len(chunk)
        if total >= max_bytes:
            break
    if total == 0:
        raise ConfigError(f"data.paths={list(paths)} are empty (valid: files with content)")
    return Corpus(tuple(used), tuple(chunks))


def package_versions(files) -> dict[str, str]:
    """{Debian package: version} of the packages that installed `files` (a corpus such as
    data=debian_docs is packages' files, so their versions say which text a run read); {} where
    dpkg is absent or owns none of them."""
    if shutil.which("dpkg-query") is None:
        return {}
    files = [str(f) for f in files]
    names = set()
    for i in range(0, len(files), 500):  # one dpkg-query per 500 files: an argv well under ARG_MAX
        found = _run("dpkg-query", "-S", *files[i : i + 500])
        names.update(line.split(":", 1)[0] for line in found.splitlines() if ": /" in line)
    versions = {}
    for name in sorted(n.strip() for n in names if "," not in n):
        version = _run("dpkg-query", "-W", "-f", "${Version}", name).strip()
        if version:
            versions[name] = version
    return versions


def _run(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
