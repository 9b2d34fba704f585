"""Where the presets live: the package's own, package data that Hydra finds as pkg://ablate.conf."""

from hydra import compose, initialize_config_module

from ablate.config import CONF_DIR, CONF_MODULE, CONF_PATH


def test_the_presets_are_package_data_hydra_reads_by_module():
    assert CONF_PATH == f"pkg://{CONF_MODULE}" and (CONF_DIR / "config.yaml").is_file()
    with initialize_config_module(config_module=CONF_MODULE, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["model=nano"])
    assert cfg.model.name == "nano" and cfg.data.kind == "synthetic"


def test_every_hydra_command_has_its_primary_config_in_the_package():
    """`ablate` (train) composes config.yaml; every other Hydra command the file of its name."""
    from ablate.cli.main import COMMANDS

    hydra_apps = [name for name, (_, _, style) in COMMANDS.items() if style.startswith("hydra")]
    expected = {"config" if name == "train" else name for name in hydra_apps}
    assert {p.stem for p in CONF_DIR.glob("*.yaml")} == expected


def test_no_config_group_shadows_a_key_of_a_command():
    """Every command composes over the same conf/ folder, so a group named like one of a command's
    own keys (`ablate compare arm=...` beside a group `arm/`) would make Hydra read that key as a
    group choice: group names and the primary configs' top-level keys stay apart."""
    import yaml

    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir() and not p.name.startswith("_")}
    for primary in CONF_DIR.glob("*.yaml"):
        keys = set(yaml.safe_load(primary.read_text()) or {}) - {"defaults", "hydra"}
        own = {k for k in keys if k not in ("model", "data", "precision", "hardware", "optim", "train", "tracking")}
        assert not own & groups, f"{primary.name}: {sorted(own & groups)} are also config groups"
