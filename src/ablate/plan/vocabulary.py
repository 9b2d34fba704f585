"""A law fitted on one vocabulary, applied to a model of another.

A loss in nats per token depends on the tokenizer: a token of a 50,257-entry vocabulary holds more
text than one of 2,048 entries, so the same model on the same text has a higher loss per token
with the larger vocabulary, and a law's L(N, D) says nothing about another tokenizer's tokens.
Bits per byte do carry over: bpb = L / ln 2 / (bytes per token) is a loss per byte of the text,
whatever cut it into tokens (the figure runs log as val/bpb). fit.json records the vocabulary its
runs were trained on and their validation text's bytes per token (data.tokenizer); a plan for a
model of another vocabulary then gives the law's prediction in bits per byte of that text, with
D read as the law's tokens, or, where the fit records no bytes per token (synthetic tokens, token
files without a tokenizer), is refused in one line naming what is valid.

`ablate predict` for a run config knows more than a plan: the run's data, its tokenizer and its
validation text's bytes per token (`for_target`). A model whose vocab_size pads the law's tokenizer
(50,304 rows for GPT-2's 50,257 tokens: the extra rows never occur as targets, so the loss per
token is the tokenizer's) is recognised as the same tokenizer where the data's name, the tokenizer
and the bytes per token agree; a tokenizer of another vocabulary cuts the same text into other
tokens, so its bytes per token differ. A target of another tokenizer gets the law through bits per
byte, in nats per token of its own text: L x (its bytes per token) / (the law's), its tokens read
as the same bytes of text in the law's tokens. A plan names no data, so it compares vocab_size alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.config import ConfigError


def fit_vocabulary(tokenizer: dict | None, where: str) -> tuple[int, float | None, str] | None:
    """(vocab_size, bytes per token or None, a description) from fit.json's data.tokenizer; None
    where the fit records none (written before it did, or from points.csv). A record no fit could
    have written is refused in one line."""
    if tokenizer is None:
        return None
    vocab, per_token = tokenizer.get("vocab_size"), tokenizer.get("bytes_per_token")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise ConfigError(f"{where}: data.tokenizer.vocab_size is {vocab!r} (valid: a positive whole number)")
    if per_token is not None and not (
        isinstance(per_token, int | float) and math.isfinite(per_token) and 0 < per_token < 1e6
    ):
        raise ConfigError(
            f"{where}: data.tokenizer.bytes_per_token is {per_token!r} (valid: a positive number or null)"
        )
    parts = [str(tokenizer[k]) for k in ("data", "tokenizer") if isinstance(tokenizer.get(k), str)]
    return vocab, None if per_token is None else float(per_token), ", ".join(dict.fromkeys(parts))


def across_vocabularies(fit, vocab_size: int | None, prediction) -> str | None:
    """One line for a plan whose model's vocabulary is not the law's: its prediction in bits per
    byte of the law's text; None where they match or either is unknown. ConfigError where the law
    cannot be put in bits per byte (module doc)."""
    where = f"fit={fit.path}"
    known = fit_vocabulary(getattr(fit, "tokenizer", None), where)
    if known is None or vocab_size is None or known[0] == vocab_size:
        return None
    vocab, per_token, what = known
    of = _of(vocab, what)
    if per_token is None:
        raise _no_bytes(where, of, vocab, vocab_size)
    line = (
        f"The law was fitted on {of}, this model has {vocab_size:,}: losses per token do not compare across "
        f"vocabularies, so the loss is given in bits per byte of the law's text (L / ln 2 / {per_token:.3g} bytes "
        f"per token), with D counted in the law's tokens"
    )
    if prediction is None or prediction.value is None:
        return line + " where the law determines one."
    bpb = [v / math.log(2) / per_token for v in (prediction.value, prediction.lo, prediction.hi)]
    return line + f": {bpb[0]:.3f} bits per byte (95% {bpb[1]:.3f} to {bpb[2]:.3f})."


def _of(vocab: int, what: str) -> str:
    return f"a {vocab:,}-token vocabulary" + (f" ({what})" if what else "")


def _no_bytes(where: str, of: str, vocab: int, vocab_size: int) -> ConfigError:
    return ConfigError(
        f"{where}: the law was fitted on losses per token of {of} and records no bytes per token, so it "
        f"cannot be applied to a model of {vocab_size:,} tokens (valid: model.vocab_size={vocab}, or a fit of "
        "runs on text that log val/bpb, such as data=text or data=debian_docs)"
    )


@dataclass(frozen=True)
class Tokens:
    """What a run's losses are nats per token of: its model's vocab_size, its data and tokenizer as
    runs record them (data.name, else data.kind; data.tokenizer, else data.kind) and its validation
    text's bytes per token (None: not known)."""

    vocab_size: int
    data: str | None = None
    tokenizer: str | None = None
    bytes_per_token: float | None = None


@dataclass(frozen=True)
class InTargetTokens:
    """A law read for a target run: its loss x `loss_scale` is in nats per token of the target's
    tokenizer, the target's tokens (and FLOPs) x `tokens_scale` are the same text counted in the
    law's tokens; `line` says what was done (None: nothing to say)."""

    line: str | None = None
    loss_scale: float = 1.0
    tokens_scale: float = 1.0


SAME_TEXT = 1e-4  # bytes per token that agree this closely (relative) come from one tokenizer on one text


def for_target(fit, target: Tokens) -> InTargetTokens:
    """The law of `fit` for a run of `target`'s tokens: as it is for the law's vocabulary or the
    same tokenizer padded, converted through bits per byte for another tokenizer, or ConfigError,
    one line, where either side records no bytes per token (module doc)."""
    where = f"fit={fit.path}"
    record = getattr(fit, "tokenizer", None)
    known = fit_vocabulary(record, where)
    if record is None or known is None or known[0] == target.vocab_size:
        return InTargetTokens()
    vocab, per_token, what = known
    of = _of(vocab, what)
    same = (record.get("data"), record.get("tokenizer")) == (target.data, target.tokenizer)
    if same and per_token and target.bytes_per_token:
        if math.isclose(per_token, target.bytes_per_token, rel_tol=SAME_TEXT):
            return InTargetTokens(
                f"model.vocab_size={target.vocab_size:,} and the law's {vocab:,} are one tokenizer padded ({what}: "
                f"the same data, tokenizer and {per_token:.4g} bytes per token), so losses per token compare"
            )
    if per_token is None:
        raise _no_bytes(where, of, vocab, target.vocab_size)
    if not target.bytes_per_token:
        raise ConfigError(
            f"{where}: the law was fitted on {of}; this run's data ({target.data}) records no bytes per token, so "
            f"its loss per token of {target.vocab_size:,} cannot be compared with the law's (valid: "
            f"model.vocab_size={vocab} on the law's data, or data on text, such as data=text or data=debian_docs)"
        )
    scale = target.bytes_per_token / per_token
    return InTargetTokens(
        f"The law was fitted on {of}, this model has {target.vocab_size:,}"
        + (f" ({target.data}, {target.tokenizer})" if target.data else "")
        + ": losses per token do not compare across vocabularies, so the law is read in bits per byte of text "
        f"(L / ln 2 / {per_token:.3g} bytes per token) and given in nats per token of this run's "
        f"({target.bytes_per_token:.3g} bytes per token: L x {scale:.4g}), its tokens read as the same text in the "
        f"law's ({scale:.4g} of the law's tokens each)",
        loss_scale=scale,
        tokens_scale=scale,
    )
