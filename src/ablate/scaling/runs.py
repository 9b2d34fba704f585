"""An MLflow experiment's training runs as the input of a fit, and the "fit" run that records the fit
beside them.

A training run (train.py) has params `derived.params`, `derived.params_non_embedding` and
`derived.entropy_floor`, the metric `final/val_loss`, and `val/loss`, `flops`, `tokens` logged at
shared steps: its final (N, D, C, L) is one point, and its val/loss-against-flops history one curve
(Chinchilla approach 1). Runs that are not training runs (a sweep's parent, a study, an earlier fit:
tag ablate.kind) and runs that did not finish are skipped and counted.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ablate.scaling.points import FitInputError, Points, RunCurve
from ablate.tracking import CONFIG_HASH_TAG, FIT_STATUS_TAG, FIT_VERDICT_TAG, KIND_TAG, REASON_TAG, client_for, run_tags

if TYPE_CHECKING:
    from mlflow.entities import Run

FIT_KIND = "fit"
PAGE = 1000  # MLflow's search_runs page size


@dataclass(frozen=True)
class ExperimentRuns:
    """The usable runs of one experiment. `skipped` counts the others by reason."""

    experiment: str
    experiment_id: str
    points: Points
    curves: tuple[RunCurve, ...]
    entropy_floor: float | None  # shared by every run used; None when unknown or when they differ
    skipped: dict[str, int]
    notes: tuple[str, ...]


def find_experiment(client, name: str, uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    names = sorted(e.name for e in client.search_experiments(max_results=PAGE))
    valid = ", ".join(names) or "none: the store is empty"
    raise FitInputError(f"experiment={name} does not exist in {uri} (valid: {valid})")


@dataclass(frozen=True)
class _Used:
    run: Run
    loss: float
    history: dict  # metric key -> {step: value}


def read_experiment(uri: str, name: str) -> ExperimentRuns:
    client = client_for(uri)
    experiment_id = find_experiment(client, name, uri)
    skipped: Counter = Counter()
    used: list[_Used] = []
    seen: set = set()
    recovered = 0
    for run in _all_runs(client, experiment_id):  # newest first
        reason = _skip_reason(run)
        config = run.data.tags.get(CONFIG_HASH_TAG)
        if reason is None and config in seen:
            reason = f"older FINISHED runs of a config that has a newer one (tag {CONFIG_HASH_TAG})"
        if reason is None:
            history = _history(client, run.info.run_id)
            loss, from_last_eval = _final_loss(run, history)
            if loss is not None:
                if config:
                    seen.add(config)
                used.append(_Used(run, loss, history))
                recovered += from_last_eval
                continue
            reason = "FINISHED runs without a final loss (final/val_loss, or val/loss at the last step)"
        skipped[reason] += 1
    if not used:
        raise FitInputError(
            f"experiment={name} has no FINISHED training runs to fit ({_describe(skipped) or 'it has no runs'})"
        )
    curves, notes = _curves(used)
    if recovered:
        have = "run has" if recovered == 1 else "runs have"
        notes.append(
            f"{recovered} {have} no final/val_loss metric: the val/loss at the last step "
            "(derived.total_steps), which is the same evaluation, is taken as the final loss"
        )
    floor, floor_note = _entropy_floor([u.run for u in used])
    return ExperimentRuns(
        name,
        experiment_id,
        _points(used).with_floor(floor),
        curves,
        floor,
        dict(skipped),
        tuple(notes) + ((floor_note,) if floor_note else ()),
    )


def describe_skipped(skipped: dict[str, int]) -> str:
    return _describe(Counter(skipped))


def _describe(skipped: Counter) -> str:
    ordered = sorted(skipped.items(), key=lambda item: (-item[1], item[0]))  # most first, then by name
    return "; ".join(f"{n} {reason if n > 1 else reason.replace('runs', 'run', 1)}" for reason, n in ordered)


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], max_results=PAGE, page_token=token, order_by=["attributes.start_time DESC"]
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


KIND_WORDS = {
    "sweep": "sweep parent runs",
    "study": "Optuna study runs",
    "fit": "earlier fit runs",
    "compare": "compute-multiplier runs",
    "trunk": "trunk runs",  # constant-rate trunks; their cooldown branches are the points (run/branches.py)
}


def _skip_reason(run) -> str | None:
    """Why a run is not a point, as a plural noun phrase ('runs ...'), or None."""
    kind = run.data.tags.get(KIND_TAG)
    if kind:
        return f"{KIND_WORDS.get(kind, kind + ' runs')} (tag {KIND_TAG}={kind})"
    if run.info.status != "FINISHED":
        return f"runs {run.info.status}, not FINISHED"
    if "derived.params" not in run.data.params:
        return "FINISHED runs without the param derived.params (not ablate training runs)"
    for key in ("tokens", "flops"):
        value = run.data.metrics.get(key)
        if value is None:
            return f"FINISHED runs without the metric {key}"
        if not _usable(value):
            return f"FINISHED runs whose {key} is not finite and > 0"
    return None


def _number(run, key: str) -> float | None:
    try:
        value = float(run.data.params[key])
    except (KeyError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _history(client, run_id: str) -> dict:
    return {
        key: {m.step: m.value for m in client.get_metric_history(run_id, key)}
        for key in ("val/loss", "flops", "tokens")
    }


def _final_loss(run, history: dict) -> tuple[float | None, bool]:
    """final/val_loss; else the val/loss of the last step, which train.py evaluates and records as the final
    loss (a run can lack final/val_loss when a flush at the last step dropped it). True when it came from
    val/loss."""
    final = run.data.metrics.get("final/val_loss")
    if final is not None:
        return (final if _usable(final) else None), False
    val, last = history["val/loss"], _number(run, "derived.total_steps")
    if val and last is not None and max(val) == int(last) and _usable(val[max(val)]):
        return val[max(val)], True
    return None, False


def _usable(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _points(used: list[_Used]) -> Points:
    runs = [u.run for u in used]
    nne = [_number(r, "derived.params_non_embedding") for r in runs]
    # training seconds = tokens / final/tokens_per_s (the training throughput train.py records)
    speed = [r.data.metrics.get("final/tokens_per_s") for r in runs]
    rates = [v for v in speed if v is not None and _usable(v)]
    given = [r.data.params.get("train.seed") for r in runs]  # replicates are runs of distinct seeds
    seeds = [s for s in given if s is not None]
    return Points(
        N=np.array([_number(r, "derived.params") for r in runs], float),
        D=np.array([r.data.metrics["tokens"] for r in runs]),
        L=np.array([u.loss for u in used]),
        C=np.array([r.data.metrics["flops"] for r in runs]),
        N_non_embedding=None if any(v is None for v in nne) else np.array(nne),
        run_ids=tuple(r.info.run_id for r in runs),
        seeds=tuple(seeds) if len(seeds) == len(given) else None,
        seconds=(
            np.array([r.data.metrics["tokens"] / v for r, v in zip(runs, rates, strict=True)])
            if len(rates) == len(speed)
            else None
        ),
        tokenizer=_tokenizer(runs),
    )


def _tokenizer(runs: list) -> dict | None:
    """The vocabulary the runs' losses are nats per token of, where they share one: the model's
    vocab_size, the data and its tokenizer, and the validation text's bytes per token (val/loss
    over val/bpb, logged together: bpb = L / ln 2 / bytes per token), which puts the law in bits
    per byte for a model of another vocabulary (plan/vocabulary.py); and the tokens of their training
    split (the smallest where they differ), which runs suggested from the law are checked against."""
    shared = {
        (
            p.get("model.vocab_size"),
            p.get("data.name") or p.get("data.kind"),
            p.get("data.tokenizer") or p.get("data.kind"),
        )
        for p in (r.data.params for r in runs)
    }
    if len(shared) != 1:
        return None
    vocab, data, tokenizer = shared.pop()
    try:
        vocab_size = int(float(vocab))
    except (TypeError, ValueError):
        return None
    ratios = [
        m["val/loss"] / math.log(2) / m["val/bpb"]
        for m in (r.data.metrics for r in runs)
        if m.get("val/bpb") and m.get("val/loss") and _usable(m["val/bpb"]) and _usable(m["val/loss"])
    ]
    per_token = float(np.median(ratios)) if ratios and len(ratios) == len(runs) else None
    splits = [v for v in (_number(r, "derived.train_split_tokens") for r in runs) if v is not None]
    train_tokens = int(min(splits)) if splits and len(splits) == len(runs) else None
    return {
        "vocab_size": vocab_size,
        "data": data,
        "tokenizer": tokenizer,
        "bytes_per_token": per_token,
        "train_tokens": train_tokens,
    }


def _curves(used: list[_Used]) -> tuple[tuple[RunCurve, ...], list[str]]:
    """Each run's (flops, tokens, val/loss) at the steps where val/loss was logged (flops > 0)."""
    curves, short = [], 0
    for u in used:
        history = u.history
        steps = sorted(
            s for s in history["val/loss"] if history["flops"].get(s, 0) > 0 and history["tokens"].get(s, 0) > 0
        )
        if len(steps) < 2:
            short += 1
            continue
        N = _number(u.run, "derived.params")
        curves.append(
            RunCurve(
                math.nan if N is None else N,  # unparsable or not > 0: RunCurve refuses nan by name, as Points does
                np.array([history["flops"][s] for s in steps]),
                np.array([history["tokens"][s] for s in steps]),
                np.array([history["val/loss"][s] for s in steps]),
                run_id=u.run.info.run_id,
            )
        )
    notes = []
    if short:
        notes.append(f"{short} runs have fewer than 2 evaluations after step 0: no training curve (approach 1)")
    return tuple(curves), notes


def _entropy_floor(runs: list) -> tuple[float | None, str | None]:
    found = {_number(r, "derived.entropy_floor") for r in runs}
    if found == {None}:
        return None, None
    floors = {f for f in found if f is not None}
    if None in found or max(floors) - min(floors) > 1e-9 * max(floors):
        shown = ", ".join("unknown" if f is None else f"{f:.4g}" for f in sorted(found, key=lambda f: f or 0))
        return None, f"the runs' entropy floors differ ({shown}): fitted E is not compared with one"
    return floors.pop(), None


def run_params(uri: str, experiment_id: str, run_ids: tuple[str, ...]) -> dict[str, dict]:
    """{run id: its params} for the given runs of one experiment (one search, not a query per run)."""
    wanted = set(run_ids)
    return {r.info.run_id: r.data.params for r in _all_runs(client_for(uri), experiment_id) if r.info.run_id in wanted}


def log_fit_run(
    uri: str,
    experiment_id: str,
    files: list[Path],
    params: dict,
    metrics: dict,
    converged: bool,
    reason: str,
    verdict: str | None = None,
    kind: str = FIT_KIND,
) -> str:
    """A run tagged ablate.kind=KIND (fit, or compare for compute multipliers) and ablate.fit_verdict
    (approach 3's verdict for a fit; for compare the worst of the laws and of the multipliers inside the
    data), with the export's files as artifacts; FAILED when the fit did not converge (or when logging
    breaks halfway), never left RUNNING."""
    from mlflow.entities import Metric, Param, RunTag

    client = client_for(uri)
    now = int(time.time() * 1000)
    tags = {
        KIND_TAG: kind,
        FIT_STATUS_TAG: "converged" if converged else "DID NOT CONVERGE",
        **({FIT_VERDICT_TAG: verdict} if verdict is not None else {}),
        **run_tags(),
    }
    run = client.create_run(experiment_id, run_name=kind, tags=tags)
    run_id = run.info.run_id
    try:
        client.log_batch(
            run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
            metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items() if _finite(v)],
            tags=[RunTag(REASON_TAG, reason)] if reason else [],
        )
        for path in files:
            client.log_artifact(run_id, str(path))
    except BaseException as exc:
        client.set_tag(run_id, REASON_TAG, f"logging the fit failed: {type(exc).__name__}: {exc}")
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED" if converged else "FAILED")
    return run_id


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)
