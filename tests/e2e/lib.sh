# Shared by the end-to-end tests: paths from ctest's environment and small assertions.
# Expects MGTRAIN (the launcher), DATA_DIR (converted Fashion-MNIST), WORK (a scratch directory).
set -euo pipefail
: "${MGTRAIN:?}" "${DATA_DIR:?}" "${WORK:?}"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# For a test that needs what a machine may not give its user (root, mount or network namespaces:
# a chroot or an unprivileged container has none): SKIP with the reason and exit 77, which ctest
# counts as a skip (SKIP_RETURN_CODE), as the GPU tests skip without a GPU. Where
# MGTRAIN_REQUIRE_NAMESPACES=1 (CI sets it, .ci/run) the same is a failure, so that these tests
# cannot stop running there unnoticed. Usage: namespaces_unavailable REASON
namespaces_unavailable() {
  [ "${MGTRAIN_REQUIRE_NAMESPACES:-0}" != 1 ] || fail "$* (MGTRAIN_REQUIRE_NAMESPACES=1: the test must run here)"
  echo "SKIP: $*" >&2
  exit 77
}

# English text for the language-model tests: Debian's fortunes package (scripts/install_deps.sh).
FORTUNES=/usr/share/games/fortunes
require_fortunes() {
  [ -r "$FORTUNES/cookie" ] || fail "no $FORTUNES/cookie: install the fortunes package (scripts/install_deps.sh)"
}

# mpirun with a hard outer limit, so a hang is a failure. Usage: run_np NP SECONDS args...
run_np() {
  local np=$1 limit=$2; shift 2
  timeout --kill-after=10 "$limit" mpirun -np "$np" --oversubscribe "$MGTRAIN" "$@"
}

# Runs a command with the training step in the memory named: "device" as a GPU rank runs it (its
# own copies in the backend's memory, its own executor, the batch staged: the test-only
# MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY), so that the GPU path's program is checked on the CPU
# backend; "host" in place, as every CPU rank trains. Usage: in_memory host|device COMMAND...
in_memory() {
  local memory=$1; shift
  if [ "$memory" = device ]; then MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1 "$@"; else "$@"; fi
}

# SHA-256 of every dataset under GROUP of a checkpoint, from h5dump's raw binary output.
group_hash() {
  local file=$1 group=$2 out=""
  for name in $(h5ls "$file/$group" | awk '{print $1}'); do
    h5dump -d "$group/$name" -b LE -o "$WORK/.raw" "$file" >/dev/null
    out+="$name $(sha256sum <"$WORK/.raw" | cut -c1-64)"$'\n'
  done
  rm -f "$WORK/.raw"
  printf '%s' "$out" | sha256sum | cut -c1-64
}

# A small training config on the converted Fashion-MNIST files. Extra lines ("[section]",
# "key = value") are merged in: a key already there takes the new value, a new one joins its
# section, since mgtrain refuses a key or a section written twice.
write_config() {
  local path=$1; shift
  cat >"$path.base" <<INI
[data]
train = $DATA_DIR/train.h5
test = $DATA_DIR/test.h5
[model]
name = mlp
[optimizer]
name = sgd
lr = 0.02
momentum = 0.9
[train]
epochs = 1
global_batch = 128
seed = 7
log_every = 50
[checkpoint]
dir = $WORK/ckpt
INI
  printf '%s\n' "$@" | awk '
    function key_of(line) { sub(/[ \t]*=.*/, "", line); sub(/^[ \t]+/, "", line); return line }
    /^[ \t]*\[/ { section = $0; gsub(/^[ \t]*\[[ \t]*|[ \t]*\][ \t]*$/, "", section)
                  if (!(section in seen)) { seen[section] = 1; order[++sections] = section }
                  next }
    /=/ { k = key_of($0); id = section SUBSEP k
          if (!(id in value)) keys[section] = keys[section] SUBSEP k
          value[id] = $0; next }
    END {
      for (i = 1; i <= sections; i++) {
        s = order[i]; print "[" s "]"
        n = split(substr(keys[s], 2), list, SUBSEP)
        for (j = 1; j <= n; j++) print value[s SUBSEP list[j]]
      }
    }' "$path.base" - >"$path"
  rm -f "$path.base"
}

# A python3 that imports h5py (Debian: python3-h5py, from scripts/install_deps.sh): $PYTHON or the
# one on PATH, else Debian's own, which another python3 on PATH may hide. Prints its path.
h5py_python() {
  local candidate
  for candidate in "${PYTHON:-python3}" /usr/bin/python3; do
    "$candidate" -c "import h5py" 2>/dev/null && { echo "$candidate"; return 0; }
  done
  fail "no python3 on PATH or in /usr/bin imports h5py (scripts/install_deps.sh installs python3-h5py)"
}

# Runs the Python statements PYTHON with f, FILE opened read-write by h5py (sys, zlib, h5py and
# numpy as np imported): for tests that damage or forge a data file in ways h5edit.py has no verb for.
h5py_edit() {  # h5py_edit FILE PYTHON
  "$(h5py_python)" - "$1" "$2" <<'PY'
import sys, zlib, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    exec(sys.argv[2])
PY
}

# Exactly one "mgtrain: error:" line in LOG, which is printed (the log is shown otherwise).
one_error_line() {  # one_error_line LOG
  local n
  n=$(grep -c "mgtrain: error:" "$1" || true)
  [ "$n" = 1 ] || { cat "$1"; fail "expected one error line, found $n"; }
  grep "mgtrain: error:" "$1"
}

# No process of this test's training job (mpirun or a rank: started in $WORK) is left once mpirun
# has returned (a few seconds of grace for the kernel to reap them). Tests run in parallel under
# ctest -j must not see each other's jobs, hence the working directory.
job_processes() {
  local here p
  here=$(cd "$WORK" && pwd -P)
  for p in $(pgrep -f "mgtrain train --config"); do
    [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$here" ] && echo "$p"
  done
  return 0
}
no_ranks_left() {
  for _ in 1 2 3 4 5; do
    [ -n "$(job_processes)" ] || return 0
    sleep 1
  done
  ps -o pid,stat,args -p "$(job_processes | paste -sd,)"
  fail "mgtrain processes are left running"
}

json_field() {  # json_field FIELD < line
  sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p"
}

# mgtrain installed into $WORK/prefix and examples/plugin built out of tree against it, as a plugin
# author does; LIB must be among the plugins. Sets PREFIX, PLUGIN_BUILD (plugins in
# $PLUGIN_BUILD/plugins) and MGTRAIN (the installed launcher). Usage: build_example_plugins LIB
build_example_plugins() {
  local src build
  src=$(cd "$EXAMPLES/.." && pwd)
  build=$(cd "$(dirname "$MGTRAIN")/.." && pwd)
  PREFIX=$WORK/prefix
  PLUGIN_BUILD=$WORK/plugin-build
  cmake --install "$build" --prefix "$PREFIX" >install.log 2>&1 || { cat install.log; fail "cmake --install $build"; }
  cmake -S "$src/examples/plugin" -B "$PLUGIN_BUILD" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release \
    >configure.log 2>&1 || { cat configure.log; fail "configure examples/plugin"; }
  cmake --build "$PLUGIN_BUILD" -j2 >build.log 2>&1 || { cat build.log; fail "build examples/plugin"; }
  [[ -f $PLUGIN_BUILD/plugins/$1 ]] || fail "no $1"
  MGTRAIN=$PREFIX/bin/mgtrain
}

# An error-feedback strategy's checkpoint holds every rank's residual (/sync/residual.rank<R>),
# and rank 1's is not all zero (the rounding left something behind).
check_residuals() {  # check_residuals CHECKPOINT RANKS
  local r
  h5ls -r "$1" >listing.txt
  for r in $(seq 0 $(($2 - 1))); do
    grep -q "^/sync/residual.rank$r " listing.txt || { cat listing.txt; fail "no residual of rank $r in $1"; }
  done
  h5dump -d /sync/residual.rank1 -y -w 0 "$1" | awk '/DATA \{/ { on = 1; next } on && /\}/ { exit } on' |
    tr ',' '\n' | awk '$1 != 0 { n++ } END { exit !(n > 0) }' || fail "rank 1's residual in $1 is all zero"
}

# No library looked up in the current directory: every ELF file under each DIR has only absolute
# or $ORIGIN entries in its RUNPATH/RPATH (an empty entry, as from a leading, trailing or doubled
# ':', and a relative one are the current directory to the loader). Counts the files checked in
# SEARCH_PATHS_CHECKED. Usage: check_search_paths DIR...
SEARCH_PATHS_CHECKED=0
check_search_paths() {
  local file entries entry
  while IFS= read -r -d '' file; do
    head -c 4 "$file" | grep -q $'^\x7fELF' || continue
    SEARCH_PATHS_CHECKED=$((SEARCH_PATHS_CHECKED + 1))
    entries=$(readelf -d "$file" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]$/\2/p')
    [[ -n $entries ]] || continue
    # An empty entry (leading, trailing or doubled ':') is the current directory.
    [[ $entries != :* && $entries != *: && $entries != *::* ]] ||
      fail "$file: RUNPATH '$entries' has an empty entry (the current directory)"
    IFS=: read -ra parts <<<"$entries"
    for entry in "${parts[@]}"; do
      [[ $entry == /* || $entry == '$ORIGIN'* || $entry == '${ORIGIN}'* ]] ||
        fail "$file: RUNPATH '$entries' has the relative entry '$entry'"
    done
  done < <(find "$@" -type f -print0)
}
