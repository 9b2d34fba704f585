"""Learning-rate schedules (model/optim.py lr_at): cosine, warmup-stable-decay and constant."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ablate.config import ConfigError, OptimConfig
from ablate.model.optim import cooldown_start, lr_at
from ablate.provenance import config_hash


def rates(total: int, **kw) -> list[float]:
    cfg = OptimConfig(**{"lr": 1.0, "warmup_steps": 10, **kw})
    return [lr_at(s, total, cfg) for s in range(total)]


@pytest.mark.parametrize("total", [50, 100, 333, 1000])
def test_wsd_is_constant_until_its_cooldown_then_decays_over_the_last_fifth(total):
    cfg = OptimConfig(lr=1.0, warmup_steps=10, schedule="wsd", min_lr_ratio=0.0)
    start = cooldown_start(total, cfg)
    assert start == total - round(0.2 * total)
    lr = rates(total, schedule="wsd", min_lr_ratio=0.0)
    assert lr[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])  # linear warmup
    assert all(x == 1.0 for x in lr[10:start])
    cooldown = lr[start:]
    assert cooldown[0] == 1.0 and all(a > b for a, b in zip(cooldown, cooldown[1:], strict=False))
    assert 0 < cooldown[-1] < 1.0 / math.sqrt(total - start) + 1e-9  # 1 - sqrt((c-1)/c) <= 1/sqrt(c)


def test_cooldown_shapes_and_floor():
    total, floor = 100, 0.1
    mid = cooldown_start(total, OptimConfig(schedule="wsd")) + 10  # halfway through a 20-step cooldown
    for shape, left in (("1-sqrt", 1 - math.sqrt(0.5)), ("linear", 0.5), ("cosine", 0.5)):
        lr = rates(total, schedule="wsd", cooldown_shape=shape, min_lr_ratio=floor)
        assert lr[mid] == pytest.approx(floor + (1 - floor) * left), shape
        assert min(lr[10:]) > floor
    quarter = cooldown_start(total, OptimConfig(schedule="wsd")) + 5
    sqrt_, cos_ = (rates(total, schedule="wsd", cooldown_shape=s)[quarter] for s in ("1-sqrt", "cosine"))
    assert sqrt_ < cos_  # 1-sqrt drops fastest at the start of the cooldown


def test_cooldown_length_is_an_option_and_never_reaches_into_the_warmup():
    cfg = OptimConfig(schedule="wsd", warmup_steps=10, cooldown_fraction=0.5)
    assert cooldown_start(100, cfg) == 50
    assert cooldown_start(12, OptimConfig(schedule="wsd", warmup_steps=10, cooldown_fraction=1.0)) == 10
    assert cooldown_start(5, OptimConfig(schedule="wsd", warmup_steps=10)) == 4  # shorter than the warmup


def test_wsd_runs_of_any_budget_share_their_rates_before_the_shorter_cooldown():
    short, long = rates(200, schedule="wsd"), rates(800, schedule="wsd")
    start = cooldown_start(200, OptimConfig(warmup_steps=10, schedule="wsd"))
    assert short[:start] == long[:start] == rates(start, schedule="constant")


def test_cosine_and_constant_are_unchanged():
    lr = rates(110, min_lr_ratio=0.1)
    assert lr[10] == 1.0 and lr[-1] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 99 / 100)))
    assert rates(50, schedule="constant")[10:] == [1.0] * 40


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("optim.schedule", "linear", "optim.schedule='linear' is invalid (valid: cosine, wsd, constant)"),
        ("optim.cooldown_fraction", 0.0, "optim.cooldown_fraction=0.0 is invalid (valid: 0 < fraction <= 1, e.g. 0.2)"),
        ("optim.cooldown_shape", "sqrt", "optim.cooldown_shape='sqrt' is invalid (valid: 1-sqrt, linear, cosine)"),
    ],
)
def test_bad_schedule_options_fail_in_one_line(tmp_path, run_config, key, value, message):
    with pytest.raises(ConfigError) as err:
        run_config(tmp_path, **{key: value})
    assert str(err.value) == message


def test_cooldown_options_only_key_wsd_runs(tmp_path, run_config):
    """Adding the options kept every earlier (cosine, constant) run's config hash."""
    cosine = run_config(tmp_path)
    other = dataclasses.replace(cosine, optim=dataclasses.replace(cosine.optim, cooldown_fraction=0.5))
    assert config_hash(cosine) == config_hash(other)
    wsd = run_config(tmp_path, **{"optim.schedule": "wsd"})
    longer = dataclasses.replace(wsd, optim=dataclasses.replace(wsd.optim, cooldown_fraction=0.5))
    assert config_hash(wsd) != config_hash(longer) != config_hash(cosine)
