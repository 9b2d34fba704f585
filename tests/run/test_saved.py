"""run/saved.py: a run found again from its folder, from anywhere, with its own resolved config and
its checkpoint; a config that no longer fits the weights is refused in one line."""

from __future__ import annotations

import shutil

import pytest

from ablate.config import ConfigError
from ablate.run.saved import find_run, load_model
from support import SMALL_DATA

TRAIN = ["model=nano", "train.steps=2", "train.eval_interval=2", "train.eval_batches=1", "tracking=none", *SMALL_DATA]


@pytest.fixture(scope="module")
def run_dir(cli, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("saved")
    result = cli([*TRAIN, "hydra.run.dir=run"], cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return cwd / "run"


def test_a_run_is_found_from_another_folder_with_the_state_dir_it_trained_with(run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saved = find_run(run_dir)
    assert saved.cfg.state_dir == str(run_dir.parent / ".ablate" / "state")  # ${hydra:runtime.cwd} then
    assert saved.cfg.model.vocab_size == 27 and saved.step == 2  # null in the config: the checkpoint's rows
    model = load_model(saved, "cpu", next(iter(saved.state["model"].values())).dtype)
    assert not model.training and model.cfg.name == "nano"


def test_a_config_that_no_longer_fits_the_weights_is_refused(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    config = copy / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("n_embd: 48", "n_embd: 64", 1))
    saved = find_run(copy)
    with pytest.raises(ConfigError, match=r"the checkpoint of run=.* has .* of shape"):
        load_model(saved, "cpu", None)


def test_a_folder_without_its_config_is_refused(tmp_path):
    (tmp_path / "result.json").write_text("{}")
    with pytest.raises(ConfigError, match="is not a run's result"):
        find_run(tmp_path)
