"""Every launcher's settings parsed when Hydra builds the launcher, before the sweep's first job is
planned (sweep/launch/settings.py, slurm.py): one line naming the key, nothing created."""

import pytest
import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ablate.config import ConfigError, ProcessSettings, SubmititSettings, parse_process_settings

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
    """The plugin raises ConfigError as it is built; Hydra's instantiate wraps it, and the app that
    asked Hydra to build it (ablate.hydra_app) says it in one line."""
    from ablate.hydra_app import plugin_errors
    from ablate.oneline import one_line

    assert parse_process_settings({"workers": 2}).workers == 2
    assert instantiate(OmegaConf.create({"_target_": PROCESS, "workers": 2})).settings.workers == 2
    for target, tree, words in (
        (PROCESS, {"workers": 0}, "workers=0"),
        (SUBMITIT, {"timeout_min": 0}, "timeout_min=0"),
    ):
        with pytest.raises(SystemExit) as stopped, one_line(), plugin_errors():
            instantiate(OmegaConf.create({"_target_": target, **tree}))
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("launcher", "schema", "values"),
    [
        ("sequential", ProcessSettings, {"workers": 1}),
        ("parallel", ProcessSettings, {"workers": None}),  # hardware.workers of hardware=cpu: null
        ("slurm", SubmititSettings, {"cluster": "slurm", "signal_delay_s": 120}),
        ("ablate_submitit_local", SubmititSettings, {"cluster": "local", "signal_delay_s": 30}),
    ],
)
def test_each_launcher_is_composed_against_its_schema_from_hydras_config_store(launcher, schema, values):
    """The launchers' settings are dataclasses (config/launch.py) that the plugins register in Hydra's
    ConfigStore, as Hydra's own plugins do, under ablate's names; the short names are files in
    ablate's own config folder that only pick the registered node, which types the composed one."""
    from ablate.cli.common import _compose
    from ablate.config import CONF_DIR, group_options

    for alias in (CONF_DIR / "hydra" / "launcher").glob("*.yaml"):
        assert yaml.safe_load(alias.read_text()) == {"defaults": [f"ablate_{alias.stem}"]}
    assert launcher in group_options("hydra/launcher")
    node = _compose("config", [f"hydra/launcher={launcher}"]).hydra.launcher
    assert issubclass(OmegaConf.get_type(node), schema)
    assert {k: node[k] for k in values} == values


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["hydra/launcher=paralel"], "hydra/launcher=paralel is not a known option (valid: ablate_parallel, ablate"),
        (["hydra/launcher=parallel", "hydra.launcher.wokers=2"], "unknown key hydra.launcher.wokers (valid: gpus,"),
        (["hydra/launcher=parallel", "hydra.launcher.workers=two"], "hydra.launcher.workers=two is not a whole number"),
        (["hydra/launcher=slurm", "hydra.launcher.timeout_min=1.5"], "hydra.launcher.timeout_min=1.5 is not a whole"),
        (["hydra/launcher=slurm", "hydra.launcher.poll_s=soon"], "hydra.launcher.poll_s=soon is not a number"),
        (["hydra/launcher=slurm", "hydra.launcher.cluster=pbs"], "hydra.launcher.cluster=pbs is not a submitit"),
    ],
)
def test_a_bad_launcher_key_stops_at_composition_in_one_line(cli, workdir, args, line):
    done = cli(["--multirun", "model=nano,micro", "train.steps=2", *args], workdir)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and line in lines[0], done.stderr[-2000:]
    assert not (workdir / "multirun").exists()
