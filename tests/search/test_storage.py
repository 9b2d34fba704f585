"""The samplers a study can use (tpe, random, gp, cmaes, qmc, grid), each built from its settings in
hydra.sweeper.samplers and each refused in one line when they are wrong."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from ablate.config import ConfigError, parse_search
from ablate.search import storage as study_storage
from ablate.search.driver import trial_budget
from ablate.search.space import check_sweeper

NUMERIC = {"optim.lr": FloatDistribution(1e-4, 1e-2, log=True), "optim.warmup_steps": IntDistribution(0, 100, step=10)}
MIXED = {"optim.lr": FloatDistribution(1e-4, 1e-2, log=True), "train.batch_size": CategoricalDistribution([8, 16])}
RUN_CONFIG = {"optim": {"lr": 1e-3, "warmup_steps": 0}, "train": {"batch_size": 8}}
CATALOGUE = {"optim": {"lr": "tag(log, interval(1e-4, 1e-2))", "warmup_steps": "range(0, 101, 10)"}}


@pytest.mark.parametrize("sampler", ["tpe", "random", "gp", "cmaes", "qmc", "grid"])
def test_each_sampler_searches_the_space_from_its_settings(tmp_path, sampler):
    cfg = parse_search({"study_name": sampler, "sampler": sampler}).resolved(str(tmp_path))
    study = study_storage.open_study(cfg, NUMERIC)
    assert type(study.sampler).__name__.lower().startswith(sampler if sampler != "random" else "randoms")
    seen = []
    for _ in range(4):
        trial = study.ask(NUMERIC)
        assert all(NUMERIC[k]._contains(NUMERIC[k].to_internal_repr(v)) for k, v in trial.params.items())
        seen.append(tuple(trial.params.values()))
        study.tell(trial, trial.params["optim.lr"] * 100)
    assert len(set(seen)) == 4  # four different points, none repeated


def test_the_grid_is_every_choice_step_and_interval_point_and_caps_the_trials():
    grid = study_storage.grid({**NUMERIC, "train.batch_size": CategoricalDistribution([8, 16])}, points_per_interval=3)
    assert grid["optim.lr"] == pytest.approx([1e-4, 1e-3, 1e-2])  # log-spaced under tag(log, ...)
    assert grid["optim.warmup_steps"] == list(range(0, 101, 10))
    assert grid["train.batch_size"] == [8, 16]
    cfg = parse_search({"sampler": "grid", "samplers": {"grid": {"points_per_interval": 3}}, "n_trials": 100})
    assert trial_budget(cfg, NUMERIC) == 3 * 11


@pytest.mark.parametrize(
    "tree, message",
    [
        (
            {"sampler": "gp", "samplers": {"gp": {"n_startup": 3}}},
            "unknown key hydra.sweeper.samplers.gp.n_startup (valid: deterministic_objective, n_startup_trials)",
        ),
        (
            {"sampler": "cmaes", "search": ["optim.lr", "train.batch_size"]},
            "hydra.sweeper.samplers.cmaes is invalid: cmaes searches numbers only, and train.batch_size is a choice "
            "(valid: tpe, gp)",
        ),
        (
            {"sampler": "qmc", "samplers": {"qmc": {"qmc_type": "lattice"}}},
            "hydra.sweeper.samplers.qmc is invalid: The `qmc_type='lattice'` is invalid. "
            "Choose either `halton` or `sobol`.",
        ),
        (
            {"sampler": "grid", "samplers": {"grid": {"points_per_interval": 1}}},
            "hydra.sweeper.samplers.grid is invalid: points_per_interval=1 must be at least 2",
        ),
        (
            {"costs": ["flops"]},
            "hydra.sweeper.costs=['flops'] with pruner=median: Optuna prunes single-objective studies only "
            "(valid: hydra.sweeper.pruner=none, or no costs)",
        ),
        (
            {"costs": ["flops"], "pruner": "none", "sampler": "cmaes"},
            "hydra.sweeper.sampler=cmaes cannot minimise costs=['flops'] too (valid: tpe, gp, random, qmc, grid)",
        ),
        ({"costs": ["tokens"], "pruner": "none"}, "hydra.sweeper.costs has 'tokens' (valid: flops, wall_s)"),
        ({"memory_limit_gb": 0}, "hydra.sweeper.memory_limit_gb=0.0 must be positive (valid: > 0)"),
    ],
)
def test_bad_sampler_and_objective_settings_fail_in_one_line(tmp_path, tree, message):
    catalogue = {**CATALOGUE, "train": {"batch_size": "choice(8, 16)"}}
    with pytest.raises(ConfigError) as err:
        check_sweeper({"params": catalogue, "search": ["optim.lr"], **tree}, [], RUN_CONFIG, str(tmp_path))
    assert str(err.value) == message
