"""`ablate prepare PATH... --out DIR`: your text as token files a run reads (data/tokenizer.py).

Trains a byte-level BPE tokenizer on the files' train split (Hugging Face `tokenizers`, nothing
downloaded) or takes your tokenizer.json, encodes both splits into memory-mapped token files with a
progress bar, and records the tokenizer and the bytes per token beside them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablate.cli.common import fail
from ablate.config import ConfigError
from ablate.data.corpus import read_corpus

EXAMPLE = (
    "ablate prepare stdlib --out data/stdlib-bpe4k --vocab-size 4096 && ablate data=tokens data.dir=data/stdlib-bpe4k"
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ablate prepare",
        description="Tokenize your text: train a byte-level BPE tokenizer (or bring one) and write token files.",
        epilog=f"example:\n  {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", help="files or folders of text; 'stdlib' is the Python standard library")
    p.add_argument("--out", required=True, help="the folder to write (train.bin, val.bin, tokenizer.json, meta.json)")
    p.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary to train (default: 4096)")
    p.add_argument("--tokenizer", default=None, help="an existing tokenizer.json instead of training one")
    p.add_argument("--glob", default="**/*.py", help="files to read inside folders (default: **/*.py)")
    p.add_argument("--max-bytes", type=int, default=20_000_000, help="read at most this much text (default: 2e7)")
    p.add_argument("--val-fraction", type=float, default=0.05, help="the last fraction of the text (default: 0.05)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from ablate.data import tokenizer

    try:
        if not 0.0 < args.val_fraction < 1.0:
            raise ConfigError(f"--val-fraction={args.val_fraction} is invalid (valid: 0 < value < 1)")
        if args.max_bytes <= 0:
            raise ConfigError(f"--max-bytes={args.max_bytes} must be positive (valid: > 0)")
        corpus = read_corpus(args.paths, args.glob, args.max_bytes)
        what = f"tokenizer {args.tokenizer}" if args.tokenizer else f"a {args.vocab_size}-token byte-level BPE"
        print(f"prepare: {corpus.size:,} bytes from {len(corpus.files)} files, {what}", file=sys.stderr)
        with Progress(enabled=not args.no_progress) as bar:
            meta = tokenizer.prepare(
                corpus,
                Path(args.out),
                args.val_fraction,
                vocab_size=None if args.tokenizer else args.vocab_size,
                tokenizer_file=Path(args.tokenizer) if args.tokenizer else None,
                progress=bar.update,
            )
    except ConfigError as exc:
        fail(str(exc))
    print(
        f"wrote {args.out}: {meta.train_tokens:,} train and {meta.val_tokens:,} val tokens, vocab {meta.vocab_size}, "
        f"{meta.bytes_per_token:.3f} bytes per token (val/bpb = val/loss / ln 2 / {meta.bytes_per_token:.3f})",
        file=sys.stderr,
    )
    print(f"train on it: ablate data=tokens data.dir={args.out}", file=sys.stderr)
    return 0


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
    raise SystemExit(main())
