"""`python -m ablate fit`: scaling laws fitted to an experiment's runs (a Hydra app over ablate/conf/fit.yaml).

    python -m ablate fit experiment=NAME [tracking.uri=sqlite:////abs/mlflow.db] [out=DIR]
    python -m ablate fit points=FILE.csv [out=DIR]
        [n_boot=1000] [seed=0] [held_out=1] [target.N=1.5e9 target.D=3e10 | target.C=1e21] [entropy_floor=...]
        [params=total|non_embedding] [tie_exponents=false] [form=additive|joint] [noise=...]
        [approach2.window_decades=0.5]

Prints one line per law and prediction, each with its verdict (trusted, wide or not_determined, and
why), and writes DIR/fit.json, fit.md, predictions.csv and PNG plots (default DIR: exports/NAME/);
with experiment=NAME the same files go to a run tagged ablate.kind=fit in that experiment. Exits 1
when approach 3 did not converge (the files say so, with no numbers as results), 2 when no law at all
can be fitted to the points. The methods are in ablate/scaling/, the MLflow side in scaling/runs.py,
the files in scaling/reports/export.py, the schema in config/fit.py.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ablate.cli.common import claim_output, hydra_main
from ablate.config import ConfigError, FitConfig, FitSourceConfig, parse_fit
from ablate.oneline import one_line

if TYPE_CHECKING:
    from ablate.scaling import Points, RunCurve


SUMMARY = "Fit scaling laws to an experiment's finished runs (experiment=NAME) or to a CSV of points (points=FILE)."
EXAMPLE = "ablate fit points=tests/fixtures/chinchilla.csv target.C=1e21"


@dataclass(frozen=True)
class FitInputs:
    points: Points  # N counted as cfg.params, with the data's floor (entropy_floor= first) when known
    curves: tuple[RunCurve, ...]  # training histories for approach 1 (none from a CSV)
    source: str  # where the points came from and what was left out, for people
    experiment_id: str | None = None  # set when the points came from MLflow

    @property
    def entropy_floor(self) -> float | None:
        return self.points.entropy_floor


def load_inputs(cfg: FitSourceConfig) -> FitInputs:
    """The points (a CSV, or an experiment's FINISHED training runs), with N counted as cfg.params and
    the floor from entropy_floor=, else the data's own (points.csv column, the runs' derived.entropy_floor)."""
    from ablate.scaling import e_bounds, load_points_csv
    from ablate.scaling import runs as fit_runs

    if cfg.points is not None:
        points, note = load_points_csv(cfg.points)
        curves, source = (), f"points: {cfg.points}" + (f" ({note})" if note else "")
        experiment_id = None
    else:
        runs = fit_runs.read_experiment(cfg.tracking.uri, cfg.experiment)
        skipped = fit_runs.describe_skipped(runs.skipped)
        source = (
            f"experiment {runs.experiment} ({cfg.tracking.uri}): {len(runs.points)} FINISHED training runs, "
            f"{len(runs.curves)} training curves; skipped {skipped or 'none'}"
        )
        source += "".join(f"\nnote: {n}" for n in runs.notes)
        points, curves, experiment_id = runs.points, runs.curves, runs.experiment_id
    if cfg.entropy_floor is not None:
        points = points.with_floor(cfg.entropy_floor)
    if points.entropy_floor is not None:  # a floor above a run's loss is the input's error, named before any other
        e_bounds(points, points.entropy_floor, "fit")
    return FitInputs(points.with_params(cfg.params), curves, source, experiment_id)


def check_held_out(k: int, n_points: int) -> None:
    """Approach 3 needs 6 points, so at most n - 6 can be held out (with fewer than 6 in all, approach 3
    itself says so)."""
    if k and n_points >= 6 and k > n_points - 6:
        raise ConfigError(
            f"held_out={k} leaves {n_points - k} of {n_points} points; approach 3 needs at least 6 "
            f"(valid: 0 to {max(0, n_points - 6)})"
        )


class StageBar:
    """One tqdm bar over the stages of a command's work (drawn on a terminal only): the methods
    fit_all runs, the arms compare fits and compares."""

    def __init__(self, name: str = "fit", unit: str = "method") -> None:
        self.bar = None
        self.name, self.unit = name, unit

    def __call__(self, label: str, i: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.name, unit=self.unit, file=sys.stderr, leave=False, disable=None)
        self.bar.set_description(f"{self.name}: {label}")
        self.bar.update(i - self.bar.n)
        if i == total:
            self.bar.close()


def task(cfg) -> dict:
    from omegaconf import OmegaConf

    from ablate.scaling import APPROACH3, FitInputError, FitOptions, export_fit, fit_all
    from ablate.scaling import report as fit_report

    with one_line():
        fc = parse_fit(OmegaConf.to_container(cfg, resolve=True))
        claim_output(fc.out_dir, "out")  # before minutes of fitting, not after
        inputs = load_inputs(fc)
        check_held_out(fc.held_out, len(inputs.points))
        started = time.perf_counter()
        single = ("N", "N_non_embedding", "D", "C") if inputs.points.N_non_embedding is not None else ("N", "D", "C")
        if fc.params == "non_embedding":  # N is already the non-embedding count
            single = ("N", "D", "C")
        target = fc.target.as_kwargs()
        report = fit_all(
            inputs.points,
            curves=inputs.curves,
            targets=[target] if target else [],
            options=FitOptions.from_config(fc),
            held_out_k=fc.held_out,
            single=single,
            budget_tol_decades=fc.approach2.budget_tol_decades,
            window_decades=fc.approach2.window_decades,
            held_out_boot=fc.n_boot,
            on_stage=StageBar(),
        )
        if report.approach3 is None and not (report.single or report.approach1 or report.approach2):
            raise FitInputError(report.skipped[APPROACH3])
        files = export_fit(report, fc.out_dir)
    print(inputs.source, file=sys.stderr)  # after the fit and its files, so that a rejected input is one line
    converged = report.approach3 is None or report.converged
    print(fit_report.summary_text(report))
    print(f"fit took {time.perf_counter() - started:.0f} s; wrote {', '.join(str(f) for f in files)}")
    if inputs.experiment_id is not None:
        from ablate.scaling import log_fit_run

        run_id = log_fit_run(
            fc.tracking.uri,
            inputs.experiment_id,
            files,
            run_params(fc, inputs),
            run_metrics(report),
            converged,
            "" if converged else report.approach3.diagnostics.message,
            report.verdicts[APPROACH3].level,
        )
        print(f"MLflow: run {run_id} (tag ablate.kind=fit) in experiment {fc.experiment}")
    if not converged:
        raise SystemExit(1)
    return {"out": str(fc.out_dir), "converged": converged, "verdict": report.verdicts[APPROACH3].level}


def run_params(cfg: FitConfig, inputs: FitInputs) -> dict:
    return {
        "experiment": cfg.experiment,
        "n_points": len(inputs.points),
        "n_curves": len(inputs.curves),
        "n_boot": cfg.n_boot,
        "seed": cfg.seed,
        "held_out": cfg.held_out,
        "params": cfg.params,
        "tie_exponents": cfg.tie_exponents,
        "form": cfg.form,
        "interval": cfg.interval,
        "entropy_floor": inputs.entropy_floor,
        "out": str(cfg.out_dir),
        **{f"target.{k}": v for k, v in cfg.target.as_kwargs().items()},
        "source": inputs.source[:5000],
    }


def run_metrics(report) -> dict:
    """Approach 3's parameters and exponents, the held-out error and E - floor, for the MLflow UI."""
    a3 = report.approach3
    if a3 is None or not a3.converged:
        return {}
    metrics = {f"approach3/{k}": v.value for k, v in {**a3.params, **a3.exponents}.items()}
    metrics["approach3/rms_log_residual"] = a3.diagnostics.rms_residual
    h = report.held_out
    if h is not None and h.runs:
        metrics["held_out/mean_abs_rel_error"] = h.mean_abs_rel_error
        metrics["held_out/coverage_ci95"] = h.coverage
    if report.entropy_floor is not None:
        metrics["entropy_floor/E_minus_floor"] = report.entropy_floor.difference
    return metrics


def main(argv: list[str] | None = None) -> None:
    hydra_main(task, config_name="fit", name="fit", summary=SUMMARY, example=EXAMPLE, argv=argv)


if __name__ == "__main__":
    main()
