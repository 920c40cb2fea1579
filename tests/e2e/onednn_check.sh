#!/usr/bin/env bash
# The configure-time check on oneDNN (cmake/FindDNNL.cmake, as the top-level CMakeLists calls it
# with 2.6): a small CMake project configured against the real oneDNN headers and against copies of
# them made too old, without a version file, and of a non-OpenMP build. The real one configures
# and reports its version; each bad one fails configuration with one line naming what was found
# and what is needed. Usage: onednn_check.sh SOURCE_DIR
source "$(dirname "$0")/lib.sh"
src=$1
real=$(dirname "$(dirname "$(dirname "$(find /usr/include /usr/local/include -path '*/oneapi/dnnl/dnnl.hpp' -print -quit)")")")
[ -f "$real/oneapi/dnnl/dnnl_version.h" ] || fail "no oneDNN headers found under /usr/include or /usr/local/include"
library=$(find /usr/lib /usr/local/lib -name 'libdnnl.so*' -print -quit)
[ -n "$library" ] || fail "no libdnnl.so found under /usr/lib or /usr/local/lib"

mkdir project
cat >project/CMakeLists.txt <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(onednn_check NONE)
list(APPEND CMAKE_MODULE_PATH "$src/cmake")
find_package(DNNL 2.6 REQUIRED)
message(STATUS "oneDNN version \${DNNL_VERSION}")
CMAKE

# headers NAME: a copy of the real headers in NAME/ (edited by the caller).
headers() { mkdir -p "$1/oneapi" && cp -r "$real/oneapi/dnnl" "$1/oneapi/"; }
# said TEXT: cmake.log holds TEXT (CMake wraps its messages: lines are joined first).
said() { tr -s ' \n' '  ' <cmake.log | grep -qF -- "$1"; }
# configure INCLUDE_DIR: runs cmake in a fresh build dir; output in cmake.log, status in rc.
configure() {
  rm -rf build
  set +e
  cmake -S project -B build -DDNNL_INCLUDE_DIR="$1" -DDNNL_LIBRARY="$library" >cmake.log 2>&1
  rc=$?
  set -e
}

configure "$real"
[ "$rc" = 0 ] || { cat cmake.log >&2; fail "configuring against the real oneDNN at $real failed"; }
version=$(sed -n 's/.*oneDNN version \([0-9.]*\).*/\1/p' cmake.log)
[ -n "$version" ] || fail "the real oneDNN's version was not reported: $(cat cmake.log)"

headers old
sed -i 's/#define DNNL_VERSION_MAJOR .*/#define DNNL_VERSION_MAJOR 2/; s/#define DNNL_VERSION_MINOR .*/#define DNNL_VERSION_MINOR 5/' \
  old/oneapi/dnnl/dnnl_version.h
configure "$PWD/old"
[ "$rc" != 0 ] || fail "a oneDNN 2.5 configured"
said "Found unsuitable version \"2.5.$(sed -n 's/#define DNNL_VERSION_PATCH \([0-9]*\).*/\1/p' "$real/oneapi/dnnl/dnnl_version.h")\", but required is at least \"2.6\"" ||
  fail "a oneDNN 2.5: the message does not name the version found and the one needed: $(cat cmake.log)"

headers nover
rm nover/oneapi/dnnl/dnnl_version.h
configure "$PWD/nover"
[ "$rc" != 0 ] || fail "oneDNN headers without dnnl_version.h configured"
said "oneDNN headers at $PWD/nover lack oneapi/dnnl/dnnl_version.h" ||
  fail "headers without a version file: the message does not say so: $(cat cmake.log)"

headers tbb
sed -i 's/^#define DNNL_CPU_RUNTIME .*/#define DNNL_CPU_RUNTIME DNNL_RUNTIME_TBB/' tbb/oneapi/dnnl/dnnl_config.h
configure "$PWD/tbb"
[ "$rc" != 0 ] || fail "a TBB build of oneDNN configured"
said "has '#define DNNL_CPU_RUNTIME DNNL_RUNTIME_TBB', expected DNNL_RUNTIME_OMP" ||
  fail "a TBB build: the message does not name the runtime found and needed: $(cat cmake.log)"
echo "PASS: oneDNN $version configures; 2.5, headers without a version file and a TBB build are refused"
