"""+sweep=text_ladder_tuned keeps the promises its header makes: no run under 512 optimizer steps,
warmup by the ladder's rule, and a target (experiments/text_ladder_tuned/study.yaml) with at least
ten times the FLOPs of the ladder's largest run."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, RunConfig, parse_run
from ablate.model.accounting import flops_per_token, params_non_embedding

STUDY = Path(__file__).resolve().parents[2] / "experiments" / "text_ladder_tuned" / "study.yaml"
RUNGS = ("femto", "pico", "micro", "nano", "tiny")
MIN_STEPS = 512  # runs shorter than this are in training's early phase, which the law does not describe
MAX_WARMUP = 64  # an eighth of the shortest run


@pytest.fixture
def hydra_conf():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def run_config(overrides: list[str]) -> RunConfig:
    cfg = compose("config", overrides=overrides)
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("state_dir", None)  # resolves against hydra:runtime, absent outside a launched job
    return parse_run(tree)


def flops(cfg: RunConfig, tokens: int) -> float:
    model = replace(cfg.model, vocab_size=cfg.data.vocab_size)
    return flops_per_token(model) * tokens


def test_the_sweep_is_every_rung_at_two_seeds(hydra_conf):
    cfg = compose("config", overrides=["+sweep=text_ladder_tuned"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert tuple(params["+tuned_rung"].split(",")) == RUNGS
    assert params["train.seed"] == "0,1"


@pytest.mark.parametrize("rung", RUNGS)
def test_each_rung_trains_512_steps_or_more_after_a_warmup_set_by_its_size(hydra_conf, rung):
    cfg = run_config(["+sweep=text_ladder_tuned", f"+tuned_rung={rung}"])
    tokens_per_step = cfg.train.batch_size * cfg.train.grad_accum * cfg.model.block_size
    assert min(cfg.train.tokens) // tokens_per_step >= MIN_STEPS
    model = replace(cfg.model, vocab_size=cfg.data.vocab_size)
    assert cfg.optim.warmup_steps == min(round(params_non_embedding(model) / tokens_per_step), MAX_WARMUP)
    assert cfg.optim.beta2 == 0.99


def test_the_target_has_ten_times_the_largest_runs_compute(hydra_conf):
    target = yaml.safe_load(STUDY.read_text())["target"]["overrides"]
    largest = max(
        flops(cfg, max(cfg.train.tokens))
        for cfg in (run_config(["+sweep=text_ladder_tuned", f"+tuned_rung={r}"]) for r in RUNGS)
    )
    run = run_config([o for o in target if not o.startswith(("hydra.", "tracking.experiment"))])
    assert flops(run, run.train.tokens) >= 10 * largest
    assert run.optim.warmup_steps <= MAX_WARMUP and run.optim.beta2 == 0.99  # the ladder's rule, unchanged
    assert math.log10(flops(run, run.train.tokens) / largest) < 1.1  # and not far past it
