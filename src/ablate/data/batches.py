"""A run's training batches, each on its device before its step needs it.

get_batch is a pure function of (seed, step), so the batch of step s + 1 can be drawn while the
device still works on step s: the trainer asks for it (`prefetch`) once step s's work is queued.
On CUDA the rows are gathered into pinned host memory and copied with non_blocking=True, so the copy
is queued on the stream behind step s's kernels instead of stalling the host (a pageable `.to()`
is a synchronous copy). On a CPU the batch is the gathered tensor itself.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ablate.data.sources import get_batch


class TrainBatches:
    """Step s's (x, y), each (rows, block_size) int64 on `device`; `local(t)` picks this rank's rows
    of the global batch (DDP) before anything is copied."""

    def __init__(
        self,
        tokens: np.ndarray,
        rows: int,
        block_size: int,
        seed: int,
        device: str,
        local: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
    ):
        self.tokens, self.rows, self.block_size, self.seed = tokens, rows, block_size, seed
        self.device, self.local = device, local
        self.pin = device.startswith("cuda")
        self.ready: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def take(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step `step`'s batch, prefetched or drawn now; earlier prefetches are dropped."""
        batch = self.ready.pop(step, None)
        self.ready.clear()
        return batch if batch is not None else self._draw(step)

    def prefetch(self, step: int) -> None:
        """Draw step `step`'s batch now and queue its copy to the device."""
        if step not in self.ready:
            self.ready[step] = self._draw(step)

    def _draw(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = get_batch(self.tokens, self.rows, self.block_size, self.seed, step, "train")
        x, y = self.local(x), self.local(y)
        if self.pin:
            # x and y are views of one (B, T + 1) window: pinned as one buffer, copied once
            window = torch.cat([x, y[:, -1:]], dim=1).pin_memory().to(self.device, non_blocking=True)
            return window[:, :-1], window[:, 1:]
        return x.to(self.device), y.to(self.device)
