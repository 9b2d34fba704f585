"""Own text, own tokenizer (data/corpus.py, data/tokenizer.py, data=text tokenizer=bpe, data=tokens
data.dir): trained on a real corpus, the Python standard library's own source, on this machine."""

import numpy as np
import pytest

from ablate.config import ConfigError, TextDataConfig, TokenDataConfig
from ablate.data import tokenizer
from ablate.data.corpus import read_corpus
from ablate.data.sources import load_data
from ablate.run.result import bits_per_byte

CORPUS_BYTES = 400_000  # enough text for a few thousand merges, seconds to train


@pytest.fixture(scope="module")
def corpus():
    return read_corpus(["stdlib"], "**/*.py", CORPUS_BYTES)


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("bpe")
    seen = []
    meta = tokenizer.prepare(corpus, out, 0.05, vocab_size=1024, progress=lambda *a: seen.append(a))
    return out, meta, seen


def test_the_split_cuts_the_byte_stream_where_byte_level_runs_cut_it(corpus):
    train, val = corpus.split(0.05)
    stream = b"".join(corpus.chunks)
    n_val = int(len(stream) * 0.05)
    assert b"".join(train) == stream[:-n_val] and b"".join(val) == stream[-n_val:]
    text = load_data(TextDataConfig(max_bytes=CORPUS_BYTES))  # tokenizer=bytes: the same split
    assert bytes(text.val) == stream[-n_val:] and text.bytes_per_token == 1.0


def test_prepare_writes_token_files_that_decode_back_to_the_text(prepared, corpus):
    out, meta, seen = prepared
    assert {p.name for p in out.iterdir()} >= {"train.bin", "val.bin", "tokenizer.json", "meta.json"}
    assert meta.vocab_size == 1024 and meta.dtype == "uint16"
    train, val = corpus.split(0.05)
    assert (meta.train_bytes, meta.val_bytes) == (sum(map(len, train)), sum(map(len, val)))
    ids = tokenizer.load_tokens(out, "val", meta)
    assert len(ids) == meta.val_tokens and int(ids.max()) < meta.vocab_size
    tok = tokenizer.load_tokenizer(out / "tokenizer.json")
    assert tok.decode(ids.tolist()) == b"".join(val).decode("utf-8", errors="replace")
    # merges shorten source code well below a byte per token, and the record says by how much
    assert meta.bytes_per_token == pytest.approx(meta.val_bytes / meta.val_tokens) and meta.bytes_per_token > 2
    assert seen[-1] == ("val", meta.val_bytes, meta.val_bytes)  # the progress reached the end of each split
    assert tokenizer.read_meta(out) == meta


def test_an_existing_tokenizer_file_is_used_as_it_is(prepared, corpus, tmp_path):
    out, meta, _ = prepared
    again = tokenizer.prepare(corpus, tmp_path / "again", 0.05, tokenizer_file=out / "tokenizer.json")
    assert again.vocab_size == meta.vocab_size and again.val_tokens == meta.val_tokens
    assert np.array_equal(
        tokenizer.load_tokens(out, "train", meta), tokenizer.load_tokens(tmp_path / "again", "train", again)
    )


def test_a_run_reads_a_prepared_folder_with_its_vocabulary_and_bytes_per_token(prepared):
    out, meta, _ = prepared
    data = load_data(TokenDataConfig(dir=str(out)))
    assert (data.vocab_size, data.bytes_per_token, len(data.train)) == (1024, meta.bytes_per_token, meta.train_tokens)
    with pytest.raises(ConfigError, match="data.vocab_size=50257 but"):
        load_data(TokenDataConfig(dir=str(out), vocab_size=50257))


def test_text_with_bpe_prepares_once_and_reuses_the_cache(tmp_path, corpus):
    cfg = TextDataConfig(max_bytes=CORPUS_BYTES, tokenizer="bpe", vocab_size=512, cache_dir=str(tmp_path))
    first = load_data(cfg)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("tokenizer-")]
    stamp = (folder / "train.bin").stat().st_mtime_ns
    second = load_data(cfg)
    assert (folder / "train.bin").stat().st_mtime_ns == stamp  # read, not prepared again
    assert first.vocab_size == second.vocab_size == 512 and np.array_equal(first.val, second.val)
    assert first.bytes_per_token > 1.5


def test_one_tokenizer_serves_every_split_of_a_corpus_trained_on_text_neither_holds_out(tmp_path, corpus, monkeypatch):
    trained = []
    train_bpe = tokenizer.train_bpe
    monkeypatch.setattr(tokenizer, "train_bpe", lambda text, *a, **k: trained.append(text) or train_bpe(text, *a, **k))
    tail = TextDataConfig(max_bytes=CORPUS_BYTES, tokenizer="bpe", vocab_size=512, cache_dir=str(tmp_path))
    files = TextDataConfig(**{**tail.__dict__, "val_split": "files"})
    by_tail, by_files = load_data(tail), load_data(files)
    assert len(trained) == 1  # the second split encodes with the first's tokenizer
    folders = [p for p in tmp_path.iterdir() if p.is_dir() and (p / tokenizer.META).is_file()]
    assert len(folders) == 2
    assert (folders[0] / tokenizer.TOKENIZER).read_bytes() == (folders[1] / tokenizer.TOKENIZER).read_bytes()
    assert not np.array_equal(by_tail.val[:1000], by_files.val[:1000])  # two splits, one vocabulary
    text = b"".join(trained[0])
    for split in ("tail", "files"):
        _, val = corpus.split(0.05, split)
        assert all(chunk not in text for chunk in val if len(chunk) > 200)  # no validation text seen
    assert len(text) > 0.85 * corpus.size


def test_bits_per_byte_puts_tokenizers_on_one_scale():
    # a loss of ln 2 nats per token is one bit per token; at 4 bytes per token, a quarter bit per byte
    assert bits_per_byte(np.log(2), 4.0) == pytest.approx(0.25)
    assert bits_per_byte(None, 4.0) is None and bits_per_byte(1.0, None) is None


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (dict(tokenizer="bytes", vocab_size=1000), "data.vocab_size=1000 with data.tokenizer=bytes"),
        (dict(tokenizer="bpe", vocab_size=100), "data.vocab_size=100 is out of range"),
        (dict(val_fraction=0.0), "data.val_fraction=0.0 is invalid"),
    ],
)
def test_bad_text_settings_fail_in_one_line(cfg, message):
    with pytest.raises(ConfigError, match=message):
        TextDataConfig(**cfg).validate()


def test_a_missing_tokenizer_file_is_one_line(tmp_path, corpus):
    with pytest.raises(ConfigError, match="does not exist"):
        tokenizer.prepare(corpus, tmp_path, 0.05, tokenizer_file=tmp_path / "nope.json")
