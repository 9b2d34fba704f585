"""`python -m ablate.fit`: scaling laws fitted to an experiment's runs (a Hydra app over conf/fit.yaml).

    python -m ablate.fit experiment=NAME [tracking.uri=sqlite:////abs/mlflow.db] [out=DIR]
    python -m ablate.fit points=FILE.csv [out=DIR]
        [n_boot=1000] [seed=0] [held_out=1] [target.N=1.5e9 target.D=3e10 | target.C=1e21] [entropy_floor=...]

Prints a short table and writes DIR/fit.json, fit.md, predictions.csv and PNG plots (default DIR:
exports/NAME/); with experiment=NAME the same files go to a run tagged ablate.kind=fit in that
experiment. Exits 1 when approach 3 did not converge (the files say so, with no numbers as results).
The methods are in ablate/scaling/, the MLflow side in fit_runs.py, the files in fit_export.py.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ablate.cli import fail, hydra_main
from ablate.config import ConfigError, build

if TYPE_CHECKING:
    from ablate.scaling.points import Points, RunCurve


@dataclass
class TargetConfig:
    """Where to extrapolate: N and D, or C alone (the compute-optimal allocation), or C with N or D."""

    N: Optional[float] = None
    D: Optional[float] = None
    C: Optional[float] = None

    def validate(self) -> None:
        given = self.as_kwargs()
        for key, value in given.items():
            if value <= 0:
                raise ConfigError(f"target.{key}={value:g} must be positive (valid: > 0)")
        if given and not (set(given) == {"N", "D"} or ("C" in given and len(given) <= 2)):
            shown = " ".join(f"target.{k}={v:g}" for k, v in given.items())
            raise ConfigError(f"{shown} is not a target (valid: target.N and target.D, or target.C alone, "
                              "or target.C with target.N or target.D)")

    def as_kwargs(self) -> dict:
        return {k: v for k, v in (("N", self.N), ("D", self.D), ("C", self.C)) if v is not None}


@dataclass
class FitTrackingConfig:
    uri: str = "sqlite:///mlflow.db"


@dataclass
class FitConfig:
    experiment: Optional[str] = None
    points: Optional[str] = None
    out: Optional[str] = None
    n_boot: int = 1000
    seed: int = 0
    held_out: int = 1
    entropy_floor: Optional[float] = None
    target: TargetConfig = field(default_factory=TargetConfig)
    tracking: FitTrackingConfig = field(default_factory=FitTrackingConfig)

    def validate(self) -> None:
        if (self.experiment is None) == (self.points is None):
            given = "both" if self.experiment else "neither"
            raise ConfigError(f"experiment and points: {given} given (valid: experiment=NAME, an MLflow experiment, "
                              "or points=FILE.csv with columns params,tokens,loss[,flops])")
        for key in ("n_boot", "held_out"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} is negative (valid: >= 0)")
        if self.entropy_floor is not None and self.entropy_floor <= 0:
            raise ConfigError(f"entropy_floor={self.entropy_floor:g} must be positive (valid: > 0, in nats per token)")
        self.target.validate()

    @property
    def name(self) -> str:
        return self.experiment or Path(self.points).stem

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("exports") / self.name


def parse_fit(tree: dict) -> FitConfig:
    """A validated FitConfig from the composed conf/fit.yaml tree (a plain dict)."""
    tree = {k: v for k, v in tree.items() if k != "hydra"}
    rest = {k: v for k, v in tree.items() if k not in ("target", "tracking")}
    cfg = replace(build(FitConfig, rest, ""), target=build(TargetConfig, tree.get("target"), "target"),
                  tracking=build(FitTrackingConfig, tree.get("tracking"), "tracking"))
    cfg.validate()
    return cfg


@dataclass(frozen=True)
class FitInputs:
    points: Points
    curves: tuple[RunCurve, ...]  # training histories for approach 1 (none from a CSV)
    entropy_floor: Optional[float]
    source: str  # where the points came from and what was left out, for people
    experiment_id: Optional[str] = None  # set when the points came from MLflow


def load_inputs(cfg: FitConfig) -> FitInputs:
    from ablate import fit_runs
    from ablate.scaling.points import load_points_csv

    if cfg.points is not None:
        points, note = load_points_csv(cfg.points)
        return FitInputs(points, (), cfg.entropy_floor, f"points: {cfg.points}" + (f" ({note})" if note else ""))
    runs = fit_runs.read_experiment(cfg.tracking.uri, cfg.experiment)
    skipped = fit_runs.describe_skipped(runs.skipped)
    source = (f"experiment {runs.experiment} ({cfg.tracking.uri}): {len(runs.points)} FINISHED training runs, "
              f"{len(runs.curves)} training curves; skipped {skipped or 'none'}")
    source += "".join(f"\nnote: {n}" for n in runs.notes)
    floor = cfg.entropy_floor if cfg.entropy_floor is not None else runs.entropy_floor
    return FitInputs(runs.points, runs.curves, floor, source, runs.experiment_id)


def check_held_out(k: int, n_points: int) -> None:
    """Approach 3 needs 6 points, so at most n - 6 can be held out (with fewer than 6 in all, approach 3
    itself says so)."""
    if k and n_points >= 6 and k > n_points - 6:
        raise ConfigError(f"held_out={k} leaves {n_points - k} of {n_points} points; approach 3 needs at least 6 "
                          f"(valid: 0 to {max(0, n_points - 6)})")


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

    from ablate.fit_export import export_fit, summary_text
    from ablate.scaling.points import FitInputError
    from ablate.scaling.report import fit_all

    try:
        fc = parse_fit(OmegaConf.to_container(cfg, resolve=True))
        inputs = load_inputs(fc)
        check_held_out(fc.held_out, len(inputs.points))
        started = time.perf_counter()
        single = ("N", "N_non_embedding", "D", "C") if inputs.points.N_non_embedding is not None else ("N", "D", "C")
        target = fc.target.as_kwargs()
        report = fit_all(inputs.points, curves=inputs.curves, targets=[target] if target else [],
                         entropy_floor=inputs.entropy_floor, held_out_k=fc.held_out, n_boot=fc.n_boot, seed=fc.seed,
                         single=single, held_out_boot=fc.n_boot, on_stage=StageBar())
    except (ConfigError, FitInputError) as exc:
        fail(str(exc))
    print(inputs.source, file=sys.stderr)  # after the fit, so that a rejected input is one line
    files = export_fit(report, fc.out_dir)
    converged = report.approach3.diagnostics.converged
    print(summary_text(report))
    print(f"fit took {time.perf_counter() - started:.0f} s; wrote {', '.join(str(f) for f in files)}")
    if inputs.experiment_id is not None:
        from ablate.fit_runs import log_fit_run

        run_id = log_fit_run(fc.tracking.uri, inputs.experiment_id, files, run_params(fc, inputs),
                             run_metrics(report), converged, "" if converged else report.approach3.diagnostics.message)
        print(f"MLflow: run {run_id} (tag ablate.kind=fit) in experiment {fc.experiment}")
    if not converged:
        raise SystemExit(1)
    return {"out": str(fc.out_dir), "converged": converged}


def run_params(cfg: FitConfig, inputs: FitInputs) -> dict:
    return {"experiment": cfg.experiment, "n_points": len(inputs.points), "n_curves": len(inputs.curves),
            "n_boot": cfg.n_boot, "seed": cfg.seed, "held_out": cfg.held_out, "out": str(cfg.out_dir),
            **{f"target.{k}": v for k, v in cfg.target.as_kwargs().items()}, "source": inputs.source[:5000]}


def run_metrics(report) -> dict:
    """Approach 3's parameters and exponents, the held-out error and E - floor, for the MLflow UI."""
    a3 = report.approach3
    if not a3.diagnostics.converged:
        return {}
    metrics = {f"approach3/{k}": v.value for k, v in {**a3.params, **a3.exponents}.items()}
    metrics["approach3/rms_log_residual"] = a3.diagnostics.rms_residual
    h = report.held_out
    if h is not None and h.fit.diagnostics.converged:
        metrics["held_out/mean_abs_rel_error"] = h.mean_abs_rel_error
        if h.coverage is not None:
            metrics["held_out/coverage_ci95"] = h.coverage
            metrics["held_out/run_coverage_ci95"] = h.run_coverage
    if report.entropy_floor is not None:
        metrics["entropy_floor/E_minus_floor"] = report.entropy_floor.difference
    return metrics


def main() -> None:
    hydra_main(task, config_name="fit")


if __name__ == "__main__":
    main()
