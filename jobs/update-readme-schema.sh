#!/usr/bin/env bash
# jobs/update-readme-schema.sh [TRIDENT] — rewrite the deck reference in
# README.md from `trident check --schema` (the cli test checks they agree).
set -euo pipefail
cd "$(dirname "$0")/.."
trident=${1:-build/trident}
"$trident" check --schema > /tmp/td-schema.$$
awk -v f=/tmp/td-schema.$$ '
  /<!-- deck-schema:begin -->/ { print; while ((getline l < f) > 0) print l; skip = 1; next }
  /<!-- deck-schema:end -->/ { skip = 0 }
  !skip' README.md > README.md.tmp && mv README.md.tmp README.md
rm -f /tmp/td-schema.$$
echo "README.md: deck reference updated"
