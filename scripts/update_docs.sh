#!/usr/bin/env bash
# Regenerates the README's table of config keys from the tables the code validates against
# (`mgtrain config-keys`), so the two cannot drift; tests/e2e/docs.sh checks it. Run after a build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
readme=$MGTRAIN_ROOT/README.md
table=$(mktemp)
trap 'rm -f "$table"' EXIT
"$MGTRAIN_BUILD/bin/mgtrain" config-keys >"$table"
awk -v table="$table" '
  /<!-- config-keys:begin -->/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /<!-- config-keys:end -->/ { skip = 0 }
  !skip { print }' "$readme" >"$readme.new"
mv "$readme.new" "$readme"
