#!/usr/bin/env bash
# The README's table of config keys is the one `mgtrain config-keys` prints from the tables the
# code validates against (scripts/update_docs.sh regenerates it).
source "$(dirname "$0")/lib.sh"
readme=$EXAMPLES/../README.md
sed -n '/<!-- config-keys:begin -->/,/<!-- config-keys:end -->/p' "$readme" | sed '1d;$d' >documented.md
"$MGTRAIN" config-keys >generated.md
[ -s documented.md ] || fail "README.md has no config-keys section"
diff -u documented.md generated.md || fail "README.md's config keys differ from the code's: run scripts/update_docs.sh"
for key in train.global_batch optimizer.lr sync.staleness model.hidden; do
  grep -q "\`$key\`" generated.md || fail "$key is not documented"
done
