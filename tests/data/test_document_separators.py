"""Document separators in prepared text (data/tokenizer.py, `ablate prepare eot=true`, the default):
each file's tokens are followed by <|endoftext|>, as GPT-2's data and nanoGPT's prepare scripts
separate documents, so that one file does not run on into the next."""

import numpy as np
import pytest

from ablate.config import ConfigError, parse_prepare
from ablate.data import tokenizer
from ablate.data.corpus import read_corpus

# Three documents that share words, so a 270-token BPE has merges to learn.
FILES = {
    "a.txt": "def alpha(x):\n    return x + 1\n" * 40,
    "b.txt": "class Beta:\n    value = 2\n" * 40,
    "c.txt": "print('gamma delta')\n" * 40,
}


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "text"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)
    return read_corpus([str(folder)], "*.txt", 1 << 20)


def tokens(meta, out, split: str) -> list[int]:
    return [int(i) for i in np.asarray(tokenizer.load_tokens(out, split, meta))]


def test_each_file_ends_with_the_end_of_text_token(corpus, tmp_path):
    out = tmp_path / "eot"
    meta = tokenizer.prepare(corpus, out, 0.2, vocab_size=270, val_split="files", eot=True)
    tok = tokenizer.load_tokenizer(out / tokenizer.TOKENIZER)
    assert meta.eot_id == tok.token_to_id(tokenizer.EOT) and meta.vocab_size == 270
    train, val = tokens(meta, out, "train"), tokens(meta, out, "val")
    assert (train.count(meta.eot_id), val.count(meta.eot_id)) == (2, 1)  # two files train, one validates
    assert train[-1] == meta.eot_id and val[-1] == meta.eot_id
    documents = [tok.decode(ids) for ids in split_at(train, meta.eot_id) + split_at(val, meta.eot_id)]
    assert sorted(documents) == sorted(FILES.values())  # every file whole, none run into another

    plain = tokenizer.prepare(corpus, tmp_path / "plain", 0.2, vocab_size=270, val_split="files")
    assert plain.eot_id is None  # without it, as before: the files run on into each other


def split_at(ids: list[int], sep: int) -> list[list[int]]:
    parts, current = [], []
    for i in ids:
        if i == sep:
            parts.append(current)
            current = []
        else:
            current.append(i)
    assert not current
    return parts


def test_a_tokenizer_without_the_token_is_refused_in_one_line(corpus, tmp_path):
    bare = tokenizer.prepare(corpus, tmp_path / "bare", 0.2, vocab_size=270, val_split="files")
    assert bare.eot_id is None
    with pytest.raises(ConfigError, match=r"has no <\|endoftext\|> token to put between files .*eot=false"):
        tokenizer.prepare(corpus, tmp_path / "x", 0.2, tokenizer_file=tmp_path / "bare" / tokenizer.TOKENIZER, eot=True)
    assert not (tmp_path / "x").exists()


def test_prepare_separates_files_by_default():
    assert parse_prepare({"paths": ["notes"], "out": "o"}).eot is True
