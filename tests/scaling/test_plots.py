"""ablate.scaling.reports.plots: what a person should read off each picture at a glance is drawn (the floor as a
line, the target as a marked point with its interval or as not_determined, the held-out runs, the
bands), the frontier's band is clipped with the clipping said, and no labels overlap."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ablate.scaling.analysis import fit_all  # noqa: E402
from ablate.scaling.points import Points  # noqa: E402
from ablate.scaling.predict import FitOptions  # noqa: E402
from ablate.scaling.reports import plots  # noqa: E402

FLOOR = 1.6


@pytest.fixture(scope="module")
def report(iso_flop, coarse_grid):
    return fit_all(
        iso_flop.with_floor(FLOOR),
        targets=[{"C": 1e22}, {"N": 1e15, "D": 1e9}],
        options=FitOptions(n_boot=20, grid=coarse_grid),
        held_out_k=3,
        single=("N", "D"),
    )


def labels(ax) -> list[str]:
    return ax.get_legend_handles_labels()[1]


def test_fit_curves_show_floor_target_held_out_runs_and_bands(report):
    fig = plots._plot_curves(report, plt)
    ax = fig.axes[0]
    shown = labels(ax)
    assert f"entropy floor {FLOOR:.4g}" in shown
    assert any(line.get_ydata()[0] == FLOOR and line.get_linestyle() == "--" for line in ax.get_lines())
    usable, nd = report.predictions
    assert usable.loss is not None and nd.loss is None
    target = next(s for s in shown if s.startswith("target: "))
    assert f"{usable.loss.value:.4g}" in target and usable.verdict.level in target
    assert any(s == f"target C={nd.C:.4g}: not_determined" for s in shown)
    assert "held-out runs" in shown and "approach 3 at N_opt(C), 95% band" in shown
    assert len(ax.collections) >= 5  # points, three size bands, the frontier band, held-out runs
    assert ax.get_xlim()[1] >= nd.C  # the axis reaches the farthest target
    for other in fig.axes[1:3]:  # the single-variable panels carry the floor too
        assert f"entropy floor {FLOOR:.4g}" in labels(other)
    plt.close(fig)


def test_the_frontier_band_is_clipped_and_the_caption_says_so(report):
    fig = plots._plot_frontier(report, plt)
    caption = fig.texts[0].get_text()
    f = report.frontier
    wide = (f.N_hi > f.N_opt * plots.BAND_CLIP) | (f.N_lo < f.N_opt / plots.BAND_CLIP)
    if wide.any():
        assert "clipped there" in caption
    else:
        assert "No band needed clipping" in caption
    if any(level == "not_determined" for level in f.levels):
        assert "not_determined" in labels(fig.axes[0])
    plt.close(fig)


def test_the_saved_figures_keep_their_captions_and_labels_inside_the_canvas(report):
    """The figures are saved at their own size (no bbox_inches="tight" second layout pass), so the
    layout itself must keep the caption and every axis label on the canvas."""
    for draw in (plots._plot_curves, plots._plot_frontier, plots._plot_residuals):
        fig = draw(report, plt)
        fig.canvas.draw()
        canvas = fig.bbox
        renderer = fig.canvas.get_renderer()
        texts = list(fig.texts) + [a.xaxis.label for a in fig.axes] + [a.yaxis.label for a in fig.axes]
        for text in texts:
            if text.get_text():
                box = text.get_window_extent(renderer)
                assert box.x0 >= canvas.x0 - 1 and box.x1 <= canvas.x1 + 1, text.get_text()
                assert box.y0 >= canvas.y0 - 1 and box.y1 <= canvas.y1 + 1, text.get_text()
        plt.close(fig)


def test_a_band_twenty_decades_wide_is_drawn_within_two_either_side(report):
    """A frontier whose N_opt band spans 20 orders of magnitude (the issue saw one) is drawn within
    BAND_CLIP either side, and the caption counts the values of C it clipped."""
    from dataclasses import replace

    f = report.frontier
    wild = replace(report, frontier=replace(f, N_lo=f.N_opt * 1e-10, N_hi=f.N_opt * 1e10))
    fig = plots._plot_frontier(wild, plt)
    band = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    assert band.max() <= f.N_opt.max() * plots.BAND_CLIP * 1.0001
    assert band.min() >= f.N_opt.min() / plots.BAND_CLIP * 0.9999
    assert f"({len(f.C)} of {len(f.C)} values of C)" in fig.texts[0].get_text()
    plt.close(fig)


def test_residual_axes_labels_do_not_overlap(report):
    fig = plots._plot_residuals(report, plt)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    plt.close(fig)


def test_a_fit_without_approach_3_says_so_in_every_picture(coarse_grid):
    one = Points(np.full(8, 1e7), np.geomspace(1e8, 1e10, 8), 2 + 300 / np.geomspace(1e8, 1e10, 8) ** 0.3)
    report = fit_all(one, options=FitOptions(n_boot=0, grid=coarse_grid), single=("D",))
    rendered = plots.render_plots(report)
    assert set(rendered) == {"fit_curves.png", "frontier.png", "residuals.png"}
    fig = plots._plot_curves(report, plt)
    assert any("not fitted" in t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)
