"""run/progress.py: a run without a terminal still says how far it has got."""

from __future__ import annotations

import logging

import pytest

from ablate.run import progress


def test_the_plain_line_gives_step_loss_speed_and_time_left():
    line = progress.plain_line("medium/fp32", 1024, 0, 4096, 5.1234, 4600.0, elapsed=300.0)
    assert line == "medium/fp32: step 1,024/4,096 (25%), loss 5.123, 4,600 tokens/s, about 15 min left"
    resumed = progress.plain_line("nano/fp32", 150, 100, 200, 3.0, 1000.0, elapsed=50.0)
    assert resumed.endswith("about 50 s left")  # the pace of this launch: 50 steps in 50 s, 50 to go


def test_without_a_terminal_a_run_logs_a_line_every_so_often(monkeypatch, caplog):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    caplog.set_level(logging.INFO, logger=progress.__name__)
    bar = progress.RunProgress(total=10, start=0, enabled=True, label="nano/fp32")  # pytest's stderr: no tty
    bar.update(5, 2.5, 1000.0)
    bar.close()
    assert any("nano/fp32: step 5/10 (50%), loss 2.500" in r.getMessage() for r in caplog.records)


def test_a_run_with_progress_off_logs_nothing(monkeypatch, caplog):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    caplog.set_level(logging.INFO, logger=progress.__name__)
    bar = progress.RunProgress(total=10, start=0, enabled=False, label="nano/fp32")
    bar.update(5, 2.5, 1000.0)
    assert not caplog.records


def test_a_sweep_counts_no_unsupported_job_as_done_and_reports_a_trunks_final_branch(tmp_path, capsys):
    """The sweep line counts runs this hardware can run (an unsupported job is said, not counted),
    and a WSD trunk's job ends with the loss of its largest budget's branch, not the trunk's."""
    import json

    from ablate.run.progress import SweepProgress, WatchedJob

    jobs = [
        WatchedJob(0, tmp_path / "0", 0.0, "precision=fp8_tensorwise", counted=False),
        WatchedJob(1, tmp_path / "1", 1e9, "model=nano"),
        WatchedJob(2, tmp_path / "2", 1e9, "model=micro"),
    ]
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "result.json").write_text(json.dumps({"status": "unsupported"}))
    trunk = {"status": "finished", "kind": "trunk", "final_val_loss": 5.0613, "tokens": 1048576}
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "result.json").write_text(json.dumps(trunk))
    for tokens, loss in ((262144, 5.4), (1048576, 4.9357), (524288, 5.1)):
        branch = tmp_path / "1" / "branches" / f"tokens={tokens}"
        branch.mkdir(parents=True)
        (branch / "result.json").write_text(json.dumps({"tokens": tokens, "final_val_loss": loss}))
    progress = SweepProgress("ladder", jobs, enabled=False)
    progress.poll()
    err = capsys.readouterr().err
    assert "sweep ladder: #0 precision=fp8_tensorwise: unsupported here, not counted" in err
    assert "sweep ladder: 1/2 done" in err and "val loss 4.9357 (branch tokens=1048576)" in err
    assert progress.counts() == (1, 2)


def test_a_trunk_at_its_last_step_is_not_its_whole_job(tmp_path):
    """A WSD trunk's job plans 1000 trunk steps and 600 of cooldowns: its trunk's progress at step
    1000 is 1000/1600 of the job, so the ETA keeps the branches' work ahead (it called it done)."""
    import json
    import time

    from ablate.run.progress import SweepProgress, WatchedJob

    jobs = [WatchedJob(0, tmp_path / "0", 1.6e9, "model=nano", steps=1600), WatchedJob(1, tmp_path / "1", 1e9, "x")]
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "progress.json").write_text(json.dumps({"step": 1000, "start": 0, "total": 1000}))
    progress = SweepProgress("ladder", jobs, enabled=False)
    progress.started = time.time() - 100.0
    progress.poll()
    assert jobs[0].fraction == 1000 / 1600
    # done: 1e9 of the trunk's FLOPs in 100 s; left: 0.6e9 of branches and 1e9 of the other job
    assert progress.eta_s() == pytest.approx(160.0, rel=0.02)
