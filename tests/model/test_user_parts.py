"""A part of the user's own (model.attention / mlp / norm = PACKAGE.MODULE:CLASS): docs/models.md's
complete example, written and run exactly as the page shows it, in a folder outside the repository;
and a class that breaks the contract stopped in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from ablate.config import ConfigError, ModelConfig
from ablate.model import accounting
from ablate.model.gpt import GPT
from ablate.model.measure import measure_part
from support import ROOT

PAGE = ROOT / "docs" / "models.md"


def page_block(kind: str) -> str:
    """The first ```KIND block of the page's "Your own" section."""
    section = PAGE.read_text().split("## Your own", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{kind}\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_documented_user_attention_trains_from_a_folder_outside_the_repository(tmp_path):
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "window.py").write_text(page_block("python"))
    command = page_block("bash").strip()
    assert command.startswith("PYTHONPATH=$PWD ablate ")
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (result_file,) = tmp_path.glob("outputs/*/*/result.json")
    result = json.loads(result_file.read_text())
    assert result["status"] == "finished"
    assert result["flops_source"] == "measured: model.attention (FlopCounterMode forward x 3)"
    # the window only masks scores: FlopCounterMode counts the full T x T, as the formula would
    sys.path.insert(0, str(tmp_path))
    try:
        cfg = ModelConfig(**{**json_model(result_file), "vocab_size": 27})
        assert result["params"] == sum(p.numel() for p in GPT(cfg).parameters())
        assert result["flops_per_token"] == accounting.flops_per_token(
            ModelConfig(**{**json_model(result_file), "vocab_size": 27, "attention": "sdpa"})
        )
    finally:
        sys.path.remove(str(tmp_path))


def json_model(result_file) -> dict:
    import yaml

    return yaml.safe_load((result_file.parent / ".hydra" / "config.yaml").read_text())["model"]


class Widens(torch.nn.Module):
    """Breaks the contract: (B, T, C) -> (B, T, 2C)."""

    def __init__(self, cfg):
        super().__init__()
        self.fc = torch.nn.Linear(cfg.n_embd, 2 * cfg.n_embd)

    def forward(self, x):
        return self.fc(x)


class Scales(torch.nn.Module):
    """Keeps the contract: a learned per-channel scale."""

    def __init__(self, cfg):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(cfg.n_embd))

    def forward(self, x):
        return x * self.gain


def test_a_class_that_breaks_the_contract_stops_in_one_line_naming_it():
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, mlp=f"{__name__}:Widens")
    with pytest.raises(ConfigError) as err:
        measure_part(cfg, "mlp")
    valid = "(valid: a module whose forward maps (B, T, C) to (B, T, C))"
    assert str(err.value) == f"model.mlp={__name__}:Widens maps (2, 8, 16) to (2, 8, 32) {valid}"


def test_a_users_norm_is_counted_by_building_it_and_costs_no_flops():
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11, norm=f"{__name__}:Scales")
    built = GPT(cfg)
    assert accounting.params(cfg) == sum(p.numel() for p in built.parameters())
    assert accounting.flops_per_token(cfg) == accounting.flops_per_token(dataclasses.replace(cfg, norm="layernorm"))
    assert accounting.flops_source(cfg).startswith("measured: model.norm")
    assert torch.equal(built.ln_f.gain, torch.ones(16))  # its own initialisation is kept
