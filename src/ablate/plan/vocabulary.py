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
"""

from __future__ import annotations

import math

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
    of = f"a {vocab:,}-token vocabulary" + (f" ({what})" if what else "")
    if per_token is None:
        raise ConfigError(
            f"{where}: the law was fitted on losses per token of {of} and records no bytes per token, so it "
            f"cannot be applied to a model of {vocab_size:,} tokens (valid: model.vocab_size={vocab}, or a fit of "
            "runs on text that log val/bpb, such as data=text or data=debian_docs)"
        )
    line = (
        f"The law was fitted on {of}, this model has {vocab_size:,}: losses per token do not compare across "
        f"vocabularies, so the loss is given in bits per byte of the law's text (L / ln 2 / {per_token:.3g} bytes "
        f"per token), with D counted in the law's tokens"
    )
    if prediction is None or prediction.value is None:
        return line + " where the law determines one."
    bpb = [v / math.log(2) / per_token for v in (prediction.value, prediction.lo, prediction.hi)]
    return line + f": {bpb[0]:.3f} bits per byte (95% {bpb[1]:.3f} to {bpb[2]:.3f})."
