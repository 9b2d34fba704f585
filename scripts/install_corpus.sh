#!/usr/bin/env bash
# The real-text corpus of data=debian_docs (src/ablate/conf/data/debian_docs.yaml, docs/data.md):
# three Debian documentation packages, read where dpkg puts them. Idempotent: installs only what is missing.
set -euo pipefail

packages=()
for p in linux-doc-6.1 python3.11-doc perl-doc; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || packages+=("$p")
done
[ ${#packages[@]} -eq 0 ] || echo "installing the corpus of data=debian_docs: ${packages[*]} (about 60 MB to download)"
bash "$(dirname "$0")/apt_install.sh" "${packages[@]}"
