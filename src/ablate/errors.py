"""The error of bad input: one line that names the key, the bad value and what is valid. Library
code raises it, only cli/ turns it into `error: ...` and exit 2; ablate.config exports it beside the
schemas. It sits below them because files.py, which the schemas use, raises it too."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user-facing configuration error; its message is a single line."""


class UnsupportedError(ConfigError):
    """A valid config that this machine cannot run (e.g. fp8 without an sm_89+ GPU)."""
