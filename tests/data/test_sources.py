"""Data sources refuse what would take minutes or could not be trained on, before any work: a synthetic
language too big to generate (with the limit), a token file with an id out of range anywhere in it,
text patterns that cannot match."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ablate.config import ConfigError, SyntheticDataConfig, TextDataConfig, TokenDataConfig
from ablate.data import sources
from ablate.data.synthetic import SyntheticLanguage, cost_seconds


@pytest.mark.parametrize("n_words, tokens", [(300_000, 1_000), (4000, 2_000_000_000)])
def test_a_language_that_would_take_minutes_is_refused_at_once_with_the_limit(n_words, tokens):
    cfg = SyntheticDataConfig(n_words=n_words, train_tokens=tokens)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="min of CPU to generate.*up to 60 s"):
        sources.load_data(cfg)
    assert time.monotonic() - started < 2.0  # refused, not attempted


def test_the_cost_model_does_not_underestimate_a_real_build():
    """The estimate is an upper bound here: a 12,000-word language and 2M tokens, measured."""
    spec = SyntheticDataConfig(n_words=12_000)
    started = time.process_time()
    SyntheticLanguage(spec).generate(2_000_000)
    spent = time.process_time() - started
    assert spent < 2 * cost_seconds(spec, 2_000_000)  # the machine is shared: CPU time, with slack


def test_a_slow_but_acceptable_language_says_so_before_it_starts(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))  # generated here, not read from another test's cache
    monkeypatch.setattr(sources, "SAY_S", 0.0)
    sources.load_data(SyntheticDataConfig(n_words=500, train_tokens=20_000, val_tokens=2_000))
    assert capsys.readouterr().err.startswith("data: generating the synthetic language and 22,000 tokens (about")


@pytest.mark.parametrize(
    "change, key",
    [
        ({"seed": -1}, "data.seed=-1"),
        ({"zipf_unigram": -0.5}, "data.zipf_unigram"),
        ({"zipf_successor": 11.0}, "data.zipf_successor"),
        ({"successors": 1}, "data.successors=1"),
        ({"max_len": 65}, "data.max_len=65"),
        ({"min_len": 1, "max_len": 1, "n_words": 27}, "data.n_words=27"),
    ],
)
def test_every_synthetic_key_is_checked_before_the_library_sees_it(change, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        SyntheticDataConfig(**change).validate()


def test_every_zipf_exponent_in_range_gives_a_finite_floor():
    for s in (0.0, SyntheticDataConfig.MAX_ZIPF):
        rate = SyntheticLanguage(SyntheticDataConfig(n_words=500, zipf_unigram=s, zipf_successor=s)).entropy_rate
        assert np.isfinite(rate) and rate > 0


def test_a_token_id_out_of_range_past_the_first_million_is_found(tmp_path):
    ids = np.zeros(3_000_000, dtype=np.uint16)
    ids[2_500_000] = 50_300
    ids.tofile(tmp_path / "train.bin")
    ids[:1000].tofile(tmp_path / "val.bin")
    cfg = TokenDataConfig(train_bin=str(tmp_path / "train.bin"), val_bin=str(tmp_path / "val.bin"))
    with pytest.raises(ConfigError, match="token id 50300 at position 2,500,000 >= data.vocab_size=50257"):
        sources.load_data(cfg)


@pytest.mark.parametrize("glob", ["", "/etc/*", "~/x"])
def test_a_text_glob_that_cannot_match_is_refused(glob):
    with pytest.raises(ConfigError, match="data.glob"):
        TextDataConfig(glob=glob).validate()


def test_validation_windows_are_the_same_whatever_the_training_seed():
    """Two seeds are scored on one validation sample, so their difference is training noise alone;
    training batches still differ by seed."""
    import numpy as np

    from ablate.data.sources import get_batch, get_val_batch

    tokens = np.arange(10_000, dtype=np.uint16)
    x0, y0 = get_val_batch(tokens, 8, 16, 0)
    x1, _ = get_val_batch(tokens, 8, 16, 1)
    assert (y0[:, :-1] == x0[:, 1:]).all() and not (x0 == x1).all()
    assert (x0 == get_val_batch(tokens, 8, 16, 0)[0]).all()
    assert not (get_batch(tokens, 8, 16, 0, 0, "train")[0] == get_batch(tokens, 8, 16, 1, 0, "train")[0]).all()
