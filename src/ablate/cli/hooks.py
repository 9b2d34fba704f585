"""What Hydra calls back into during a command (conf/config.yaml's `hydra.callbacks`, as `sweep`): the
sweep callback of the library, which hydra_app.App.multirun hands back to cli/train by that name. Its
errors reach the user through the sweeper and the launcher that call it (hydra_plugins/), whose
ConfigError the app says in one line, exit 2: Hydra's own calls of a callback turn an exception into
a warning."""

from __future__ import annotations

from ablate.sweep import callback


class SweepCallback(callback.SweepCallback):
    """The sweep callback, at the name conf/config.yaml gives it."""
