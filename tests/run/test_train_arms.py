"""Training keys that came with the architecture arms: gradient accumulation, the z-loss, a budget in
tokens per parameter, Muon, and what result.json says of FLOPs."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ablate.model import accounting
from ablate.run import train
from ablate.run.prepare import total_steps
from ablate.run.trainer import z_loss


def test_accumulated_micro_batches_train_the_rows_of_one_big_batch(run_config, tmp_path):
    """batch_size 4 x grad_accum 2 draws the rows of batch_size 8 and averages the same gradient:
    the two runs end on the same loss to float rounding, and count the same tokens."""
    one = train.run(run_config(tmp_path / "a", **{"train.batch_size": 8}), tmp_path / "a" / "out")
    two = train.run(
        run_config(tmp_path / "b", **{"train.batch_size": 4, "train.grad_accum": 2}), tmp_path / "b" / "out"
    )
    assert one.tokens == two.tokens == 20 * 8 * 64
    assert two.final_val_loss == pytest.approx(one.final_val_loss, abs=2e-4)
    assert two.memory_bytes < one.memory_bytes  # the activations of one micro-batch at a time


def test_z_loss_is_the_mean_squared_log_normaliser():
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), math.log(3.0)]]])  # log Z = log 2, log 6
    assert z_loss(logits).item() == pytest.approx((math.log(2) ** 2 + math.log(6) ** 2) / 2)


def test_z_loss_changes_training_and_train_loss_stays_the_cross_entropy(run_config, tmp_path):
    plain = train.run(run_config(tmp_path / "a"), tmp_path / "a" / "out")
    pulled = train.run(run_config(tmp_path / "b", **{"train.z_loss": 0.1}), tmp_path / "b" / "out")
    assert pulled.final_val_loss != plain.final_val_loss
    assert abs(pulled.final_train_loss - plain.final_train_loss) < 0.5  # no 0.1 x (log Z)^2 added to it


def test_tokens_per_param_is_a_token_budget_of_the_model_size(run_config, tmp_path):
    cfg = run_config(tmp_path, **{"train.steps": None, "train.tokens_per_param": 2.0, "model.vocab_size": 27})
    n = accounting.params(cfg.model)
    assert total_steps(cfg) == math.ceil(2.0 * n / (16 * 64))


def test_a_muon_run_with_arms_records_its_flops_and_params(run_config, tmp_path):
    cfg = run_config(
        tmp_path,
        **{"optim.name": "muon", "model.position": "rope", "model.mlp": "swiglu", "model.n_kv_head": 1},
    )
    result = train.run(cfg, tmp_path / "out")
    assert result.status == "finished" and result.final_val_loss < 3.3  # ln 27 = 3.30 untrained
    assert result.flops == pytest.approx(result.tokens * result.flops_per_token)
    assert result.flops_source == "formula"
    assert result.params == accounting.params(dataclasses.replace(cfg.model, vocab_size=27))
