"""data/codec.py: each data source's tokens as text and back, and a run whose tokens came without a
tokenizer refused in one line."""

from __future__ import annotations

import pytest

from ablate.config import ConfigError, SyntheticDataConfig, TextDataConfig, TokenDataConfig
from ablate.data import tokenizer
from ablate.data.codec import codec_for


def test_the_synthetic_language_reads_as_its_alphabet():
    codec = codec_for(SyntheticDataConfig())
    assert codec.encode("ab z") == [0, 1, 26, 25]
    assert codec.decode([0, 1, 26, 25]) == "ab z"
    with pytest.raises(ConfigError, match=r"'!A' is outside the synthetic language's alphabet"):
        codec.encode("Ab!")


def test_bytes_read_as_utf8_and_a_cut_character_as_the_replacement():
    codec = codec_for(TextDataConfig(tokenizer="bytes"))
    ids = codec.encode("déjà")
    assert ids == list("déjà".encode()) and codec.decode(ids) == "déjà"
    assert codec.decode(ids[:2]) == "d\ufffd"


def test_a_prepared_folder_reads_with_its_own_tokenizer(tmp_path):
    tok = tokenizer.train_bpe([b"the cat sat on the mat. " * 200], vocab_size=264)
    tok.save(str(tmp_path / tokenizer.TOKENIZER))
    codec = codec_for(TokenDataConfig(dir=str(tmp_path)))
    ids = codec.encode("the cat sat")
    assert len(ids) < len("the cat sat") and codec.decode(ids) == "the cat sat"


def test_token_files_without_a_tokenizer_are_refused():
    with pytest.raises(ConfigError, match=r"without a tokenizer .* \(valid: tokenizer=FILE"):
        codec_for(TokenDataConfig(train_bin="a.bin", val_bin="b.bin"))
