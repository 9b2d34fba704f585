"""Tests for the synthetic language with an exact entropy rate (ablate.data.synthetic, its schema config/data.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.config import ConfigError, SyntheticDataConfig
from ablate.data.synthetic import SPACE, VOCAB_SIZE, SyntheticLanguage

SMALL = SyntheticDataConfig(n_words=200, successors=16, seed=3)


@pytest.fixture(scope="module")
def default_lang() -> SyntheticLanguage:
    return SyntheticLanguage()


@pytest.fixture(scope="module")
def small_lang() -> SyntheticLanguage:
    return SyntheticLanguage(SMALL)


def _words_of(lang: SyntheticLanguage, ids: np.ndarray) -> np.ndarray:
    """Word ids of the complete words in a stream (the first and last, possibly cut, are dropped)."""
    index = {w: i for i, w in enumerate(lang.words)}
    parts = lang.decode(ids).split(" ")[1:-1]
    return np.array([index[p] for p in parts], dtype=np.int64)


def test_deterministic_and_seed_dependent(small_lang: SyntheticLanguage) -> None:
    a = small_lang.generate(5000, seed=1)
    b = SyntheticLanguage(SMALL).generate(5000, seed=1)
    c = small_lang.generate(5000, seed=2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    other = SyntheticLanguage(SyntheticDataConfig(n_words=200, successors=16, seed=4))
    assert other.words != small_lang.words


def test_prefix_consistent(small_lang: SyntheticLanguage) -> None:
    long = small_lang.generate(200_000, seed=7)
    assert np.array_equal(small_lang.generate(1234, seed=7), long[:1234])


def test_vocab_length_and_range(default_lang: SyntheticLanguage) -> None:
    assert default_lang.vocab_size == VOCAB_SIZE == 27
    for n in (0, 1, 10, 100_003):
        x = default_lang.generate(n, seed=0)
        assert x.dtype == np.uint8 and x.shape == (n,)
    x = default_lang.generate(100_003, seed=0)
    assert int(x.max()) < 27
    assert set(np.unique(x).tolist()) == set(range(27))


def test_lexicon(default_lang: SyntheticLanguage) -> None:
    words = default_lang.words
    spec = default_lang.spec
    assert len(words) == len(set(words)) == spec.n_words
    assert all(spec.min_len <= len(w) <= spec.max_len and w.isalpha() and w.islower() for w in words)
    succ = default_lang.successors
    assert succ.shape == (spec.n_words, spec.successors)
    assert all(len(set(row)) == spec.successors for row in succ.tolist())
    assert np.all(default_lang.stationary > 0)  # the threaded cycle makes the chain irreducible


def test_decoded_text_is_lexicon_words(default_lang: SyntheticLanguage) -> None:
    ids = default_lang.generate(20_000, seed=5)
    text = default_lang.decode(ids)
    assert len(text) == len(ids)
    assert "  " not in text
    lexicon = set(default_lang.words)
    parts = text.split(" ")
    # Interior pieces are whole words; the ends may be cut by the window.
    assert all(p in lexicon for p in parts[1:-1])
    assert any(w.endswith(parts[0]) for w in lexicon)
    assert any(w.startswith(parts[-1]) for w in lexicon)


def _brute_force_rate(lang: SyntheticLanguage) -> float:
    """Entropy rate from the dense transition matrix and the eigenvector of P^T for eigenvalue 1.

    H = sum_i pi_i H(P_i) / sum_i pi_i (len_i + 1); duplicate successors would merge in P and show up
    as a smaller row entropy, so this also checks that rows hold distinct words.
    """
    W = lang.spec.n_words
    P = np.zeros((W, W))
    rows = np.repeat(np.arange(W), lang.spec.successors)
    np.add.at(P, (rows, lang.successors.ravel()), np.tile(lang.successor_probs, W))
    assert np.allclose(P.sum(axis=1), 1.0)
    vals, vecs = np.linalg.eig(P.T)
    k = int(np.argmin(np.abs(vals - 1.0)))
    pi = np.real(vecs[:, k])
    pi = pi / pi.sum()
    assert np.allclose(pi @ P, pi, atol=1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        row_h = -np.where(P > 0, P * np.log(P), 0.0).sum(axis=1)
    lengths = np.array([len(w) for w in lang.words])
    return float(pi @ row_h / (pi @ (lengths + 1)))


@pytest.mark.parametrize(
    "spec",
    [
        SyntheticDataConfig(n_words=5, successors=3, seed=0),
        SyntheticDataConfig(n_words=5, successors=3, seed=11, zipf_successor=1.7),
        SyntheticDataConfig(n_words=12, successors=2, seed=2, min_len=1, max_len=4),
        SyntheticDataConfig(n_words=60, successors=8, seed=9),
    ],
)
def test_exact_entropy_matches_brute_force(spec: SyntheticDataConfig) -> None:
    lang = SyntheticLanguage(spec)
    q = lang.successor_probs
    r = np.arange(1, spec.successors + 1) ** -spec.zipf_successor
    assert np.allclose(q, r / r.sum())
    assert lang.successor_entropy == pytest.approx(-(q * np.log(q)).sum(), rel=1e-12)
    assert lang.entropy_rate == pytest.approx(_brute_force_rate(lang), rel=1e-9)


def test_empirical_word_statistics(small_lang: SyntheticLanguage) -> None:
    """Bigram plug-in estimate of H(next word | word) from a sample matches H(q); the word frequencies and
    tokens per word match pi and E_pi[len + 1]."""
    ids = small_lang.generate(3_000_000, seed=0)
    seq = _words_of(small_lang, ids)
    n = len(seq) - 1
    W = small_lang.spec.n_words
    pair = np.bincount(seq[:-1] * W + seq[1:], minlength=W * W).astype(np.float64)
    prev = np.bincount(seq[:-1], minlength=W).astype(np.float64)
    nz = pair > 0
    joint = pair[nz] / n
    cond = pair[nz] / np.repeat(prev, W)[nz]
    h_plugin = float(-(joint * np.log(cond)).sum())
    # The plug-in estimate is biased low by about (#seen bigrams - #seen words) / (2n) (Miller-Madow).
    h_mm = h_plugin + (nz.sum() - (prev > 0).sum()) / (2 * n)
    assert h_mm == pytest.approx(small_lang.successor_entropy, abs=0.01)

    # Only the chain's edges occur.
    allowed = np.zeros((W, W), dtype=bool)
    allowed[np.repeat(np.arange(W), SMALL.successors), small_lang.successors.ravel()] = True
    assert np.all(allowed.ravel()[nz])

    freq = np.bincount(seq, minlength=W) / len(seq)
    assert 0.5 * np.abs(freq - small_lang.stationary).sum() < 0.02
    tokens_per_word = len(ids) / (np.sum(ids == SPACE))
    assert tokens_per_word == pytest.approx(small_lang.mean_word_length + 1.0, rel=0.01)


def test_stationary_from_token_zero(small_lang: SyntheticLanguage) -> None:
    """Token 0 has the stationary token law (mass 1/E[len+1] on space), not always a word start."""
    first = np.array([small_lang.generate(1, seed=s)[0] for s in range(4000)])
    p_space = 1.0 / (small_lang.mean_word_length + 1.0)
    assert np.mean(first == SPACE) == pytest.approx(p_space, abs=4 * math.sqrt(p_space / 4000))


def test_default_floor_plausible(default_lang: SyntheticLanguage) -> None:
    h = default_lang.entropy_rate
    assert h == pytest.approx(default_lang.successor_entropy / (default_lang.mean_word_length + 1.0), rel=1e-12)
    assert default_lang.successor_entropy == pytest.approx(3.3714, abs=1e-3)  # K = 64, Zipf 1.0
    assert 5.0 < default_lang.mean_word_length < 6.5  # uniform lengths 2..9, frequency-weighted
    assert 0.40 < h < 0.60  # the design note reports 0.482 for its lexicon draw
    assert h < 0.25 * math.log(27)


def test_rejects_bad_specs() -> None:
    """The language checks its config as the run's parse does: it is the same schema."""
    with pytest.raises(ConfigError, match=r"data\.n_words=700 is not a lexicon"):
        SyntheticLanguage(SyntheticDataConfig(n_words=700, min_len=2, max_len=2))  # only 676 two-letter words
    with pytest.raises(ConfigError, match=r"data\.successors=11 is out of range"):
        SyntheticLanguage(SyntheticDataConfig(n_words=10, successors=11))
    with pytest.raises(ValueError):
        SyntheticLanguage(SMALL).generate(-1)
