#!/usr/bin/env bash
# The module boundaries, checked on the sources and on the built libraries:
# - every folder includes only the folders below it (the table ALLOWED below), so the layering
#   stays one that can be drawn;
# - kernels/ and datasets/ include nothing of core/src but base/ (datasets: the converters' atomic
#   file write); plugins and examples/plugin include only the SDK's public headers (mgtrain/...)
#   and their own headers beside them;
# - libmgtrain-runtime, which every rank loads, carries none of the commands that are not training
#   (mgtrain_tools: export, generate, report, bench, verify, compare) and does not load ONNX's
#   protobuf;
# - libmgtrain (the SDK) exports mgt:: symbols but none of the kernels or the layer executor, and
#   loads neither MPI, HDF5 nor OpenSSL (those are the runtime's);
# - every mgt:: symbol a built plugin needs is exported by libmgtrain, so a plugin needs the SDK
#   alone;
# - libmgtrain-gpu.so (when built) needs nothing of the runtime.
source "$(dirname "$0")/lib.sh"
SRC=$(cd "$EXAMPLES/.." && pwd)
BUILD=$(cd "$(dirname "$MGTRAIN")/.." && pwd)
LIB=$BUILD/lib/libmgtrain.so

# The folders and the folders each may include ("" none), besides itself and the SDK's public
# headers (core/include/mgtrain, "mgtrain"), which every folder may include. Bottom up:
#   base      leaf utilities (host name, stop signals, resident memory, SHA-256, the atomic file
#             write): nothing of the project
#   kernels   CPU and GPU kernels: nothing of the project
#   datasets  the data format, reader and converters: base (the converters' atomic write)
#   sdk       libmgtrain, the SDK plugins link: base (idle_core.hpp), kernels, datasets
#   io, observers: base, kernels (io below observers)
#   testing   the test builds' fault injection: observers (the slow rank is a loop callback)
#   comm, loader, checkpoint, device: base and what is drawn before them
#   runtime   the trainer and evaluation: everything above
#   tools     the commands that are not training: the runtime and everything it may use
#   launcher  the executables: everything
#   plugins   the built-in plugins: the SDK's public headers, their own and their kind's common/
#             (checked more closely below)
declare -A ALLOWED=(
  [mgtrain]=""
  [base]=""
  [kernels]=""
  [datasets]="base"
  [sdk]="base kernels datasets"
  [testing]="observers"
  [io]="base kernels"
  [comm]="base io kernels testing"
  [observers]="base io kernels"
  [loader]="base"
  [checkpoint]="base datasets testing"
  [device]="base io comm observers kernels sdk testing"
  [runtime]="base io comm observers loader checkpoint device kernels datasets sdk testing"
  [tools]="base io comm observers loader checkpoint device runtime kernels datasets sdk testing"
  [launcher]="base io comm observers loader checkpoint device runtime tools kernels datasets sdk testing"
  [plugins]=""
)
# The folder a source file belongs to, by its path under the source tree.
folder_of_file() {
  case $1 in
    core/src/*) local rest=${1#core/src/} && echo "${rest%%/*}" ;;
    core/include/*) echo mgtrain ;;
    kernels/* | datasets/* | launcher/* | plugins/*) echo "${1%%/*}" ;;
  esac
}
# The folder an `#include "..."` names: its first component where that is a folder of the
# project, the including file's own for a header beside it, nothing for another library's.
folder_of_include() {  # folder_of_include <header> <including folder>
  local first=${1%%/*}
  if [[ $1 != */* ]]; then
    echo "$2"
  elif [[ -v ALLOWED[$first] ]]; then
    echo "$first"
  fi
}
include_line='^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)"'
broken=$(cd "$SRC" && grep -rn --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' --include='*.h' \
  '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' core/src core/include kernels datasets launcher plugins |
  while IFS= read -r hit; do
    [[ $hit =~ $include_line ]] || continue
    file=${BASH_REMATCH[1]} line=${BASH_REMATCH[2]} header=${BASH_REMATCH[3]}
    from=$(folder_of_file "$file")
    [[ -n $from ]] || continue
    [[ -v ALLOWED[$from] ]] || { echo "$file: folder '$from' is not in the architecture test's table"; continue; }
    to=$(folder_of_include "$header" "$from")
    [[ -z $to || $to == "$from" || $to == mgtrain ]] && continue
    [[ " ${ALLOWED[$from]} " == *" $to "* ]] && continue
    may=${ALLOWED[$from]:+only ${ALLOWED[$from]// /, }}
    echo "$file:$line: includes \"$header\": $from/ may include ${may:-nothing of the project} (the table in tests/e2e/architecture.sh)"
  done)
[[ -z $broken ]] || { echo "$broken"; fail "an include goes against the layering"; }

internal=$(cd "$SRC/core/src" && find . -path ./base -prune -o -name '*.hpp' -printf '%f\n' | sort -u)
for module in kernels datasets; do
  while read -r header; do
    ! grep -rn --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' "#include \"$header\"" \
      "$SRC/$module" || fail "$module/ includes core/src's $header"
  done <<<"$internal"
done
# A plugin's own header, next to the file that includes it, is the plugin's; a built-in plugin
# may also include ../common/<header>, shared by the built-in plugins of its kind
# (plugins/<kind>/common/, itself held to the same rule).
bad=$(grep -rn '#include "' "$SRC/plugins" "$SRC/examples/plugin" | grep -v '#include "mgtrain/' |
  while IFS= read -r hit; do
    file=${hit%%:*} header=$(sed 's/.*#include "\([^"]*\)".*/\1/' <<<"$hit")
    [[ $header != */* && -f $(dirname "$file")/$header ]] && continue
    [[ $file == "$SRC"/plugins/*/*/* && $header =~ ^\.\./common/[^/]+$ && -f $(dirname "$file")/$header ]] && continue
    echo "$hit"
  done || true)
[[ -z $bad ]] || { echo "$bad"; fail "a plugin includes more than the SDK's public headers"; }

exported_raw=$(nm -D --defined-only "$LIB" | awk '{print $3}')
exported=$(c++filt <<<"$exported_raw")
grep -q '^mgt::make_linear' <<<"$exported" || fail "libmgtrain does not export make_linear"
! grep -E '^(typeinfo for |vtable for )?mgt::(kernels::|LayerExecutor|BackendMemory)' <<<"$exported" ||
  fail "libmgtrain exports internals"
needed=$(objdump -p "$LIB" | awk '/NEEDED/ {print $2}')
! grep -E 'libmpi|libhdf5|libcrypto' <<<"$needed" || fail "libmgtrain loads the runtime's libraries: $needed"

n=0
for plugin in "$BUILD"/plugins/*.so; do
  while read -r symbol; do
    grep -qxF "$symbol" <<<"$exported_raw" ||
      fail "$(basename "$plugin") needs $(c++filt "$symbol"), which libmgtrain does not export"
    n=$((n + 1))
  done < <(nm -D --undefined-only "$plugin" | awk '{print $2}' | grep '^_ZN3mgt\|^_ZTIN3mgt\|^_ZTVN3mgt' || true)
done
[[ $n -gt 10 ]] || fail "found only $n SDK symbols used by the built-in plugins"

# The commands that are not training are mgtrain_tools', which the launcher links: a rank that
# trains loads none of them, nor ONNX's protobuf, which only the export uses.
RUNTIME=$BUILD/lib/libmgtrain-runtime.so
runtime_symbols=$(nm -D --defined-only "$RUNTIME" | c++filt)
for tool in export_onnx write_report run_bench compare_checkpoints run_verify generate_text bench_result_json; do
  ! grep -q " mgt::$tool(" <<<"$runtime_symbols" || fail "libmgtrain-runtime carries $tool, a command that is not training"
done
! objdump -p "$RUNTIME" | awk '/NEEDED/ {print $2}' | grep -q 'libprotobuf\|libonnx' ||
  fail "libmgtrain-runtime loads ONNX's protobuf"
grep -q ' mgt::write_report(' < <(nm -C "$MGTRAIN") || fail "the launcher does not carry the report command"

gpu=$BUILD/lib/libmgtrain-gpu.so
if [[ -f $gpu ]]; then
  ! objdump -p "$gpu" | awk '/NEEDED/ {print $2}' | grep -q 'libmgtrain-runtime' ||
    fail "libmgtrain-gpu.so needs the runtime"
fi
echo "PASS: $n SDK symbols used by the built-in plugins, all exported; $(wc -l <<<"$exported") exported in all"
