"""What a precision sweep's summary shows: loss against FLOPs with each policy's ratio to fp32,
speed and memory side by side, what a GPU would change; and a plain --multirun's name."""

import json
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from ablate.sweep import plots, summary
from ablate.sweep.callback import sweep_name
from ablate.sweep.rows import SummaryRow, compared


def rows_and_curves():
    rows, curves = [], {}
    for job, (precision, speed, memory, bump) in enumerate(
        [("fp32", 900.0, 4e6, 0.0), ("bf16", 300.0, 4e6, 0.002), ("bf16_pure", 280.0, 3e6, 0.01)]
    ):
        flops = (1e9, 2e9, 3e9)
        curves[str(job)] = (flops, tuple(3.0 - 0.3 * i + bump for i in range(3)))
        result = {
            "precision": precision,
            "status": "finished",
            "params": 59_904,
            "tokens": 30_000,
            "final_val_loss": curves[str(job)][1][-1],
            "tokens_per_s": speed,
            "memory_bytes": memory,
            "device": "cpu",
        }
        rows.append(SummaryRow(f"precision={precision}", str(job), {"precision": precision}, result))
    return compared(rows), curves


def test_runs_of_one_model_get_a_ratio_to_fp32_panel(tmp_path):
    rows, curves = rows_and_curves()
    assert plots._ratio_baseline(rows, curves).precision == "fp32"
    assert plots.plot_loss_vs_flops(rows, curves, tmp_path / "l.png").stat().st_size > 0
    rows[1] = replace(
        rows[1], result={**rows[1].result, "params": 1}
    )  # runs of different sizes: a ratio compares nothing
    assert plots._ratio_baseline(rows, curves) is None


def test_speed_and_memory_side_by_side_and_in_the_table(tmp_path):
    rows, _ = rows_and_curves()
    assert plots.plot_speed_memory(rows, tmp_path / "s.png").stat().st_size > 0
    table = summary.format_table(rows, "precision")
    assert "| memory |" in table and "| 3 MB |" in table


def test_the_summary_says_what_a_gpu_would_change():
    rows, _ = rows_and_curves()
    note = summary.gpu_note(rows)
    # conf/hardware/h100.yaml: bf16 989 TFLOP/s against TF32's 494.5: at most 2x for a compute-bound step
    assert "bf16 2x" in note and "bf16_pure 2x" in note
    assert "494 TFLOP/s for fp32 matmuls (as TF32)" in note
    assert note in summary.format_table(rows, "precision")


@pytest.mark.parametrize(
    ("choices", "params", "task", "name"),
    [
        ({"sweep": "precision"}, None, ["precision=a,b"], "precision"),
        ({}, None, ["model=nano,micro", "train.seed=0,1", "train.steps=20"], "model x train.seed"),
        ({}, {"optim.lr": "1e-3,3e-3"}, ["+x=range(1,3)"], "optim.lr x x"),
        ({}, None, ["train.steps=20"], "sweep"),
    ],
)
def test_a_sweep_is_named_by_its_preset_else_its_axes(choices, params, task, name):
    cfg = OmegaConf.create(
        {"hydra": {"runtime": {"choices": choices}, "sweeper": {"params": params}, "overrides": {"task": task}}}
    )
    assert sweep_name(cfg) == name


def test_a_recorded_mfu_above_100_percent_is_never_shown(tmp_path):
    """Runs of an older ablate recorded MFUs of 127% (a CPU peak measured on a busy machine): the
    summary's table, its JSON and its points show none above 100%, and say which runs it left out."""
    recorded = {"model=nano": 0.2, "model=micro train.seed=1": 1.2763, "model=micro train.seed=2": 1.2675}
    for job, (label, mfu) in enumerate(recorded.items()):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(json.dumps(label.split()))
        result = {"status": "finished", "reason": "", "model": label.split()[0][6:], "precision": "fp32"}
        result |= {"params": 1000 * (job + 1), "tokens": 8192, "flops": 1e9, "final_val_loss": 3.0 - job / 10}
        (tmp_path / str(job) / "result.json").write_text(json.dumps({**result, "tokens_per_s": 900.0, "mfu": mfu}))
    done = summary.summarize(tmp_path, {"name": "model x train.seed", "tracking_uri": None})
    assert [r.mfu for r in done.rows] == [0.2, None, None]
    assert [r["mfu"] for r in json.loads((tmp_path / "summary.json").read_text())["runs"]] == [0.2, None, None]
    assert "20.00%" in done.table and "127" not in done.table and "126" not in done.table
    assert "MFU not shown for model=micro train.seed=1, model=micro train.seed=2" in done.table


def test_without_the_store_a_skipped_run_keeps_the_figures_its_summary_recorded(tmp_path):
    """A fresh clone has no MLflow store: re-summarizing a relaunched sweep (every run skipped as
    finished) must not empty the rows that summary.json recorded while the store was there."""
    import json as _json

    import yaml as _yaml

    from ablate.sweep.summary import summarize

    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(_yaml.safe_dump(["model=nano"]))
    skipped = {"status": "skipped", "reason": "finished", "kind": "run", "mlflow_run_id": "r1", "params": 59904}
    (job / "result.json").write_text(_json.dumps(skipped))
    recorded = {**skipped, "label": "0", "job": "0", "final_val_loss": 2.5, "final_val_bpb": 3.6, "tokens": 4096}
    (tmp_path / "summary.json").write_text(_json.dumps({"sweep_id": "s", "runs": [recorded]}))
    (row,) = summarize(tmp_path, {"name": "sweep", "sweep_id": "s"}).rows
    assert row.final_val_loss == 2.5 and row.final_val_bpb == 3.6 and row.status == "skipped"
    assert (tmp_path / "points.csv").read_text().splitlines()[1].startswith("59904,4096,2.5,")


def seeded_rows(arms: list[str], sizes: dict[str, int], key: str = "precision"):
    """Runs of each arm, size and seed (0, 1), each with a loss curve."""
    rows, curves = [], {}
    for model, params in sizes.items():
        for arm in arms:
            for seed in ("0", "1"):
                job = str(len(rows))
                curves[job] = ((1e9, 2e9), (3.0, 2.5 + 0.01 * len(rows)))
                overrides = {key: arm, "train.seed": seed}
                if len(sizes) > 1:
                    overrides = {"model": model, **overrides}
                result = {"precision": arm if key == "precision" else "fp32", "status": "finished"}
                result.update(params=params, tokens=2_000, final_val_loss=curves[job][1][-1], model=model)
                label = " ".join(f"{k}={v}" for k, v in overrides.items())
                rows.append(SummaryRow(label, job, overrides, result))
    return compared(rows), curves


def drawn(monkeypatch, plot, *args):
    """The figure a plot function draws: {axes title or index: (legend texts, line colours, line styles)}."""
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, plt, path: figures.append(fig) or path)
    plot(*args)
    (fig,) = figures
    return fig


def test_each_arm_has_its_own_colour_and_one_legend_entry(monkeypatch, tmp_path):
    """Twelve arms on one model: twelve colours, none repeated, one legend entry each (its seeds
    share it), the legend outside the axes; the ratio panel says it divides by the same seed's run."""
    import matplotlib.colors as mcolors

    arms = ["fp32", *[f"arm{i}" for i in range(11)]]
    rows, curves = seeded_rows(arms, {"nano": 59_904})
    fig = drawn(monkeypatch, plots.plot_loss_vs_flops, rows, curves, tmp_path / "l.png")
    top, low = fig.axes[0], fig.axes[-1]
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert [t for t in legend if not t.startswith("entropy")] == [f"precision={a}" for a in arms]
    colours = {line.get_label(): mcolors.to_hex(line.get_color()) for line in top.get_lines()}
    assert len({colours[f"precision={a}"] for a in arms}) == len(arms)
    bbox = top.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert bbox.x0 >= top.get_window_extent(fig.canvas.get_renderer()).x1  # beside the data, not over it
    assert "precision=fp32's" in low.get_ylabel() and "same seed" in low.get_ylabel()


def test_arms_of_a_sweep_over_sizes_are_told_apart(monkeypatch, tmp_path):
    """baseline and muon at the same size (one parameter count): a legend entry for each size and
    arm, colour by size, a dash pattern by arm."""
    rows, curves = seeded_rows(["baseline", "muon"], {"pico": 9_000, "nano": 59_904}, key="+ablation")
    fig = drawn(monkeypatch, plots.plot_loss_vs_flops, rows, curves, tmp_path / "l.png")
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts() if not t.get_text().startswith("entropy")]
    assert legend == [
        "pico (9K params), +ablation=baseline",
        "pico (9K params), +ablation=muon",
        "nano (59.9K params), +ablation=baseline",
        "nano (59.9K params), +ablation=muon",
    ]
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines() if line.get_label() in legend}
    assert styles[legend[0]] != styles[legend[1]] and styles[legend[0]] == styles[legend[2]]


def test_speeds_the_summary_cannot_compare_are_drawn_as_such(monkeypatch, tmp_path):
    rows, _ = rows_and_curves()  # no core share recorded: no speed is comparable
    fig = drawn(monkeypatch, plots.plot_speed_memory, rows, tmp_path / "s.png")
    assert "not comparable" in fig.axes[0].get_xlabel() and "shared their cores" in fig.axes[0].get_title()
