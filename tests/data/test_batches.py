"""TrainBatches (data/batches.py): the batch a step trains on is get_batch's for that step whether it
was drawn ahead (prefetched while the device works) or when asked; a rank's rows are picked before
anything is copied."""

import numpy as np
import torch

from ablate.data import TrainBatches, get_batch

TOKENS = np.arange(10_000, dtype=np.uint16) % 97


def test_a_prefetched_batch_is_the_steps_own():
    batches = TrainBatches(TOKENS, rows=4, block_size=16, seed=3, device="cpu")
    batches.prefetch(5)
    for step in (5, 6, 6):  # prefetched, drawn when asked, drawn again
        x, y = batches.take(step)
        want_x, want_y = get_batch(TOKENS, 4, 16, 3, step, "train")
        assert torch.equal(x, want_x) and torch.equal(y, want_y)
        assert x.dtype == torch.int64 and x.shape == (4, 16)


def test_a_stale_prefetch_is_dropped_not_trained_on():
    batches = TrainBatches(TOKENS, rows=2, block_size=8, seed=0, device="cpu")
    batches.prefetch(9)
    x, _ = batches.take(2)  # a resumed or forked run asks for another step
    assert torch.equal(x, get_batch(TOKENS, 2, 8, 0, 2, "train")[0]) and not batches.ready


def test_each_rank_copies_its_own_rows_only():
    second_half = TrainBatches(TOKENS, rows=4, block_size=8, seed=1, device="cpu", local=lambda t: t[2:])
    x, y = second_half.take(0)
    full_x, full_y = get_batch(TOKENS, 4, 8, 1, 0, "train")
    assert torch.equal(x, full_x[2:]) and torch.equal(y, full_y[2:])
