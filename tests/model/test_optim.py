"""optim.py's eager optimizers: torch's arithmetic step for step, without importing torch._dynamo."""

import subprocess
import sys

import pytest
import torch

from ablate.config import ModelConfig, OptimConfig
from ablate.model.gpt import GPT
from ablate.model.optim import EagerOnly, Fp32StateAdamW, ScaledLRAdamW, build_optimizer
from support import ROOT


def _model(mup: bool = False, dtype=torch.float32) -> GPT:
    torch.manual_seed(0)
    cfg = ModelConfig(name="t", n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=17, mup=mup, mup_base_width=16)
    return GPT(cfg).to(dtype)


def _trajectory(model: GPT, opt, steps: int = 4) -> list[torch.Tensor]:
    torch.manual_seed(1)
    for step in range(steps):
        x = torch.randint(0, 17, (4, 8))
        _, loss = model(x, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = 1e-2 * (step + 1) / steps
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1:  # a checkpoint's round trip in the middle
            opt.load_state_dict(opt.state_dict())
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("mup, dtype", [(False, torch.float32), (True, torch.float32), (False, torch.bfloat16)])
def test_the_eager_optimizer_takes_the_same_steps_as_torchs(mup, dtype):
    eager_model, torch_model = _model(mup, dtype), _model(mup, dtype)
    eager = build_optimizer(eager_model, OptimConfig(weight_decay=0.1))
    reference = build_optimizer(torch_model, OptimConfig(weight_decay=0.1), compiled=True)
    assert isinstance(eager, EagerOnly) and not isinstance(reference, EagerOnly)
    assert type(reference) in (torch.optim.AdamW, ScaledLRAdamW, Fp32StateAdamW)
    if dtype == torch.bfloat16:  # stochastic rounding draws from torch's generator: same seed, same draws
        torch.manual_seed(2)
        got = _trajectory(eager_model, eager)
        torch.manual_seed(2)
        want = _trajectory(torch_model, reference)
    else:
        got, want = _trajectory(eager_model, eager), _trajectory(torch_model, reference)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_a_run_that_does_not_compile_never_imports_dynamo(tmp_path):
    """AdamW's constructor, zero_grad, state_dict and step would each import torch._dynamo (about
    as long as importing torch); a whole run, checkpoints included, must not."""
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(ROOT / "tests")!r})
from support import run_config
from ablate.run import train
cfg = run_config(Path({str(tmp_path)!r}), **{{"train.steps": 6, "train.checkpoint_interval": 3}})
result = train.run(cfg, Path({str(tmp_path / "out")!r}))
assert result.status == "finished", result.reason
print("torch._dynamo" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
