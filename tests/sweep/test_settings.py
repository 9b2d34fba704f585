"""Every launcher's settings parsed when Hydra builds the launcher, before the sweep's first job is
planned (sweep/launch/settings.py, slurm.py): one line naming the key, nothing created."""

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ablate.config import ConfigError
from ablate.sweep.launch.settings import parse_process_settings

PROCESS = "hydra_plugins.ablate_launcher.process_launcher.ProcessLauncher"
SUBMITIT = "hydra_plugins.ablate_slurm.submitit_launcher.SubmititLauncher"


@pytest.mark.parametrize(
    "tree, words",
    [
        ({"workers": 0}, "hydra.launcher.workers=0"),
        ({"workers": "two"}, "hydra.launcher.workers='two'"),
        ({"threads_per_job": -1}, "hydra.launcher.threads_per_job=-1"),
        ({"stop_timeout_s": -5}, "hydra.launcher.stop_timeout_s=-5"),
        ({"wokers": 2}, "unknown key hydra.launcher.wokers"),
    ],
)
def test_process_launcher_settings(tree, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        parse_process_settings(tree)


def test_a_launcher_built_with_bad_settings_stops_in_one_line(capsys):
    assert parse_process_settings({"workers": 2}).workers == 2
    assert instantiate(OmegaConf.create({"_target_": PROCESS, "workers": 2})).settings.workers == 2
    for target, tree, words in (
        (PROCESS, {"workers": 0}, "workers=0"),
        (SUBMITIT, {"timeout_min": 0}, "timeout_min=0"),
    ):
        with pytest.raises(SystemExit) as stopped:
            instantiate(OmegaConf.create({"_target_": target, **tree}))
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1
