"""Sharded checkpoints of an FSDP run (train.parallel=fsdp): every rank writes its own shards with
torch.distributed.checkpoint (DCP) into STATE/<hash>/shards-<step>/, and checkpoint.pt (rank 0,
checkpoint.py's atomic write) holds the rest of the state and names that folder. checkpoint.pt is the
commit: it is written after DCP's save has returned on rank 0, which coordinates the save and writes
its metadata once every rank has written, so a checkpoint.pt never names a torn folder.

DCP keeps each tensor's global shape and where its pieces lie, and loads into whatever sharding the
resuming run has: a checkpoint saved by 2 ranks resumes on 4, or on 1.

checkpoint.pt keeps the model's weight shapes (lists of sizes), so that the checks a resume makes
before loading (trainer.state_mismatch) read them as for an unsharded checkpoint.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import torch

SHARDS = "shards-{step}"
KEPT = 3  # the folder being written, checkpoint.pt's and checkpoint.prev.pt's


def weights(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state_dir: Path, step: int) -> dict:
    """The model and optimizer part of a checkpoint: their state dicts, or for a sharded model, the
    shards written by every rank (a collective: every rank calls it at the same step) and their folder."""
    from ablate.run import fsdp

    if not fsdp.is_sharded(model):
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    folder = SHARDS.format(step=step)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(state_dir / folder))
    if dist.get_rank() == 0:
        _prune(state_dir)
    shapes = {k: list(v.shape) for k, v in model_state.items()}
    return {"model": shapes, "optimizer": {}, "sharded": folder}


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict, state_dir: Path) -> None:
    """Load a checkpoint's weights and optimizer state into this run's model (sharded or not); a
    sharded checkpoint is read by every rank, each into its own shards, whatever the world it was saved in."""
    folder = state.get("sharded")
    if not folder:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    loaded = {"model": model_state, "optimizer": optim_state}
    dcp.load(loaded, checkpoint_id=str(state_dir / folder))
    set_state_dict(model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optimizer"])


def _prune(state_dir: Path) -> None:
    """Shard folders older than the KEPT newest: the one just written (not yet named by checkpoint.pt),
    the latest checkpoint's and the one before it, which a resume falls back to."""
    found = sorted(
        (int(m.group(1)), p) for p in state_dir.glob("shards-*") if (m := re.fullmatch(r"shards-(\d+)", p.name))
    )
    for _, old in found[:-KEPT]:
        shutil.rmtree(old, ignore_errors=True)
