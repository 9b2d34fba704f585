"""Generated token streams kept on disk (CACHE/data/KEY.npz), so that the runs of a sweep, its plan
and every later run of the same data read the tokens instead of generating them again (4M tokens
of the default synthetic language take most of a second of CPU; reading them, milliseconds).

The key is a hash of everything the tokens depend on: the source's config, the source code of
the modules that generate them, and numpy's version (its random streams may change between
versions). A changed generator therefore never reads an old file. Least recently used files are
deleted once the directory holds more than MAX_BYTES. A cache that cannot be written (read-only
home) only costs the generation.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ablate.files import cache_dir, write_bytes

MAX_BYTES = 1 << 30


def cached(kind: str, config: dict, generate: Callable[[], Any], modules: tuple, token_data: type):
    """The TokenData that `generate()` returns for `config`, from the cache when it is there.
    `modules`: those whose code makes the tokens; `token_data`: the TokenData class."""
    path = cache_dir() / "data" / f"{kind}-{key(config, modules)}.npz"
    try:
        with np.load(path, allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            data = token_data(train=saved["train"], val=saved["val"], **meta)
        os.utime(path)  # recently used
        return data
    except (OSError, ValueError, KeyError):
        pass  # missing, or torn by a crash before the rename (files.py makes that impossible) or foreign
    data = generate()
    meta = {
        field: getattr(data, field)
        for field in ("name", "vocab_size", "entropy_floor", "bytes_per_token", "fingerprint", "packages")
    }
    buffer = io.BytesIO()
    np.savez(buffer, train=data.train, val=data.val, meta=np.array(json.dumps(meta)))
    try:
        write_bytes(path, buffer.getvalue())
        evict(path.parent, MAX_BYTES)
    except OSError:
        pass
    return data


def key(config: dict, modules: tuple) -> str:
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    digest.update(np.__version__.encode())
    for module in modules:
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:24]


def evict(directory: Path, max_bytes: int) -> None:
    files = sorted(directory.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for path in files:
        total += path.stat().st_size
        if total > max_bytes:
            path.unlink(missing_ok=True)
