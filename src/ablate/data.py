"""Data sources: token id streams for training and validation, and how batches are drawn.

Every source returns a `TokenData`: two 1-D integer arrays (train, val), the vocabulary size,
and the entropy floor in nats/token when it is known exactly (the synthetic language).
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ablate.config import ConfigError, DataConfig, SyntheticDataConfig, TextDataConfig, TokenDataConfig


@dataclass
class TokenData:
    name: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    entropy_floor: float | None = None


def load_data(cfg: DataConfig) -> TokenData:
    if isinstance(cfg, SyntheticDataConfig):
        return _synthetic(cfg)
    if isinstance(cfg, TextDataConfig):
        return _text(cfg)
    if isinstance(cfg, TokenDataConfig):
        return _tokens(cfg)
    raise ConfigError(f"data.kind={getattr(cfg, 'kind', None)!r} is unknown (valid: synthetic, text, tokens)")


def check_fits(data: TokenData, block_size: int) -> None:
    """Each split must hold at least one (block_size + 1)-token window."""
    for split, arr in (("train", data.train), ("val", data.val)):
        if len(arr) <= block_size + 1:
            raise ConfigError(
                f"model.block_size={block_size} is longer than the {data.name} data's {split} split "
                f"({len(arr)} tokens) (valid: block_size < {len(arr) - 1}, or more data)"
            )


def get_batch(tokens: np.ndarray, batch_size: int, block_size: int, seed: int, step: int, split: str):
    """Random windows, a pure function of (seed, step, split) so a resumed run sees the same batches.

    Returns x, y: (B, T) int64 tensors, y shifted by one token.
    """
    salt = 0 if split == "train" else 1
    rng = np.random.default_rng((seed, step, salt))
    starts = rng.integers(0, len(tokens) - block_size - 1, size=batch_size)
    idx = starts[:, None] + np.arange(block_size + 1)[None, :]
    window = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    return window[:, :-1], window[:, 1:]


def _synthetic(cfg: SyntheticDataConfig) -> TokenData:
    from ablate.synthetic import SyntheticLanguage, SyntheticSpec

    spec = SyntheticSpec(
        n_words=cfg.n_words,
        successors=cfg.successors,
        zipf_unigram=cfg.zipf_unigram,
        zipf_successor=cfg.zipf_successor,
        min_len=cfg.min_len,
        max_len=cfg.max_len,
        seed=cfg.seed,
    )
    lang = SyntheticLanguage(spec)
    return TokenData(
        name="synthetic",
        train=lang.generate(cfg.train_tokens, seed=2 * cfg.seed),
        val=lang.generate(cfg.val_tokens, seed=2 * cfg.seed + 1),
        vocab_size=lang.vocab_size,
        entropy_floor=lang.entropy_rate,
    )


def _text(cfg: TextDataConfig) -> TokenData:
    """Byte-level tokens (vocab 256) from the named files, in sorted order for reproducibility."""
    files = sorted(_text_files(cfg))
    if not files:
        raise ConfigError(f"data.paths={list(cfg.paths)} with data.glob={cfg.glob!r} matched no files (valid: existing files or folders)")
    chunks, total = [], 0
    for f in files:
        try:
            b = f.read_bytes()
        except OSError:
            continue
        chunks.append(b[: cfg.max_bytes - total])
        total += len(chunks[-1])
        if total >= cfg.max_bytes:
            break
    data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    if len(data) == 0:
        raise ConfigError(f"data.paths={list(cfg.paths)} are empty (valid: files with content)")
    n_val = max(1, int(len(data) * cfg.val_fraction))
    return TokenData(name="text", train=data[:-n_val], val=data[-n_val:], vocab_size=256)


def _text_files(cfg: TextDataConfig):
    for entry in cfg.paths:
        path = Path(sysconfig.get_paths()["stdlib"]) if entry == "stdlib" else Path(str(entry)).expanduser()
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in path.glob(cfg.glob) if p.is_file())
        else:
            raise ConfigError(f"data.paths has {str(entry)!r}, which does not exist (valid: existing files or folders, or stdlib)")


def _tokens(cfg: TokenDataConfig) -> TokenData:
    splits = {}
    for key in ("train_bin", "val_bin"):
        path = Path(getattr(cfg, key)).expanduser()
        if not path.is_file():
            raise ConfigError(f"data.{key}={str(path)!r} does not exist (valid: a uint16 token file)")
        if path.stat().st_size < 2 or path.stat().st_size % 2:
            raise ConfigError(f"data.{key}={str(path)!r} is empty or not uint16 (valid: an even, non-zero byte count)")
        arr = np.memmap(path, dtype=np.uint16, mode="r")
        top = int(arr[: 1 << 20].max())
        if top >= cfg.vocab_size:
            raise ConfigError(f"data.{key} holds token id {top} >= data.vocab_size={cfg.vocab_size} (valid: ids < vocab_size)")
        splits[key] = arr
    return TokenData(name="tokens", train=splits["train_bin"], val=splits["val_bin"], vocab_size=cfg.vocab_size)
