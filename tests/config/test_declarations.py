"""A config key is declared once: its dataclass field holds its default and how it enters the config
hash (config/keys.py `setting`). A key without its hashing facts, or a key named again as a string
where the hash is computed, fails here."""

import ast
import dataclasses
import inspect

import pytest
import yaml

from ablate import provenance
from ablate.config import (
    CONF_DIR,
    CONF_MODULE,
    DATA_KINDS,
    HardwareConfig,
    ModelConfig,
    OptimConfig,
    PrecisionConfig,
    RunConfig,
    TrackingConfig,
    TrainConfig,
    declared_fields,
    hashing,
)
from ablate.config.schemas import SCHEMAS
from ablate.provenance import config_hash, hashed

KEYS = declared_fields(RunConfig)


def test_every_key_of_a_run_declares_how_it_is_hashed():
    missing = [key for key, f in KEYS if hashing(f) is None]
    assert not missing, f"declared without setting(...): {missing}"


def test_the_hash_names_no_key_of_its_own():
    """provenance.py reads the facts from the fields: a string naming a key there is a second declaration."""
    sections = {key for key, _ in KEYS if "." not in key}
    tree = ast.parse(inspect.getsource(provenance))
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    # a key or a family of keys (optim.muon_) of a section; the one key the hash adds itself is the
    # device it resolved, which no config declares
    named = {s for s in strings if s.split(".", 1)[0] in sections and "." in s} - {"hardware.resolved_device"}
    assert not named, named


def plain_run() -> RunConfig:
    return RunConfig(
        model=ModelConfig(name="nano"),
        data=DATA_KINDS["synthetic"](),
        precision=PrecisionConfig(),
        hardware=HardwareConfig(),
        optim=OptimConfig(),
        train=TrainConfig(steps=300),
        tracking=TrackingConfig(),
    )


def changed(value):
    """Another value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return 3  # None


def with_value(cfg: RunConfig, key: str, value) -> RunConfig:
    section, name = key.split(".")
    part = getattr(cfg, section)
    return dataclasses.replace(cfg, **{section: dataclasses.replace(part, **{name: value})})


SECTION_KEYS = [
    (key, f)
    for key, f in KEYS
    if key.count(".") == 1 and not key.startswith(("tracking.", "data.")) and key != "model.preset"
]


@pytest.mark.parametrize("key, f", SECTION_KEYS, ids=[k for k, _ in SECTION_KEYS])
def test_a_key_changes_the_hash_as_its_field_declares(key, f):
    """hashed=False: no value changes the hash. Otherwise a value other than the one runs had
    before the key existed changes it, where the key acts (`when`) on a config it acts in."""
    facts = hashing(f)
    cfg = plain_run()
    if facts.when is not None:  # put the config where the key acts: rope, muon, wsd, mup
        acting = {
            "model.rope_base": ("model.position", "rope"),
            "model.mup": ("model.mup", True),
            "model.mup_base_width": ("model.mup", True),
            "optim.cooldown_fraction": ("optim.schedule", "wsd"),
            "optim.cooldown_shape": ("optim.schedule", "wsd"),
        }.get(key, ("optim.name", "muon"))
        cfg = with_value(cfg, *acting)
        assert facts.when(dataclasses.asdict(getattr(cfg, key.split(".")[0]))), key
    other = with_value(cfg, key, changed(getattr(getattr(cfg, key.split(".")[0]), f.name)))
    assert (config_hash(other) != config_hash(cfg)) == facts.hashed, key
    assert hashed(key) == facts.hashed


def test_a_section_left_out_leaves_out_every_key_under_it():
    cfg = plain_run()
    tagged = dataclasses.replace(cfg, tracking=TrackingConfig(tags={"arm": "x"}, experiment="other"))
    assert config_hash(tagged) == config_hash(cfg)
    assert not hashed("tracking.tags.arm") and not hashed("hardware.peak_flops.bf16") and not hashed("data.cache_dir")
    assert hashed("data.vocab_size") and hashed("model.n_layer")


# The groups whose presets write only what they change: the rest start from the schema. A preset
# names itself (`name`, what its runs are recorded under) even where the name is the default's. A
# data source has no schema common to the three, and its presets write every key (config/schemas.py).
SLIM_GROUPS = ("model", "precision", "hardware", "optim", "train", "tracking")
REPEATED_ON_PURPOSE = {"name"}


@pytest.mark.parametrize("group", SLIM_GROUPS)
def test_a_preset_lists_only_what_it_changes(group):
    defaults = dataclasses.asdict(SCHEMAS[group]())
    presets = sorted((CONF_DIR / group).glob("*.yaml"))
    assert presets
    repeated = []
    for path in presets:
        tree = yaml.safe_load(path.read_text()) or {}
        assert "defaults" not in tree, path  # the schema comes in from the primary config's defaults
        repeated += [
            f"{path.stem}.{k}={v}"
            for k, v in tree.items()
            if k not in REPEATED_ON_PURPOSE and k in defaults and v == defaults[k]
        ]
    assert not repeated, f"{group} presets repeat their schema's defaults: {repeated}"


@pytest.mark.parametrize("config_name", ["config", "plan"])
def test_the_primary_configs_start_each_group_from_its_schema(config_name):
    """Every key can be overridden without `+`, though no preset writes it (ConfigStore: GROUP/base_GROUP)."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(CONF_MODULE, version_base=None):
        cfg = compose(config_name, overrides=["model.mup_base_width=64", "hardware.nvlink_gbs=1"])
    for group in ("model", "hardware", "precision"):
        assert set(cfg[group]) == set(dataclasses.asdict(SCHEMAS[group]())), group
    assert cfg.model.mup_base_width == 64
