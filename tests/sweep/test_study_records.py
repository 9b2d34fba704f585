"""Every recorded study re-renders byte for byte: `ablate study experiments/NAME` (no --run, nothing
trained) on a copy of what a fresh clone holds of the study writes its README, the sweep's table,
record and points file exactly as they are committed. A figure, field or run the code stops writing
as it did fails here; an intended change of the renderer is committed with the studies rendered
again (`ablate study experiments/NAME` for each)."""

import json
import shutil
from pathlib import Path

import pytest

from ablate.cli.study import main as study_main

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
STUDIES = sorted(path.parent.name for path in EXPERIMENTS.glob("*/study.yaml"))
# Compared: the text a render writes. Its plots are left out: a PNG's bytes follow matplotlib's and
# its bundled FreeType's versions, not this code. The analyses' outputs (fit/, compare/, cost/) are
# not written by a render (`--analyze` writes them), only quoted in README.md, which is compared.
RENDERED = ("README.md", "sweep/summary.md", "sweep/summary.json", "sweep/points.csv")
# Run output each study's .gitignore keeps out of git: a fresh clone renders without its MLflow store.
NOT_IN_GIT = shutil.ignore_patterns(
    "mlflow.db*", "mlartifacts", ".state", ".launcher", ".*.claims", "progress.json", "sweep.lock"
)


def fresh_copy(name: str, root: Path) -> Path:
    """The study as a fresh clone holds it, under root/experiments/ (its commands' paths are relative
    to the folder above experiments/). The rendered files are removed, but for summary.json: a clone's
    only record of the figures of runs skipped as finished (sweep/rows.py filled_from_record), kept
    with its JSON compacted so that the bytes compared are the render's own."""
    study = shutil.copytree(EXPERIMENTS / name, root / "experiments" / name, ignore=NOT_IN_GIT)
    for rel in RENDERED:
        path = study / rel
        if rel.endswith(".json"):
            path.write_text(json.dumps(json.loads(path.read_text())))
        else:
            path.unlink()
    return study


def test_every_recorded_study_is_here():
    """The nine sweeps with a study.yaml and the demo (experiments/profile_cpu is a profile, no sweep)."""
    assert len(STUDIES) >= 10 and {"precision_demo", "ladder_wsd", "text_ladder_tuned"} <= set(STUDIES)


@pytest.mark.parametrize("name", STUDIES)
def test_a_recorded_study_renders_as_committed(name, tmp_path, capsys):
    study = fresh_copy(name, tmp_path)
    study_main([str(study)])
    assert capsys.readouterr().err.strip().endswith("README.md")
    differ = [rel for rel in RENDERED if (study / rel).read_bytes() != (EXPERIMENTS / name / rel).read_bytes()]
    assert not differ, f"experiments/{name}: {', '.join(differ)} render differently from what is committed"
