"""Every launcher's settings parsed before anything is created (sweep/launch/settings.py), with the
parsers the launchers themselves use."""

import pytest

from ablate.config import ConfigError
from ablate.sweep.launch.settings import PROCESS_LAUNCHER, SUBMITIT_LAUNCHER, check_launcher, parse_process_settings


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
        check_launcher({"_target_": PROCESS_LAUNCHER, **tree})


def test_good_settings_parse_and_unknown_launchers_are_left_to_hydra():
    assert parse_process_settings({"_target_": PROCESS_LAUNCHER, "workers": 2}).workers == 2
    check_launcher({"_target_": "somebody.elses.Launcher", "anything": -1})
    with pytest.raises(ConfigError, match="timeout_min=0"):
        check_launcher({"_target_": SUBMITIT_LAUNCHER, "timeout_min": 0})
