"""A sweep over sizes says before it trains whether a law fitted to its runs can be determined, with
the fit's own design checks (scaling.design_reasons), and which runs to add."""

from types import SimpleNamespace

import pytest

from ablate.config import ConfigError
from ablate.scaling import design_reasons
from ablate.sweep.design import AtOnce, design_lines, launch_at_once

SPLIT = 16_600_000  # the training split's tokens (data=debian_docs)


def jobs(sizes, tokens, seeds=2, split=SPLIT):
    """A WSD ladder's jobs as the planner leaves them: one per size and seed, a point per branch."""
    return [SimpleNamespace(action="run", points=[(n, d, split) for d in tokens]) for n in sizes for _ in range(seeds)]


def test_an_affordable_ladder_is_told_before_it_runs_what_it_lacks_and_what_to_add():
    """The review's ladder (4 sizes x 3 budgets x 2 seeds): the design checks ablate fit applies
    afterwards, named now, and the token counts that pass them, within the corpus."""
    ladder = jobs([2.5e4, 6e4, 1.5e5, 4.4e5], [262144, 524288, 1048576])
    lines = design_lines(ladder)
    assert lines[0].startswith("ladder design: 4 sizes over 1.25 decades of N, 3 token counts over 0.60 decades")
    assert "would be wide at best: 3 distinct token counts D (needs 4)" in lines[0]
    assert lines[1] == "  add token counts: 2.1e+06, 4.19e+06 (train.tokens=[262144,524288,1048576,2097152,4194304])"
    # the counts it suggests pass the same checks
    N = [p[0] for j in ladder for p in j.points] * 2
    D = [262144, 524288, 1048576, 2097152, 4194304] * (len(N) // 5) + [262144] * (len(N) % 5)
    assert not [r for r in design_reasons(N, D) if "token counts" in r.text]


def test_suggested_runs_stay_within_the_training_split():
    """With 1.5M tokens in the split, doubling past 1M would repeat data: smaller counts instead."""
    lines = design_lines(jobs([2.5e4, 6e4, 1.5e5, 4.4e5], [262144, 524288, 1048576], split=1_500_000))
    assert "add token counts: 6.55e+04, 1.31e+05" in lines[1]
    assert "the training split holds 1,500,000 tokens, so larger counts would repeat data" in lines[1]


def test_a_design_that_passes_says_so_and_one_size_says_nothing():
    good = jobs([1e4, 3e4, 1e5, 3e5], [2**18, 2**19, 2**20, 2**21, 2**22])
    assert design_lines(good)[0].endswith("the design can determine a law (the design checks of `ablate fit` pass)")
    assert design_lines(jobs([6e4], [2**18, 2**20])) == []  # the demo: one model, no law


def test_too_few_sizes_is_not_determined_and_says_how_many_to_add():
    lines = design_lines(jobs([2.5e4, 6e4], [2**18, 2**19, 2**20, 2**21]))
    assert "would be not_determined at best: 2 distinct sizes N (needs 3)" in lines[0]
    assert lines[-1].startswith("  add sizes: 2 more model size(s) and ")


def planned(model, steps, flops_per_token, tokens_per_step=2048, precision="fp32", job_dir="/nonexistent/s/0"):
    """A job as the planner leaves it, with the parts of its config the time estimate reads."""
    cfg = SimpleNamespace(
        model=SimpleNamespace(name=model, block_size=64),
        precision=SimpleNamespace(name=precision),
        hardware=SimpleNamespace(device="cpu"),
        train=SimpleNamespace(sequences_per_step=tokens_per_step // 64),
        tracking=SimpleNamespace(backend="none", uri=""),
    )
    tokens = steps * tokens_per_step
    return SimpleNamespace(
        action="run",
        cfg=cfg,
        total_steps=steps,
        cost_flops=float(tokens * flops_per_token),
        job_dir=job_dir,
        points=[(flops_per_token / 6, tokens, SPLIT)],
    )


def test_the_time_is_each_jobs_tokens_at_its_models_measured_speed_not_the_job_count():
    from ablate.perf.recorded_speed import Speed

    speeds = [
        Speed("nano", "fp32", "cpu", 4000.0, 6e5, "MLflow"),
        Speed("nano", "fp32", "cpu", 6000.0, 6e5, "result.json"),  # median of the two: 5000 tokens/s
        Speed("tiny", "fp32", "cpu", 1000.0, 3e6, "result.json"),
    ]
    jobs = [planned("nano", 1000, 6e5), planned("tiny", 500, 3e6)]
    line = design_lines(jobs, speeds)[-1]
    # 2,048,000 tokens at 5000/s + 1,024,000 at 1000/s = 410 s + 1024 s
    assert line.startswith(
        "time: about 24 min of training summed over the 2 jobs to run (the launcher's concurrency is not known), "
        "from speeds measured"
    )
    assert "2 of 2 jobs at the median speed recorded by runs of their model and precision" in line
    assert "from MLflow and result.json" in line
    # a size no run recorded: its FLOPs at the FLOP rate of the nearest recorded model (tiny: 3e9 FLOP/s)
    small = design_lines([planned("nano", 1000, 6e5), planned("small", 100, 1.2e7)], speeds)[-1]
    assert "1 of 2 jobs at the median speed" in small and "1 at the FLOP rate of the recorded model nearest" in small
    # nano 410 s; small's 204,800 tokens x 1.2e7 FLOPs at tiny's 1000 x 3e6 FLOP/s (nearer than nano's): 819 s
    assert "about 20 min" in small


def test_without_a_recorded_speed_the_time_is_not_guessed_from_the_job_count():
    line = design_lines([planned("nano", 1000, 6e5), planned("tiny", 500, 3e6)], [])[-1]
    assert line.startswith("time: not estimated: no run of these models and precisions recorded its speed")


def test_a_sweeps_own_runs_past_the_training_split_are_warned_of():
    lines = design_lines(jobs([2.5e4, 6e4, 1.5e5, 4.4e5], [2**20, 2**22], split=3_000_000))
    (warning,) = [line for line in lines if "warning" in line]
    assert "8 run(s) read more tokens than the training split holds (3,000,000): 4.19e+06 (1.4x)" in warning


def test_a_jobs_speed_comes_from_the_recorded_runs_nearest_it_in_length():
    """Warm-up weighs on a short run: femto on a shared CPU made 1,568 tokens/s over 20 steps and
    4,311 over 200 (measured here); a 200-step job is timed by the 200-step run."""
    from ablate.perf.recorded_speed import Speed

    speeds = [
        Speed("femto", "fp32", "cpu", 1568.0, 4e5, "result.json", tokens=20_480),
        Speed("femto", "fp32", "cpu", 4311.0, 4e5, "result.json", tokens=204_800),
    ]
    line = design_lines([planned("femto", 200, 4e5, tokens_per_step=1024), planned("pico", 200, 1e6)], speeds)[-1]
    # femto: 204,800 / 4311 = 48 s; pico at femto's FLOP rate over its 200-step run: 409,600 x 1e6 / (4311 x 4e5)
    assert "about 5 min" in line  # 48 + 238 = 285 s (at the 20-step run's speed: 131 + 653 s, 13 min)


def test_the_time_is_what_the_user_waits_with_the_launchers_jobs_at_once():
    """Summed, the jobs took 24 min; two at a time, longest first, the user waits for the longest
    slot: tiny's 1024 s alone, nano's 410 s beside it."""
    from ablate.perf.recorded_speed import Speed

    speeds = [Speed("nano", "fp32", "cpu", 5000.0, 6e5, "MLflow"), Speed("tiny", "fp32", "cpu", 1000.0, 3e6, "MLflow")]
    jobs = [planned("nano", 1000, 6e5), planned("tiny", 500, 3e6)]
    two = design_lines(jobs, speeds, AtOnce(2, "2 jobs at a time, 1 thread each"))[-1]
    assert two.startswith("time: about 17 min, 2 jobs at a time, 1 thread each: 24 min of training summed over the 2")
    one = design_lines(jobs, speeds, AtOnce(1, "one job at a time"))[-1]
    assert one.startswith("time: about 24 min, one job at a time: 24 min of training summed")
    # four nano jobs of 410 s and one tiny of 1024 s on 2 slots, longest first: tiny and a nano on one
    # slot (1434 s), three nanos on the other (1229 s); neither half of the sum (1331 s) nor the longest job
    many = design_lines([*(planned("nano", 1000, 6e5) for _ in range(4)), jobs[1]], speeds, AtOnce(2, "2 jobs"))[-1]
    assert many.startswith("time: about 24 min, 2 jobs: 44 min of training summed over the 5 jobs to run")


def composed(*overrides):
    from ablate.hydra_app import App

    return App("config").compose(["+sweep=scaling", "hardware=cpu", *overrides])


def test_the_launchers_jobs_at_once_come_from_its_own_settings():
    """The process launcher's workers as it starts them (never more than the jobs to run), a SLURM
    array's parallelism, submitit's local executor all at once, Hydra's basic launcher one at a time."""
    five = [SimpleNamespace(action="run")] * 5 + [SimpleNamespace(action="skip")]
    parallel = launch_at_once(composed("hydra/launcher=parallel", "hardware.workers=2"), five)
    assert parallel.slots == 2 and parallel.how.startswith("2 jobs at a time, ")
    assert launch_at_once(composed("hydra/launcher=parallel", "hardware.workers=8"), five).slots == 5
    sequential = launch_at_once(composed("hydra/launcher=sequential"), five)
    assert sequential.slots == 1 and sequential.how.startswith("one job at a time, ")
    slurm = launch_at_once(composed("hydra/launcher=slurm", "hydra.launcher.array_parallelism=3"), five)
    assert slurm.slots == 3 and "hydra.launcher.array_parallelism" in slurm.how and "SLURM's queue" in slurm.how
    assert launch_at_once(composed("hydra/launcher=ablate_submitit_local"), five).slots == 5
    basic = launch_at_once(composed("hydra/launcher=basic"), five)
    assert basic == AtOnce(1, "one job at a time (Hydra's basic launcher)")
    # settings the launcher refuses when Hydra builds it, before the plan, are refused here in its words
    with pytest.raises(ConfigError, match=r"^hydra\.launcher\.workers=0 is invalid"):
        launch_at_once(composed("hydra/launcher=parallel", "hydra.launcher.workers=0"), five)
    unresolved = composed("hydra/launcher=basic")
    unresolved.hydra.launcher = {"_target_": "some.OtherLauncher", "queue": "${nosuch.key}"}
    assert launch_at_once(unresolved, five) == AtOnce(None, "the launcher's concurrency is not known")


def test_speeds_recorded_far_apart_are_named_with_the_time():
    """femto's 200-step runs on one shared 2-core machine: 4,311 and 1,353 tokens/s while other work
    held the cores, 123,627 once it had gone quiet (measured here). The median times it; the
    fastest and slowest say how far the machine's load moved it."""
    from ablate.perf.recorded_speed import Speed

    speeds = [Speed("femto", "fp32", "cpu", v, 4e5, "result.json", tokens=204_800) for v in (4311, 1353, 123_627)]
    job = planned("femto", 200, 4e5, tokens_per_step=1024)
    line = design_lines([job, planned("pico", 200, 1e6)], speeds, AtOnce(2, "2 jobs at a time"))[-1]
    # femto 48 s (2 s to 151 s); pico's 409,600 x 1e6 FLOPs at femto's FLOP rate: 238 s (8 s to 757 s);
    # two at a time, the user waits for pico
    assert line.startswith("time: about 4 min (8 s to 13 min at the fastest and slowest of the speeds recorded), 2")
    summed = design_lines([job, planned("pico", 200, 1e6)], speeds)[-1]
    assert summed.startswith("time: about 5 min of training summed over the 2 jobs to run (10 s to 15 min at the")
    steady = [Speed("femto", "fp32", "cpu", v, 4e5, "result.json", tokens=204_800) for v in (4311, 4000)]
    assert "fastest and slowest" not in design_lines([job, planned("pico", 200, 1e6)], steady)[-1]
