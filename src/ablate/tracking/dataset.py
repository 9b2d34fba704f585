"""The tokens a run trained on as an MLflow dataset input: its name, its fingerprint as the digest, and
its source, shown on the run's page and in the experiment's "Datasets used" column.

Built in the run's process from what the run records anyway (its data tag and its data.* params),
as plain data, so that the run need not import MLflow; runstore.RunStore.log_dataset turns it into
MLflow's entities. The source is the files the tokens were read from (data=tokens: MLflow's local
artifact source), or else the config of the code that made them (data=synthetic, data=text: MLflow's
code source, the config naming the generator's settings or the text's paths and tokenizer).
"""

from __future__ import annotations

from pathlib import Path

DATA_PARAM_PREFIX = "data."
MAX_DIGEST_CHARS = 36  # MLflow's column for a dataset's digest


def dataset_input(data_tag: str, params: dict) -> dict:
    """{"name", "digest", "source"} of a run's tokens. `data_tag`: the run's tags.DATA_TAG value,
    "NAME FINGERPRINT [PACKAGE=VERSION ...]"; `params`: its flattened config. A digest of None (data
    without a fingerprint) is left to MLflow, which computes one from the name and source."""
    words = data_tag.split()
    if not words:
        raise ValueError(f"data tag {data_tag!r} names no data (valid: 'NAME FINGERPRINT [PACKAGE=VERSION ...]')")
    name, rest = words[0], words[1:]
    fingerprint = rest[0] if rest and "=" not in rest[0] else None
    packages = " ".join(w for w in rest if "=" in w)
    config = {k[len(DATA_PARAM_PREFIX) :]: str(v) for k, v in params.items() if k.startswith(DATA_PARAM_PREFIX)}
    return {
        "name": name,
        "digest": fingerprint[:MAX_DIGEST_CHARS] if fingerprint else None,
        "source": _source(config, packages),
    }


def _source(config: dict, packages: str) -> str | dict:
    """The token files' absolute path (data=tokens), or the data config with the text's packages."""
    if config.get("kind") == "tokens":
        return str(Path(config.get("dir") or config["train_bin"]).expanduser().resolve())
    return {**config, **({"packages": packages} if packages else {})}
