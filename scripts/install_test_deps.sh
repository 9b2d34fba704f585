#!/usr/bin/env bash
# Debian packages the tests need beyond the Python environment: a headless browser for the
# MLflow UI end-to-end test (tests/test_mlflow_ui.py) and PostgreSQL (tests/test_reliability.py). Idempotent: installs only what is missing.
set -euo pipefail

packages=()
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
# PostgreSQL for the reliability suite's load test (an MLflow server backed by PostgreSQL).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || packages+=(postgresql)

bash "$(dirname "$0")/apt_install.sh" "${packages[@]}"
# torchtitan for the export test (tests/plan/test_export.py), beside the CPU torch
bash "$(dirname "$0")/install_torchtitan.sh"
