"""data/cache.py: generated tokens are made once per config and generator code, then read."""

import os

import numpy as np

from ablate.config import SyntheticDataConfig
from ablate.data import cache
from ablate.data.sources import load_data

SMALL = {"n_words": 300, "train_tokens": 20_000, "val_tokens": 5_000}


def test_the_same_config_reads_the_tokens_it_generated(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    cfg = SyntheticDataConfig(**SMALL)
    first = load_data(cfg)
    (saved,) = (tmp_path / "data").glob("synthetic-*.npz")
    again = load_data(cfg)
    assert np.array_equal(first.train, again.train) and np.array_equal(first.val, again.val)
    assert (again.vocab_size, again.entropy_floor, again.name) == (first.vocab_size, first.entropy_floor, "synthetic")
    assert list((tmp_path / "data").glob("*.npz")) == [saved]  # read, not made again
    load_data(SyntheticDataConfig(**{**SMALL, "seed": 1}))
    assert len(list((tmp_path / "data").glob("*.npz"))) == 2  # another seed, other tokens


def test_the_key_changes_with_the_generators_code(tmp_path):
    module = tmp_path / "generator.py"
    module.write_text("STREAM = 1\n")
    fake = type("Module", (), {"__file__": str(module)})
    before = cache.key({"n_words": 300}, (fake,))
    module.write_text("STREAM = 2\n")
    assert cache.key({"n_words": 300}, (fake,)) != before
    assert cache.key({"n_words": 301}, (fake,)) != cache.key({"n_words": 300}, (fake,))


def test_a_damaged_file_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    cfg = SyntheticDataConfig(**SMALL)
    first = load_data(cfg)
    (saved,) = (tmp_path / "data").glob("*.npz")
    saved.write_bytes(b"not an npz")
    again = load_data(cfg)
    assert np.array_equal(first.train, again.train)
    assert np.load(saved)["train"].shape == first.train.shape


def test_the_least_recently_used_files_go_first(tmp_path):
    for i, name in enumerate(("old", "mid", "new")):
        path = tmp_path / f"{name}.npz"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    cache.evict(tmp_path, max_bytes=250)
    assert sorted(p.stem for p in tmp_path.glob("*.npz")) == ["mid", "new"]
