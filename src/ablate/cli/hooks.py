"""What Hydra calls back into during a command (conf/config.yaml's `hydra.callbacks`): the sweep
callback of the library. Its errors reach the command line through the sweeper and the launcher
that call it (hydra_plugins/), which turn a ConfigError into one line and exit 2: Hydra's own calls
of a callback turn an exception into a warning."""

from __future__ import annotations

from ablate.sweep import callback


class SweepCallback(callback.SweepCallback):
    """The sweep callback, at the name conf/config.yaml gives it."""
