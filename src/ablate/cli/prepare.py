"""`ablate prepare paths=PATH out=DIR [KEY=VALUE ...]`: your text as token files a run reads (data/tokenizer.py).

Trains a byte-level BPE tokenizer on the files' train split (Hugging Face `tokenizers`, nothing
downloaded) or takes your tokenizer.json, encodes both splits into memory-mapped token files with a
progress bar, and records the tokenizer and the bytes per token beside them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ablate.cli.common import claim_output, hydra_main
from ablate.config import parse_prepare
from ablate.data import read_corpus
from ablate.oneline import fail, one_line

SUMMARY = "Tokenize your text: train a byte-level BPE tokenizer (or bring one) and write token files."
EXAMPLE = (
    "ablate prepare paths=stdlib out=data/stdlib-bpe4k vocab_size=4096 && ablate data=tokens data.dir=data/stdlib-bpe4k"
)
# The flags of earlier versions, and the key each is now (every command takes KEY=VALUE)
OLD_FLAGS = {
    "--out": "out=DIR",
    "--vocab-size": "vocab_size=N",
    "--tokenizer": "tokenizer=FILE",
    "--glob": "glob=PATTERN",
    "--max-bytes": "max_bytes=N",
    "--val-fraction": "val_fraction=F",
    "--no-progress": "progress=false",
}


def refuse_old_spelling(argv: list[str]) -> None:
    """A flag of the earlier spelling, or a bare path, is one line with the new spelling."""
    for flag in (arg.split("=", 1)[0] for arg in argv):
        if flag in OLD_FLAGS:
            fail(f"{flag} is now {OLD_FLAGS[flag]} (valid: ablate prepare paths=... out=DIR [vocab_size=4096 ...])")
    for arg in argv:
        if not arg.startswith("-") and "=" not in arg:
            fail(f"{arg!r} is not KEY=VALUE (valid: paths={arg}, or paths=[{arg},...], then out=DIR)")


def task(cfg) -> None:
    from omegaconf import OmegaConf

    from ablate.data import tokenizer

    with one_line():
        pc = parse_prepare(OmegaConf.to_container(cfg, resolve=True))
        claim_output(pc.out, "out")  # a full or read-only disk refused before the corpus is read
        corpus = read_corpus(pc.paths, pc.glob, pc.max_bytes)
        what = f"tokenizer {pc.tokenizer}" if pc.tokenizer else f"a {pc.vocab_size}-token byte-level BPE"
        print(f"prepare: {corpus.size:,} bytes from {len(corpus.files)} files, {what}", file=sys.stderr)
        with Progress(enabled=pc.progress) as bar:
            meta = tokenizer.prepare(
                corpus,
                Path(pc.out),
                pc.val_fraction,
                vocab_size=None if pc.tokenizer else pc.vocab_size,
                tokenizer_file=Path(pc.tokenizer) if pc.tokenizer else None,
                progress=bar.update,
                val_split=pc.val_split,
                eot=pc.eot,
            )
    print(
        f"wrote {pc.out}: {meta.train_tokens:,} train and {meta.val_tokens:,} val tokens, vocab {meta.vocab_size}, "
        f"{meta.bytes_per_token:.3f} bytes per token (val/bpb = val/loss / ln 2 / {meta.bytes_per_token:.3f})",
        file=sys.stderr,
    )
    print(f"train on it: ablate data=tokens data.dir={pc.out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    refuse_old_spelling(argv)
    hydra_main(task, config_name="prepare", name="prepare", summary=SUMMARY, example=EXAMPLE, argv=argv)


class Progress:
    """One tqdm bar per split, in bytes encoded (the tokenizer's own training shows no bar)."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.phase = enabled, None, None

    def __enter__(self):
        return self

    def update(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = tqdm(total=total, desc=f"encode {phase}", unit="B", unit_scale=True, file=sys.stderr)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    main()
