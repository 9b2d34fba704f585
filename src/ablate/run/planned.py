"""A sweep job as its plan left it (sweep/plan.py): the RunConfig the plan parsed from the job's
composition, and the config hash of each run the job makes, as the plan prepared them. The job is
sent these with its composition, and prepares that config here (its device and its data are this
process's) instead of parsing it again; what it prepares must hash as the plan's did, since the plan
decided from those hashes whether the job trains, resumes or is skipped. A difference (its data or a
preset changed between the plan and the job, another version of the code on a cluster's node) fails
the job in one line before anything is trained.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ablate.config import ConfigError, RunConfig
from ablate.provenance import config_hash

if TYPE_CHECKING:
    from ablate.run.branches import Family
    from ablate.run.prepare import Prepared


@dataclass(frozen=True)
class Planned:
    cfg: RunConfig  # as the plan parsed it from the job's composition
    # each run's config hash as the plan prepared it: one, or a list budget's branches in budget
    # order; () where the plan found the job unsupported here (it hashed nothing)
    hashes: tuple[str, ...]
    device: str | None  # the device the plan resolved, which the hashes include (provenance.config_hash)


class PlanChanged(ConfigError):
    """What a job prepares does not hash as its plan said."""


def prepare_planned(planned: Planned, cfg: RunConfig) -> Prepared | Family:
    """`cfg` (the plan's, with the job's run name) prepared here, its runs' hashes checked against
    the plan's; PlanChanged in one line where they differ."""
    # torch: imported here, since the plan's process builds a Planned without it
    from ablate.run.branches import Family, is_family, prepare_family
    from ablate.run.prepare import prepare

    prepared = prepare_family(cfg) if is_family(cfg) else prepare(cfg)
    runs = prepared.branches if isinstance(prepared, Family) else (prepared,)
    found = tuple(_hash_on(p, planned.device) for p in runs)
    if planned.hashes and found != planned.hashes:
        raise PlanChanged(
            f"the sweep's plan hashed this job's config as {', '.join(planned.hashes)}, and it prepares here as "
            f"{', '.join(found)}: what the job is made of (its data, a preset, the code) changed after the sweep "
            "was planned; nothing was trained (valid: the same command again, which plans every job anew)"
        )
    return prepared


def _hash_on(p: Prepared, device: str | None) -> str:
    """The run's hash on the plan's device: a cluster's job may run where the device `auto` resolves
    to differs from the machine that planned it, and the config is what the plan vouches for."""
    if device is None or p.hardware.device == device:
        return p.config_hash
    return config_hash(p.cfg, dataclasses.replace(p.hardware, device=device))
