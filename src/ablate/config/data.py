"""Where a run's tokens come from (`data=synthetic|text|tokens`): one schema per source, chosen by
`data.kind`. `SyntheticDataConfig` is the synthetic language's only definition: its keys fix the
language (data/synthetic.py builds it from them) and how many of its tokens a run draws."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ablate.config.keys import setting
from ablate.config.schema import build, require_positive
from ablate.errors import ConfigError


@dataclass
class SyntheticDataConfig:
    kind: Literal["synthetic"] = setting("synthetic")
    # The language: a lexicon of n_words words min_len..max_len letters long with Zipf(zipf_unigram)
    # ranks, each followed by one of `successors` words with Zipf(zipf_successor) probabilities.
    n_words: int = setting(4000)
    successors: int = setting(64)
    zipf_unigram: float = setting(1.1)
    # 1.0 gives H(q) = 3.371 nats for 64 successors (log 64 = 4.159): peaked enough to be learnable,
    # broad enough that the floor is far from zero.
    zipf_successor: float = setting(1.0)
    min_len: int = setting(2)
    max_len: int = setting(9)
    seed: int = setting(0)
    # Tokens generated once per run for the training and validation streams.
    train_tokens: int = setting(4_000_000)
    val_tokens: int = setting(200_000)

    # Longer words add nothing a block of context could use, and the lexicon draw's memory grows with them.
    MAX_WORD_LEN = 64
    # q_r ~ (r+1)^-s: beyond this the rarest ranks' probabilities underflow (no entropy to compute).
    MAX_ZIPF = 10.0

    def validate(self) -> None:
        for key in ("n_words", "successors", "min_len", "max_len", "train_tokens", "val_tokens"):
            require_positive(f"data.{key}", getattr(self, key))
        if self.max_len > self.MAX_WORD_LEN:
            raise ConfigError(f"data.max_len={self.max_len} is too long (valid: 1..{self.MAX_WORD_LEN} letters)")
        if self.min_len > self.max_len:
            raise ConfigError(f"data.min_len={self.min_len} > data.max_len={self.max_len} (valid: min_len <= max_len)")
        capacity = sum(26**n for n in range(self.min_len, self.max_len + 1))
        if not 2 <= self.n_words <= capacity:
            raise ConfigError(
                f"data.n_words={self.n_words} is not a lexicon of distinct words {self.min_len}..{self.max_len} "
                f"letters long (valid: 2..{capacity:,})"
            )
        if not 2 <= self.successors <= self.n_words:
            raise ConfigError(f"data.successors={self.successors} is out of range (valid: 2..{self.n_words})")
        for key in ("zipf_unigram", "zipf_successor"):
            if not 0.0 <= getattr(self, key) <= self.MAX_ZIPF:
                raise ConfigError(f"data.{key}={getattr(self, key)} is out of range (valid: 0..{self.MAX_ZIPF:g})")
        if self.seed < 0:
            raise ConfigError(f"data.seed={self.seed} is negative (valid: >= 0)")


VAL_SPLITS = ("tail", "files")  # how a text corpus is split into train and validation (data/corpus.py)


def counts_tokenizer(data: dict) -> bool:
    """Bytes are the one tokenizer runs had before there was a choice: a text run on bytes hashes
    without its tokenizer and vocabulary, as it did then."""
    return not (data["kind"] == "text" and data["tokenizer"] == "bytes")


@dataclass
class TextDataConfig:
    kind: Literal["text"] = setting("text")
    name: str = setting("text")  # what runs record as the data's name (a preset's own, e.g. debian_docs)
    # Files or folders; folders are searched with `glob`. "stdlib" means the Python standard
    # library's own source, a real corpus present on every machine that runs this project.
    paths: list = setting(factory=lambda: ["stdlib"])
    glob: str = setting("**/*.py")
    max_bytes: int = setting(20_000_000)
    val_fraction: float = setting(0.05)
    # tail: the last val_fraction of the bytes; files: whole files drawn across the corpus by a hash
    # of their path, until they hold val_fraction of it (data/corpus.py)
    val_split: Literal["tail", "files"] = setting("tail", before="tail")
    # bytes: one token per byte (vocab 256). bpe: a byte-level BPE tokenizer of vocab_size entries
    # trained on the train split (data/tokenizer.py), its token files cached under cache_dir.
    tokenizer: Literal["bytes", "bpe"] = setting("bytes", when=counts_tokenizer)
    vocab_size: int | None = setting(None, when=counts_tokenizer)  # bpe only; null: 4096
    cache_dir: str = setting(".ablate/data", hashed=False)

    def validate(self) -> None:
        if not self.paths:
            raise ConfigError("data.paths=[] is empty (valid: a list of files or folders, or [stdlib])")
        for entry in self.paths:
            if not isinstance(entry, str) or not entry.strip():
                raise ConfigError(f"data.paths has {entry!r} (valid: file or folder paths, or stdlib)")
        if not self.glob or self.glob.startswith(("/", "~")):
            raise ConfigError(
                f"data.glob={self.glob!r} is invalid (valid: a pattern relative to each folder, e.g. '**/*.txt')"
            )
        require_positive("data.max_bytes", self.max_bytes)
        if not self.cache_dir.strip():
            raise ConfigError("data.cache_dir='' is empty (valid: a folder for prepared token files)")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={self.val_fraction} is invalid (valid: 0 < val_fraction < 1)")
        if self.vocab_size is not None:
            if self.tokenizer == "bytes" and self.vocab_size != 256:
                raise ConfigError(
                    f"data.vocab_size={self.vocab_size} with data.tokenizer=bytes "
                    "(valid: data.tokenizer=bpe to choose a vocabulary; bytes have 256)"
                )
            if not 257 <= self.vocab_size <= 65536 and self.tokenizer == "bpe":
                raise ConfigError(f"data.vocab_size={self.vocab_size} is out of range (valid: 257 to 65536)")


@dataclass
class TokenDataConfig:
    kind: Literal["tokens"] = setting("tokens")
    # A folder written by `ablate prepare` (train.bin, val.bin, meta.json: vocabulary and bytes per
    # token come from it), or uint16 token ids written by your own tokenizer (numpy .tofile / memmap).
    dir: str = setting("", when=lambda d: d["kind"] != "tokens" or bool(d["dir"]))
    train_bin: str = setting("")
    val_bin: str = setting("")
    vocab_size: int | None = setting(None)  # null: from dir's meta.json, else 50257 (GPT-2's)

    def validate(self) -> None:
        if not self.dir and (not self.train_bin or not self.val_bin):
            raise ConfigError(
                "data.dir or data.train_bin and data.val_bin must name token files "
                "(valid: a folder from `ablate prepare`, or paths to existing uint16 .bin files)"
            )
        if self.vocab_size is not None:
            if self.vocab_size < 2:
                raise ConfigError(f"data.vocab_size={self.vocab_size} is too small (valid: 2..65536, or null)")
            if self.vocab_size > 65536 and not self.dir:
                raise ConfigError(f"data.vocab_size={self.vocab_size} does not fit uint16 (valid: <= 65536)")


DataConfig = SyntheticDataConfig | TextDataConfig | TokenDataConfig
DATA_KINDS = {"synthetic": SyntheticDataConfig, "text": TextDataConfig, "tokens": TokenDataConfig}


def parse_data(tree: dict) -> DataConfig:
    kind = (tree or {}).get("kind")
    if kind not in DATA_KINDS:
        raise ConfigError(f"data.kind={kind!r} is unknown (valid: {', '.join(DATA_KINDS)})")
    return build(DATA_KINDS[kind], tree, "data")


@dataclass
class PrepareConfig:
    """`ablate prepare` (conf/prepare.yaml): which text, where the token files go, how it is tokenized."""

    paths: list[str] = field(default_factory=list)  # files or folders; "stdlib": the Python standard library
    out: str | None = None
    vocab_size: int = 4096
    tokenizer: str | None = None  # an existing tokenizer.json instead of training one
    glob: str = "**/*.py"
    max_bytes: int = 20_000_000
    val_fraction: float = 0.05
    val_split: str = "tail"  # tail | files, as data.val_split (data/corpus.py)
    progress: bool = True
    eot: bool = True  # <|endoftext|> after each file (data/tokenizer.py), as GPT-2 and nanoGPT separate documents

    def validate(self) -> None:
        if not self.paths or not all(isinstance(p, str) and p.strip() for p in self.paths):
            raise ConfigError("paths is empty (valid: paths=FILE, paths=[FILE,FOLDER], or paths=stdlib)")
        if not (self.out or "").strip():
            raise ConfigError("out is empty (valid: out=DIR, the folder to write the token files to)")
        if not 257 <= self.vocab_size <= 65536:
            raise ConfigError(f"vocab_size={self.vocab_size} is out of range (valid: 257 to 65536)")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"val_fraction={self.val_fraction} is invalid (valid: 0 < val_fraction < 1)")
        if self.val_split not in VAL_SPLITS:
            raise ConfigError(f"val_split={self.val_split} is not a way to split (valid: {', '.join(VAL_SPLITS)})")
        require_positive("max_bytes", self.max_bytes)


def parse_prepare(tree: dict) -> PrepareConfig:
    """A validated PrepareConfig from the composed conf/prepare.yaml tree; paths= may be one path."""
    tree = {k: v for k, v in (tree or {}).items() if k != "hydra"}
    if isinstance(tree.get("paths"), str):
        tree["paths"] = [tree["paths"]]
    cfg = build(PrepareConfig, tree, "")
    cfg.validate()
    return cfg
