"""Inputs for the bad-input and fault cases, made on demand: an upper-case word in a case's
arguments names one (`materialize` makes it under the case's folder and puts its path in place),
and a store's run statuses read straight from its database. A plain module the tests import."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

CSV_OK = "params,tokens,loss\n" + "".join(
    f"{n:g},{d:g},{2 + 1e3 / n**0.3 + 1e3 / d**0.3:.4f}\n" for n in (1e6, 4e6, 1.6e7) for d in (1e8, 4e8)
)

# Two arms of one ladder, as `ablate compare points=... arm=arm` reads them.
CSV_ARMS = "params,tokens,loss,flops,arm\n" + "".join(
    f"{n:g},{d:g},{2 + k * 1e3 / n**0.3 + 1e3 / d**0.3:.4f},{6 * n * d:g},{arm}\n"
    for arm, k in (("a", 1.0), ("b", 0.9))
    for n in (1e6, 4e6, 1.6e7)
    for d in (1e8, 4e8)
)

FIT_LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
FIT_DATA = {"N": {"min": 1e6, "max": 1e8}, "D": {"min": 1e8, "max": 1e10}, "C": {"min": 1e15, "max": 1e18}}


def fit_json(path: Path, law: dict = FIT_LAW, data: dict = FIT_DATA) -> None:
    """A fit.json as far as the planner reads it: approach 3's parameters and the data's range."""
    params = {k: {"value": v} for k, v in law.items()}
    path.write_text(json.dumps({"chinchilla_approach3": {"status": "converged", "params": params}, "data": data}))


def prepared_dir(path: Path, train_tokens: int = 300_000, dtype: str = "uint16", top_id: int = 99) -> None:
    """A folder as `ablate prepare` writes it, whose meta.json says 300,000 train tokens of vocab 100;
    train.bin holds train_tokens ids up to top_id."""
    path.mkdir()
    (np.arange(train_tokens) % (top_id + 1)).astype(np.uint16).tofile(path / "train.bin")
    (np.arange(20_000) % 100).astype(np.uint16).tofile(path / "val.bin")
    meta = {
        "vocab_size": 100, "dtype": dtype, "train_tokens": 300_000, "val_tokens": 20_000, "train_bytes": 600_000,
        "val_bytes": 40_000, "bytes_per_token": 2.0, "tokenizer": "test", "sources": [], "fingerprint": "test",
    }  # fmt: skip
    (path / "meta.json").write_text(json.dumps(meta))


def tokens_file(path: Path, n: int, bad_at: int | None = None) -> None:
    tokens = np.arange(n, dtype=np.uint16) % 100
    if bad_at is not None:
        tokens[bad_at] = 60_000  # past the first million tokens, which were all that used to be checked
    tokens.tofile(path)


# An upper-case word in a case's arguments -> how to make it under the case's inputs folder.
INPUTS = {
    "EMPTY": lambda p: (p / "empty.txt").write_bytes(b""),
    "SHORT": lambda p: (p / "short.bin").write_bytes(bytes(40)),  # 20 uint16 tokens: shorter than any context
    "NOTADB": lambda p: (p / "notadb.db").write_bytes(b"this is not a database\n"),
    "FILE": lambda p: (p / "file.txt").write_bytes(b"a file where a folder is expected\n"),
    "BINARY": lambda p: (p / "points.csv").write_bytes(bytes(range(256)) * 8),
    "OK": lambda p: (p / "ok.csv").write_text(CSV_OK),
    "NOCOLUMN": lambda p: (p / "nocolumn.csv").write_text("params,loss\n1e6,3.0\n"),
    "NEGATIVE": lambda p: (p / "negative.csv").write_text(CSV_OK.replace("\n1e+06,", "\n-1e+06,", 1)),
    "DUPLICATE": lambda p: (p / "duplicate.csv").write_text(CSV_OK + CSV_OK.splitlines()[3] + "\n"),
    "HEADERONLY": lambda p: (p / "header.csv").write_text("params,tokens,loss\n"),
    "NOTJSON": lambda p: (p / "fit.json").write_text('{"chinchilla_approach3": '),
    "BROKENSTUDY": lambda p: (p / "broken").mkdir() or (p / "broken" / "study.yaml").write_text("title: [unclosed\n"),
    "TOKENS": lambda p: tokens_file(p / "tokens.bin", 300_000),
    "BADIDS": lambda p: tokens_file(p / "badids.bin", 1_500_000, bad_at=1_200_000),
    "DIR": lambda p: (p / "somedir").mkdir(),
    "RAGGED": lambda p: (p / "ragged.csv").write_text("params,tokens,loss,arm\n1e6,1e8,3.0,a\n2e6,1e8\n"),
    "NEGALPHA": lambda p: fit_json(p / "negalpha.json", {**FIT_LAW, "alpha": -0.3}),
    "HUGEALPHA": lambda p: fit_json(p / "hugealpha.json", {**FIT_LAW, "alpha": 1e300}),
    "HUGEPARAMS": lambda p: (p / "hugeparams.csv").write_text(CSV_OK.replace("\n1e+06,", "\n1e308,", 2)),
    "BADRANGE": lambda p: fit_json(p / "badrange.json", data={**FIT_DATA, "N": {"min": 1e8, "max": 1e6}}),
    "WRONGTYPES": lambda p: fit_json(p / "wrongtypes.json", data={**FIT_DATA, "C": {"min": "big", "max": []}}),
    "BROKENRUN": lambda p: (p / "run").mkdir() or (p / "run" / "result.json").write_text('{"status": "fini'),
    "SHORTSPLIT": lambda p: prepared_dir(p / "short", train_tokens=250_000),
    "IDSPASTVOCAB": lambda p: prepared_dir(p / "ids", top_id=150),
    "BADDTYPE": lambda p: prepared_dir(p / "dtype", dtype="float32"),
    "BROKENMETA": lambda p: prepared_dir(p / "meta") or (p / "meta" / "meta.json").write_text("{"),
    "BADJOBS": lambda p: (p / "badjobs").mkdir() or (p / "badjobs" / "jobs.json").write_text("[3]"),
    "RESULTDIR": lambda p: (p / "rundir" / "result.json").mkdir(parents=True),
    "LOGDIR": lambda p: (p / "logdir" / "train.log").mkdir(parents=True),
    "SUMMARYDIR": lambda p: (p / "sweepdir" / "summary.json").mkdir(parents=True),
    "ARMS": lambda p: (p / "arms.csv").write_text(CSV_ARMS),
    "FITOK": lambda p: fit_json(p / "fitok.json"),
    "FIFO": lambda p: os.mkfifo(p / "fifo"),
    "FIFOMETA": lambda p: (
        prepared_dir(p / "fifometa")
        or (p / "fifometa" / "meta.json").unlink()
        or os.mkfifo(p / "fifometa" / "meta.json")
    ),
    "MISSING": lambda p: None,
    # a store that has an experiment, but not the one asked for
    "STORE": lambda p: MlflowClient(f"sqlite:///{p / 'store.db'}").create_experiment("scaling"),
}
INPUT_NAMES = {
    "EMPTY": "empty.txt", "SHORT": "short.bin", "NOTADB": "notadb.db", "FILE": "file.txt", "BINARY": "points.csv",
    "OK": "ok.csv", "NOCOLUMN": "nocolumn.csv", "NEGATIVE": "negative.csv", "DUPLICATE": "duplicate.csv",
    "HEADERONLY": "header.csv", "NOTJSON": "fit.json", "BROKENSTUDY": "broken",
    "TOKENS": "tokens.bin", "BADIDS": "badids.bin", "DIR": "somedir", "MISSING": "missing", "STORE": "store.db",
    "RAGGED": "ragged.csv", "NEGALPHA": "negalpha.json", "BADRANGE": "badrange.json", "WRONGTYPES": "wrongtypes.json",
    "BROKENRUN": "run", "SHORTSPLIT": "short", "IDSPASTVOCAB": "ids", "BADDTYPE": "dtype", "BROKENMETA": "meta",
    "BADJOBS": "badjobs", "RESULTDIR": "rundir", "LOGDIR": "logdir", "SUMMARYDIR": "sweepdir", "ARMS": "arms.csv",
    "FITOK": "fitok.json", "HUGEALPHA": "hugealpha.json", "FIFO": "fifo", "FIFOMETA": "fifometa",
    "HUGEPARAMS": "hugeparams.csv",
}  # fmt: skip
PLACEHOLDER = re.compile(r"\b(" + "|".join(sorted(INPUTS, key=len, reverse=True)) + r")\b")


def materialize(args: list[str], folder: Path) -> list[str]:
    """The arguments with each upper-case word replaced by the path of the input it names, made here."""
    for name in {m for a in args for m in PLACEHOLDER.findall(a)}:
        INPUTS[name](folder)
    return [PLACEHOLDER.sub(lambda m: str(folder / INPUT_NAMES[m.group(1)]), a) for a in args]


def statuses(db: Path) -> list[str]:
    """Every run's status in a sqlite store, read from the database (MLflow's client would create it)."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT status FROM runs")]
