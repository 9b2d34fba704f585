"""Data sources: token id streams for training and validation, and how batches are drawn.

Every source returns a `TokenData`: two 1-D integer arrays (train, val), the vocabulary size,
the entropy floor in nats/token when it is known exactly (the synthetic language), and the bytes
of text per token when known (1 for bytes and for the synthetic language's characters), which
turns a loss into bits per byte.
"""

from __future__ import annotations

import fcntl
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ablate.config import ConfigError, DataConfig, SyntheticDataConfig, TextDataConfig, TokenDataConfig, as_dict
from ablate.data.corpus import read_corpus
from ablate.files import check_complete, check_writable_dir, disk_errors


@dataclass
class TokenData:
    name: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    entropy_floor: float | None = None
    bytes_per_token: float | None = None
    # Which tokens these are: a hash of the generator's config, or of the corpus's files (path,
    # size, mtime, bytes read), and the Debian packages (with versions) the text came from.
    fingerprint: str | None = None
    packages: dict | None = None

    def provenance(self) -> dict:
        """name, fingerprint and packages: what result.json, MLflow and a prediction record of the data
        (beside the config's kind)."""
        return {"name": self.name, "fingerprint": self.fingerprint, "packages": self.packages or {}}


def load_data(cfg: DataConfig) -> TokenData:
    if isinstance(cfg, SyntheticDataConfig):  # generated: the same config, the same tokens (data/cache.py)
        from ablate.data import cache, synthetic

        modules = (synthetic, sys.modules[__name__])
        config = as_dict(cfg)
        return cache.cached(
            "synthetic", config, lambda: _synthetic(cfg, cache.key(config, modules)), modules, TokenData
        )
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


# Every run is scored on the same validation windows, whatever its training seed: two seeds then
# differ by training noise alone, and every point of a ladder shares one validation sample, so the
# sample's own error is a common offset rather than scatter about the law.
VAL_SEED = 0


def get_val_batch(tokens: np.ndarray, batch_size: int, block_size: int, index: int):
    """The index-th validation batch: the same windows for every run of a given batch and block size."""
    return get_batch(tokens, batch_size, block_size, VAL_SEED, index, "val")


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


# A data source that would take longer than this to make is refused up front, with the limit;
# one that takes longer than SAY_S says so before it starts.
MAX_GENERATE_S = 60.0
SAY_S = 10.0


def _synthetic(cfg: SyntheticDataConfig, fingerprint: str) -> TokenData:
    from ablate.data.synthetic import BYTES_PER_TOKEN, SyntheticLanguage, cost_seconds

    tokens = cfg.train_tokens + cfg.val_tokens
    seconds = cost_seconds(cfg, tokens)
    if seconds > MAX_GENERATE_S:
        worst = "the lexicon (data.n_words)" if cost_seconds(cfg, 0) > seconds / 2 else "the tokens"
        raise ConfigError(
            f"data.n_words={cfg.n_words}, data.successors={cfg.successors} and {tokens:,} tokens would take "
            f"about {seconds / 60:.0f} min of CPU to generate, mostly for {worst} "
            f"(valid: up to {MAX_GENERATE_S:.0f} s: about n_words <= 60,000 and train_tokens <= 500,000,000; "
            "or data=tokens with a file made once)"
        )
    free = _free_bytes()
    need = BYTES_PER_TOKEN * max(cfg.train_tokens, cfg.val_tokens) + tokens
    if free is not None and need > free:
        raise ConfigError(
            f"data.train_tokens={cfg.train_tokens} needs about {need / 1e9:.3g} GB to generate and this machine has "
            f"{free / 1e9:.3g} GB free (valid: fewer tokens, or data=tokens with a file read from disk)"
        )
    if seconds > SAY_S:
        print(f"data: generating the synthetic language and {tokens:,} tokens (about {seconds:.0f} s)", file=sys.stderr)
    lang = SyntheticLanguage(cfg)
    return TokenData(
        name="synthetic",
        train=lang.generate(cfg.train_tokens, seed=2 * cfg.seed),
        val=lang.generate(cfg.val_tokens, seed=2 * cfg.seed + 1),
        vocab_size=lang.vocab_size,
        entropy_floor=lang.entropy_rate,
        bytes_per_token=1.0,  # one character, one byte
        fingerprint=fingerprint,
    )


def _text(cfg: TextDataConfig) -> TokenData:
    """Your files as bytes (vocab 256), or as BPE tokens prepared once and cached (tokenizer=bpe)."""

    corpus = read_corpus(cfg.paths, cfg.glob, cfg.max_bytes)
    if cfg.tokenizer == "bpe":
        return _bpe(cfg, corpus)
    train, val = corpus.split(cfg.val_fraction, cfg.val_split)
    return TokenData(
        name=cfg.name,
        train=np.frombuffer(b"".join(train), dtype=np.uint8),
        val=np.frombuffer(b"".join(val), dtype=np.uint8),
        vocab_size=256,
        bytes_per_token=1.0,
        fingerprint=corpus.fingerprint(),
    )


def _free_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


DEFAULT_BPE_VOCAB = 4096


def _bpe(cfg: TextDataConfig, corpus) -> TokenData:
    """The corpus's token files from the cache, prepared first if missing. A lock per folder: the
    jobs of a sweep that share a corpus prepare it once, the others wait and read it."""
    from ablate.data import tokenizer

    vocab = cfg.vocab_size or DEFAULT_BPE_VOCAB
    folder = Path(cfg.cache_dir).expanduser() / tokenizer.cache_key(corpus, cfg.val_fraction, vocab, cfg.val_split)
    if tokenizer.read_meta(folder) is None:  # to be prepared: a disk that cannot take it refused first
        check_writable_dir(cfg.cache_dir, "data.cache_dir")
    with disk_errors(folder, "data.cache_dir"):
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / ".lock", "w")
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta = tokenizer.read_meta(folder)
        if meta is None:
            with disk_errors(folder, "data.cache_dir"):  # a full disk met writing the tokenizer: one line
                shared = tokenizer.shared_tokenizer(corpus, Path(cfg.cache_dir), cfg.val_fraction, vocab)
            print(f"data: encoding {corpus.size:,} bytes, {cfg.val_split} split -> {folder}", file=sys.stderr)
            meta = tokenizer.prepare(
                corpus, folder, cfg.val_fraction, tokenizer_file=shared, val_split=cfg.val_split, key="data.cache_dir"
            )
    return _prepared(folder, meta, cfg.name)


PREPARED_DTYPES = {"uint16": 65536, "uint32": 2**32}  # dtype -> ids it holds


def _prepared(folder: Path, meta, name: str) -> TokenData:
    """A prepared folder's splits, each checked against its meta.json before a step is trained: the
    dtype, the vocabulary it holds, every file's token count, and every id below the vocabulary."""
    from ablate.data import tokenizer

    described = folder / tokenizer.META
    if meta.dtype not in PREPARED_DTYPES:
        raise ConfigError(f"{described} says dtype {meta.dtype!r} (valid: {', '.join(PREPARED_DTYPES)})")
    if not isinstance(meta.vocab_size, int) or not 2 <= meta.vocab_size <= PREPARED_DTYPES[meta.dtype]:
        raise ConfigError(
            f"{described} says vocab_size {meta.vocab_size!r} "
            f"(valid: 2..{PREPARED_DTYPES[meta.dtype]} for {meta.dtype})"
        )
    splits = {split: _checked_split(folder, split, meta) for split in ("train", "val")}
    return TokenData(
        name=name,
        train=splits["train"],
        val=splits["val"],
        vocab_size=meta.vocab_size,
        bytes_per_token=meta.bytes_per_token,
        fingerprint=meta.fingerprint,
        packages=meta.packages,
    )


def _checked_split(folder: Path, split: str, meta) -> np.ndarray:
    from ablate.data import tokenizer

    path, described = folder / f"{split}.bin", folder / tokenizer.META
    expected = getattr(meta, f"{split}_tokens")
    if not path.is_file():
        raise ConfigError(f"{path} is missing or not a file (valid: the {split} split {described} describes)")
    found = path.stat().st_size / np.dtype(meta.dtype).itemsize
    if found != expected:
        raise ConfigError(
            f"{path} holds {found:,.1f} {meta.dtype} tokens and {described} says {expected} "
            "(valid: the folder as `ablate prepare` wrote it; prepare it again)"
        )
    tokens = tokenizer.load_tokens(folder, split, meta)
    at, top = _largest_id(tokens)
    if top >= meta.vocab_size:
        raise ConfigError(
            f"{path} holds token id {top} at position {at:,} >= vocab_size {meta.vocab_size} of {described} "
            "(valid: ids < vocab_size)"
        )
    return tokens


def _largest_id(arr: np.ndarray, chunk: int = 1 << 24) -> tuple[int, int]:
    """(position, value) of the largest id in the whole file, read in 32 MB chunks (an id out of
    range anywhere would index past the embedding mid-run, not only in the first chunk)."""
    best_at, best = 0, -1
    for start in range(0, len(arr), chunk):
        part = arr[start : start + chunk]
        i = int(part.argmax())
        if int(part[i]) > best:
            best_at, best = start + i, int(part[i])
    return best_at, best


def _tokens(cfg: TokenDataConfig) -> TokenData:
    if cfg.dir:
        from ablate.data import tokenizer

        folder = Path(cfg.dir).expanduser()
        check_complete(folder, "data.dir")  # a prepare stopped between its renames: a mix of two outputs
        meta = tokenizer.read_meta(folder)
        if meta is None:
            raise ConfigError(
                f"data.dir={cfg.dir!r} has no readable {tokenizer.META} (missing, not JSON, or not the keys "
                "`ablate prepare` writes) (valid: a folder written by `ablate prepare`)"
            )
        if cfg.vocab_size is not None and cfg.vocab_size != meta.vocab_size:
            raise ConfigError(
                f"data.vocab_size={cfg.vocab_size} but {folder / tokenizer.META} says {meta.vocab_size} "
                "(valid: null, or the prepared vocabulary)"
            )
        return _prepared(folder, meta, "tokens")
    vocab = cfg.vocab_size or 50257
    splits = {}
    for key in ("train_bin", "val_bin"):
        path = Path(getattr(cfg, key)).expanduser()
        if not path.exists():
            raise ConfigError(f"data.{key}={str(path)!r} does not exist (valid: a uint16 token file)")
        if not path.is_file():
            raise ConfigError(f"data.{key}={str(path)!r} is not a file (valid: a uint16 token file)")
        if path.stat().st_size < 2 or path.stat().st_size % 2:
            raise ConfigError(f"data.{key}={str(path)!r} is empty or not uint16 (valid: an even, non-zero byte count)")
        try:
            arr = np.memmap(path, dtype=np.uint16, mode="r")
        except OSError as exc:
            raise ConfigError(f"data.{key}={str(path)!r} cannot be read ({exc.strerror})") from None
        at, top = _largest_id(arr)
        if top >= vocab:
            raise ConfigError(
                f"data.{key} holds token id {top} at position {at:,} >= data.vocab_size={vocab} "
                "(valid: ids < vocab_size)"
            )
        splits[key] = arr
    return TokenData(name="tokens", train=splits["train_bin"], val=splits["val_bin"], vocab_size=vocab)
