"""Atomic checkpoints: a reader sees the previous complete file or the new complete file, never a torn one.

Beside checkpoint.pt, checkpoint.json holds what deciding about a run needs (its step, its MLflow
run, its config hash) so that a sweep can plan without loading tensors or importing torch. It is
written after the .pt file, so whenever it names a step, that step's tensors are on disk.

The checkpoint before the latest stays as checkpoint.prev.pt, its own file (renamed there once the new
one is complete, so it costs no copy and nothing done to the latest touches it): when the latest turns
out unreadable (truncated by hand, a disk that lied, a file from another config) the run goes on from
the one before.
A checkpoint that does not load or does not match its run is never deleted: `load_good` moves it to
STATE/<hash>/quarantine/ and names it in one line.

Off the step path: BackgroundSaver copies the state to host memory (the only part training waits
for: a device-to-host copy on a GPU, a memcpy on a CPU) and a thread serializes and writes it, while
the next steps run. One write at a time; a failed write (a full disk) is raised at the next save
or wait, so the run ends as a synchronous write would have ended it.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ablate.files import not_a_file, quarantine, read_json, write_bytes, write_json

CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"
META = "checkpoint.json"
# What the trainer needs from a checkpoint to resume (trainer.Trainer._checkpoint writes them all).
REQUIRED = ("model", "optimizer", "rng", "step", "train_time", "pending")


@dataclass(frozen=True)
class Fork:
    """Another run's checkpoint that a run starts from instead of step 0: a cooldown branch's trunk
    at the step its cooldown begins (run/branches.py)."""

    step: int
    directory: Path


@dataclass(frozen=True)
class CheckpointMeta:
    step: int
    mlflow_run_id: str  # "" when the run was not tracked
    config_hash: str


def save(state: dict, directory: Path) -> Path:
    """torch.save to memory, then one durable atomic write (files.write_bytes: fsync, rename) that
    moves the latest checkpoint to checkpoint.prev.pt once the new one is complete."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    quarantine_non_files(directory)
    path = write_bytes(
        directory / CHECKPOINT, buffer.getvalue(), durable=True, fault="checkpoint.write", previous=directory / PREVIOUS
    )
    write_json(directory / META, _meta_doc(state))
    return path


def host_copy(state):
    """The state with every tensor copied to host memory (a copy even on a CPU: training goes on
    updating the originals in place)."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: host_copy(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(host_copy(v) for v in state)
    return state


class BackgroundSaver:
    """`save(state, directory)` returns once the state is copied to host memory; a thread writes it."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def save(self, state: dict, directory: Path) -> None:
        self.wait()  # the previous write is complete (or its failure raised) before the next begins
        snapshot = host_copy(state)
        self.thread = threading.Thread(target=self._write, args=(snapshot, directory), name="ablate-checkpoint")
        self.thread.start()

    def _write(self, snapshot: dict, directory: Path) -> None:
        try:
            save(snapshot, directory)
        except BaseException as exc:  # handed to the training thread at its next save or wait
            self.error = exc

    def wait(self) -> None:
        """Until the write in flight is on disk; raises its failure."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def load(directory: Path) -> dict | None:
    """The latest checkpoint as it is, or None (no checks: `load_good` is what a resume uses)."""
    path = directory / CHECKPOINT
    return read(path) if path.is_file() else None


def read(path: Path) -> dict:
    """One checkpoint file. weights_only=True: nothing in it is unpickled as code."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def load_good(directory: Path, config_hash: str, check: Callable[[dict], str | None] | None = None) -> dict | None:
    """The newest checkpoint in `directory` that loads and belongs to this run (its config hash, the
    keys a resume needs, and whatever `check(state)` says: None when it fits, else why not); None
    when there is none. Each one that does not is quarantined with one line on stderr."""
    quarantine_non_files(directory)
    for name in (CHECKPOINT, PREVIOUS):
        path = directory / name
        if not path.is_file():
            continue
        try:
            state = read(path)
            problem = _mismatch(state, config_hash) or (check(state) if check else None)
        except Exception as exc:  # torn zip, not a torch file, refused by weights_only, ...
            problem = f"does not load ({type(exc).__name__}: {first_sentence(str(exc))})"
        if problem is None:
            if name == PREVIOUS:  # it becomes the latest, so that DDP helper ranks load the same one
                os.replace(path, directory / CHECKPOINT)
                write_json(directory / META, _meta_doc(state))
            return state
        moved = quarantine(path)
        if name == CHECKPOINT:
            (directory / META).unlink(missing_ok=True)
        print(f"ablate: checkpoint {path} {problem}; moved aside to {moved}", file=sys.stderr)
    return None


def _meta_doc(state: dict) -> dict:
    return {
        "step": int(state["step"]),
        "mlflow_run_id": state.get("mlflow_run_id") or "",
        "config_hash": state.get("config_hash", ""),
    }


def first_sentence(text: str) -> str:
    """torch's messages run to paragraphs with terminal colours: their first sentence, plain."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text).strip().splitlines()[0] if text.strip() else "no message"
    return text.split(". ")[0][:120]


def _mismatch(state, config_hash: str) -> str | None:
    if not isinstance(state, dict):
        return f"holds a {type(state).__name__}, not a checkpoint"
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        return f"lacks {', '.join(missing)}"
    found = state.get("config_hash")
    if found and found != config_hash:
        return f"belongs to config {found}, not {config_hash}"
    return None


def quarantine_non_files(directory: Path) -> None:
    """A checkpoint or its sidecar that is there but not a file (a folder, a socket where a person or a
    tool put one) would make the next write fail mid-run: each is moved aside with one line instead."""
    for name in (CHECKPOINT, PREVIOUS, META):
        path = directory / name
        kind = not_a_file(path)
        if kind:
            print(
                f"ablate: checkpoint {path} is {kind}, not a file; moved aside to {quarantine(path)}", file=sys.stderr
            )


def meta(directory: Path) -> CheckpointMeta | None:
    """What the latest checkpoint in `directory` is, without loading tensors when its sidecar is
    there; None when there is none. One that cannot be read counts as a checkpoint at step 0, so
    that the launch that resumes from it finds out, says so and moves it aside."""
    if not (directory / CHECKPOINT).is_file():
        return _meta_of(directory / PREVIOUS)
    doc = read_json(directory / META)
    if not isinstance(doc, dict):  # a checkpoint written before the sidecar existed, or a lost sidecar
        return _meta_of(directory / CHECKPOINT) or _meta_of(directory / PREVIOUS)
    return CheckpointMeta(int(doc.get("step") or 0), doc.get("mlflow_run_id") or "", doc.get("config_hash") or "")


def _meta_of(path: Path) -> CheckpointMeta | None:
    if not path.is_file():
        return None
    try:
        state = read(path)
        return CheckpointMeta(int(state["step"]), state.get("mlflow_run_id") or "", state.get("config_hash") or "")
    except Exception:  # there, but unreadable: the run that resumes from it quarantines it (load_good)
        return CheckpointMeta(0, "", "")
