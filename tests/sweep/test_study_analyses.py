"""A recorded study's analyses (study.yaml `analyses`): CPU time of sweeps side by side (sweep/cost.py),
compute multipliers over points from several sweeps, and their sections in the README."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from ablate.config import ConfigError
from ablate.sweep.cost import cost_markdown, cost_table
from ablate.sweep.study import load_study, refresh, run_analyses
from ablate.sweep.summary import recorded_summary, summarize

SIZES = {"nano": 59_904, "micro": 153_728, "tiny": 451_968}
TOKENS = (262_144, 524_288, 1_048_576)


def job(sweep: Path, num: int, overrides: list[str], cpu_s: float | None, branches: dict | None = None, **result):
    """A job dir as a process launcher leaves it; with `branches`, a trunk's and its branches'."""
    d = sweep / str(num)
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    kind = "trunk" if branches else "run"
    (d / "result.json").write_text(json.dumps({"status": "finished", "reason": "", "kind": kind, **result}))
    if cpu_s is not None:
        (d / "usage.json").write_text(json.dumps({"cpu_s": cpu_s}))
    for name, fields in (branches or {}).items():
        b = d / "branches" / name
        b.mkdir(parents=True)
        (b / "result.json").write_text(json.dumps({"status": "finished", "reason": "", "kind": "branch", **fields}))


def loss(params: float, tokens: float, worth: float = 1.0) -> float:
    return 0.5 + 40 / params**0.3 + 60 / (worth * tokens) ** 0.3


def point(name: str, tokens: int, worth: float = 1.0) -> dict:
    p = SIZES[name]
    return dict(model=name, params=p, tokens=tokens, flops=6.0 * p * tokens, final_val_loss=loss(p, tokens, worth))


def cosine_sweep(root: Path) -> Path:
    """One run per (size, budget), each its own job: CPU time proportional to its tokens."""
    num = 0
    for name in SIZES:
        for tokens in TOKENS:
            job(
                root,
                num,
                [f"model={name}", f"train.tokens={tokens}"],
                cpu_s=SIZES[name] * tokens * 1e-9,
                **point(name, tokens),
            )
            num += 1
    summarize(root, {"name": "cosine"})
    return root


def wsd_sweep(root: Path, worth: float = 1.0, extra: tuple = ()) -> Path:
    """A trunk per size, a branch per budget: the trunk's job holds their CPU time, 0.65 of the sum."""
    for num, name in enumerate([*SIZES, *extra]):
        params = SIZES.get(name, 1_200_000)
        branches = {
            f"tokens={t}": point(name, t, worth)
            if name in SIZES
            else {**point("tiny", t), "model": name, "params": params}
            for t in TOKENS
        }
        cpu = 0.65 * sum(params * t for t in TOKENS) * 1e-9
        job(
            root,
            num,
            [f"model={name}"],
            cpu_s=cpu,
            branches=branches,
            model=name,
            params=params,
            tokens=TOKENS[-1],
            final_val_loss=3.0,
        )
    summarize(root, {"name": "wsd"})
    return root


def test_cost_table_totals_cpu_time_by_size_over_the_sizes_both_sweeps_have(tmp_path):
    cosine, wsd = cosine_sweep(tmp_path / "cos"), wsd_sweep(tmp_path / "wsd", extra=("small",))
    table = cost_table({"cosine": cosine, "wsd": wsd}, "model")
    assert table.values == ("nano", "micro", "tiny")  # small is only in one sweep
    assert table.total("cosine") / table.total("wsd") == pytest.approx(1 / 0.65)
    assert table.runs["wsd"] == {"nano": 3, "micro": 3, "tiny": 3, "small": 3}  # branches, not trunks
    md = cost_markdown(table)
    assert "| all | **" in md and "cosine used 1.54 times the CPU time of wsd" in md


def test_cost_table_refuses_sweeps_without_cpu_records(tmp_path):
    root = tmp_path / "s"
    job(root, 0, ["model=nano"], cpu_s=None, **point("nano", TOKENS[0]))
    summarize(root, {"name": "x"})
    with pytest.raises(ConfigError) as err:
        cost_table({"a": root, "b": root}, "model")
    assert "some jobs recorded no CPU time (usage.json" in str(err.value)


def write_study(directory: Path, analyses: list) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "study.yaml").write_text(
        yaml.safe_dump({"title": "t", "question": "q", "overrides": ["+sweep=scaling"], "analyses": analyses})
    )
    return directory


@pytest.mark.parametrize(
    ("analysis", "message"),
    [
        ({"kind": "plot", "out": "x"}, "analyses[0].kind='plot' is invalid (valid: fit, compare, cost)"),
        ({"kind": "fit"}, "analyses[0].out=None is invalid (valid: a folder name such as fit)"),
        (
            {"kind": "cost", "out": "c"},
            "analyses[0]: a cost analysis needs sweeps: {label: sweep dir} and by: a swept key",
        ),
    ],
)
def test_bad_analyses_fail_in_one_line(tmp_path, analysis, message):
    with pytest.raises(ConfigError) as err:
        load_study(write_study(tmp_path / "s", [analysis]))
    assert str(err.value).endswith(message)


def test_a_study_compares_two_recorded_sweeps_and_shows_it_in_its_readme(tmp_path):
    """The ladder both ways: CPU time side by side, and the WSD arm's compute multiplier against cosine
    from the two sweeps' points files (the WSD sweep worth 1.3x its compute here)."""
    study = write_study(
        tmp_path / "study",
        [
            {"kind": "cost", "out": "cost", "sweeps": {"cosine": "../cos", "wsd": "sweep"}, "by": "model"},
            {
                "kind": "compare",
                "out": "schedules",
                "title": "WSD against cosine",
                "points": {"cosine": "../cos/points.csv", "wsd": "sweep/points.csv"},
                "args": ["baseline=cosine", "n_boot=100"],
            },
        ],
    )
    cosine_sweep(tmp_path / "cos")
    wsd_sweep(study / "sweep", worth=1.3)
    (study / "sweep" / "sweep.json").write_text(json.dumps({"name": "wsd", "sweep_id": "wsd-1"}))
    spec = load_study(study)
    assert run_analyses(study, spec) == 0
    doc = json.loads((study / "schedules" / "multiplier.json").read_text())
    values = [s["multiplier"]["value"] for s in doc["comparisons"][0]["scales"]]
    assert np.allclose(values, 1.3, rtol=0.2) and doc["baseline"] == "cosine"
    readme = refresh(study, spec).read_text()
    assert "## CPU time" in readme and "cosine used 1.54 times the CPU time of wsd" in readme
    assert "## WSD against cosine" in readme and "#### Answer" in readme
    assert "](schedules/multiplier.png)" in readme  # links point into the analysis' folder


def test_a_study_just_run_reads_its_sweeps_own_summary_back_and_no_other(tmp_path):
    """Right after `ablate study --run` the README is made from the summary the sweep wrote at its
    end (same rows, same table); a summary left by another launch of the sweep dir is made again."""
    study = write_study(tmp_path / "study", [])
    sweep = cosine_sweep(study / "sweep")
    (sweep / "sweep.json").write_text(json.dumps({"name": "cosine", "sweep_id": "cosine-2"}))
    spec = load_study(study)
    made = summarize(sweep, {"name": "cosine", "sweep_id": "cosine-2"})
    read = recorded_summary(sweep, "cosine-2")
    assert (
        read is not None
        and read.table == made.table
        and [r.record() for r in read.rows] == json.loads(json.dumps([r.record() for r in made.rows]))
    )
    assert read.failed == made.failed == 0 and read.files == [] and sweep / "points.csv" in made.files
    (sweep / "summary.md").write_text(made.table + " (as the sweep wrote it)\n")
    assert "(as the sweep wrote it)" in refresh(study, spec, just_run=True).read_text()  # read back
    assert "(as the sweep wrote it)" not in refresh(study, spec).read_text()  # made again from the records
    assert recorded_summary(sweep, "cosine-3") is None  # another launch's summary
    (sweep / "summary.md").unlink()
    assert recorded_summary(sweep, "cosine-2") is None
