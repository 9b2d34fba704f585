"""A sweep over sizes says before it trains whether a law fitted to its runs can be determined, with
the fit's own design checks (scaling.design_reasons), and which runs to add."""

from types import SimpleNamespace

from ablate.scaling import design_reasons
from ablate.sweep.design import design_lines

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
