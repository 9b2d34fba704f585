"""Atomic checkpoints: a reader sees the previous complete file or the new complete file, never a torn one."""

from __future__ import annotations

import io
import os
from pathlib import Path

import torch

from ablate.faults import failpoint

CHECKPOINT = "checkpoint.pt"


def save(state: dict, directory: Path) -> Path:
    """Write to a temporary file in the same directory, fsync, then rename over the old one.

    os.replace is atomic on POSIX within one filesystem; the fsync before it makes sure the
    renamed file has its data on disk after a crash, not just its name.
    """
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / CHECKPOINT
    tmp = directory / f".{CHECKPOINT}.{os.getpid()}.tmp"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    try:
        with open(tmp, "wb") as f:
            f.write(data[: len(data) // 2])
            failpoint("checkpoint.write")  # a kill here leaves a torn temporary file
            f.write(data[len(data) // 2 :])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(directory)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def load(directory: Path) -> dict | None:
    """The latest checkpoint, or None. weights_only=True: nothing in it is unpickled as code."""
    path = directory / CHECKPOINT
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
