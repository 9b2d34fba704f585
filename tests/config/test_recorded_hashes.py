"""Every run a study in experiments/ recorded hashes as it recorded: its config, parsed again from
what it ran with, hashes to the config_hash its result.json holds. A key's hashing facts live in its
dataclass field (config/keys.py); a fact lost or changed there hashes a recorded run anew, and a
study would train it again instead of finding it."""

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ablate.config import BUDGET_KEYS, ConfigError, budget, parse_run
from ablate.provenance import config_hash

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# The vocabulary prepare fills in (model.vocab_size=null: the data's): the synthetic language's 26
# letters and a space, one token per byte; a BPE tokenizer's is its data.vocab_size.
DATA_VOCAB = {"synthetic": 27, "bytes": 256}


def recorded(result: Path) -> dict:
    return json.loads(result.read_text())


def ran_with(path: Path, cwd: Path) -> dict:
    """A saved config, with the launch folder Hydra resolved ${hydra:runtime.cwd} to."""
    return yaml.safe_load(path.read_text().replace("${hydra:runtime.cwd}", str(cwd)))


def prepared(cfg):
    """The model's vocabulary as prepare fills it in from the data (run/prepare.py)."""
    if cfg.model.vocab_size is not None:
        return cfg
    data = cfg.data
    vocab = DATA_VOCAB.get(data.kind) or DATA_VOCAB.get(getattr(data, "tokenizer", None)) or data.vocab_size
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab))


def with_budget(cfg, key: str, value):
    train = dataclasses.replace(cfg.train, **{k: value if k == key else None for k in BUDGET_KEYS})
    return dataclasses.replace(cfg, train=train)


def trunk(cfg, steps: int):
    """A family's trunk (run/branches.py prepare_family): its first budget's config on a constant
    rate, for `steps`, the last branch's fork."""
    key, values = budget(cfg.train)
    first = with_budget(cfg, key, min(values))
    return dataclasses.replace(
        first,
        optim=dataclasses.replace(first.optim, schedule="constant"),
        train=dataclasses.replace(first.train, steps=steps, tokens=None, flops=None),
    )


def members(job: Path, cfg) -> list[tuple[Path, object]]:
    """(result.json, the config it ran) of a sweep job: the run itself, or a family's trunk and
    branches (run/branches.py prepare_family): each branch the job at one budget of its list, the
    trunk its first budget's config on a constant rate for the steps its result.json counts."""
    key, values = budget(cfg.train)
    if not isinstance(values, list):
        return [(job / "result.json", cfg)]
    found, forks = [], []
    for value in sorted(values):
        result = job / "branches" / f"{key}={value:g}" / "result.json"
        if result.is_file():
            found.append((result, with_budget(cfg, key, value)))
            forks.append(recorded(result).get("fork_step") or 0)
    if (job / "result.json").is_file() and max(forks, default=0):
        # the trunk runs to the last fork (a skipped trunk, whose branches all had theirs, counts no steps)
        found.append((job / "result.json", trunk(cfg, max(forks))))
    return found


def recorded_runs() -> tuple[list[tuple[Path, object]], list[Path]]:
    """Every (result.json, config) pair with a config hash: sweep jobs (.hydra/config.yaml beside
    it) and the runs whose MLflow artifacts hold the config they ran (config.yaml); and the saved
    configs no schema of today parses."""
    runs, unparsed = [], []
    for saved in sorted(EXPERIMENTS.glob("**/.hydra/config.yaml")):
        try:
            runs += members(saved.parent.parent, parse_run(ran_with(saved, EXPERIMENTS.parent)))
        except ConfigError:
            unparsed.append(saved)
    for saved in sorted(EXPERIMENTS.glob("**/artifacts/config.yaml")):
        cfg = parse_run(ran_with(saved, EXPERIMENTS.parent))
        result = saved.parent / "result.json"
        if result.is_file() and recorded(result).get("kind") == "trunk":  # it holds its family's config
            cfg = trunk(cfg, recorded(result)["steps"])
        runs.append((result, cfg))
    return [(r, cfg) for r, cfg in runs if r.is_file() and recorded(r).get("config_hash")], unparsed


# Studies whose recorded hashes no config_hash of today's keys reproduces, with why: each was
# hashed by the code of its day, and the code before keys were declared in their fields
# (provenance.py's string tables) did not reproduce them either.
RECORDED_UNDER_OLDER_KEYS = {
    # recorded at 96d69bf (2026-11-29), before the architecture arms (a3552e0) and the model's preset
    # (ModelConfig.named) changed what a config holds
    "scaling",
    "profile_cpu",
}


def study_of(result: Path) -> str:
    return result.relative_to(EXPERIMENTS).parts[0]


def test_every_recorded_run_hashes_as_it_recorded():
    runs, unparsed = recorded_runs()
    differ = []
    for result, cfg in runs:
        was = recorded(result)
        now = config_hash(prepared(cfg), SimpleNamespace(device=was["device"]))
        if now != was["config_hash"] and study_of(result) not in RECORDED_UNDER_OLDER_KEYS:
            differ.append(f"{result.relative_to(EXPERIMENTS)}: {now}, recorded {was['config_hash']}")
    assert not differ, f"{len(differ)} of {len(runs)} recorded runs hash anew: {differ[:5]}"
    # the repository's records: 515 runs of 8 studies (a checkout that ran studies holds more, such
    # as their MLflow artifacts), every study with a study.yaml among them
    kept = [r for r, _ in runs if study_of(r) not in RECORDED_UNDER_OLDER_KEYS]
    studies = {path.parent.name for path in EXPERIMENTS.glob("*/study.yaml")} - RECORDED_UNDER_OLDER_KEYS
    assert len(kept) >= 515 and {study_of(r) for r in kept} >= studies and len(studies) >= 8
    # the jobs of precision policies whose presets are gone (fp8, fp8_emulated; torchao's emulated
    # recipes replaced them in 2578190) are refused by name, and are no other jobs
    for saved in unparsed:
        with pytest.raises(ConfigError, match=r"precision\.name=('fp8'|'fp8_emulated') is invalid"):
            parse_run(ran_with(saved, EXPERIMENTS.parent))
