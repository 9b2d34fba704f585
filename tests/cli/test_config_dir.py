"""A user's own presets through Hydra's `--config-dir DIR`: a preset there is an option of its
group, for the run and for the check before it alike, and a folder that is not there is one line."""

import json

import pytest
import yaml

from support import SMALL_DATA, preset

pytestmark = pytest.mark.e2e

TINY = ["train.steps=2", "train.batch_size=4", "train.eval_interval=2", "train.eval_batches=1", "train.progress=false"]
MINE = {"name": "mine", "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32, "vocab_size": None}


def composed_preset(name: str) -> dict:
    """A packaged model preset as Hydra composes it: its schema's defaults (model/base_model), then its keys."""
    from ablate.config import SCHEMAS, as_dict

    return {**as_dict(SCHEMAS["model"]()), **preset("model", name)}


def presets(root, model: dict):
    """A folder of the user's presets laid out as the config groups: model/mine.yaml."""
    (root / "model").mkdir(parents=True)
    (root / "model" / "mine.yaml").write_text(yaml.safe_dump(model))
    return root


def trained(cli, workdir, args: list[str]) -> tuple[dict, dict]:
    """A tiny run of `ablate ARGS`: its result.json and the config it ran with (.hydra/config.yaml)."""
    proc = cli([*args, *TINY, *SMALL_DATA, "tracking=none"], workdir)
    assert proc.returncode == 0, proc.stderr
    (result,) = workdir.glob("outputs/*/*/result.json")
    return json.loads(result.read_text()), yaml.safe_load((result.parent / ".hydra" / "config.yaml").read_text())


def test_a_preset_of_your_own_trains_from_config_dir(cli, workdir):
    mine = presets(workdir / "my_presets", MINE)
    result, composed = trained(cli, workdir, ["--config-dir", str(mine), "model=mine"])
    assert {k: composed["model"][k] for k in MINE} == MINE
    assert result["model"] == "mine"


def test_the_check_before_the_run_reads_the_same_preset(cli, workdir):
    """A bad value in the user's preset stops in one line before anything is created (the flag may
    also come after every override)."""
    mine = presets(workdir / "my_presets", {**MINE, "n_embd": 100, "n_head": 3})
    proc = cli(["model=mine", *TINY, *SMALL_DATA, "--config-dir", str(mine)], workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: model.n_embd=100 is not divisible by model.n_head=3 (valid: a multiple of 3, e.g. 99)"
    )
    assert not (workdir / "outputs").exists() and not (workdir / "mlflow.db").exists()


def test_a_preset_of_your_own_can_start_from_a_packaged_one(cli, workdir):
    """Its defaults list names a packaged preset of its group."""
    mine = workdir / "my_presets" / "model"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text(yaml.safe_dump({"defaults": ["micro", "_self_"], "name": "mine", "n_layer": 2}))
    result, composed = trained(cli, workdir, ["--config-dir", str(mine.parent), "model=mine"])
    micro = composed_preset("micro")
    assert composed["model"] == {**micro, "name": "mine", "n_layer": 2} and micro["n_layer"] != 2
    assert result["model"] == "mine"  # its sizes are its preset's as composed, micro's under its own


def test_a_size_changed_on_a_preset_of_your_own_is_in_its_name(cli, workdir):
    """The run finds the user's preset where Hydra found it (--config-dir) to tell what it changes."""
    mine = presets(workdir / "my_presets", MINE)
    result, _ = trained(cli, workdir, ["--config-dir", str(mine), "model=mine", "model.n_embd=32"])
    assert result["model"] == "mine.n_embd_32"


def test_a_packaged_preset_keeps_its_name(cli, workdir):
    """--config-dir puts the user's folder after the package's presets (Hydra's order): a preset
    named like a packaged one does not replace it, in the check and in the run."""
    mine = presets(workdir / "my_presets", MINE)
    (mine / "model" / "pico.yaml").write_text(yaml.safe_dump({**MINE, "name": "pico"}))
    _, composed = trained(cli, workdir, ["--config-dir", str(mine), "model=pico"])
    assert composed["model"] == composed_preset("pico") and preset("model", "pico")["n_layer"] != MINE["n_layer"]


@pytest.mark.parametrize("flag", [["--config-dir", "no_such_folder"], ["-cd", "no_such_folder"]])
def test_a_config_dir_that_is_not_a_folder_is_one_line(cli, workdir, flag):
    proc = cli(["model=mine", *flag], workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --config-dir no_such_folder ") and len(proc.stderr.splitlines()) == 1


def test_your_presets_are_options_in_help_in_errors_and_in_hydras_printouts(cli, workdir):
    """A preset of your own is listed where the packaged ones are: `--help`, the valid options of a
    mistyped choice, and Hydra's print-only flags (`--cfg job`), which are checked first."""
    mine = str(presets(workdir / "my_presets", MINE))
    helped = cli(["--config-dir", mine, "--help"], workdir)
    (line,) = [ln for ln in helped.stdout.splitlines() if ln.lstrip().startswith("model ") and "micro*" in ln]
    assert " mine " in f"{line} "
    typo = cli(["--config-dir", mine, "model=mien", *TINY], workdir)
    assert typo.returncode == 2
    assert "model=mien is not a known option (valid: " in typo.stderr and ", mine, " in typo.stderr
    printed = cli(["--config-dir", mine, "model=mine", "--cfg", "job"], workdir)
    assert printed.returncode == 0, printed.stderr
    assert yaml.safe_load(printed.stdout)["model"]["name"] == "mine"
    assert not (workdir / "outputs").exists()
