#!/usr/bin/env bash
# The table of config keys in docs/config-reference.md is the one `mgtrain config-keys` prints
# from the tables the code validates against (scripts/update_docs.sh regenerates it).
source "$(dirname "$0")/lib.sh"
page=$EXAMPLES/../docs/config-reference.md
sed -n '/<!-- config-keys:begin -->/,/<!-- config-keys:end -->/p' "$page" | sed '1d;$d' >documented.md
"$MGTRAIN" config-keys >generated.md
[ -s documented.md ] || fail "docs/config-reference.md has no config-keys section"
diff -u documented.md generated.md || fail "docs/config-reference.md's config keys differ from the code's: run scripts/update_docs.sh"
for key in train.global_batch optimizer.lr sync.staleness model.hidden; do
  grep -q "\`$key\`" generated.md || fail "$key is not documented"
done
