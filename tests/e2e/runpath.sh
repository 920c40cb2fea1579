#!/usr/bin/env bash
# No library is looked up in the directory mgtrain is run from: every ELF file of the build tree
# and of an installed copy has only absolute or $ORIGIN entries in its RUNPATH/RPATH (an empty
# entry, as CMake's padding of the build tree's RUNPATH left, or a relative one is the current
# directory to the loader), and a libdeflate.so.0 and libz.so.1 left in the current directory are
# not loaded by the build tree's or the installed launcher.
source "$(dirname "$0")/lib.sh"

BUILD=$(cd "$(dirname "$MGTRAIN")/.." && pwd)   # <build>/bin/mgtrain
PREFIX=$WORK/prefix
[[ -f $BUILD/CMakeCache.txt ]] || fail "no CMake build directory above $MGTRAIN"
cmake --install "$BUILD" --prefix "$PREFIX" >install.log 2>&1 || { cat install.log; fail "cmake --install $BUILD"; }

check_search_paths "$BUILD/bin" "$BUILD/lib" "$BUILD/plugins" "$BUILD/test-plugins" "$PREFIX"
[[ $SEARCH_PATHS_CHECKED -gt 20 ]] || fail "checked only $SEARCH_PATHS_CHECKED ELF files"
echo "search paths of $SEARCH_PATHS_CHECKED ELF files: absolute or \$ORIGIN"

# Libraries the launcher's libraries need, planted where a user runs it: each writes a marker
# when loaded. libz.so.1's versioned symbols would make the loader refuse it before its
# constructor runs, so a load of it shows as a launcher that does not start.
mkdir planted
cat >planted.c <<'C'
#include <fcntl.h>
#include <unistd.h>
#include <stdint.h>
#include <stddef.h>
__attribute__((constructor)) static void planted_loaded(void) {
  int fd = open(PLANTED_MARKER, O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
}
uint32_t libdeflate_crc32(uint32_t crc, const void* buffer, size_t length) { (void)buffer; (void)length; return crc; }
C
for lib in libdeflate.so.0 libz.so.1; do
  cc -shared -fPIC -DPLANTED_MARKER="\"$WORK/loaded-$lib\"" -Wl,-soname,$lib planted.c -o "planted/$lib" ||
    fail "could not build the planted $lib"
done
for launcher in "$MGTRAIN" "$PREFIX/bin/mgtrain"; do
  (cd planted && "$launcher" --version) >version.log 2>&1 ||
    { cat version.log; fail "$launcher --version failed with libraries planted in the current directory"; }
  for lib in libdeflate.so.0 libz.so.1; do
    [[ ! -e $WORK/loaded-$lib ]] || fail "$launcher loaded $lib from the current directory"
  done
done
echo "planted libraries in the current directory: not loaded"
