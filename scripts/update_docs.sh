#!/usr/bin/env bash
# Regenerates the table of config keys in docs/config-reference.md from the tables the code
# validates against (`mgtrain config-keys`), so the two cannot drift; tests/e2e/docs.sh checks it.
# Run after a build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
page=$MGTRAIN_ROOT/docs/config-reference.md
table=$(mktemp)
trap 'rm -f "$table"' EXIT
"$MGTRAIN_BUILD/bin/mgtrain" config-keys >"$table"
awk -v table="$table" '
  /<!-- config-keys:begin -->/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /<!-- config-keys:end -->/ { skip = 0 }
  !skip { print }' "$page" >"$page.new"
mv "$page.new" "$page"
