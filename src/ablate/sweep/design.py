"""Before a sweep over model sizes trains anything: can a law fitted to its runs be determined?

The sweep's planner knows every run it will make (sweep/plan.py: each job's parameters and training
tokens, a WSD trunk's job one run per cooldown branch). Those sizes N and token counts D go through
the design checks `ablate fit` applies to the finished runs (scaling.design_reasons: how many
distinct N and D, how many decades each spans, scaling/checks.py), so the verdict said before the
sweep is the one the fit would reach on the design alone; the runs' noise can only make it worse.
Where the design falls short, the token counts (or sizes) to add are named, each checked against the
tokens of the training split: a run that reads its data more than once is no fresh-data point
(Muennighoff et al. 2023, "Scaling Data-Constrained Language Models"); the sweep's own runs that
read past it are warned of. A sweep over sizes or token counts is also timed before it starts, from
the speeds earlier runs of its models measured on this machine (perf/recorded_speed.py), not from
its job count, and over the jobs its launcher runs at once (`launch_at_once`: the process
launcher's slots, SLURM's array parallelism, one at a time for a sequential launcher): the time the
user waits, not the sum of the jobs' times.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ablate.host import available_cores
from ablate.perf import nearest_in_length, recorded_speeds, this_gpu

DOUBLINGS = 8  # how far the suggested token counts reach from the sweep's, in doublings


@dataclass(frozen=True)
class AtOnce:
    """How many of a sweep's jobs its launcher runs at once (None: not known), and that in words."""

    slots: int | None
    how: str


UNKNOWN = AtOnce(None, "the launcher's concurrency is not known")


def design_lines(jobs: list, speeds: list | None = None, at_once: AtOnce = UNKNOWN) -> list[str]:
    """Lines to print before the sweep starts: for a sweep over model sizes, its design against the
    fit's checks; for one over sizes or token counts (a law's data), the runs that would read past
    the training split and the time it will take (`time_line`: `speeds`, else those earlier runs
    recorded on this machine, spread over `at_once`). None for a sweep of one size and one token
    count (no law)."""
    points = [p for j in jobs if j.action != "unsupported" for p in j.points]
    if len({p[0] for p in points}) < 2 and len({p[1] for p in points}) < 2:
        return []
    lines = _ladder_lines(points) + _repeat_lines(points)
    timed = time_line(jobs, recorded(jobs) if speeds is None else speeds, at_once)
    return lines + ([timed] if timed else [])


def launch_at_once(config, jobs: list) -> AtOnce:
    """How many of `jobs` the sweep's launcher (the composed hydra.launcher of `config`) runs at
    once: the process launchers' workers as they will start them (sweep/launch/process.resources:
    hydra.launcher.workers, GPU slots, cores, never more than the jobs to run), submitit's local
    executor all at once, a SLURM array hydra.launcher.array_parallelism at most (its queue may
    start fewer), Hydra's basic launcher one at a time; UNKNOWN for any other launcher."""
    from omegaconf.errors import OmegaConfBaseException

    from ablate.config import parse_process_settings, parse_submitit_settings
    from ablate.hydra_app import hydra_node

    n = max(1, sum(1 for j in jobs if j.action in ("run", "resume")))
    try:  # another launcher's settings may name what only its own plugin resolves
        launcher = hydra_node(config, "launcher") or {}
    except OmegaConfBaseException:
        return UNKNOWN
    target = str(launcher.get("_target_", ""))
    # The launcher parsed these settings when Hydra built it, before the plan: they parse here too.
    if target.endswith(".ProcessLauncher"):
        from ablate.sweep.launch.process import launcher_gpus, resources

        settings = parse_process_settings(launcher)
        res = resources(settings, n, available_cores(), launcher_gpus(settings, config))
        gpus = f", {res.gpus.per_job} GPU{'s' * (res.gpus.per_job > 1)} each" if res.gpus else ""
        return AtOnce(
            res.workers, f"{_jobs(res.workers)} at a time, {res.threads} thread{'s' * (res.threads > 1)} each{gpus}"
        )
    if target.endswith(".SubmititLauncher"):
        settings = parse_submitit_settings(launcher)
        if settings.cluster == "local":
            return AtOnce(n, f"{_jobs(n)} at once (submitit's local executor)")
        slots = min(settings.array_parallelism, n)
        return AtOnce(
            slots,
            f"{_jobs(slots)} at a time at most (hydra.launcher.array_parallelism), not counting SLURM's "
            "queue, at this machine's speeds, not its nodes'",
        )
    if target.endswith(".BasicLauncher"):
        return AtOnce(1, "one job at a time (Hydra's basic launcher)")
    return UNKNOWN


def _jobs(n: int) -> str:
    return "one job" if n == 1 else f"{n} jobs"


def _ladder_lines(points: list) -> list[str]:
    import numpy as np

    from ablate.scaling import Thresholds, Verdict, design_reasons

    N = np.array([p[0] for p in points], float)
    D = np.array([p[1] for p in points], float)
    if len(set(N)) < 2:
        return []
    th = Thresholds()
    head = (
        f"ladder design: {len(set(N))} sizes over {_decades(N):.2f} decades of N, "
        f"{len(set(D))} token counts over {_decades(D):.2f} decades of D, {len(points)} runs"
    )
    reasons = design_reasons(N, D, th)
    if not reasons:
        return [f"{head}: the design can determine a law (the design checks of `ablate fit` pass)"]
    level = Verdict.of(reasons).level
    lines = [
        f"{head}: a law fitted to these runs would be {level} at best: "
        + "; ".join(r.text for r in reasons)
        + " (the design checks of `ablate fit`, scaling/checks.py)"
    ]
    split = min(p[2] for p in points)
    if any(r.code in ("few_sizes", "narrow_span") and "token counts" in r.text for r in reasons):
        lines.append(_token_line(sorted(set(D)), split, th))
    if any(r.code in ("few_sizes", "narrow_span") and "sizes N" in r.text for r in reasons):
        more = max(0, th.sizes_wide - len(set(N)))
        short = max(0.0, th.decades_wide - _decades(N))
        lines.append(
            f"  add sizes: {more} more model size(s)" * (more > 0)
            + (" and " if more and short else "  add sizes: " if short else "")
            + (f"{short:.2f} more decades of N" if short else "")
            + " (model=... with more or fewer layers or a wider or narrower model.n_embd)"
        )
    return lines


def _repeat_lines(points: list) -> list[str]:
    """A warning for the sweep's own runs that read more tokens than their training split holds:
    each repeats data, which the law's D (fresh tokens) does not describe."""
    over = sorted({(d, split) for _, d, split in points if split and d > split})
    if not over:
        return []
    runs = sum(1 for _, d, split in points if split and d > split)
    counts = ", ".join(f"{d:.3g} ({d / split:.1f}x)" for d, split in over)
    return [
        f"  warning: {runs} run(s) read more tokens than the training split holds ({over[0][1]:,}): {counts}; "
        "each repeats data, which a law's D does not describe (valid: train.tokens within the split, or more data)"
    ]


def recorded(jobs: list) -> list:
    """The speeds earlier runs recorded on this machine (perf/recorded_speed.py), looked up for the
    jobs to run: result.json files in the sweep's folder and its siblings, and the jobs' sqlite
    MLflow stores."""
    from ablate.provenance import cpu

    todo = [j for j in jobs if j.action in ("run", "resume") and getattr(j, "cfg", None) is not None]
    if not todo:
        return []
    sweeps = {Path(j.job_dir).parent for j in todo}
    folders = [f for f in {*sweeps, *(s.parent for s in sweeps)} if f.is_dir()]
    # the sweep's own folder first: the walk of its parent is bounded and may stop before it
    folders = sorted(folders, key=lambda f: f not in sweeps)
    stores = [j.cfg.tracking.uri for j in todo if j.cfg.tracking.backend == "mlflow"]
    gpu = this_gpu() if any(j.cfg.hardware.device in ("auto", "cuda") for j in todo) else None
    return recorded_speeds(folders, stores, cpu()["cpu"], gpu)


def time_line(jobs: list, speeds: list, at_once: AtOnce = UNKNOWN) -> str | None:
    """The sweep's training time from measured speeds, not the job count: each job's tokens at the
    median speed the runs of its model and precision recorded on this machine (those nearest it in
    length: perf/recorded_speed.nearest_in_length), else its FLOPs at the FLOP rate of the recorded
    model nearest in FLOPs per token; the jobs spread over the `at_once` slots longest first, as
    the process launcher hands them out (`_wall`). The line says how many at a time, which speeds
    and where they came from. None when no job is to run."""
    todo = [j for j in jobs if j.action in ("run", "resume") and getattr(j, "cfg", None) is not None]
    if not todo:
        return None
    times: list[tuple[float, float, float]] = []  # each job's at the median, fastest and slowest speed
    exact, scaled, unknown, sources = 0, 0, 0, set()
    for j in todo:
        device = j.cfg.hardware.device
        usable = [s for s in speeds if device not in ("cpu", "cuda", "mps") or s.device == device]
        same = [s for s in usable if (s.model, s.precision) == (j.cfg.model.name, j.cfg.precision.name)]
        tokens = j.total_steps * j.cfg.train.sequences_per_step * j.cfg.model.block_size
        if same:
            times.append(_at(tokens, [s.tokens_per_s for s in nearest_in_length(same, tokens)]))
            exact += 1
            sources |= {s.source for s in same}
            continue
        near = [s for s in usable if s.precision == j.cfg.precision.name]
        if not near or not j.cost_flops:
            unknown += 1
            continue
        per_token = j.cost_flops / max(tokens, 1)
        closest = min(abs(math.log(s.flops_per_token / per_token)) for s in near)
        model = [s for s in near if abs(math.log(s.flops_per_token / per_token)) == closest]
        times.append(_at(j.cost_flops, [s.tokens_per_s * s.flops_per_token for s in nearest_in_length(model, tokens)]))
        scaled += 1
        sources |= {s.source for s in model}
    if exact + scaled == 0:
        return (
            f"time: not estimated: no run of these models and precisions recorded its speed on this machine "
            f"(result.json files in and beside the sweep's folder, sqlite MLflow stores); the live line's ETA "
            f"measures it once the first of the {len(todo)} jobs report"
        )
    how = [f"{exact} of {len(todo)} jobs at the median speed recorded by runs of their model and precision"] * (
        exact > 0
    )
    how += [f"{scaled} at the FLOP rate of the recorded model nearest in FLOPs per token"] * (scaled > 0)
    how += [f"{unknown} with no recorded speed, not counted"] * (unknown > 0)
    measured = f"from speeds measured on this machine ({'; '.join(how)}; from {' and '.join(sorted(sources))})"
    summed = f"{_duration(sum(t[0] for t in times))} of training summed over the {len(todo)} jobs to run"
    if at_once.slots is None:
        return f"time: about {summed}{_spread(times, 1)} ({at_once.how}), {measured}"
    wall = _duration(_wall([t[0] for t in times], at_once.slots))
    return f"time: about {wall}{_spread(times, at_once.slots)}, {at_once.how}: {summed}, {measured}"


SPREAD = 1.5  # recorded speeds this far apart (slowest to fastest) are named with the time


def _at(work: float, rates: list[float]) -> tuple[float, float, float]:
    """The time `work` (tokens, or FLOPs) takes at the median, the fastest and the slowest rate."""
    return work / statistics.median(rates), work / max(rates), work / min(rates)


def _spread(times: list[tuple[float, float, float]], slots: int) -> str:
    """The wall time at the fastest and at the slowest recorded speeds, where they differ by more than
    SPREAD: the same model on the same machine measured at other times (another load on its cores)."""
    fast, slow = (_wall([t[k] for t in times], slots) for k in (1, 2))
    if slow <= SPREAD * fast:
        return ""
    return f" ({_duration(fast)} to {_duration(slow)} at the fastest and slowest of the speeds recorded)"


def _wall(times: list[float], slots: int) -> float:
    """The time until the last job ends when `slots` run at once and each job, longest first, takes
    the slot that frees first (the process launcher's order, sweep/launch/process.py: LPT, within
    4/3 of the best order, Graham 1969)."""
    ends = [0.0] * max(1, min(slots, len(times)))
    for t in sorted(times, reverse=True):
        ends[ends.index(min(ends))] += t
    return max(ends)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _token_line(counts: list[float], split: int, th) -> str:
    """The token counts to add, doubling past the largest while the training split holds them, else
    halving below the smallest, until the counts and their span pass the design checks."""
    found = list(counts)
    up = [counts[-1] * 2**k for k in range(1, DOUBLINGS + 1)]
    down = [counts[0] / 2**k for k in range(1, DOUBLINGS + 1)]
    added = []
    for d in [*(u for u in up if u <= split), *down]:
        if len(found) >= th.sizes_wide and _decades(found) >= th.decades_wide:
            break
        found.append(d)
        added.append(d)
    over = [u for u in up[:2] if u > split]
    corpus = f"; the training split holds {split:,} tokens, so larger counts would repeat data" if over else ""
    grid = ",".join(str(int(d)) for d in sorted(found))
    return f"  add token counts: {', '.join(f'{d:.3g}' for d in sorted(added))} (train.tokens=[{grid}]){corpus}"


def _decades(x) -> float:
    values = [float(v) for v in x]
    return math.log10(max(values) / min(values)) if values and min(values) > 0 else 0.0
