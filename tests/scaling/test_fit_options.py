"""FitOptions is built from the fit's config: each option `ablate fit` and `ablate backtest` take is a
FitOptions field of the same name, carried by FitOptions.from_config, not copied by hand."""

from dataclasses import fields

from ablate.config import parse_backtest, parse_fit
from ablate.config.fit import FitSourceConfig
from ablate.scaling.predict import FitOptions

# Where the points come from and where results go: the command's, not the fit's.
SOURCE_KEYS = {"experiment", "points", "out", "tracking"}
# Each fitting key at a valid value other than its default (each given alone: form=joint refuses
# tie_exponents=true).
CHANGED = {
    "n_boot": 17,
    "seed": 3,
    "entropy_floor": 1.25,
    "params": "non_embedding",
    "tie_exponents": True,
    "form": "joint",
    "noise": 0.02,
    "interval": "hull",
}


def test_every_fitting_key_of_the_config_is_an_option():
    options = {f.name for f in fields(FitOptions)}
    keys = {f.name for f in fields(FitSourceConfig)} - SOURCE_KEYS
    assert keys <= options, f"config keys FitOptions does not take: {sorted(keys - options)}"
    assert keys == set(CHANGED)


def test_from_config_carries_each_key_the_fit_and_the_backtest_were_given():
    for parse in (parse_fit, parse_backtest):
        default = FitOptions.from_config(parse({"points": "p.csv"}))
        for key, value in CHANGED.items():
            assert getattr(default, key) != value
            opts = FitOptions.from_config(parse({"points": "p.csv", key: value}))
            assert getattr(opts, key) == value, key
            assert opts == FitOptions(**{**vars(default), key: value}), key  # and nothing else moved


def test_a_default_config_gives_the_default_options():
    assert FitOptions.from_config(parse_fit({"points": "p.csv"})) == FitOptions(n_boot=1000, interval="adaptive")
