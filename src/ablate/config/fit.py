"""The schemas of the commands that fit runs (`ablate fit`, `ablate backtest`, `ablate compare`;
conf/fit.yaml, backtest.yaml, compare.yaml), and their parse functions."""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path

from ablate.config.schema import build, require_at_most
from ablate.errors import ConfigError
from ablate.files import output_dir

PARAM_KINDS = ("total", "non_embedding")  # which parameter count is N: Chinchilla's or Kaplan's
# approach 3's law: additive E + A/N^alpha + B/D^beta (Hoffmann et al. 2022), or joint
# E + [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D (Kaplan et al. 2020), scaling/laws/chinchilla.FORMS
LAW_FORMS = ("additive", "joint")
# how a prediction's interval is calibrated (scaling/calibration.py): adaptive corrects the drift the
# refits below cuts share and scales the width to their errors; hull keeps the law's value and widens
# the interval toward the drift (the method before adaptive, kept to compare against)
INTERVAL_METHODS = ("adaptive", "hull")
DEFAULT_CUTS = (0.25, 0.375, 0.5, 0.625, 0.75)  # the backtest's cuts, as fractions of the log-compute span
# Each bootstrap resample is a whole fit: beyond this the fit outlasts any use of its interval.
MAX_BOOT = 100_000
# Beyond 1e40 (FLOPs, parameters or tokens) the law's terms underflow against E and no prediction means anything.
MAX_TARGET = 1e40
# Wider than this an iso-FLOP window or tolerance spans every budget a design could hold.
MAX_DECADES = 10.0


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


@dataclass
class Approach2Config:
    """When runs form an iso-FLOP design, and where each budget's parabola is fitted (scaling/laws/approach2.py)."""

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


def source_name(experiment: str | None, points: str | None) -> str:
    """The name of a command's export folder: the experiment's, or the CSV's path without its suffix,
    folders joined by '-' (relative to the working folder when inside it, else from the root), so that
    two sweeps' points.csv never share one: experiments/ladder/sweep/points.csv ->
    experiments-ladder-sweep-points, ./chinchilla.csv -> chinchilla."""
    if experiment:
        return experiment
    if points is None:  # experiment='' passes check_source (it is not None) but names nothing
        raise ConfigError("experiment='' names no MLflow experiment (valid: experiment=NAME, or points=FILE.csv)")
    path = Path(os.path.abspath(points))  # "../x.csv" as the folder it names
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        path = path.relative_to(path.anchor)
    return "-".join(path.with_suffix("").parts)


@dataclass
class FitSourceConfig:
    """What `ablate fit` and `ablate backtest` share: where the points come from, and how approach 3 is
    fitted (the law's form, the data's floor, N as total or non-embedding parameters, alpha tied to
    beta, the noise)."""

    experiment: str | None = None
    points: str | None = None
    out: str | None = None
    n_boot: int = 1000
    seed: int = 0
    entropy_floor: float | None = None
    params: str = "total"
    tie_exponents: bool = False
    form: str = "additive"
    noise: float | None = None
    interval: str = "adaptive"
    tracking: FitTrackingConfig = field(default_factory=FitTrackingConfig)

    def validate(self) -> None:
        check_source(self.experiment, self.points, "params,tokens,loss[,flops]")
        if self.interval not in INTERVAL_METHODS:
            raise ConfigError(
                f"interval={self.interval} is not a calibration method (valid: {', '.join(INTERVAL_METHODS)})"
            )
        for key in ("n_boot", "seed"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} is negative (valid: >= 0)")
        require_at_most("n_boot", self.n_boot, MAX_BOOT, "resamples")
        if self.entropy_floor is not None and self.entropy_floor <= 0:
            raise ConfigError(f"entropy_floor={self.entropy_floor:g} must be positive (valid: > 0, in nats per token)")
        if self.form not in LAW_FORMS:
            raise ConfigError(f"form={self.form} is not a law's form (valid: {', '.join(LAW_FORMS)})")
        if self.form == "joint" and self.tie_exponents:
            raise ConfigError(
                "tie_exponents=true with form=joint: the joint form has no alpha and beta to tie "
                "(valid: form=additive, or tie_exponents=false)"
            )
        if self.params not in PARAM_KINDS:
            raise ConfigError(f"params={self.params} is not a parameter count (valid: {', '.join(PARAM_KINDS)})")
        if self.noise is not None and not 0 < self.noise < 1:
            raise ConfigError(
                f"noise={self.noise:g} is not a run-to-run spread (valid: 0 < noise < 1, the sd of log loss)"
            )

    @property
    def name(self) -> str:
        return source_name(self.experiment, self.points)

    @property
    def out_dir(self) -> Path:
        """out=, else exports/NAME (source_name), made one safe path component: an experiment called
        '../x' does not write outside exports/."""
        return output_dir(self.out, "exports", self.name)


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


@dataclass
class BacktestConfig(FitSourceConfig):
    n_boot: int = 200  # each cut is a whole fit with its own bootstrap: fewer resamples keep it quick
    cuts: list = field(default_factory=lambda: list(DEFAULT_CUTS))

    def validate(self) -> None:
        super().validate()
        if not self.cuts or not all(isinstance(c, (int, float)) and 0 < c < 1 for c in self.cuts):
            raise ConfigError(
                f"cuts={self.cuts} is invalid (valid: a list of fractions of the compute span, each 0 < cut < 1)"
            )

    @property
    def out_dir(self) -> Path:
        return output_dir(self.out, "exports", self.name, "backtest")


@dataclass
class CompareConfig:
    experiment: str | None = None
    points: str | None = None
    arm: str = "precision"
    baseline: str | None = None
    arms: list | None = None
    target: float | None = None
    n_boot: int = 1000
    seed: int = 0
    entropy_floor: float | None = None
    shared: bool = True
    out: str | None = None
    tracking: FitTrackingConfig = field(default_factory=FitTrackingConfig)

    def validate(self) -> None:
        check_source(self.experiment, self.points, "params,tokens,loss,flops and an arm column")
        if not self.baseline:
            raise ConfigError(
                f"baseline={self.baseline} is missing (valid: the value of {self.arm} to measure against)"
            )
        if self.n_boot < 0:
            raise ConfigError(f"n_boot={self.n_boot} is negative (valid: >= 0)")
        require_at_most("n_boot", self.n_boot, MAX_BOOT, "resamples")
        if self.seed < 0:
            raise ConfigError(f"seed={self.seed} is negative (valid: >= 0)")
        if self.target is not None and self.target <= 0:
            raise ConfigError(f"target={self.target:g} must be positive (valid: training FLOPs, e.g. 1e18)")
        if self.target is not None:
            require_at_most("target", self.target, MAX_TARGET, "FLOPs")

    @property
    def name(self) -> str:
        return source_name(self.experiment, self.points)

    @property
    def out_dir(self) -> Path:
        return output_dir(self.out, "exports", f"{self.name}-{self.arm}")


def _parse(cls, tree: dict):
    """A validated `cls` from a composed tree (a plain dict): its own keys, and each section whose
    field is itself a dataclass (target, tracking, approach2) built as that dataclass."""
    tree = {k: v for k, v in tree.items() if k != "hydra"}
    hints = typing.get_type_hints(cls)
    nested = {f.name: hints[f.name] for f in fields(cls) if is_dataclass(hints[f.name])}
    cfg = replace(
        build(cls, {k: v for k, v in tree.items() if k not in nested}, ""),
        **{k: build(c, tree.get(k), k) for k, c in nested.items()},
    )
    cfg.validate()
    return cfg


def parse_fit(tree: dict) -> FitConfig:
    """A validated FitConfig from the composed conf/fit.yaml tree (a plain dict)."""
    return _parse(FitConfig, tree)


def parse_backtest(tree: dict) -> BacktestConfig:
    """A validated BacktestConfig from the composed conf/backtest.yaml tree (a plain dict)."""
    return _parse(BacktestConfig, tree)


def parse_compare(tree: dict) -> CompareConfig:
    """A validated CompareConfig from the composed conf/compare.yaml tree (a plain dict). The arms are
    compared as the strings the runs record, whatever type YAML gave them (fp32, 0.001, true)."""
    arms = tree.get("arms")
    if isinstance(arms, list):
        tree = {**tree, "arms": [str(a) for a in arms]}
    return _parse(CompareConfig, tree)
