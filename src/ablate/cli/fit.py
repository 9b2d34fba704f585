"""`python -m ablate fit`: scaling laws fitted to an experiment's runs (a Hydra app over conf/fit.yaml).

    python -m ablate fit experiment=NAME [tracking.uri=sqlite:////abs/mlflow.db] [out=DIR]
    python -m ablate fit points=FILE.csv [out=DIR]
        [n_boot=1000] [seed=0] [held_out=1] [target.N=1.5e9 target.D=3e10 | target.C=1e21] [entropy_floor=...]
        [params=total|non_embedding] [tie_exponents=false] [noise=...] [approach2.window_decades=0.5]

Prints one line per law and prediction, each with its verdict (trusted, wide or not_determined, and
why), and writes DIR/fit.json, fit.md, predictions.csv and PNG plots (default DIR: exports/NAME/);
with experiment=NAME the same files go to a run tagged ablate.kind=fit in that experiment. Exits 1
when approach 3 did not converge (the files say so, with no numbers as results), 2 when no law at all
can be fitted to the points. The methods are in ablate/scaling/, the MLflow side in scaling/runs.py,
the files in scaling/export.py.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.cli.common import fail, hydra_main
from ablate.config import ConfigError, build, require_at_most
from ablate.files import check_writable_dir, output_dir

if TYPE_CHECKING:
    from ablate.scaling.points import Points, RunCurve


# Each bootstrap resample is a whole fit: beyond this the fit outlasts any use of its interval.
MAX_BOOT = 100_000
# Beyond 1e40 (FLOPs, parameters or tokens) the law's terms underflow against E and no prediction means anything.
MAX_TARGET = 1e40


@dataclass
class TargetConfig:
    """Where to extrapolate: N and D, or C alone (the compute-optimal allocation), or C with N or D."""

    N: float | None = None
    D: float | None = None
    C: float | None = None

    def validate(self) -> None:
        given = self.as_kwargs()
        for key, value in given.items():
            if value <= 0:
                raise ConfigError(f"target.{key}={value:g} must be positive (valid: > 0)")
            require_at_most(f"target.{key}", value, MAX_TARGET, "(parameters, tokens or FLOPs)")
        if given and not (set(given) == {"N", "D"} or ("C" in given and len(given) <= 2)):
            shown = " ".join(f"target.{k}={v:g}" for k, v in given.items())
            raise ConfigError(
                f"{shown} is not a target (valid: target.N and target.D, or target.C alone, "
                "or target.C with target.N or target.D)"
            )

    def as_kwargs(self) -> dict:
        return {k: v for k, v in (("N", self.N), ("D", self.D), ("C", self.C)) if v is not None}


@dataclass
class FitTrackingConfig:
    uri: str = "sqlite:///mlflow.db"


# Wider than this an iso-FLOP window or tolerance spans every budget a design could hold.
MAX_DECADES = 10.0


@dataclass
class Approach2Config:
    """When runs form an iso-FLOP design, and where each budget's parabola is fitted (scaling/approach2.py)."""

    budget_tol_decades: float = 0.02
    window_decades: float = 0.5

    def validate(self) -> None:
        for key in ("budget_tol_decades", "window_decades"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"approach2.{key}={getattr(self, key)} must be positive (valid: > 0 decades)")
            require_at_most(f"approach2.{key}", getattr(self, key), MAX_DECADES, "decades")


def check_source(experiment: str | None, points: str | None, columns: str) -> None:
    """Exactly one source of points: an MLflow experiment or a CSV file with `columns`."""
    if (experiment is None) == (points is None):
        given = "both" if experiment else "neither"
        raise ConfigError(
            f"experiment and points: {given} given (valid: experiment=NAME, an MLflow experiment, "
            f"or points=FILE.csv with columns {columns})"
        )


@dataclass
class FitSourceConfig:
    """What `ablate fit` and `ablate backtest` share: where the points come from, and how approach 3 is
    fitted (the data's floor, N as total or non-embedding parameters, alpha tied to beta, the noise)."""

    experiment: str | None = None
    points: str | None = None
    out: str | None = None
    n_boot: int = 1000
    seed: int = 0
    entropy_floor: float | None = None
    params: str = "total"
    tie_exponents: bool = False
    noise: float | None = None
    tracking: FitTrackingConfig = field(default_factory=FitTrackingConfig)

    def validate(self) -> None:
        from ablate.scaling.points import PARAM_KINDS

        check_source(self.experiment, self.points, "params,tokens,loss[,flops]")
        for key in ("n_boot", "seed"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} is negative (valid: >= 0)")
        require_at_most("n_boot", self.n_boot, MAX_BOOT, "resamples")
        if self.entropy_floor is not None and self.entropy_floor <= 0:
            raise ConfigError(f"entropy_floor={self.entropy_floor:g} must be positive (valid: > 0, in nats per token)")
        if self.params not in PARAM_KINDS:
            raise ConfigError(f"params={self.params} is not a parameter count (valid: {', '.join(PARAM_KINDS)})")
        if self.noise is not None and not 0 < self.noise < 1:
            raise ConfigError(
                f"noise={self.noise:g} is not a run-to-run spread (valid: 0 < noise < 1, the sd of log loss)"
            )

    def options(self):
        """The fit's FitOptions (scaling/predict.py) from this config."""
        from ablate.scaling.predict import FitOptions

        return FitOptions(
            floor=self.entropy_floor,
            tie_exponents=self.tie_exponents,
            params=self.params,
            n_boot=self.n_boot,
            seed=self.seed,
            noise=self.noise,
        )

    @property
    def name(self) -> str:
        return self.experiment or Path(self.points).stem

    @property
    def out_dir(self) -> Path:
        """out=, else exports/NAME, with NAME (an experiment's name, a file's stem) made one safe
        path component: an experiment called '../x' does not write outside exports/."""
        return output_dir(self.out, "exports", self.name)


SUMMARY = "Fit scaling laws to an experiment's finished runs (experiment=NAME) or to a CSV of points (points=FILE)."
EXAMPLE = "ablate fit points=tests/fixtures/chinchilla.csv target.C=1e21"


@dataclass
class FitConfig(FitSourceConfig):
    held_out: int = 1
    target: TargetConfig = field(default_factory=TargetConfig)
    approach2: Approach2Config = field(default_factory=Approach2Config)

    def validate(self) -> None:
        super().validate()
        if self.held_out < 0:
            raise ConfigError(f"held_out={self.held_out} is negative (valid: >= 0)")
        self.target.validate()
        self.approach2.validate()


NESTED = {"target": TargetConfig, "tracking": FitTrackingConfig, "approach2": Approach2Config}


def parse_config(cls, tree: dict):
    """A validated `cls` (FitConfig, or the backtest's) from the composed tree (a plain dict)."""
    tree = {k: v for k, v in tree.items() if k != "hydra"}
    nested = {k: c for k, c in NESTED.items() if k in {f.name for f in fields(cls)}}
    cfg = replace(
        build(cls, {k: v for k, v in tree.items() if k not in nested}, ""),
        **{k: build(c, tree.get(k), k) for k, c in nested.items()},
    )
    cfg.validate()
    return cfg


def parse_fit(tree: dict) -> FitConfig:
    """A validated FitConfig from the composed conf/fit.yaml tree (a plain dict)."""
    return parse_config(FitConfig, tree)


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
    from ablate.scaling import runs as fit_runs
    from ablate.scaling.chinchilla import e_bounds
    from ablate.scaling.points import load_points_csv

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
    """One tqdm bar over the methods fit_all runs (drawn on a terminal only)."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, label: str, i: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, desc="fit", unit="method", file=sys.stderr, leave=False, disable=None)
        self.bar.set_description(f"fit: {label}")
        self.bar.update(i - self.bar.n)
        if i == total:
            self.bar.close()


def task(cfg) -> dict:
    from omegaconf import OmegaConf

    from ablate.scaling.analysis import APPROACH3, fit_all
    from ablate.scaling.export import export_fit
    from ablate.scaling.points import FitInputError
    from ablate.scaling.report import summary_text

    try:
        fc = parse_fit(OmegaConf.to_container(cfg, resolve=True))
        check_writable_dir(fc.out_dir, "out")  # before minutes of fitting, not after
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
            options=fc.options(),
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
    except (ConfigError, FitInputError) as exc:
        fail(str(exc))
    print(inputs.source, file=sys.stderr)  # after the fit and its files, so that a rejected input is one line
    converged = report.approach3 is None or report.converged
    print(summary_text(report))
    print(f"fit took {time.perf_counter() - started:.0f} s; wrote {', '.join(str(f) for f in files)}")
    if inputs.experiment_id is not None:
        from ablate.scaling.runs import log_fit_run

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


def main() -> None:
    hydra_main(task, config_name="fit", name="fit", summary=SUMMARY, example=EXAMPLE)


if __name__ == "__main__":
    main()
