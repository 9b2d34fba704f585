"""A summary row typed (sweep/rows.py): summary.json written as it always was, read back the same,
and a skipped run's figures from the summary recorded before placed where the record had them."""

import json
import shutil
from pathlib import Path

import yaml

from ablate.sweep.rows import SummaryRow, compared, filled_from_record, from_record
from ablate.sweep.summary import recorded_summary, summarize

DEMO = Path(__file__).resolve().parents[2] / "experiments" / "precision_demo" / "sweep"


def test_a_recorded_sweep_summarized_again_writes_its_summary_byte_for_byte(tmp_path):
    """experiments/precision_demo's 27 jobs (21 runs and the GPU-only fp8 arms' 6 unsupported rows;
    every figure a row holds: core shares, seeds, arms, an interval per arm): summary.json and
    summary.md as the summary of dict rows wrote them."""
    sweep = shutil.copytree(DEMO, tmp_path / "sweep")
    done = summarize(sweep, {"name": "precision", "sweep_id": "demo"})
    recorded = json.loads((DEMO / "summary.json").read_text())
    assert len(done.rows) == 27 and sum(r.status == "unsupported" for r in done.rows) == 6
    assert (sweep / "summary.json").read_text() == json.dumps(
        {"sweep_id": "demo", "runs": recorded["runs"]}, indent=2, default=str
    ) + "\n"
    assert (sweep / "summary.md").read_text() == (DEMO / "summary.md").read_text()


def test_a_row_read_back_from_its_record_is_the_same_row(tmp_path):
    sweep = shutil.copytree(DEMO, tmp_path / "sweep")
    made = summarize(sweep, {"name": "precision", "sweep_id": "demo"})
    read = recorded_summary(sweep, "demo")
    assert read is not None and [r.record() for r in read.rows] == [r.record() for r in made.rows]
    assert [r.arm for r in read.rows] == [r.arm for r in made.rows] and read.rows[0].arm is not None
    assert [r.comparison for r in read.rows] == [r.comparison for r in made.rows]


def test_a_skipped_row_takes_the_recorded_figures_after_its_own(tmp_path):
    """The figures result.json lacks come after job_cpu_s, those it has stay in place."""
    skipped = {"status": "skipped", "reason": "finished", "mlflow_run_id": "r1", "params": 100, "tokens": None}
    row = SummaryRow(label="model=nano", job="0", overrides={"model": "nano"}, result=skipped, job_cpu_s=1.5)
    old = {"label": "x", "job": "0", "mlflow_run_id": "r1", "tokens": 64, "final_val_loss": 2.5, "job_cpu_s": 9.0}
    (filled,) = compared(filled_from_record([row], {"runs": [old]}))
    record = filled.record()
    assert list(record)[:9] == [
        "label",
        "job",
        "overrides",
        "status",
        "reason",
        "mlflow_run_id",
        "params",
        "tokens",
        "job_cpu_s",
    ]
    assert list(record)[9:11] == ["final_val_loss", "mfu"] and record["label"] == "model=nano"
    assert (filled.tokens, filled.final_val_loss, filled.job_cpu_s, record["job_cpu_s"]) == (64, 2.5, 9.0, 9.0)
    (kept,) = filled_from_record([row], {"runs": [{**old, "mlflow_run_id": "another"}]})
    assert kept is row  # another run's record fills nothing


def test_an_impossible_mfu_is_none_and_said(tmp_path):
    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["model=nano"]))
    (job / "result.json").write_text(json.dumps({"status": "finished", "reason": "", "mfu": 1.27}))
    (row,) = summarize(tmp_path, {"name": "sweep"}).rows
    assert row.mfu is None and row.mfu_impossible and row.record()["mfu_impossible"] is True
    assert from_record(row.record()).mfu_impossible
