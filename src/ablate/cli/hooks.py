"""What Hydra calls back into during a command (conf/config.yaml's `hydra.callbacks`): the sweep
callback of the library, with bad input turned into one line and exit 2, as everywhere else on the
command line."""

from __future__ import annotations

from ablate.cli.common import fail
from ablate.config import ConfigError
from ablate.sweep import callback


class SweepCallback(callback.SweepCallback):
    def on_multirun_start(self, config, **kwargs) -> None:
        try:
            super().on_multirun_start(config, **kwargs)
        except ConfigError as exc:
            fail(str(exc))
