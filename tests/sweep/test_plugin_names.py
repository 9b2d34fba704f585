"""ablate's Hydra plugins touch only ablate (sweep/launch/names.py): they register under names of
ablate's own, another Hydra app in the same environment composes as it would without ablate, and a
name of ablate's that another plugin holds is refused in one line before anything runs."""

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
from hydra.core.config_store import ConfigStore

from ablate.config import ConfigError
from ablate.sweep import check_plugin_providers, register_plugin
from support import SMALL_DATA

# Someone else's five-line Hydra app: what its sweeper and launcher are, and each job's config.
PLAIN_APP = """import hydra
from hydra.core.hydra_config import HydraConfig
@hydra.main(version_base=None)
def app(cfg):
    print("job", HydraConfig.get().sweeper._target_, HydraConfig.get().launcher._target_, dict(cfg))
app()
"""
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
# Another plugin that registers a name ablate picks (hydra/launcher=parallel is ablate_parallel).
SQUATTER = """from dataclasses import dataclass
from hydra.core.config_store import ConfigStore
@dataclass
class Conf:
    _target_: str = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
ConfigStore.instance().store(group="hydra/launcher", name="ablate_parallel", node=Conf, provider="squatter")
"""


def test_a_plain_hydra_app_beside_ablate_keeps_hydras_sweeper_and_launcher(tmp_path):
    (tmp_path / "app.py").write_text(PLAIN_APP)
    done = subprocess.run(
        [sys.executable, "app.py", "--multirun", "+x=1,2"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = [line.split(" ", 3)[1:] for line in done.stdout.splitlines() if line.startswith("job ")]
    assert jobs == [[BASIC_SWEEPER, BASIC_LAUNCHER, "{'x': 1}"], [BASIC_SWEEPER, BASIC_LAUNCHER, "{'x': 2}"]]
    shown = subprocess.run(
        [sys.executable, "app.py", "--cfg", "hydra", "--multirun", "+x=1,2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "ablate" not in shown  # nothing of ablate's in its composed hydra config


def test_ablate_picks_its_own_names_and_leaves_hydras_and_upstreams_alone():
    from ablate.cli.common import _compose
    from ablate.config import group_options
    from ablate.hydra_app import hydra_node

    choices = hydra_node(_compose("config", ["+sweep=precision"]), "runtime.choices")
    assert (choices["hydra/sweeper"], choices["hydra/launcher"]) == ("ablate_grid", "parallel")
    assert hydra_node(_compose("config", ["+sweep=lr"]), "runtime.choices")["hydra/sweeper"] == "ablate_optuna"
    basic = _compose("config", ["hydra/sweeper=basic"]).hydra.sweeper._target_
    assert basic == BASIC_SWEEPER  # `basic` in ablate is Hydra's own
    store = ConfigStore.instance().repo["hydra"]
    ours = {f"{g}/{n}" for g in ("sweeper", "launcher") for n, e in store[g].items() if e.provider == "ablate"}
    assert ours == {
        "sweeper/ablate_grid.yaml",
        "sweeper/ablate_optuna.yaml",
        "launcher/ablate_sequential.yaml",
        "launcher/ablate_parallel.yaml",
        "launcher/ablate_slurm.yaml",
        "launcher/ablate_submitit_local.yaml",
    }
    for upstream in ("optuna", "submitit_local", "submitit_slurm"):
        assert upstream not in group_options("hydra/sweeper") + group_options("hydra/launcher")


@dataclass
class OtherConf:
    _target_: str = BASIC_LAUNCHER


@pytest.fixture
def restored_store():
    """Hydra's ConfigStore as it was, after a test that registers a squatter in it."""
    repo = ConfigStore.instance().repo["hydra"]["launcher"]
    before = dict(repo)
    yield
    repo.clear()
    repo.update(before)


def test_a_name_taken_by_another_provider_is_kept_theirs_and_refused(restored_store):
    # registered after ablate's: it replaces ablate's entry, and the check finds it
    ConfigStore.instance().store(group="hydra/launcher", name="ablate_parallel", node=OtherConf, provider="squatter")
    with pytest.raises(
        ConfigError, match=r"^hydra/launcher=parallel is ablate's, but another Hydra plugin \(provider squatter\)"
    ):
        check_plugin_providers({"hydra/sweeper": "ablate_grid", "hydra/launcher": "parallel"})
    # registered before ablate's: ablate's registration leaves it there, and the check refuses the same
    register_plugin("hydra/launcher", "ablate_parallel", OtherConf)
    assert ConfigStore.instance().repo["hydra"]["launcher"]["ablate_parallel.yaml"].provider == "squatter"
    check_plugin_providers({"hydra/sweeper": "basic", "hydra/launcher": "basic"})  # not ablate's names: fine


def test_a_sweep_whose_launcher_name_another_plugin_holds_stops_in_one_line(tmp_path):
    plugin = tmp_path / "other" / "hydra_plugins" / "squatter"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text(SQUATTER)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ablate", "--multirun", "model=nano", "train.seed=1,2", "hydra/launcher=parallel"]
        + ["tracking=none", *SMALL_DATA],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "other")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "hydra/launcher=parallel is ablate's, but another Hydra plugin (provider squatter)" in lines[0]
    assert not list(work.iterdir())  # nothing created
