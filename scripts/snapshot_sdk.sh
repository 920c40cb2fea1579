#!/usr/bin/env bash
# Keeps the SDK of a release as it was: copies the public headers (with the generated version.hpp)
# and the example plugins' sources into tests/abi/sdk-<major>.<minor>/, with their SHA-256 sums.
# Run once, when a version is declared; never edit a snapshot afterwards. tests/abi builds those
# plugins from those headers and tests/e2e/sdk_abi.sh trains them with the current mgtrain, so a
# change that would break a plugin author's binary fails the build's tests (docs/plugins.md).
#   scripts/snapshot_sdk.sh            # the version plugin.hpp declares
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$MGTRAIN_ROOT"
plugin_hpp=core/include/mgtrain/plugin.hpp
major=$(sed -n 's/^#define MGTRAIN_SDK_VERSION_MAJOR \([0-9]*\)u.*/\1/p' $plugin_hpp)
minor=$(sed -n 's/^#define MGTRAIN_SDK_VERSION_MINOR \([0-9]*\)u.*/\1/p' $plugin_hpp)
[[ -n $major && -n $minor ]] || { echo "snapshot_sdk.sh: no MGTRAIN_SDK_VERSION_MAJOR/MINOR in $plugin_hpp" >&2; exit 1; }
out=tests/abi/sdk-$major.$minor
[[ ! -e $out ]] || { echo "snapshot_sdk.sh: $out exists; a snapshot is never rewritten" >&2; exit 1; }
version=$(sed -n 's/^project(mgtrain VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)
mkdir -p "$out/include/mgtrain" "$out/plugins"
cp core/include/mgtrain/*.hpp "$out/include/mgtrain/"
sed "s/@PROJECT_VERSION@/$version/" core/include/mgtrain/version.hpp.in >"$out/include/mgtrain/version.hpp"
cp examples/plugin/*.cpp examples/plugin/*.hpp "$out/plugins/"
(cd "$out" && find include plugins -type f | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "SDK $major.$minor kept in $out ($(find "$out" -type f | wc -l) files)"
