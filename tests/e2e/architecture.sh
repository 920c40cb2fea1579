#!/usr/bin/env bash
# The module boundaries, checked on the sources and on the built libraries:
# - kernels/ and datasets/ include nothing of core/src; plugins and examples/plugin include only
#   the SDK's public headers (mgtrain/...) and their own headers beside them;
# - libmgtrain (the SDK) exports mgt:: symbols but none of the kernels or the layer executor, and
#   loads neither MPI, HDF5 nor OpenSSL (those are the runtime's);
# - every mgt:: symbol a built plugin needs is exported by libmgtrain, so a plugin needs the SDK
#   alone;
# - libmgtrain-gpu.so (when built) needs nothing of the runtime.
source "$(dirname "$0")/lib.sh"
SRC=$(cd "$EXAMPLES/.." && pwd)
BUILD=$(cd "$(dirname "$MGTRAIN")/.." && pwd)
LIB=$BUILD/lib/libmgtrain.so

internal=$(cd "$SRC/core/src" && find . -name '*.hpp' -printf '%f\n' | sort -u)
for module in kernels datasets; do
  while read -r header; do
    ! grep -rn --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' "#include \"$header\"" \
      "$SRC/$module" || fail "$module/ includes core/src's $header"
  done <<<"$internal"
done
# A plugin's own header, next to the file that includes it, is the plugin's.
bad=$(grep -rn '#include "' "$SRC/plugins" "$SRC/examples/plugin" | grep -v '#include "mgtrain/' |
  while IFS= read -r hit; do
    file=${hit%%:*} header=$(sed 's/.*#include "\([^"]*\)".*/\1/' <<<"$hit")
    [[ $header != */* && -f $(dirname "$file")/$header ]] || echo "$hit"
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

gpu=$BUILD/lib/libmgtrain-gpu.so
if [[ -f $gpu ]]; then
  ! objdump -p "$gpu" | awk '/NEEDED/ {print $2}' | grep -q 'libmgtrain-runtime' ||
    fail "libmgtrain-gpu.so needs the runtime"
fi
echo "PASS: $n SDK symbols used by the built-in plugins, all exported; $(wc -l <<<"$exported") exported in all"
