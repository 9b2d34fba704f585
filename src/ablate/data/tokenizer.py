"""Your own text as tokens: a byte-level BPE tokenizer trained on your files with Hugging Face
`tokenizers` (nothing is downloaded), or a tokenizer file you bring, and the token files runs read.

A prepared folder (`ablate prepare`, or data=text data.tokenizer=bpe, which caches one) holds:
    tokenizer.json    the tokenizer, in the `tokenizers` format
    train.bin val.bin token ids, little-endian uint16 (vocab <= 65536) or uint32: np.memmap them
    meta.json         vocab_size, dtype, tokens and bytes per split, bytes_per_token, the sources, eot_id
With an end-of-text token (`ablate prepare`'s default, eot=true) each file's tokens are followed by
<|endoftext|>, as GPT-2's training data and nanoGPT's prepare scripts separate documents: a model
then sees where one file ends and the next begins instead of one file running on into the next.
Byte-level BPE (Radford et al. 2019, GPT-2; Sennrich et al. 2016) starts from the 256 byte values,
so every input is encodable; merges are learned on the training split only. bytes_per_token is
the validation split's bytes over its tokens: a loss L in nats per token is L / ln 2 / bytes_per_token
bits per byte, the figure that compares runs with different tokenizers.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ablate.config import ConfigError
from ablate.data.corpus import Corpus, package_versions
from ablate.files import read_regular, staged_folder, write_bytes

META = "meta.json"
TOKENIZER = "tokenizer.json"
MIN_VOCAB = 257  # the 256 bytes and at least one merge
MAX_VOCAB = 1 << 32
MIN_SPLIT_TOKENS = 64  # femto's and nano's context: each split holds at least one block and its target
BATCH_BYTES = 1 << 20  # text encoded per batch (encode_batch runs in parallel inside tokenizers)
EOT = "<|endoftext|>"  # GPT-2's document separator; a trained tokenizer gets it as a special token


@dataclass(frozen=True)
class PreparedMeta:
    vocab_size: int
    dtype: str  # "uint16" or "uint32"
    train_tokens: int
    val_tokens: int
    train_bytes: int
    val_bytes: int
    bytes_per_token: float  # of the validation split
    tokenizer: str  # "bpe trained here" or the file it came from
    sources: list
    fingerprint: str
    packages: dict = field(default_factory=dict)  # {Debian package: version} the text came from
    eot_id: int | None = None  # the EOT token after each file; None: files run on into each other

    def to_dict(self) -> dict:
        return asdict(self)


# A run of text without whitespace longer than this is cut into pieces of this many characters
# before BPE sees it: normal words are far shorter, and one "word" of megabytes (a file of NUL bytes,
# minified text) made each merge rescan it, so training took minutes and gigabytes (tokenizers
# keeps a word as one sequence of symbols; Sennrich et al.'s algorithm merges within words).
MAX_WORD = 256
# Bounds on training, proportional to the text: time (s) and memory (bytes) of the training process.
TRAIN_S_BASE, TRAIN_S_PER_MB = 60.0, 30.0
TRAIN_MEM_BASE, TRAIN_MEM_PER_BYTE = 2 << 30, 60


def pre_tokenizer():
    """Byte-level pre-tokenization (GPT-2's), with runs without whitespace cut at MAX_WORD characters."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(rf"[^\s]{{{MAX_WORD}}}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )


def check_distinct(chunks: list[bytes], vocab_size: int) -> None:
    """Refuse, before training, text with too little in it for `vocab_size`: each merge joins two
    symbols of one distinct word, so the merges possible are at most the sum over distinct words
    (whitespace-free runs, cut at MAX_WORD) of their length - 1 (a file of one repeated character
    allows about 255). ConfigError (one line) otherwise."""
    words: set[bytes] = set()
    for chunk in chunks:
        words.update(re.findall(rb"\S{1,%d}" % MAX_WORD, chunk))
    possible = 256 + sum(len(w) - 1 for w in words)
    if possible < vocab_size:
        raise ConfigError(
            f"vocab_size={vocab_size}: the training text has {len(words):,} distinct words, room for at most "
            f"{possible:,} tokens (valid: more varied text, or vocab_size <= {max(MIN_VOCAB, possible):,})"
        )


def train_bpe(chunks: list[bytes], vocab_size: int, progress: bool = False, special: tuple[str, ...] = ()):
    """A byte-level BPE tokenizer with `vocab_size` entries, trained on `chunks` (the train split),
    in a process of its own, bounded in time and memory in proportion to the text (TRAIN_*): the
    library's training is one call that no signal interrupts, so Ctrl-C or SIGTERM here stops that
    process at once. Text too poor for the vocabulary is refused before (check_distinct). `special`:
    tokens the vocabulary holds whole (EOT), counted in vocab_size."""
    if not MIN_VOCAB <= vocab_size < MAX_VOCAB:
        raise ConfigError(f"vocab_size={vocab_size} is out of range (valid: {MIN_VOCAB} to {MAX_VOCAB - 1})")
    check_distinct(chunks, vocab_size)
    size = sum(map(len, chunks))
    seconds = TRAIN_S_BASE + TRAIN_S_PER_MB * size / 1e6
    memory = TRAIN_MEM_BASE + TRAIN_MEM_PER_BYTE * size
    with tempfile.TemporaryDirectory(prefix="ablate-bpe-") as tmp:
        saved = Path(tmp) / TOKENIZER
        _bounded(lambda: _train(chunks, vocab_size, progress, special).save(str(saved)), seconds, memory, vocab_size)
        return load_tokenizer(saved)


def _train(chunks: list[bytes], vocab_size: int, progress: bool, special: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(special),
        show_progress=progress,
    )
    tok.train_from_iterator((_text(c) for c in chunks), trainer=trainer, length=len(chunks))
    return tok


def _address_space() -> int:
    """This process's virtual address space in bytes (/proc/self/statm's first field, in pages): a
    fork inherits it whole (a process that imported torch maps gigabytes it never touches), so the
    training's bound is added to it rather than counting it against training."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _bounded(work: Callable[[], None], seconds: float, memory: int, vocab_size: int) -> None:
    """work() in a forked process whose address space may grow by `memory` past what the fork
    inherited (RLIMIT_AS), killed after `seconds`, or at once when this process is interrupted
    (KeyboardInterrupt: Ctrl-C, or SIGTERM through cli/main.entry)."""
    pid = os.fork()
    if pid == 0:  # the child: train, save, exit without the parent's clean-up
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            limit = _address_space() + memory
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            work()
            code = 0
        except MemoryError:
            code = 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + seconds
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"vocab_size={vocab_size}: training the tokenizer took over {seconds:.0f} s, its bound for this "
                    "much text; stopped (valid: a smaller vocab_size or max_bytes, or more varied text)"
                )
            time.sleep(0.05)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    if os.waitstatus_to_exitcode(status) != 0:
        raise ConfigError(
            f"vocab_size={vocab_size}: training the tokenizer went past its memory bound ({memory / 2**30:.1f} GiB "
            "for this much text) or failed (valid: a smaller vocab_size or max_bytes)"
        )


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"tokenizer={str(path)!r} does not exist (valid: a tokenizer.json file of `tokenizers`)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own exception types for a bad file
        raise ConfigError(
            f"tokenizer={str(path)!r} is not a `tokenizers` file ({exc}) (valid: a tokenizer.json)"
        ) from None


def prepare(
    corpus: Corpus,
    out_dir: Path,
    val_fraction: float,
    vocab_size: int | None = None,
    tokenizer_file: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    val_split: str = "tail",
    key: str = "out",
    eot: bool = False,
) -> PreparedMeta:
    """Train (or load) the tokenizer, encode both splits into token files, record it all.

    progress(phase, bytes_done, bytes_total) is called as the encoding goes. The files are written
    in a staging folder and moved into `out_dir` together once all are complete, meta.json last (a
    folder with it is a finished one): a full or read-only disk leaves none of them (WriteError,
    one line naming `key`). eot: an EOT token after each file (a trained tokenizer gets it; a
    tokenizer brought must have it).
    """
    train, val = corpus.split(val_fraction, val_split)
    if tokenizer_file is not None:
        tok = load_tokenizer(tokenizer_file)
        source = str(tokenizer_file)
    else:
        if vocab_size is None:
            raise ConfigError("vocab_size is missing (valid: a vocabulary size such as 4096, or an existing tokenizer)")
        tok = train_bpe(train, vocab_size, special=(EOT,) if eot else ())
        source = "byte-level BPE trained on the train split"
    eot_id = tok.token_to_id(EOT) if eot else None
    if eot and eot_id is None:
        raise ConfigError(
            f"tokenizer={str(tokenizer_file)!r} has no {EOT} token to put between files "
            "(valid: a tokenizer with one, GPT-2's has it; or eot=false)"
        )
    vocab = tok.get_vocab_size()
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    out_dir = Path(out_dir)
    with staged_folder(out_dir, last=META, key=key) as stage:
        counts = {}
        for split, chunks in (("train", train), ("val", val)):
            counts[split] = encode_to_file(tok, chunks, stage / f"{split}.bin", dtype, progress, split, eot_id)
        if tokenizer_file is not None and Path(tokenizer_file).resolve() != (out_dir / TOKENIZER).resolve():
            shutil.copyfile(tokenizer_file, stage / TOKENIZER)
        elif tokenizer_file is None:
            tok.save(str(stage / TOKENIZER))
        short = {k: n for k, n in counts.items() if n <= MIN_SPLIT_TOKENS}
        if short:
            raise ConfigError(
                f"the text encodes to {', '.join(f'{n:,} {k}' for k, n in short.items())} tokens, not one block of "
                f"the smallest model's context ({MIN_SPLIT_TOKENS} tokens and its target) (valid: more text, "
                "or a larger val_fraction)"
            )
        val_bytes = sum(map(len, val))
        meta = PreparedMeta(
            vocab_size=vocab,
            dtype=np.dtype(dtype).name,
            train_tokens=counts["train"],
            val_tokens=counts["val"],
            train_bytes=sum(map(len, train)),
            val_bytes=val_bytes,
            bytes_per_token=val_bytes / counts["val"] if counts["val"] else 0.0,
            tokenizer=source,
            sources=[str(f) for f in corpus.files[:20]]
            + [f"... {len(corpus.files) - 20} more"] * (len(corpus.files) > 20),
            fingerprint=corpus.fingerprint(),
            packages=package_versions(corpus.files),
            eot_id=eot_id,
        )
        (stage / META).write_text(json.dumps(meta.to_dict(), indent=2) + "\n")
    return meta


def encode_to_file(
    tok, chunks: list[bytes], path: Path, dtype, progress=None, phase: str = "", eot_id: int | None = None
) -> int:
    """Encode `chunks` in batches and write the ids to `path` (a file in prepare's staging folder,
    which makes the set atomic), `eot_id` after each chunk's last piece when given; returns the
    token count."""
    total = sum(map(len, chunks))
    done = 0
    count = 0
    with open(path, "wb") as f:
        for batch in _batches(chunks, BATCH_BYTES):
            encoded = tok.encode_batch([_text(piece) for piece, _ in batch], add_special_tokens=False)
            for enc, (_, ends) in zip(encoded, batch, strict=True):
                ids = np.asarray(enc.ids + ([eot_id] if ends and eot_id is not None else []), dtype=dtype)
                f.write(ids.astype(ids.dtype.newbyteorder("<"), copy=False).tobytes())
                count += len(ids)
            done += sum(len(piece) for piece, _ in batch)
            if progress is not None:
                progress(phase, done, total)
    if count == 0:
        raise ConfigError(f"the {phase} split encodes to no tokens (valid: more text, or a larger val_fraction)")
    return count


def read_meta(directory: Path) -> PreparedMeta | None:
    try:
        doc = json.loads(read_regular(Path(directory) / META))
        return PreparedMeta(**doc)
    except (OSError, ValueError, TypeError):
        return None


def load_tokens(directory: Path, split: str, meta: PreparedMeta) -> np.memmap:
    return np.memmap(Path(directory) / f"{split}.bin", dtype=np.dtype(meta.dtype).newbyteorder("<"), mode="r")


def cache_key(corpus: Corpus, val_fraction: float, vocab_size: int, val_split: str = "tail") -> str:
    """A prepared folder's name under the cache: the corpus, the split, the vocabulary and the
    tokenizer its tokens come from (the corpus's one tokenizer, `shared_tokenizer`)."""

    blob = f"{tokenizer_key(corpus, val_fraction, vocab_size)}|{val_split}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def tokenizer_key(corpus: Corpus, val_fraction: float, vocab_size: int) -> str:
    """The name of a corpus's tokenizer under the cache: one per corpus, vocabulary and held-out
    fraction, whatever the split (it is trained on the text no split holds out)."""
    import tokenizers

    blob = f"{corpus.fingerprint()}|{val_fraction}|{vocab_size}|{tokenizers.__version__}|unsplit"
    return "tokenizer-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def shared_tokenizer(corpus: Corpus, cache_dir: Path, val_fraction: float, vocab_size: int) -> Path:
    """The corpus's tokenizer.json, trained once for every split (Corpus.unsplit_text: the text
    neither the tail nor the files split holds out at this fraction) and kept in
    cache_dir/tokenizer-KEY/; a lock per folder, so that the jobs of a sweep train it once. The
    folders of each split's tokens encode with it (sources.py), so runs on either split share one
    vocabulary and a second split costs an encoding pass, not a second training."""
    folder = Path(cache_dir).expanduser() / tokenizer_key(corpus, val_fraction, vocab_size)
    path = folder / TOKENIZER
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            text = corpus.unsplit_text(val_fraction)
            print(
                f"data: training a {vocab_size}-token BPE tokenizer on {sum(map(len, text)):,} bytes "
                f"(the text no validation split holds out) -> {folder}",
                file=sys.stderr,
            )
            write_bytes(path, train_bpe(text, vocab_size).to_str().encode())
    return path


def _text(chunk: bytes) -> str:
    # Byte-level BPE sees bytes; `tokenizers` takes str, so undecodable bytes (rare in source
    # text) become U+FFFD. Byte counts are always the original bytes'.
    return chunk.decode("utf-8", errors="replace")


def _batches(chunks: list[bytes], limit: int):
    """Batches of (piece, whether it ends its chunk), about `limit` bytes each."""
    batch, size = [], 0
    for c in chunks:
        for i in range(0, len(c), limit):  # a huge file is encoded in pieces
            piece = c[i : i + limit]
            batch.append((piece, i + limit >= len(c)))
            size += len(piece)
            if size >= limit:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch
