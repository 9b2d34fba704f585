"""A run's tokens as text and text as its tokens, for every data source: the synthetic language's
27-letter alphabet, the bytes of text (one token per byte), and a byte-level BPE tokenizer, the one
a run on data=text data.tokenizer=bpe cached under data.cache_dir, or the tokenizer.json that
`ablate prepare` wrote into a data=tokens folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ablate.config import ConfigError, DataConfig, SyntheticDataConfig, TextDataConfig, TokenDataConfig
from ablate.data import synthetic, tokenizer
from ablate.data.corpus import read_corpus
from ablate.data.sources import DEFAULT_BPE_VOCAB


class Codec(Protocol):
    name: str  # what the text is cut into, for a record

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class Alphabet:
    """The synthetic language: 'a'..'z' and the space, ids 0..26."""

    name: str = "the synthetic language's alphabet (a-z and space)"

    def encode(self, text: str) -> list[int]:
        try:
            return synthetic.SyntheticLanguage.encode(text)
        except ValueError as exc:
            raise ConfigError(f"prompt={text!r}: {exc}") from None

    def decode(self, ids: list[int]) -> str:
        return synthetic.SyntheticLanguage.decode(np.asarray(ids))


@dataclass(frozen=True)
class Bytes:
    """Text as its UTF-8 bytes, one token each; a cut through a character reads as U+FFFD."""

    name: str = "bytes (UTF-8, one token per byte)"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Bpe:
    """A `tokenizers` tokenizer.json."""

    path: Path
    tok: object

    @property
    def name(self) -> str:
        return f"byte-level BPE, {self.path}"

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)


def bpe(path: Path) -> Bpe:
    return Bpe(Path(path), tokenizer.load_tokenizer(path))


def codec_for(cfg: DataConfig) -> Codec:
    """The codec of the tokens a run on `cfg` trained on; ConfigError in one line when its tokenizer
    is not on this machine, or the tokens came with none."""
    if isinstance(cfg, SyntheticDataConfig):
        return Alphabet()
    if isinstance(cfg, TextDataConfig):
        return Bytes() if cfg.tokenizer == "bytes" else bpe(_cached_tokenizer(cfg))
    if isinstance(cfg, TokenDataConfig) and cfg.dir:
        return bpe(Path(cfg.dir).expanduser() / tokenizer.TOKENIZER)
    raise ConfigError(
        "the run trained on token files without a tokenizer (data.train_bin, data.val_bin) "
        "(valid: tokenizer=FILE, the tokenizer.json that wrote them)"
    )


def _cached_tokenizer(cfg: TextDataConfig) -> Path:
    """The tokenizer.json of the folder data/sources.py prepared for this corpus (the same key)."""
    corpus = read_corpus(cfg.paths, cfg.glob, cfg.max_bytes)
    vocab = cfg.vocab_size or DEFAULT_BPE_VOCAB
    folder = Path(cfg.cache_dir).expanduser() / tokenizer.cache_key(corpus, cfg.val_fraction, vocab, cfg.val_split)
    path = folder / tokenizer.TOKENIZER
    if not path.is_file():
        raise ConfigError(
            f"the run's tokenizer is not in data.cache_dir={cfg.cache_dir} (no {path}: the corpus changed, or the "
            "cache was emptied) (valid: train the run's data again, or tokenizer=FILE)"
        )
    return path
