"""`ablate sample run=PATH` takes a path as it is written, `=` included (a cooldown branch's folder
is branches/tokens=1.04858e+06), as Hydra's grammar would not."""

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from ablate.cli.sample import verbatim


@pytest.mark.parametrize(
    "arg, value",
    [
        ("run=outputs/x/branches/tokens=1.04858e+06", "outputs/x/branches/tokens=1.04858e+06"),
        ("run=a/b", "a/b"),
        ("prompt=the ", "the "),
        ("prompt=it's (a, b) = [c]", "it's (a, b) = [c]"),
        ("out=runs/o=1/sample.json", "runs/o=1/sample.json"),
        ("run='already quoted=1'", "already quoted=1"),
    ],
)
def test_a_path_or_prompt_reaches_the_config_as_written(arg, value):
    (override,) = OverridesParser.create().parse_overrides(verbatim([arg]))
    assert override.value() == value


def test_other_arguments_pass_unchanged():
    args = ["tokens=40", "temperature=0.8", "--cfg", "job"]
    assert verbatim(args) == args
