"""What a study leaves behind, rewritten after every batch: the trials as data, the best parameters
as a config a later run can use, and plots.

STUDIES_DIR/NAME/   trials.json, study.md, best.args, history.png, importance.png, intermediate.png
STUDIES_DIR/best/NAME.yaml   the best parameters as a config group option, used as
    python -m ablate 'hydra.searchpath=[file://STUDIES_DIR]' +best=NAME [more overrides]
or, with the same effect, python -m ablate $(cat STUDIES_DIR/NAME/best.args).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from ablate.config import SearchConfig
from ablate.files import figure_bytes, inside, write_files
from ablate.search.space import trial_overrides
from ablate.search.storage import REASON_ATTR, RETRY_ATTR, REUSED_ATTR, RUN_ATTR, STEPS_ATTR


def export(study, cfg: SearchConfig) -> list[Path]:
    """Write every file of the study as one set (files.write_files); returns their paths."""
    study_dir = inside(cfg.studies_dir, cfg.study_name)
    trials = study.get_trials(deepcopy=False)
    rows = [trial_row(t) for t in trials]
    summary = summarize(rows)
    doc = {"study": cfg.study_name, "storage": cfg.storage, "summary": summary, "trials": rows}
    files = {study_dir / "trials.json": (json.dumps(doc, indent=2, default=str) + "\n").encode()}
    best = summary["best"]
    if best is not None:
        files[study_dir / "best.args"] = (" ".join(trial_overrides(best["params"])) + "\n").encode()
        files[inside(cfg.studies_dir, "best", f"{cfg.study_name}.yaml")] = best_yaml(cfg, best).encode()
    files[study_dir / "study.md"] = format_study(cfg, summary, rows).encode()
    files |= {study_dir / name: data for name, data in plots(study).items()}
    return write_files(files)


def trial_row(t) -> dict:
    duration = (
        (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else None
    )
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value if t.value is not None and math.isfinite(t.value) else None,
        "params": dict(t.params),
        "steps": t.user_attrs.get(STEPS_ATTR, t.last_step),
        "last_reported_step": t.last_step,
        "mlflow_run_id": t.user_attrs.get(RUN_ATTR),
        "reason": t.user_attrs.get(REASON_ATTR, ""),
        "retried": bool(t.user_attrs.get(RETRY_ATTR)),
        "reused_finished_run": bool(t.user_attrs.get(REUSED_ATTR)),
        "wall_s": duration,
    }


def summarize(rows: list[dict]) -> dict:
    """Counts by state, the best COMPLETE trial, and the training steps spent against what the
    same trials would have cost without pruning (each run to the longest complete trial's steps).
    Trials that reused an already finished run of the same config trained nothing and count in neither."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    complete = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
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
    keys = sorted({k for r in rows for k in r["params"]})
    lines += [
        "",
        "| trial | state | val loss | steps | " + " | ".join(keys) + " |",
        "|---|---|---|---|" + "---|" * len(keys),
    ]
    for r in rows:
        value = "-" if r["value"] is None else f"{r['value']:.4f}"
        params = " | ".join(_fmt(r["params"].get(k)) for k in keys)
        lines.append(f"| {r['number']} | {r['state'].lower()} | {value} | {r['steps'] or '-'} | {params} |")
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def plots(study) -> dict[str, bytes]:
    """{file name: PNG} of the optimization history, intermediate values (the pruned curves) and
    parameter importance (Optuna 5's default PED-ANOVA evaluator, which needs no scikit-learn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as ovm

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    files = {}
    drawings = [
        ("history.png", ovm.plot_optimization_history, 1),
        ("intermediate.png", ovm.plot_intermediate_values, 1),
        ("importance.png", ovm.plot_param_importances, 2),
    ]
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
        fig = ax.figure
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
