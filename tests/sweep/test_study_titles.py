"""A recorded study's title says what its prediction did: a study whose target landed outside the
interval it predicted is not titled as if the prediction had held."""

import json
from pathlib import Path

import pytest
import yaml

from ablate.sweep.prediction import outcome

ROOT = Path(__file__).resolve().parents[2]
PREDICTIONS = sorted((ROOT / "experiments").glob("*/prediction.json"))


@pytest.mark.parametrize("path", PREDICTIONS, ids=lambda p: p.parent.name)
def test_a_studys_title_matches_its_predictions_outcome(path):
    doc = json.loads(path.read_text())
    title = yaml.safe_load((path.parent / "study.yaml").read_text())["title"]
    readme_title = (path.parent / "README.md").read_text().splitlines()[0]
    assert readme_title == f"# {title}"
    inside = outcome(doc)["inside"]
    if inside is False:
        assert "miss" in title and "predicts" not in title, title
    elif inside is True:
        assert "miss" not in title, title


def test_there_are_recorded_predictions_to_check():
    assert len(PREDICTIONS) >= 2
