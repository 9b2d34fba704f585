"""Before a sweep over model sizes trains anything: can a law fitted to its runs be determined?

The sweep's planner knows every run it will make (sweep/plan.py: each job's parameters and training
tokens, a WSD trunk's job one run per cooldown branch). Those sizes N and token counts D go through
the design checks `ablate fit` applies to the finished runs (scaling.design_reasons: how many
distinct N and D, how many decades each spans, scaling/checks.py), so the verdict said before the
sweep is the one the fit would reach on the design alone; the runs' noise can only make it worse.
Where the design falls short, the token counts (or sizes) to add are named, each checked against the
tokens of the training split: a run that reads its data more than once is no fresh-data point
(Muennighoff et al. 2023, "Scaling Data-Constrained Language Models").
"""

from __future__ import annotations

import math

DOUBLINGS = 8  # how far the suggested token counts reach from the sweep's, in doublings


def design_lines(jobs: list) -> list[str]:
    """Lines to print before the sweep starts; none for a sweep over one model size (no law)."""
    import numpy as np

    from ablate.scaling import Thresholds, Verdict, design_reasons

    points = [p for j in jobs if j.action != "unsupported" for p in j.points]
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
