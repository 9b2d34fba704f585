"""A config is recorded under the name of what it holds (ModelConfig.named, HardwareConfig.named,
presets.real_name): a preset as it is keeps its name and its config hash; a size changed on a preset
is in its name, and its hash is the one it always had, so its records are still found."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from ablate.config import as_dict, parse_plan, parse_run, preset_folders, read_preset
from ablate.provenance import config_hash

LADDER = Path(__file__).resolve().parents[2] / "experiments" / "ladder" / "sweep"


def renamed(cfg, **model):
    """`cfg` with its model's fields replaced, as a test sets what a parse would not."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model))


def test_a_preset_as_it_is_keeps_its_name(run_config, tmp_path):
    cfg = run_config(tmp_path)
    assert (cfg.model.name, cfg.model.preset, cfg.hardware.name) == ("nano", "nano", "cpu")


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"model.n_layer": 12}, "nano.n_layer_12"),
        ({"model.n_embd": 96, "model.n_layer": 3}, "nano.n_layer_3.n_embd_96"),  # in NAMED_BY's order
        ({"model.block_size": 32, "model.n_head": 4}, "nano.n_head_4.block_size_32"),
        # a key the preset leaves null is the data's: prepare fills vocab_size in, the same model
        ({"model.vocab_size": 27}, "nano"),
        # the architecture arms are compared at their preset's size, under keys of their own
        ({"model.n_kv_head": 1, "model.mlp": "swiglu", "model.tie_embeddings": False}, "nano"),
    ],
)
def test_a_size_changed_on_a_preset_is_in_its_name(run_config, tmp_path, overrides, name):
    cfg = run_config(tmp_path, **overrides)
    assert cfg.model.name == name and cfg.model.preset == "nano"


def test_a_size_changed_on_a_preset_hashes_as_it_did_before_its_name_told_it(run_config, tmp_path):
    """The hash reads the preset's name as model.name: the same as a run named nano with 12 layers
    had, so its MLflow run and checkpoints are found; and not nano's own."""
    wide = run_config(tmp_path, **{"model.n_layer": 12})
    as_before = renamed(wide, name="nano", preset=None)
    assert config_hash(wide) == config_hash(as_before) != config_hash(run_config(tmp_path))


def test_a_config_parsed_again_keeps_its_name_and_hash(run_config, tmp_path):
    """A saved config (a branch's spec, a rank's, a checkpoint's) holds the derived name and its
    preset; one saved before names told sizes holds the preset's name alone. Both parse to the same."""
    cfg = run_config(tmp_path, **{"model.n_layer": 12})
    again = parse_run(as_dict(cfg))
    tree = as_dict(cfg)
    tree["model"].update(name="nano", preset=None)
    older = parse_run(tree)
    for parsed in (again, older):
        assert (parsed.model.name, parsed.model.preset) == ("nano.n_layer_12", "nano")
        assert config_hash(parsed) == config_hash(cfg)


@pytest.mark.parametrize("name", ["mine", "../../escape"])
def test_a_name_without_a_preset_is_kept_as_given(run_config, tmp_path, name):
    cfg = run_config(tmp_path, **{"model.name": name, "model.n_layer": 12})
    assert cfg.model.name == cfg.model.preset == name


def test_a_preset_of_the_users_is_read_from_the_folders_the_caller_names(run_config, tmp_path):
    """Naming reads the user's presets from the folders it is given (the app's --config-dir,
    preset_folders), not from a Hydra app that happens to be running: without them, the name is kept."""
    from omegaconf import OmegaConf

    folder = tmp_path / "my_presets"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "mine.yaml").write_text(yaml.safe_dump({"defaults": ["nano", "_self_"], "name": "mine"}))
    tree = as_dict(run_config(tmp_path, **{"model.name": "mine", "model.n_layer": 12}))
    assert parse_run(tree, (folder,)).model.name == "mine.n_layer_12"
    running = {"runtime": {"config_sources": [{"path": str(folder), "schema": "file", "provider": "command-line"}]}}
    assert preset_folders(OmegaConf.create(running)) == (folder,)
    assert parse_run(tree).model.name == "mine"


def test_every_recorded_run_of_a_study_is_named_and_hashed_as_it_recorded(tmp_path):
    """experiments/ladder's 12 runs (nano, micro, tiny) parsed again from the config each ran with:
    the name and the config hash its result.json holds. Its store and state dir are no part of the
    hash; the vocabulary is filled in from the synthetic language's 27 tokens, as prepare does."""
    jobs = sorted(p for p in LADDER.iterdir() if (p / "result.json").is_file())
    assert len(jobs) == 12
    for job in jobs:
        text = (job / ".hydra" / "config.yaml").read_text().replace("${hydra:runtime.cwd}", str(tmp_path))
        cfg = parse_run(yaml.safe_load(text))
        recorded = json.loads((job / "result.json").read_text())
        assert cfg.model.name == recorded["model"]
        hashed = config_hash(renamed(cfg, vocab_size=27), dataclasses.make_dataclass("Hw", ["device"])("cpu"))
        assert hashed == recorded["config_hash"], job


def hardware_run(run_config, tmp_path, name: str, **values):
    tree = as_dict(run_config(tmp_path))
    tree["hardware"] = {**read_preset("hardware", name), **values}
    return parse_run(tree).hardware.name


def test_hardware_whose_figures_are_not_its_presets_is_named_by_them(run_config, tmp_path):
    h100 = read_preset("hardware", "h100")
    faster = {**h100["peak_flops"], "bf16": 2e15}
    assert hardware_run(run_config, tmp_path, "h100", memory_gb=40, peak_flops=faster) == (
        "h100.peak_flops.bf16_2e15.memory_gb_40"
    )
    # what it costs and how many a node holds leave it an h100
    assert hardware_run(run_config, tmp_path, "h100", price_per_hour=1.5, gpus_per_node=4) == "h100"
    # a device kind leaves its figures open: a cuda GPU with 24 GB is cuda
    assert hardware_run(run_config, tmp_path, "cuda", memory_gb=24, peak_flops={"bf16": 1e14}) == "cuda"


def test_a_plans_folder_is_named_by_what_it_plans_as_one_path_component():
    tree = {
        "model": {**read_preset("model", "gpt_1p5b"), "vocab_size": 2048},
        "precision": read_preset("precision", "bf16"),
        "hardware": {**read_preset("hardware", "h200"), "memory_gb": 96},
        "budget": {"tokens": 1e9},
        "context": 4096,  # the plan's own key, which the plan states: no part of the model's name
    }
    plan = parse_plan(tree)
    assert plan.model.name == "gpt_1p5b.vocab_size_2048" and plan.model.block_size == 4096
    assert Path(plan.plan.out) == Path("plans") / "gpt_1p5b.vocab_size_2048-h200.memory_gb_96"
