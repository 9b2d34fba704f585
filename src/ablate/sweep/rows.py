"""A sweep's summary rows: one per job (and per cooldown branch), typed, from each job's result.json.

A row holds what the job recorded (`result`, its result.json as written) and what the summary
computes from the sweep as a whole, each by a function that returns new rows: the figures of a run
skipped as already finished (`filled`, from its MLflow run or the summary recorded before), its
comparison against the baseline and its arm's interval over the seeds. `record()` is the row as
summary.json holds it: the keys in the order the summary has always written them, so recorded
studies and their readers see the same file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ablate.files import read_json, read_json_object
from ablate.model import recorded_mfu
from ablate.run import BRANCHES_DIR

SEED_KEY = "train.seed"
# A run's speed is comparable with another's only when neither shared its cores (or its GPU):
# core share = training CPU seconds / (training wall seconds x torch threads), 1.0 for a run that
# had its threads' cores to itself; below this, another process took a part of them.
MIN_CORE_SHARE = 0.85
# The keys a row sets itself; every other key of a record is the job's own figure.
_IDENTITY = ("label", "job", "overrides")


@dataclass(frozen=True)
class Comparison:
    """A run against its baseline run: the fp32 run (else the first finished one) of the same seed."""

    baseline: str | None = None  # the baseline's label
    baseline_job: str | None = None  # the job of the run this one is paired with
    val_loss_delta: float | None = None  # final val loss minus the partner's
    speedup: float | None = None  # tokens/s over the partner's
    speedup_comparable: bool | None = None  # None without a speed-up; else whether it may be read
    speedup_why_not: str | None = None


@dataclass(frozen=True)
class ArmFigures:
    """An arm's (the runs that differ only in their seed) mean loss difference against the
    baseline's paired runs, with its Student's t 95% interval over the n seeds."""

    arm: str  # the arm's label
    val_loss_delta_mean: float | None
    val_loss_delta_ci95: list[float] | None
    val_loss_delta_n: int
    val_loss_delta_resolved: bool | None  # the interval excludes 0; None without one


# What the summary computes for a row, written by record() after the run's own figures: a recorded
# summary's values of these are computed again, never kept as the run's figures (kept, each would sit
# where the older record had it, and a summary written from a summary would not be the same file).
_COMPUTED = frozenset({"job_cpu_s", "profile", *(f.name for f in (*fields(Comparison), *fields(ArmFigures)))})


@dataclass(frozen=True)
class SummaryRow:
    label: str
    job: str  # the job's folder under the sweep dir ("3", or "3/branches/tokens=65536")
    overrides: dict[str, str]  # the swept keys that set this job apart
    result: dict[str, Any]  # result.json as the job wrote it
    job_cpu_s: float | None = None  # the job process's CPU time (usage.json), branches included
    filled: dict[str, Any] = field(default_factory=dict)  # a skipped run's figures from elsewhere
    comparison: Comparison = Comparison()
    arm: ArmFigures | None = None  # None for a trunk, which is no point of any arm
    profile: dict[str, Any] | None = None  # perf/roofline.profile_figures, with train.profile=true

    @cached_property
    def figures(self) -> dict[str, Any]:
        """The run's figures: its result.json, with a skipped run's filled in."""
        return {**self.result, **self.filled}

    @property
    def status(self) -> str:
        return self.figures["status"]

    @property
    def reason(self) -> str:
        return self.figures.get("reason", "")

    @property
    def kind(self) -> str | None:
        return self.figures.get("kind")

    @property
    def precision(self) -> str | None:
        return self.figures.get("precision")

    @property
    def device(self) -> str | None:
        return self.figures.get("device")

    @property
    def params(self) -> int | None:
        return self.figures.get("params")

    @property
    def tokens(self) -> int | None:
        return self.figures.get("tokens")

    @property
    def flops(self) -> float | None:
        return self.figures.get("flops")

    @property
    def final_val_loss(self) -> float | None:
        return self.figures.get("final_val_loss")

    @property
    def final_val_bpb(self) -> float | None:
        return self.figures.get("final_val_bpb")

    @property
    def tokens_per_s(self) -> float | None:
        return self.figures.get("tokens_per_s")

    @property
    def core_share(self) -> float | None:
        return self.figures.get("core_share")

    @property
    def memory_bytes(self) -> int | None:
        return self.figures.get("memory_bytes")

    @property
    def entropy_floor(self) -> float | None:
        return self.figures.get("entropy_floor")

    @property
    def mlflow_run_id(self) -> str | None:
        return self.figures.get("mlflow_run_id")

    @property
    def wall_s(self) -> float | None:
        return self.figures.get("wall_s")

    @property
    def mfu(self) -> float | None:
        """The recorded MFU, None where it was impossible (model/accounting.recorded_mfu)."""
        return recorded_mfu(self.figures.get("mfu"))

    @property
    def mfu_impossible(self) -> bool:
        """An MFU above 100% in a record (a run of an older ablate, whose CPU peak a busy machine
        fooled) is not shown: the row says it was impossible instead."""
        return (self.figures.get("mfu") is not None and self.mfu is None) or self.figures.get("mfu_impossible") is True

    def record(self) -> dict[str, Any]:
        """The row as summary.json holds it: identity, result.json, CPU time, a skipped run's filled
        figures (in place where result.json had the key), then what the summary computed."""
        record = {"label": self.label, "job": self.job, "overrides": self.overrides}
        record.update(self.result)
        record["job_cpu_s"] = self.job_cpu_s
        record.update({k: v for k, v in self.filled.items() if k != "mfu_impossible"})
        record["mfu"] = self.mfu
        if self.mfu_impossible:
            record["mfu_impossible"] = True
        record.update(asdict(self.comparison))
        if self.arm is not None:
            record.update(asdict(self.arm))
        if self.profile is not None:
            record["profile"] = self.profile
        return record


def from_record(record: dict[str, Any]) -> SummaryRow:
    """A row of a recorded summary.json, read back (an older one may lack the computed keys)."""
    compared_keys = [f.name for f in fields(Comparison) if f.name in record]
    arm_keys = [f.name for f in fields(ArmFigures) if f.name in record]
    arm = ArmFigures(**{k: record[k] for k in arm_keys}) if len(arm_keys) == len(fields(ArmFigures)) else None
    return SummaryRow(
        label=record["label"],
        job=str(record["job"]),
        overrides=record.get("overrides") or {},
        result={k: v for k, v in record.items() if k not in _IDENTITY and k not in _COMPUTED},
        job_cpu_s=record.get("job_cpu_s"),
        comparison=Comparison(**{k: record[k] for k in compared_keys}),
        arm=arm,
        profile=record.get("profile"),
    )


def read_rows(job_dir: Path, label: str, overrides: dict[str, str]) -> list[SummaryRow]:
    """The job's row; for a trunk, then a row per branch, labelled and keyed by its own budget."""
    # the process launchers record each job's CPU time (a trunk's includes its branches')
    cpu_s = read_json_object(job_dir / "usage.json").get("cpu_s")
    if not isinstance(cpu_s, (int, float)):
        cpu_s = None
    row = replace(_row(job_dir, label, overrides, job_dir.name), job_cpu_s=cpu_s)
    branches = job_dir / BRANCHES_DIR
    if row.kind != "trunk" or not branches.is_dir():
        return [row]
    rows = [replace(row, label=f"{label} (trunk)".strip())]
    for d in sorted((d for d in branches.iterdir() if "=" in d.name), key=_budget_order):
        key, value = d.name.split("=", 1)
        budget = {f"train.{key}": value}
        name = " ".join(f"{k}={v}" for k, v in budget.items())
        rows.append(
            _row(d, f"{label} {name}".strip(), {**overrides, **budget}, f"{job_dir.name}/{BRANCHES_DIR}/{d.name}")
        )
    return rows


def _budget_order(d: Path) -> float:
    return float(d.name.split("=", 1)[1])


def _row(job_dir: Path, label: str, overrides: dict[str, str], job: str) -> SummaryRow:
    result = read_json(job_dir / "result.json")
    if not isinstance(result, dict):  # none, or one that is not a result (a FIFO is refused unread)
        result = {"status": "missing", "reason": "the job wrote no result.json (crashed or still running)"}
    return SummaryRow(label=label, job=job, overrides=overrides, result=result)


def filled_from_mlflow(rows: list[SummaryRow], uri: str | None) -> list[SummaryRow]:
    """A run skipped as already finished reports the figures of the run it points to."""
    skipped = [r for r in rows if r.status == "skipped" and r.mlflow_run_id]
    if not skipped or not uri:
        return rows
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    metrics = {id(r): client.get_run(r.mlflow_run_id).data.metrics for r in skipped}
    return [replace(r, filled=_mlflow_figures(r, metrics[id(r)])) if id(r) in metrics else r for r in rows]


def _mlflow_figures(r: SummaryRow, m: dict[str, float]) -> dict[str, Any]:
    return {
        "final_val_loss": m.get("final/val_loss", m.get("val/loss")),
        "final_val_bpb": m.get("final/val_bpb", m.get("val/bpb")),
        "final_train_loss": m.get("final/train_loss"),
        "tokens_per_s": m.get("final/tokens_per_s"),
        "mfu": m.get("final/mfu"),
        "flops": m.get("flops", r.flops),
        "tokens": int(m["tokens"]) if "tokens" in m else r.tokens,
        "wall_s": m.get("final/wall_s", r.wall_s),
    }


def filled_from_record(rows: list[SummaryRow], recorded: object) -> list[SummaryRow]:
    """Without the store (a fresh clone keeps none), a run skipped as already finished reports the
    figures the summary recorded for it while the store was there, not an empty row."""
    if not isinstance(recorded, dict):
        return rows
    before = {(r.get("job"), r.get("mlflow_run_id")): r for r in recorded.get("runs") or []}
    out = []
    for r in rows:
        old = before.get((r.job, r.mlflow_run_id))
        if r.status == "skipped" and old is not None and r.final_val_loss is None:
            filled = {k: v for k, v in old.items() if k not in _IDENTITY and k not in _COMPUTED and v is not None}
            cpu_s = old.get("job_cpu_s")
            r = replace(r, filled=filled, job_cpu_s=r.job_cpu_s if cpu_s is None else cpu_s)
        out.append(r)
    return out


def compared(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Loss difference and speed-up of each run against its baseline: the fp32 run (else the first
    finished one) with the same seed (train.seed swept: same data order and initialisation), so the
    difference is paired. Each arm (the runs that differ only in their seed) then gets the mean of its
    runs' differences with a Student's t 95% interval over the seeds (`val_loss_delta_ci95`)."""
    from ablate.scaling import mean_interval  # scipy: a second to import

    done = [r for r in rows if r.final_val_loss is not None and r.kind != "trunk"]
    base = next((r for r in done if r.precision == "fp32"), done[0] if done else None)
    base_arm = arm_key(base) if base else None
    partners = {r.overrides.get(SEED_KEY): r for r in done if arm_key(r) == base_arm}
    rows = [replace(r, comparison=_comparison(r, base, partners, rows)) for r in rows]
    figures: dict[int, ArmFigures] = {}
    for arm in arms(rows):
        deltas = [r.comparison.val_loss_delta for r in arm.runs if r.comparison.val_loss_delta is not None]
        est = mean_interval(deltas) if deltas and arm.key != base_arm else None
        ci = list(est.ci95) if est is not None and est.ci95 is not None else None
        for r in arm.runs:
            figures[id(r)] = ArmFigures(
                arm=arm.label,
                val_loss_delta_mean=est.value if est is not None else None,
                val_loss_delta_ci95=ci,
                val_loss_delta_n=len(deltas),
                val_loss_delta_resolved=None if ci is None else not ci[0] <= 0.0 <= ci[1],
            )
    return [replace(r, arm=figures.get(id(r))) for r in rows]


def _comparison(
    r: SummaryRow, base: SummaryRow | None, partners: dict[str | None, SummaryRow], rows: list[SummaryRow]
) -> Comparison:
    seed = r.overrides.get(SEED_KEY)
    partner = partners.get(seed) if seed is not None else base
    ok = partner is not None and r.final_val_loss is not None
    speed, base_speed = r.tokens_per_s, partner.tokens_per_s if partner else None
    speedup = speed / base_speed if speed and base_speed else None
    why = _why_not_comparable(r, partner, rows) if speedup and partner else None
    return Comparison(
        baseline=base.label if base else None,
        baseline_job=partner.job if partner else None,
        val_loss_delta=r.final_val_loss - partner.final_val_loss if ok else None,
        speedup=speedup,
        speedup_comparable=None if speedup is None else why is None,
        speedup_why_not=why,
    )


def arm_key(row: SummaryRow) -> tuple[tuple[str, str], ...]:
    """What sets a run apart but its seed: runs that share it are one arm's replicates."""
    return tuple(sorted((k, v) for k, v in row.overrides.items() if k != SEED_KEY))


@dataclass(frozen=True)
class Arm:
    key: tuple[tuple[str, str], ...]
    label: str
    runs: list[SummaryRow]


def arms(rows: list[SummaryRow]) -> list[Arm]:
    """The arms in the order of their first run: the runs that differ only in seed (trunks left out)."""
    found: dict[tuple, Arm] = {}
    for r in rows:
        if r.kind == "trunk":
            continue
        key = arm_key(r)
        label = " ".join(f"{k}={v}" for k, v in key) or r.label
        found.setdefault(key, Arm(key, label, [])).runs.append(r)
    return list(found.values())


def _why_not_comparable(r: SummaryRow, base: SummaryRow, rows: list[SummaryRow]) -> str | None:
    """Why a run's speed cannot be set against its baseline's, or None when it can: both ran on a
    CPU with their cores to themselves (core share >= MIN_CORE_SHARE), or both on a GPU of their own
    (no other run of the sweep on the same GPU while it ran)."""
    devices = {str(r.device or "?").split(":")[0], str(base.device or "?").split(":")[0]}
    if len(devices) != 1:
        return f"{r.label} and {base.label} ran on different devices ({', '.join(sorted(devices))})"
    for x in (r, base):
        if devices == {"cuda"}:
            other = _gpu_sharer(x, rows)
            if other is not None:
                return f"{x.label} shared its GPU with {other}"
            continue
        share = x.core_share
        if share is None:
            return f"{x.label} recorded no core share (an older ablate, or a run skipped as finished)"
        if share < MIN_CORE_SHARE:
            return f"{x.label} had {share:.0%} of its {x.figures.get('torch_threads') or '?'} thread(s)' cores"
    return None


def _gpu_sharer(r: SummaryRow, rows: list[SummaryRow]) -> str | None:
    """Another run of the sweep on r's GPU while r ran ("?" when r recorded no GPU or times)."""
    gpu, start, end = (r.figures.get(k) for k in ("gpu", "started_at", "ended_at"))
    if not gpu or start is None or end is None:
        return "?"
    for o in rows:
        o_gpu, o_start, o_end = (o.figures.get(k) for k in ("gpu", "started_at", "ended_at"))
        if o is r or o_gpu != gpu or o_start is None or o_end is None:
            continue
        if o_start < end and start < o_end:
            return o.label
    return None


def profiled(rows: list[SummaryRow], sweep_dir: Path) -> list[SummaryRow]:
    """Runs launched with train.profile=true left a profile.json: which bound each hit (roofline.py)."""
    if not any((sweep_dir / r.job / "profile.json").exists() for r in rows):
        return rows
    from ablate.perf import roofline

    out = []
    for r in rows:
        figures = roofline.profile_figures(sweep_dir / r.job)
        out.append(r if figures is None else replace(r, profile=figures))
    return out


def fit_points(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Rows that are points of a fit: finished runs and branches, not trunks (constant rate)."""
    return [r for r in rows if r.final_val_loss is not None and r.params and r.tokens and r.kind != "trunk"]
