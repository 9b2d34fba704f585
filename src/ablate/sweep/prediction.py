"""A prediction written down before its run is trained, and the run's outcome recorded beside it.

`ablate predict fit=FIT out=FILE OVERRIDE...` resolves the target run exactly as `ablate OVERRIDE...`
would train it (its parameters as the fit counts them, its tokens, its FLOPs as the runs record
them, its config hash), asks the fit for the loss there with its 95% interval and verdict, and
writes FILE (schema ablate.prediction/1). A made prediction is never rewritten: a second
prediction needs another file. `ablate predict --outcome RUN_DIR out=FILE` then fills `actual`,
`actual_bpb`, `actual_run_id` and `trained_at` from the finished run's result.json, checked to be
the predicted run by its config hash, and leaves every predicted field as it was.

A law of one vocabulary is read for a run of another as `ablate plan` reads it (plan/vocabulary.py
for_target): the same tokenizer padded as it is; another tokenizer through bits per byte, in nats
per token of the run's own text (so that its outcome is scored in its own units), its tokens and
FLOPs read as the same text in the law's tokens (`law_units`); refused in one line where either side
records no bytes per token. The document's `vocabulary` says which, `ablate predict` prints it.

This is the check of Bhagia et al. 2024 (the OLMo ladder), Gadre et al. 2024 and Hoffmann et al.
2022 as a record: the prediction's time, fit (path and sha256) and code version come first, the
run after, and a miss is kept as it came out.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.config import ConfigError
from ablate.files import write_json
from ablate.model import accounting
from ablate.plan import vocabulary
from ablate.provenance import code_version
from ablate.run import RunResult, bits_per_byte
from ablate.scaling import load_fit, predict

if TYPE_CHECKING:
    from ablate.run import Prepared

SCHEMA = "ablate.prediction/1"
# trained_at: when the run ended; trained_from: when it began (both from its result.json), so
# that the record says whether the prediction came before the run, while it trained, or after
OUTCOME_KEYS = ("actual", "actual_bpb", "actual_run_id", "trained_at", "trained_from")


def make_prediction(prepared: Prepared, fit_path: Path, overrides: list[str], out: Path) -> dict:
    """The prediction document for the run `prepared` describes (not yet written)."""
    fit = load_fit(str(fit_path))
    cfg = prepared.cfg
    tokens = prepared.total_steps * cfg.train.sequences_per_step * cfg.model.block_size
    counts = {
        "total": accounting.params(cfg.model),
        "non_embedding": accounting.params_non_embedding(cfg.model),
    }
    flops = accounting.training_flops(cfg.model, tokens)
    N = counts[fit.params]
    bpt = prepared.data.bytes_per_token
    units = vocabulary.for_target(fit, run_tokens(cfg, bpt))
    law = {"tokens": tokens * units.tokens_scale, "flops": flops * units.tokens_scale, "loss_scale": units.loss_scale}
    p = predict.predict(fit.predictor, N=N, D=law["tokens"], C=law["flops"])
    loss = p.loss
    band = None if loss is None or loss.ci95 is None else [v * units.loss_scale for v in loss.ci95]
    predicted = None if loss is None else loss.value * units.loss_scale
    return {
        "schema": SCHEMA,
        "target": {
            "params": N,
            "params_counted": fit.params,
            "params_total": counts["total"],
            "params_non_embedding": counts["non_embedding"],
            "tokens": tokens,
            "flops": flops,
            "tokens_per_param": tokens / N,
            "overrides": list(overrides),
            "config_hash": prepared.config_hash,
        },
        "predicted": predicted,
        "interval95": band,
        "predicted_bpb": bits_per_byte(predicted, bpt),
        "vocabulary": units.line,
        # the law's own (N,) D, C and the factor its loss was put into this run's tokens by; None: the same
        "law_units": law if units.loss_scale != 1.0 else None,
        "verdict": p.verdict.level,
        "reasons": [r.text for r in p.verdict.reasons],
        "runs_to_determine": [r.to_dict() for r in p.runs_to_determine],
        "train_split_tokens": len(prepared.data.train),
        "decades_past_data": p.orders_past_data,
        "fit": os.path.relpath(Path(fit_path).resolve(), Path(out).resolve().parent),
        "fit_sha256": hashlib.sha256(Path(fit_path).read_bytes()).hexdigest(),
        "commit": code_version()["git.commit"],
        "data": {"kind": cfg.data.kind, **prepared.data.provenance()},
        "bytes_per_token": bpt,
        "made_at": now(),
        **{k: None for k in OUTCOME_KEYS},
    }


def run_tokens(cfg, bytes_per_token: float | None) -> vocabulary.Tokens:
    """What a run's losses are nats per token of, named as its MLflow params name them (a fit's
    data.tokenizer, scaling/runs.py): data.name else data.kind, data.tokenizer else data.kind."""
    kind = cfg.data.kind
    return vocabulary.Tokens(
        cfg.model.vocab_size,
        getattr(cfg.data, "name", None) or kind,
        getattr(cfg.data, "tokenizer", None) or kind,
        bytes_per_token,
    )


# an outside target's names for N, D and C (`ablate predict target.N=.. target.D=..`), as predict() takes them
OUTSIDE_TARGET = {"N": "N", "params": "N", "D": "D", "tokens": "D", "C": "C", "flops": "C"}
OUTSIDE_MATCH = 0.01  # an outside outcome's params, tokens or FLOPs agree with the target's within this share


def make_outside_prediction(fit_path: Path, target: dict[str, float], given: list[str], out: Path) -> dict:
    """The prediction document for a target outside this project (no run config): `target` is predict()'s
    N, D and C (N and D, C alone for its compute-optimal allocation, or C with N or D), `given` the
    arguments that named it. The fit, the verdict and the interval are those a run config would get."""
    fit = load_fit(str(fit_path))
    p = predict.predict(fit.predictor, **target)
    loss = p.loss
    return {
        "schema": SCHEMA,
        "target": {
            "params": p.N.value,
            "params_counted": fit.params,
            "params_total": None,
            "params_non_embedding": None,
            "tokens": p.D.value,
            "flops": p.C,
            "tokens_per_param": p.D.value / p.N.value,
            "compute_optimal": p.compute_optimal,
            "overrides": list(given),
            "config_hash": None,  # outside this project: no run config to hash
        },
        "predicted": None if loss is None else loss.value,
        "interval95": None if loss is None or loss.ci95 is None else list(loss.ci95),
        "predicted_bpb": None,
        "verdict": p.verdict.level,
        "reasons": [r.text for r in p.verdict.reasons],
        "runs_to_determine": [r.to_dict() for r in p.runs_to_determine],
        "decades_past_data": p.orders_past_data,
        "fit": os.path.relpath(Path(fit_path).resolve(), Path(out).resolve().parent),
        "fit_sha256": hashlib.sha256(Path(fit_path).read_bytes()).hexdigest(),
        "commit": code_version()["git.commit"],
        "data": None,
        "bytes_per_token": None,
        "made_at": now(),
        **{k: None for k in OUTCOME_KEYS},
    }


def score_outside(path: Path, outcome: dict[str, float], source: str) -> dict:
    """Record an outcome from outside this project (a loss reached elsewhere, and optionally the run's
    params, tokens and FLOPs, checked against the target's within OUTSIDE_MATCH) beside the prediction
    at `path`: `actual`, where it came from, when it was scored, and the score (inside, error, verdict)."""
    doc = read_prediction(path)
    loss = outcome.get("loss")
    if loss is None or not (math.isfinite(loss) and loss > 0):
        raise ConfigError(f"the outcome's loss is {loss} (valid: loss=L, a finite loss > 0 in nats per token)")
    t = doc["target"]
    for key in ("params", "tokens", "flops"):
        if key in outcome and not math.isclose(outcome[key], t[key], rel_tol=OUTSIDE_MATCH):
            raise ConfigError(
                f"the outcome's {key}={outcome[key]:.6g} is not the predicted target's {t[key]:.6g} (valid: the "
                f"target's own, within {OUTSIDE_MATCH:.0%}, or leave {key}= out)"
            )
    if doc.get("actual") is not None:
        if doc.get("actual") == loss and doc.get("actual_source") == source:
            return doc  # already scored: scoring it again changes nothing
        raise ConfigError(f"{path} already holds an outcome, {doc['actual']:.6g} (valid: a new prediction)")
    doc.update(actual=loss, actual_source=source, actual_scored_at=now())
    doc["actual_score"] = score(doc)
    write_json(path, doc)
    return doc


def score(doc: dict) -> dict:
    """inside, error and half_width (outcome()) with the verdict the prediction was made with."""
    return {**outcome(doc), "verdict": doc["verdict"]}


def write_prediction(doc: dict, out: Path) -> Path:
    """Write a new prediction; one already made at `out` is refused, never replaced."""
    out = Path(out)
    check_new(out)
    draft = write_json(out.with_name(f".{out.name}.{os.getpid()}"), doc)
    try:
        os.link(draft, out)  # atomic and never replaces: of two writers at once, one wins
    except FileExistsError:
        _refuse(out)
    finally:
        draft.unlink(missing_ok=True)
    return out


def check_new(out: Path) -> None:
    """ConfigError when `out` already holds a prediction: checked before any work."""
    if Path(out).exists():
        _refuse(Path(out))


def _refuse(out: Path):
    made = read_prediction(out).get("made_at", "?")
    raise ConfigError(
        f"out={out} already holds a prediction made at {made} (valid: another out= file; a made "
        "prediction is never rewritten)"
    )


def read_prediction(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(
            f"{path} cannot be read: {exc.strerror} (valid: a prediction.json of ablate predict)"
        ) from None
    except ValueError:
        raise ConfigError(f"{path} is not JSON (valid: a prediction.json of ablate predict)") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(f"{path} is not a prediction (valid: a file with schema {SCHEMA})")
    return doc


def record_outcome(path: Path, result: RunResult) -> dict:
    """Fill the outcome fields of the prediction at `path` from the target run's result."""
    doc = read_prediction(path)
    if result.config_hash != doc["target"]["config_hash"]:
        raise ConfigError(
            f"the run's config hash {result.config_hash[:12]} is not the predicted run's "
            f"{doc['target']['config_hash'][:12]} (valid: the run dir of "
            f"`ablate {' '.join(doc['target']['overrides'])}`)"
        )
    if result.status != "finished" or result.final_val_loss is None:
        raise ConfigError(f"the target run is {result.status}, with no final loss (valid: a finished run)")
    if doc.get("actual") is not None:
        if doc.get("actual_run_id") == result.mlflow_run_id and doc["actual"] == result.final_val_loss:
            return doc  # already recorded: recording it again changes nothing
        raise ConfigError(
            f"{path} already holds an outcome, recorded at {doc.get('trained_at')} (valid: a new prediction)"
        )
    doc.update(
        actual=result.final_val_loss,
        actual_bpb=result.final_val_bpb,
        actual_run_id=result.mlflow_run_id,
        trained_at=iso(result.ended_at) if result.ended_at else now(),
        trained_from=iso(result.started_at) if result.started_at else None,
    )
    doc["actual_score"] = score(doc)
    write_json(path, doc)
    return doc


def outcome(doc: dict) -> dict:
    """inside (the 95% interval), error (actual / predicted - 1) and half_width (of the interval,
    as a fraction of the prediction); None where not known yet or nothing was predicted."""
    actual, predicted, band = doc.get("actual"), doc.get("predicted"), doc.get("interval95")
    known = actual is not None and predicted is not None
    return {
        "inside": (band[0] <= actual <= band[1]) if known and band else None,
        "error": actual / predicted - 1 if known else None,
        "half_width": (band[1] - band[0]) / 2 / predicted if predicted and band else None,
    }


def when_made(doc: dict) -> str | None:
    """'before' the target began training, 'during' its training (before its outcome), or 'after' it
    ended (then it predicts nothing); None while the run's window is not recorded."""
    made, start, end = doc.get("made_at"), doc.get("trained_from"), doc.get("trained_at")
    if made is None or end is None:
        return None
    if start is not None and made <= start:
        return "before"
    return "during" if made < end else "after"


TIMING = {
    "before": "made before the target was trained",
    "during": "made while the target trained, before its outcome",
    "after": "made AFTER the target was trained: it predicts nothing",
    None: "made before the target was trained",
}


def render(doc: dict) -> list[str]:
    """The prediction against the outcome as a short markdown table, for a study's README."""
    t = doc["target"]
    o = outcome(doc)
    band = doc.get("interval95")
    predicted = "not determined" if doc["predicted"] is None else f"{doc['predicted']:.4f}"
    interval = f"{band[0]:.4f} to {band[1]:.4f} (±{o['half_width']:.1%})" if band else "-"
    actual = "not trained yet" if doc.get("actual") is None else f"{doc['actual']:.4f}"
    bpb = _bpb_pair(doc)
    error = "-" if o["error"] is None else f"{o['error']:+.2%}"
    verdict_of = "hit: inside" if o["inside"] else "miss: outside" if o["inside"] is False else "-"
    return [
        f"| target | N ({t['params_counted']}) | tokens | FLOPs | predicted | 95% interval | verdict "
        "| actual | error | inside? | bits per byte (predicted / actual) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| `{' '.join(t['overrides'])}` | {t['params']:,.0f} | {t['tokens']:,.0f} | {t['flops']:.3g} "
        f"| {predicted} | {interval} | {doc['verdict']} | {actual} "
        f"| {error} | {verdict_of} | {bpb} |",
        "",
        f"Predicted at {doc['made_at']} from `{doc['fit']}` (sha256 {doc['fit_sha256'][:12]}, commit "
        f"{str(doc['commit'])[:10]}); trained" + _window(doc),
    ]


def _window(doc: dict) -> str:
    if doc.get("actual_source"):  # an outcome from outside this project: when it trained is not known here
        return f" outside this project; its outcome ({doc['actual_source']}) scored at {doc['actual_scored_at']}."
    if not doc.get("trained_at"):
        return ": not yet."
    start = doc.get("trained_from")
    span = f" from {start} to {doc['trained_at']}" if start else f" by {doc['trained_at']}"
    return f"{span} (MLflow run {doc['actual_run_id']}): the prediction was {TIMING[when_made(doc)]}."


def _bpb_pair(doc: dict) -> str:
    values = [doc.get("predicted_bpb"), doc.get("actual_bpb")]
    return " / ".join("-" if v is None or not math.isfinite(v) else f"{v:.4f}" for v in values)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def iso(seconds: float) -> str:
    """A Unix time as now() writes times: UTC, ISO 8601, to the second."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")
