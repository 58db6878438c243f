#!/usr/bin/env bash
# jobs/update-deck-reference.sh [TRIDENT] — rewrite the deck reference table in
# docs/decks.md ("Deck reference") from `trident check --schema` (the cli test
# checks they agree).
set -euo pipefail
cd "$(dirname "$0")/.."
trident=${1:-build/trident}
doc=docs/decks.md
"$trident" check --schema > /tmp/td-schema.$$
awk -v f=/tmp/td-schema.$$ '
  /<!-- deck-schema:begin -->/ { print; while ((getline l < f) > 0) print l; skip = 1; next }
  /<!-- deck-schema:end -->/ { skip = 0 }
  !skip' "$doc" > "$doc.tmp" && mv "$doc.tmp" "$doc"
rm -f /tmp/td-schema.$$
echo "$doc: deck reference updated"
