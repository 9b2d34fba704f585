"""A sweep's loss differences paired by seed, with each arm's 95% interval and a verdict, and
speed-ups shown only between runs that were timed fairly (neither shared its cores or its GPU)."""

import json
import math

import pytest
import yaml
from scipy import stats

from ablate.sweep import summary

# val loss per (precision, seed): fp8_tensorwise_emulated is 0.02 above fp32 on every seed (a real difference),
# bf16_pure above on one seed and below on the others (noise).
LOSSES = {
    "fp32": [1.60, 1.55, 1.58],
    "fp8_tensorwise_emulated": [1.62, 1.571, 1.598],
    "bf16_pure": [1.605, 1.545, 1.578],
}


def write_job(sweep_dir, num: int, overrides: list, **result) -> None:
    job = sweep_dir / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    base = {"status": "finished", "reason": "", "params": 59_904, "tokens": 1000, "device": "cpu"}
    (job / "result.json").write_text(json.dumps({**base, **result}))


def seeded_sweep(sweep_dir, core_share: float = 0.95) -> None:
    num = 0
    for seed in range(3):
        for precision, losses in LOSSES.items():
            write_job(
                sweep_dir,
                num,
                [f"precision={precision}", f"train.seed={seed}"],
                precision=precision,
                final_val_loss=losses[seed],
                tokens_per_s=1000.0 if precision == "fp32" else 800.0,
                torch_threads=1,
                core_share=core_share,
            )
            num += 1


def by_label(rows: list) -> dict:
    return {r.label: r for r in rows}


def test_each_difference_is_against_the_same_seed_and_each_arm_gets_a_t_interval(tmp_path):
    seeded_sweep(tmp_path)
    done = summary.summarize(tmp_path, {"name": "precision"})
    rows = by_label(done.rows)
    assert rows["precision=fp8_tensorwise_emulated train.seed=1"].comparison.val_loss_delta == pytest.approx(0.021)
    assert rows["precision=bf16_pure train.seed=2"].comparison.val_loss_delta == pytest.approx(-0.002)
    deltas = [a - b for a, b in zip(LOSSES["fp8_tensorwise_emulated"], LOSSES["fp32"], strict=True)]
    mean, sd = sum(deltas) / 3, math.sqrt(sum((d - sum(deltas) / 3) ** 2 for d in deltas) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)  # 4.303 x sd / sqrt(3)
    recorded = {r["label"]: r for r in json.loads((tmp_path / "summary.json").read_text())["runs"]}
    for seed in range(3):
        fp8 = recorded[f"precision=fp8_tensorwise_emulated train.seed={seed}"]
        assert fp8["val_loss_delta_ci95"] == pytest.approx([mean - half, mean + half])
        assert fp8["val_loss_delta_n"] == 3 and fp8["val_loss_delta_resolved"] is True
        assert recorded[f"precision=bf16_pure train.seed={seed}"]["val_loss_delta_resolved"] is False
        assert recorded[f"precision=fp32 train.seed={seed}"]["val_loss_delta_ci95"] is None
    lo, hi = mean - half, mean + half
    assert (
        f"| precision=fp8_tensorwise_emulated | 3 | 1.5963 | {mean:+.4f} | [{lo:+.4f}, {hi:+.4f}] | real |"
        in done.table
    )
    assert "| precision=bf16_pure | 3 |" in done.table and "| noise |" in done.table
    verdict = [line for line in done.table.splitlines() if line.startswith("- Against precision=fp32:")]
    assert verdict == [
        f"- Against precision=fp32: real (the 95% interval excludes 0): precision=fp8_tensorwise_emulated {mean:+.4f} "
        f"[{lo:+.4f}, {hi:+.4f}]; noise (the interval holds 0): precision=bf16_pure."
    ]
    assert "Δ vs precision=fp32 (same seed)" in done.table


def test_when_every_interval_holds_zero_the_summary_says_none_was_resolved(tmp_path):
    for num, (seed, precision, loss) in enumerate(
        [(0, "fp32", 2.0), (0, "bf16", 2.01), (1, "fp32", 2.0), (1, "bf16", 1.99), (2, "fp32", 2.0), (2, "bf16", 2.0)]
    ):
        overrides = [f"precision={precision}", f"train.seed={seed}"]
        write_job(tmp_path, num, overrides, precision=precision, final_val_loss=loss)
    table = summary.summarize(tmp_path, {"name": "precision"}).table
    assert "- Against precision=fp32: no difference resolved; noise (the interval holds 0): precision=bf16." in table


def test_one_run_per_arm_says_its_differences_have_no_noise_estimate(tmp_path):
    for num, (precision, loss) in enumerate([("fp32", 2.0), ("bf16", 2.01)]):
        write_job(tmp_path, num, [f"precision={precision}"], precision=precision, final_val_loss=loss)
    done = summary.summarize(tmp_path, {"name": "precision"})
    assert by_label(done.rows)["precision=bf16"].arm.val_loss_delta_ci95 is None
    assert "- One run per arm: the differences against precision=fp32 have no noise estimate" in done.table


def test_a_speed_up_is_shown_between_runs_that_had_their_cores(tmp_path):
    seeded_sweep(tmp_path, core_share=0.95)
    done = summary.summarize(tmp_path, {"name": "precision"})
    fp8 = by_label(done.rows)["precision=fp8_tensorwise_emulated train.seed=0"]
    assert fp8.comparison.speedup == pytest.approx(0.8) and fp8.comparison.speedup_comparable is True
    assert "| 0.80x | 95% |" in done.table and "No speed-up shown" not in done.table


def test_no_speed_up_is_shown_between_runs_that_shared_cores_and_one_line_says_why(tmp_path):
    seeded_sweep(tmp_path, core_share=0.95)
    result = tmp_path / "4" / "result.json"  # fp8_tensorwise_emulated, seed 1: another process took 60% of its core
    result.write_text(json.dumps({**json.loads(result.read_text()), "core_share": 0.4}))
    done = summary.summarize(tmp_path, {"name": "precision"})
    rows = by_label(done.rows)
    assert rows["precision=fp8_tensorwise_emulated train.seed=1"].comparison.speedup_comparable is False
    assert rows["precision=fp8_tensorwise_emulated train.seed=0"].comparison.speedup_comparable is True
    assert "| 0.80x | 40% |" not in done.table and "| - | 40% |" in done.table
    notes = [line for line in done.table.splitlines() if line.startswith("- No speed-up shown")]
    assert len(notes) == 1 and "for 1 of 9 runs" in notes[0]
    assert "precision=fp8_tensorwise_emulated train.seed=1 had 40% of its 1 thread(s)' cores" in notes[0]


def test_a_run_without_a_core_share_is_never_timed_against_another(tmp_path):
    for num, precision in enumerate(["fp32", "bf16"]):  # an older ablate's result.json: no core share
        write_job(tmp_path, num, [f"precision={precision}"], precision=precision, final_val_loss=2.0, tokens_per_s=1e3)
    done = summary.summarize(tmp_path, {"name": "precision"})
    assert [r.comparison.speedup_comparable for r in done.rows] == [False, False]
    assert "recorded no core share" in done.table


@pytest.mark.parametrize(("second_starts", "comparable"), [(5.0, False), (20.0, True)])
def test_gpu_runs_compare_only_when_each_had_its_gpu(tmp_path, second_starts, comparable):
    for num, (precision, start) in enumerate([("fp32", 0.0), ("bf16", second_starts)]):
        write_job(
            tmp_path,
            num,
            [f"precision={precision}"],
            precision=precision,
            device="cuda",
            final_val_loss=2.0,
            tokens_per_s=1e5 * (num + 1),
            gpu="node1:GPU-0",
            started_at=start,
            ended_at=start + 10.0,
        )
    done = summary.summarize(tmp_path, {"name": "precision"})
    assert by_label(done.rows)["precision=bf16"].comparison.speedup_comparable is comparable
    assert ("| 2.00x |" in done.table) is comparable
    assert ("shared its GPU with" in done.table) is not comparable
