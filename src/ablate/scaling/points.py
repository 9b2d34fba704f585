"""The data a fit reads: final losses of runs (Points), one run's loss-vs-FLOPs history (RunCurve),
the CSV and Chinchilla loaders, and the input checks whose FitInputError is one line.

Points also carry what is known about the data beyond the losses: its entropy floor (the lowest loss
any model can reach, e.g. the synthetic language's entropy rate; the fit keeps E above it) and each
run's training seconds (for what a further run would take on the same hardware)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from ablate.config import MAX_TARGET, PARAM_KINDS, ConfigError

FLOPS_PER_PARAM_TOKEN = 6.0  # C = 6 N D (Kaplan et al. 2020, sec. 2.1)


class FitInputError(ConfigError):
    """Input that no fit can use; the message is one line that says what to change. `code` is the
    verdict reason it amounts to (verdict.REASON_CODES) when a method is skipped for it."""

    def __init__(self, message: str, code: str = "few_points") -> None:
        super().__init__(message)
        self.code = code


CSV_REQUIRED = ("params", "tokens", "loss")
CSV_OPTIONAL = ("flops", "params_non_embedding", "train_s", "entropy_floor", "run_id", "seed")
# a seed column: `seed`, or `train.seed` as a sweep over the training seed writes it (one column per swept key)
SEED_COLUMNS = ("seed", "train.seed")
CSV_NUMERIC = ("params", "tokens", "loss", "flops", "params_non_embedding", "train_s")
CHINCHILLA_COLUMNS = ("Model Size", "Training FLOP", "loss")


def check_positive(name: str, values, where: str, first_line: int | None = None) -> np.ndarray:
    """Values as a 1-D float array, each finite, > 0 and at most MAX_TARGET (past it 6 N D overflows
    and the law's terms underflow against E), or a FitInputError naming column and row."""
    arr = np.asarray(values, dtype=float).reshape(-1)
    bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
    if bad.size:
        raise FitInputError(
            f"{where}: column '{name}' {_line_of(int(bad[0]), first_line)} is {float(arr[bad[0]])!r}; every value must "
            "be finite and > 0" + (f" ({bad.size} bad rows)" if bad.size > 1 else "")
        )
    huge = np.flatnonzero(arr > MAX_TARGET)
    if huge.size:
        raise FitInputError(
            f"{where}: column '{name}' {_line_of(int(huge[0]), first_line)} is {float(arr[huge[0]]):g}; every value "
            f"must be at most {MAX_TARGET:g}"
        )
    return arr


def _line_of(i: int, first_line: int | None) -> str:
    return f"row {i}" + (f" (line {i + first_line})" if first_line is not None else "")


@dataclass(frozen=True, init=False)
class Points:
    """Final (or per-checkpoint) results of training runs: one row per point, arrays of shape (n,).

    C may be left out (None) when constructing: it is then 6ND, so that the attribute is always an array."""

    N: np.ndarray  # parameters (total: Chinchilla's N)
    D: np.ndarray  # training tokens
    L: np.ndarray  # loss, nats per token
    C: np.ndarray  # training FLOPs; 6ND when not given
    N_non_embedding: np.ndarray | None  # Kaplan's N, when known
    run_ids: tuple[str, ...] | None
    seconds: np.ndarray | None  # each run's training time, when known
    entropy_floor: float | None  # the lowest loss any model can reach on these data, when known
    seeds: tuple[str, ...] | None  # each run's training seed, when known: replicates are distinct seeds
    # the vocabulary the losses are nats per token of, when known: {vocab_size, data, tokenizer,
    # bytes_per_token} (scaling/runs.py), which fit.json records for a plan to check
    tokenizer: dict | None

    def __init__(
        self,
        N: ArrayLike,
        D: ArrayLike,
        L: ArrayLike,
        C: ArrayLike | None = None,
        N_non_embedding: ArrayLike | None = None,
        run_ids: Sequence | None = None,
        seconds: ArrayLike | None = None,
        entropy_floor: float | None = None,
        seeds: Sequence | None = None,
        tokenizer: dict | None = None,
    ) -> None:
        given = {
            "params": N,
            "tokens": D,
            "loss": L,
            "flops": C,
            "params_non_embedding": N_non_embedding,
            "train_s": seconds,
        }
        cols = {k: check_positive(k, v, "Points") for k, v in given.items() if v is not None}
        lengths = {k: len(v) for k, v in cols.items()}
        if len(set(lengths.values())) != 1:
            raise FitInputError(f"Points: columns differ in length: {lengths}")
        if run_ids is not None and len(run_ids) != lengths["params"]:
            raise FitInputError(f"Points: {len(run_ids)} run_ids for {lengths['params']} points")
        cols.setdefault("flops", FLOPS_PER_PARAM_TOKEN * cols["params"] * cols["tokens"])
        for attr, key in (
            ("N", "params"),
            ("D", "tokens"),
            ("L", "loss"),
            ("C", "flops"),
            ("N_non_embedding", "params_non_embedding"),
            ("seconds", "train_s"),
        ):
            object.__setattr__(self, attr, cols.get(key))
        object.__setattr__(self, "run_ids", None if run_ids is None else tuple(str(r) for r in run_ids))
        if seeds is not None and len(seeds) != lengths["params"]:
            raise FitInputError(f"Points: {len(seeds)} seeds for {lengths['params']} points")
        object.__setattr__(self, "seeds", None if seeds is None else tuple(str(r) for r in seeds))
        if entropy_floor is not None:
            entropy_floor = float(check_positive("entropy_floor", [entropy_floor], "Points")[0])
        object.__setattr__(self, "entropy_floor", entropy_floor)
        object.__setattr__(self, "tokenizer", tokenizer)

    def __len__(self) -> int:
        return len(self.L)

    def subset(self, idx) -> Points:
        idx = np.asarray(idx)

        def pick(col):
            return None if col is None else col[idx]

        def labels(col):
            return None if col is None else tuple(np.asarray(col, dtype=object)[idx])

        return Points(
            self.N[idx],
            self.D[idx],
            self.L[idx],
            self.C[idx],
            pick(self.N_non_embedding),
            labels(self.run_ids),
            pick(self.seconds),
            self.entropy_floor,
            labels(self.seeds),
            self.tokenizer,
        )

    def with_floor(self, floor: float | None) -> Points:
        """The same points with a known entropy floor (None: unknown)."""
        return replace(self, entropy_floor=floor)

    def with_params(self, kind: str) -> Points:
        """The points with N counted as `kind`: 'total' (Chinchilla's N, the default) or 'non_embedding'
        (Kaplan et al. 2020's N); C stays as recorded."""
        if kind not in PARAM_KINDS:
            raise FitInputError(f"params={kind} is not a parameter count (valid: {', '.join(PARAM_KINDS)})")
        if kind == "total":
            return self
        if self.N_non_embedding is None:
            raise FitInputError(
                "params=non_embedding asked for, but the points have no params_non_embedding column "
                "(valid: params=total, or points with params_non_embedding)"
            )
        return replace(self, N=self.N_non_embedding)

    @property
    def flops_per_second(self) -> float | None:
        """The training throughput of the largest runs (median C / seconds at the largest N): what a
        further run's FLOPs take on the hardware these ran on. None without timings."""
        if self.seconds is None:
            return None
        top = self.N >= self.N.max() * (1 - 1e-9)
        return float(np.median(self.C[top] / self.seconds[top]))

    def variable(self, name: str) -> np.ndarray:
        """The column a single-variable law uses: 'N', 'N_non_embedding', 'D' or 'C'."""
        valid = ("N", "N_non_embedding", "D", "C")
        if name not in valid:
            raise FitInputError(f"unknown variable {name!r}; valid: {', '.join(valid)}")
        if name == "N_non_embedding" and self.N_non_embedding is None:
            raise FitInputError(
                "variable 'N_non_embedding' asked for, but the points have no params_non_embedding column"
            )
        return getattr(self, name)

    def summary(self) -> dict:
        def rng(x):
            return {"min": float(x.min()), "max": float(x.max())}

        return {
            "n_points": len(self),
            "N": rng(self.N),
            "D": rng(self.D),
            "C": rng(self.C),
            "L": rng(self.L),
            "distinct_N": int(len(np.unique(self.N))),
        }

    @classmethod
    def from_csv(cls, path: str | Path) -> Points:
        """Columns params, tokens, loss[, flops, params_non_embedding, train_s, entropy_floor, run_id,
        seed] (header names exact; `train.seed` stands for `seed`). The entropy floor is the data's when
        every row that gives one agrees; seeds are read when every row gives one."""
        header, rows = _read_csv(path)
        missing = [c for c in CSV_REQUIRED if c not in header]
        if missing:
            hint = ""
            if all(c in header for c in CHINCHILLA_COLUMNS):
                hint = " (this looks like Epoch's Chinchilla CSV: load it with load_chinchilla)"
            raise FitInputError(
                f"{path}: missing column(s) {', '.join(missing)}; valid columns: "
                f"{', '.join(CSV_REQUIRED + CSV_OPTIONAL)}{hint}"
            )
        _require_rows(path, len(rows))
        # an optional column left empty on every row (e.g. flops not recorded) counts as absent
        present = [c for c in CSV_NUMERIC if c in header and (c in CSV_REQUIRED or any(r[c] for r in rows))]
        if "train_s" in present and not all(_positive_text(r["train_s"]) for r in rows):
            present.remove("train_s")  # timings only inform the time of suggested runs: all or none
        checked = {
            c: check_positive(c, _numbers(path, c, [r[c] for r in rows]), str(path), first_line=2) for c in present
        }
        _refuse_duplicates(
            path,
            [checked[c] for c in present],
            [(r.get("run_id", ""), *(r.get(c, "") for c in SEED_COLUMNS)) for r in rows],
        )
        floors = csv_floors(path, rows)
        return cls(
            checked["params"],
            checked["tokens"],
            checked["loss"],
            checked.get("flops"),
            checked.get("params_non_embedding"),
            tuple(r["run_id"] for r in rows) if "run_id" in header else None,
            checked.get("train_s"),
            floors.pop() if len(floors) == 1 else None,
            csv_seeds(path, header, rows),
        )


def csv_seeds(path, header: list[str], rows: list[dict]) -> tuple[str, ...] | None:
    """The seed of each row (column `seed`, else `train.seed`); None without such a column. A column
    that leaves some rows empty is refused: replicates are told apart by their seeds."""
    column = next((c for c in SEED_COLUMNS if c in header), None)
    if column is None:
        return None
    seeds = tuple(r.get(column, "") for r in rows)
    missing = [i for i, s in enumerate(seeds) if not s]
    if len(missing) == len(seeds):
        return None
    if missing:
        i = missing[0]
        raise FitInputError(
            f"{path}: column '{column}' row {i} (line {i + 2}) is empty; give every run's seed or none "
            "(valid: a seed on every row, or no seed column)"
        )
    return seeds


def _positive_text(text: str) -> bool:
    try:
        return float(text) > 0
    except (TypeError, ValueError):
        return False


def csv_floors(path, rows: list[dict]) -> set[float]:
    """The distinct entropy floors the rows give (column entropy_floor; empty cells: unknown)."""
    texts = [r.get("entropy_floor") for r in rows]
    values = _numbers(path, "entropy_floor", [t for t in texts if t])
    return {float(v) for v in check_positive("entropy_floor", values, str(path))} if len(values) else set()


def _read_csv(path: str | Path) -> tuple[list[str], list[dict]]:
    """Header and rows; a byte-order mark (Excel's UTF-8) and spaces around names are not part of them."""
    path = Path(path)
    if not path.is_file():
        raise FitInputError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = [name.strip() for name in next(reader, [])]
            rows = [_row(path, header, row, reader.line_num) for row in reader if any(row)]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FitInputError(f"{path}: not a CSV text file ({type(exc).__name__}: {str(exc)[:80]})") from None
    return header, rows


def _row(path: Path, header: list[str], row: list[str], line: int) -> dict:
    """One data row as {column: text}; a row with more or fewer fields than the header is refused:
    its values would land in the wrong columns, or in none."""
    if len(row) != len(header):
        raise FitInputError(
            f"{path}: line {line} has {len(row)} fields and the header {len(header)} (valid: one value per column)"
        )
    return dict(zip(header, (v.strip() for v in row), strict=True))


def _refuse_duplicates(path, columns: list[np.ndarray], run_ids: list) -> None:
    """Two rows with the same numbers (and the same run_id and seed, when there are) are one point
    pasted twice: in a least-squares fit it would count double."""
    seen: dict = {}
    for i, key in enumerate(zip(*(c.tolist() for c in columns), run_ids, strict=True)):
        if key in seen:
            j = seen[key]
            raise FitInputError(
                f"{path}: rows {j} and {i} (lines {j + 2} and {i + 2}) are the same point "
                "(valid: each run once; a repeated row counts double in the fit)"
            )
        seen[key] = i


def _numbers(path, column: str, texts: list[str]) -> np.ndarray:
    out = np.empty(len(texts))
    for i, t in enumerate(texts):
        try:
            out[i] = float(t)
        except (TypeError, ValueError):
            raise FitInputError(f"{path}: column '{column}' row {i} (line {i + 2}) is {t!r}, not a number") from None
    return out


def _require_rows(path, n: int) -> None:
    if n == 0:
        raise FitInputError(f"{path}: no data rows")


def load_chinchilla(path: str | Path, drop_worst: int = 5) -> Points:
    """Epoch's svg_extracted_data.csv: N = 'Model Size', C = 'Training FLOP', D = C/(6N).

    Besiroglu et al. 2024 drop the `drop_worst` highest-loss points (5 of 245) before fitting.
    """
    header, rows = _read_csv(path)
    missing = [c for c in CHINCHILLA_COLUMNS if c not in header]
    if missing:
        raise FitInputError(
            f"{path}: missing column(s) {', '.join(repr(c) for c in missing)}; "
            f"the Chinchilla loader needs {', '.join(repr(c) for c in CHINCHILLA_COLUMNS)}"
        )
    _require_rows(path, len(rows))
    N, C, L = (check_positive(c, _numbers(path, c, [r[c] for r in rows]), str(path), 2) for c in CHINCHILLA_COLUMNS)
    keep = np.sort(np.argsort(L, kind="stable")[: len(L) - drop_worst])
    return Points(N[keep], C[keep] / (FLOPS_PER_PARAM_TOKEN * N[keep]), L[keep], C[keep])


def load_points_csv(path: str | Path) -> tuple[Points, str | None]:
    """A CSV in our columns (Points.from_csv) or Epoch's Chinchilla CSV (load_chinchilla, which drops
    the 5 highest losses); the note says which Epoch rows were dropped, None for our columns."""
    header, rows = _read_csv(path)
    if all(c in header for c in CHINCHILLA_COLUMNS) and not all(c in header for c in CSV_REQUIRED):
        points = load_chinchilla(path)
        return points, (
            f"Epoch's Chinchilla columns ({', '.join(repr(c) for c in CHINCHILLA_COLUMNS)}): "
            f"{len(rows) - len(points)} highest-loss rows of {len(rows)} dropped, "
            "as Besiroglu et al. 2024 did; D = C / (6N)"
        )
    floors = csv_floors(path, rows)
    if len(floors) > 1:
        shown = ", ".join(f"{f:.4g}" for f in sorted(floors))
        return Points.from_csv(
            path
        ), f"the rows' entropy floors differ ({shown}): no floor is used unless entropy_floor= is given"
    return Points.from_csv(path), None


def require_count(n: int, needed: int, law: str, what: str = "points") -> None:
    if n < needed:
        raise FitInputError(f"{law}: {n} {what}, needs at least {needed}")


def require_distinct(x: np.ndarray, needed: int, name: str, law: str) -> None:
    k = len(np.unique(x))
    if k == 1:
        raise FitInputError(
            f"{law}: all points at one {name} ({x[0]:.4g}); needs at least {needed} distinct values", "few_sizes"
        )
    if k < needed:
        raise FitInputError(f"{law}: only {k} distinct values of {name}; needs at least {needed}", "few_sizes")


@dataclass(frozen=True)
class RunCurve:
    """One training run's history: arrays (t,) of cumulative FLOPs, tokens and loss."""

    N: float
    flops: np.ndarray
    tokens: np.ndarray
    loss: np.ndarray
    run_id: str | None = None

    def __post_init__(self) -> None:
        where = f"run {self.run_id or self.N!r}"
        cols = {k: check_positive(k, getattr(self, k), where) for k in ("flops", "tokens", "loss")}
        check_positive("N", [self.N], where)
        if len({len(v) for v in cols.values()}) != 1:
            raise FitInputError(f"{where}: flops, tokens and loss differ in length")
        if np.any(np.diff(cols["flops"]) <= 0):
            raise FitInputError(f"{where}: flops must increase strictly along the curve")
        for k, v in cols.items():
            object.__setattr__(self, k, v)
