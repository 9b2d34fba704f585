#!/usr/bin/env bash
# The real-text corpus of data=debian_docs (conf/data/debian_docs.yaml, docs/data.md): three Debian
# documentation packages, read where dpkg puts them. Idempotent: installs only what is missing.
set -euo pipefail

packages=()
for p in linux-doc-6.1 python3.11-doc perl-doc; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || packages+=("$p")
done
if [ ${#packages[@]} -eq 0 ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "error: installing ${packages[*]} needs root or sudo" >&2; exit 1; }
    SUDO="sudo"
fi
echo "installing the corpus of data=debian_docs: ${packages[*]} (about 60 MB to download)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null
