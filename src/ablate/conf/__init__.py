"""The presets: each command's primary config and the config groups, as YAML package data. Hydra
reads them as pkg://ablate.conf, which needs this package to be importable (config/presets.py)."""
