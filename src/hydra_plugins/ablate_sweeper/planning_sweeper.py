"""`hydra/sweeper=ablate_grid` (ablate's default, conf/config.yaml): Hydra's grid sweeper
(BasicSweeper: the cartesian product of its params and the command line's sweeps, in the same
order), whose check of a batch plans it.

BasicSweeper calls validate_batch_is_legal(batch) before it launches a batch, to compose every job
once and fail early; here that composition is the plan's (sweep/plan.py): each job composed and
parsed once, checked and hashed, and what it will do decided (run, skip, resume) before anything is
created, then the sweep opened (its parent run, SWEEP_DIR/sweep.json) through the sweep callback,
which keeps each job's composition for the launcher to send to the job. The whole grid is checked
so first, as one batch, before BasicSweeper.sweep writes the sweep's folder.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ablate.hydra_app import basic_sweeper
from ablate.sweep import register_plugin

# No `from __future__ import annotations` in this module: the ConfigStore reads the dataclass's
# field types, which must be types, not strings.


@dataclass
class PlanningSweeperConf:
    """hydra.sweeper: BasicSweeperConf's settings, with this sweeper as the target."""

    _target_: str = "hydra_plugins.ablate_sweeper.planning_sweeper.PlanningSweeper"
    max_batch_size: Optional[int] = None  # noqa: UP045  jobs launched together; None: all of them
    params: Optional[dict[str, str]] = None  # noqa: UP045  the grid: KEY: a,b,c (a sweep preset's)


# Under a name of ablate's own, which ablate's primary config picks, so that every sweep of this
# project plans while any other Hydra app in the environment keeps Hydra's `basic`; a preset that
# picks another sweeper (hydra/sweeper=ablate_optuna) still can.
register_plugin("hydra/sweeper", "ablate_grid", PlanningSweeperConf)


class PlanningSweeper(basic_sweeper()):  # type: ignore[misc]  Hydra's BasicSweeper
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[dict[str, str]] = None) -> None:  # noqa: UP045
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.planned: set[tuple[str, ...]] = set()  # the overrides of every job planned so far

    def sweep(self, arguments: list[str]) -> Any:
        """The whole grid checked as one batch first, before BasicSweeper.sweep writes the sweep's
        folder (multirun.yaml): a bad job leaves nothing behind. Its own check of each batch then
        finds the batch planned."""
        self.validate_batch_is_legal(self.grid(arguments))
        return super().sweep(arguments)

    def grid(self, arguments: list[str]) -> list[list[str]]:
        """Every job's overrides, as BasicSweeper.sweep expands them, in the order it launches them."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        return [list(job) for batch in self.split_arguments(overrides, None) for job in batch]

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from ablate.config import ConfigError
        from ablate.hydra_app import App
        from ablate.sweep import sweep_callback

        assert self.hydra_context is not None
        sweep = sweep_callback(self.hydra_context)
        if sweep is None:  # no sweep callback configured: Hydra's own check
            super().validate_batch_is_legal(batch)
            return
        todo = [list(job) for job in batch if tuple(job) not in self.planned]
        if not todo:
            return
        try:  # a ConfigError is said in one line by the app that runs this sweeper (ablate.hydra_app)
            sweep.open(sweep.plan(self.hydra_context.config_loader, todo, len(self.planned)))
        except (HydraException, OmegaConfBaseException) as exc:
            overrides = getattr(exc, "job_overrides", [])
            why = App("config").explain(exc, overrides)
            raise ConfigError(f"sweep job #{getattr(exc, 'job_num', '?')} ({' '.join(overrides)}): {why}") from None
        self.planned.update(tuple(job) for job in todo)
