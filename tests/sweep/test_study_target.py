"""A study's target (study.yaml `target`): predicted from the study's fit before it is trained,
trained into target/, its outcome recorded; a relaunch does none of it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.config import ConfigError
from ablate.sweep.study import PREDICTION_FILE, _target_section, load_study, run_target
from support import SMALL_DATA, law_points_csv

TARGET = ["model=nano", "train.steps=6", *SMALL_DATA]


@pytest.fixture
def study(tmp_path, cli) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "points.csv").write_text(law_points_csv(seed=1))
    fitted = cli(["points=points.csv", "n_boot=20", "held_out=0", "out=fit"], d, command="fit")
    assert fitted.returncode == 0, fitted.stdout + fitted.stderr
    (d / "study.yaml").write_text(
        json.dumps({"title": "t", "overrides": ["model=nano"], "target": {"fit": "fit/fit.json", "overrides": TARGET}})
    )
    return d


@pytest.mark.slow
def test_the_target_is_predicted_then_trained_then_recorded_once(study):
    spec = load_study(study)
    assert run_target(study, spec) == 0
    doc = json.loads((study / PREDICTION_FILE).read_text())
    result = json.loads((study / "target" / "result.json").read_text())
    assert doc["target"]["config_hash"] == result["config_hash"]
    assert doc["actual"] == result["final_val_loss"] and doc["made_at"] <= doc["trained_at"]
    section = "\n".join(_target_section(study, spec))
    assert "made before the target was trained" in section and f"{doc['actual']:.4f}" in section
    assert doc["made_at"] <= doc["trained_from"] <= doc["trained_at"]  # the run's own window, after the prediction

    assert "rewritten since" not in section

    assert run_target(study, spec) == 0  # relaunched: the prediction stays, the run is skipped
    assert json.loads((study / PREDICTION_FILE).read_text()) == doc
    (study / "fit" / "fit.json").write_text((study / "fit" / "fit.json").read_text() + "\n")  # a later refit
    assert "has been rewritten since" in "\n".join(_target_section(study, spec))


def test_a_target_without_its_fit_or_overrides_is_refused(tmp_path):
    (tmp_path / "study.yaml").write_text(json.dumps({"overrides": ["model=nano"], "target": {"fit": "f.json"}}))
    with pytest.raises(ConfigError, match="target=.* is invalid"):
        load_study(tmp_path)
