#!/usr/bin/env bash
# apt-get install PACKAGE... as root, or through sudo; nothing when no package is given.
set -euo pipefail
[ $# -gt 0 ] || exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "error: installing $* needs root or sudo" >&2; exit 1; }
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "$@"
