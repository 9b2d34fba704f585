"""What a study leaves behind, rewritten after every trial (the plots after every launch): the
trials as data, how busy each launch kept its slots, the Pareto front of a study that minimises
costs too, the best parameters as a config a later run can use, and plots.

STUDIES_DIR/NAME/   trials.json, study.md, best.args, history.png, importance.png, intermediate.png,
    pareto.png (with costs)
STUDIES_DIR/best/NAME.yaml   the best parameters as a config group option, used as
    python -m ablate 'hydra.searchpath=[file://STUDIES_DIR]' +best=NAME [more overrides]
or, with the same effect, python -m ablate $(cat STUDIES_DIR/NAME/best.args).
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from pathlib import Path

from ablate.config import SearchConfig
from ablate.files import figure_bytes, inside, write_files
from ablate.search.space import trial_overrides
from ablate.search.storage import (
    DRIVER_ATTR,
    ENDED_ATTR,
    REASON_ATTR,
    RETRY_ATTR,
    REUSED_ATTR,
    RUN_ATTR,
    SCHEDULE_ATTR,
    SLOTS_ATTR,
    STEPS_ATTR,
)


def export(study, cfg: SearchConfig, with_plots: bool = True) -> list[Path]:
    """Write every file of the study as one set (files.write_files); returns their paths."""
    study_dir = inside(cfg.studies_dir, cfg.study_name)
    trials = study.get_trials(deepcopy=False)
    rows = [trial_row(t, cfg.objectives) for t in trials]
    summary = summarize(rows)
    summary["launches"] = launches(rows)
    if cfg.costs:
        summary["pareto_front"] = sorted(t.number for t in study.best_trials)
    doc = {"study": cfg.study_name, "storage": cfg.storage, "summary": summary, "trials": rows}
    files = {study_dir / "trials.json": (json.dumps(doc, indent=2, default=str) + "\n").encode()}
    best = summary["best"]
    if best is not None:
        files[study_dir / "best.args"] = (" ".join(trial_overrides(best["params"])) + "\n").encode()
        files[inside(cfg.studies_dir, "best", f"{cfg.study_name}.yaml")] = best_yaml(cfg, best).encode()
    files[study_dir / "study.md"] = format_study(cfg, summary, rows).encode()
    if with_plots:
        files |= {study_dir / name: data for name, data in plots(study, cfg.objectives).items()}
    return write_files(files)


def trial_row(t, objectives: list[str]) -> dict:
    duration = (
        (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else None
    )
    values = [v if math.isfinite(v) else None for v in t.values or []]
    ended = t.user_attrs.get(ENDED_ATTR) or (t.datetime_complete.timestamp() if t.datetime_complete else None)
    return {
        "number": t.number,
        "state": t.state.name,
        "value": values[0] if values else None,
        "objectives": dict(zip(objectives, values, strict=False)) if values else None,
        "feasible": all(v <= 0 for v in t.constraints.values()),
        "constraints": dict(t.constraints),
        "params": dict(t.params),
        "steps": t.user_attrs.get(STEPS_ATTR, t.last_step),
        "last_reported_step": t.last_step,
        "mlflow_run_id": t.user_attrs.get(RUN_ATTR),
        "reason": t.user_attrs.get(REASON_ATTR, ""),
        "retried": bool(t.user_attrs.get(RETRY_ATTR)),
        "reused_finished_run": bool(t.user_attrs.get(REUSED_ATTR)),
        "wall_s": duration,
        "driver": t.user_attrs.get(DRIVER_ATTR),
        "slots": t.user_attrs.get(SLOTS_ATTR),
        "schedule": t.user_attrs.get(SCHEDULE_ATTR),
        "started_at": t.datetime_start.timestamp() if t.datetime_start else None,
        "ended_at": ended,
    }


def summarize(rows: list[dict]) -> dict:
    """Counts by state, the best feasible COMPLETE trial (lowest validation loss), and the training
    steps spent against what the same trials would have cost without pruning (each run to the
    longest complete trial's steps). Trials that reused an already finished run of the same config
    trained nothing and count in neither."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    complete = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None and r["feasible"]]
    best = min(complete, key=lambda r: r["value"]) if complete else None
    full = max((r["steps"] or 0 for r in complete), default=0)
    ran = [r for r in rows if r["state"] in ("COMPLETE", "PRUNED") and not r["reused_finished_run"]]
    spent = sum(r["steps"] or 0 for r in ran)
    return {
        "counts": counts,
        "best": {k: best[k] for k in ("number", "value", "params", "steps", "mlflow_run_id")} if best else None,
        "steps_spent": spent,
        "steps_without_pruning": full * len(ran),
        "steps_fraction": spent / (full * len(ran)) if full and ran else None,
    }


def launches(rows: list[dict]) -> list[dict]:
    """Each launch (driver) of the study: its schedule, slots, trials, span, and busy share, the
    slot-seconds its trials ran (from being asked to their run's end) over slots x span."""
    by_driver: dict[str, list[dict]] = {}
    for r in rows:
        if r["driver"] and r["slots"] and r["started_at"] is not None and r["ended_at"] is not None:
            by_driver.setdefault(r["driver"], []).append(r)
    found = []
    for driver, trials in by_driver.items():
        start, end = min(r["started_at"] for r in trials), max(r["ended_at"] for r in trials)
        busy = sum(r["ended_at"] - r["started_at"] for r in trials)
        slots = trials[0]["slots"]
        found.append(
            {
                "driver": driver,
                "schedule": trials[0]["schedule"],
                "slots": slots,
                "trials": len(trials),
                "span_s": end - start,
                "busy_s": busy,
                "busy_share": busy / (slots * (end - start)) if end > start else None,
                "started_at": start,
            }
        )
    return sorted(found, key=lambda launch: launch["started_at"])


def best_yaml(cfg: SearchConfig, best: dict) -> str:
    """A `# @package _global_` config: nested keys, the values of the best trial."""
    import yaml

    tree: dict = {}
    for key, value in best["params"].items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    header = (
        f"# @package _global_\n"
        f"# Best trial of Optuna study '{cfg.study_name}': trial {best['number']}, val loss {best['value']:.4f}.\n"
        f"# Use: python -m ablate 'hydra.searchpath=[file://{cfg.studies_dir}]' +best={cfg.study_name}\n"
    )
    return header + yaml.safe_dump(tree, sort_keys=True)


def format_study(cfg: SearchConfig, summary: dict, rows: list[dict]) -> str:
    best = summary["best"]
    lines = [
        f"## Optuna study `{cfg.study_name}`",
        "",
        f"storage: `{cfg.storage}`; sampler {cfg.sampler}, pruner {cfg.pruner}",
        "",
        "trials: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(summary["counts"].items())),
    ]
    if best:
        lines.append(
            f"best: trial {best['number']}, val loss {best['value']:.4f}, " + " ".join(trial_overrides(best["params"]))
        )
    if summary["steps_fraction"] is not None:
        lines.append(
            f"training steps: {summary['steps_spent']:,} of {summary['steps_without_pruning']:,} "
            f"without pruning ({summary['steps_fraction']:.0%})"
        )
    lines += [format_launch(i, launch) for i, launch in enumerate(summary["launches"], 1)]
    keys = sorted({k for r in rows for k in r["params"]})
    front = set(summary.get("pareto_front", []))
    if front:
        lines += ["", f"Pareto front ({', '.join(cfg.objectives)}, each minimised): trials {sorted(front)}"]
    costs = cfg.objectives[1:]
    lines += [
        "",
        "| trial | state | val loss | " + "".join(f"{c} | " for c in costs) + "steps | " + " | ".join(keys) + " |",
        "|---|---|---|" + "---|" * len(costs) + "---|" + "---|" * len(keys),
    ]
    for r in rows:
        value = "-" if r["value"] is None else f"{r['value']:.4f}"
        state = (
            r["state"].lower()
            + (" (Pareto)" if r["number"] in front else "")
            + ("" if r["feasible"] else ", infeasible")
        )
        measured = "".join(f"{_fmt((r['objectives'] or {}).get(c))} | " for c in costs)
        params = " | ".join(_fmt(r["params"].get(k)) for k in keys)
        lines.append(f"| {r['number']} | {state} | {value} | {measured}{r['steps'] or '-'} | {params} |")
    return "\n".join(lines) + "\n"


def format_launch(i: int, launch: dict) -> str:
    share = "-" if launch["busy_share"] is None else f"{launch['busy_share']:.0%}"
    return (
        f"launch {i} ({launch['schedule']}, {launch['slots']} slots, {launch['trials']} trials): "
        f"slots busy {share} of {launch['span_s']:.0f} s"
    )


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def plots(study, objectives: list[str]) -> dict[str, bytes]:
    """{file name: PNG} of the optimization history, intermediate values (the pruned curves) and
    parameter importance (Optuna 5's default PED-ANOVA evaluator, which needs no scikit-learn), of
    the validation loss; with costs, the Pareto front of every objective."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as ovm

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    files = {}
    # Several objectives: the history and importance are the validation loss's, named as Optuna's target.
    loss = {"target": _val_loss, "target_name": "val_loss"} if len(objectives) > 1 else {}
    drawings = [
        ("history.png", functools.partial(ovm.plot_optimization_history, **loss), 1),
        ("intermediate.png", ovm.plot_intermediate_values, 1),
        ("importance.png", functools.partial(ovm.plot_param_importances, **loss), 2),
    ]
    if len(objectives) > 1:
        drawings.append(("pareto.png", functools.partial(ovm.plot_pareto_front, target_names=objectives), 1))
    for name, draw, needed in drawings:
        if len(complete) < needed:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna.visualization.matplotlib is marked experimental
            try:
                ax = draw(study)
            except (ValueError, RuntimeError):  # e.g. importance with too few distinct values
                plt.close("all")
                continue
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        fig.set_size_inches(7.5, 4.5)
        if name == "history.png":
            ax.set_ylabel("final validation loss (nats/token)")
        if name == "intermediate.png":
            ax.set_xlabel("training step")
            ax.set_ylabel("validation loss (nats/token)")
            legend = ax.get_legend()
            if legend is not None:
                legend.remove()  # one entry per trial: the curves speak for themselves
        fig.tight_layout()
        files[name] = figure_bytes(fig, dpi=110)
        plt.close(fig)
    return files


def _val_loss(trial) -> float:
    return trial.values[0]
