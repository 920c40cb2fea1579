#!/usr/bin/env bash
# Builds libhdf5 1.14.5 (the source Debian 13 "trixie" ships) from Debian's orig tarball, C library
# only (no HL, C++, Fortran, Java, tools, tests or examples: mgtrain calls the C API only), zlib on,
# szip off, and installs it into a prefix that find_package(HDF5) takes through HDF5_ROOT:
#   tests/fuzz/build_hdf5.sh WORKDIR fuzz|plain
# fuzz:  static, clang, ASan + UBSan + libFuzzer coverage (-fsanitize=fuzzer-no-link), so that a
#        memory error inside libhdf5 is reported where it happens and the fuzzer is guided by the
#        branches libhdf5 takes; for scripts/fuzz.sh.
# plain: shared, the default C compiler, no sanitizers; for building the whole project against it.
# The tarball is cached in WORKDIR and checked against Debian's checksums; the prefix,
# WORKDIR/1.14.5-<flavour>, is kept and reused while its stamp (version and flags) matches.
# Prints the prefix on stdout (everything else goes to stderr). MGTRAIN_FUZZ_JOBS: build
# parallelism (default 1).
set -euo pipefail
work=${1:?usage: $0 WORKDIR fuzz|plain}
flavour=${2:?usage: $0 WORKDIR fuzz|plain}

version=1.14.5
tarball=hdf5_${version}+repack.orig.tar.gz
url=http://deb.debian.org/debian/pool/main/h/hdf5/$tarball
# From hdf5_1.14.5+repack-3.dsc (Checksums-Sha256, Files), the version in Debian trixie.
sha256=71cdb04c151ef4e8a7f88907adfc4f3b75afd44e96fbd55775e1c9d7c4e7c112
md5=e01faccbffa22ca7a0df3c312647e4ce

case $flavour in
  fuzz)
    cc=${MGTRAIN_FUZZ_HDF5_CC:-clang}
    cflags="-g -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all"
    libs=(-DBUILD_SHARED_LIBS=OFF -DBUILD_STATIC_LIBS=ON) ;;
  plain)
    cc=${CC:-cc}
    cflags=""
    libs=(-DBUILD_SHARED_LIBS=ON -DBUILD_STATIC_LIBS=OFF -DONLY_SHARED_LIBS=ON) ;;
  *) echo "$0: flavour must be fuzz or plain, not '$flavour'" >&2; exit 2 ;;
esac

mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/$version-$flavour
stamp="hdf5 $version $flavour cc=$($cc --version | head -1) cflags=$cflags"
if [ -f "$prefix/.mgtrain-stamp" ] && [ "$(cat "$prefix/.mgtrain-stamp")" = "$stamp" ] \
   && [ -f "$prefix/include/H5public.h" ]; then
  echo "$prefix"
  exit 0
fi

verify() {
  echo "$sha256  $1" | sha256sum -c --status && echo "$md5  $1" | md5sum -c --status
}
if [ ! -f "$work/$tarball" ] || ! verify "$work/$tarball"; then
  echo "downloading $url" >&2
  rm -f "$work/$tarball.part"
  if command -v curl >/dev/null; then
    curl -fsSL --retry 3 -o "$work/$tarball.part" "$url"
  else
    wget -q -O "$work/$tarball.part" "$url"
  fi
  if ! verify "$work/$tarball.part"; then
    echo "$0: $tarball does not match Debian's checksums (sha256 $sha256)" >&2
    exit 1
  fi
  mv "$work/$tarball.part" "$work/$tarball"
fi

src=$work/hdf5-$version+repack
if [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$src"
  tar -xzf "$work/$tarball" -C "$work"
fi

echo "building libhdf5 $version ($flavour) into $prefix" >&2
bld=$work/build-$version-$flavour
rm -rf "$bld" "$prefix"
# The configure checks run small programs; with ASan they must not fail on a leak at exit.
export ASAN_OPTIONS=detect_leaks=0
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$cflags" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  "${libs[@]}" -DHDF5_BUILD_HL_LIB=OFF -DHDF5_BUILD_CPP_LIB=OFF -DHDF5_BUILD_FORTRAN=OFF \
  -DHDF5_BUILD_JAVA=OFF -DHDF5_BUILD_TOOLS=OFF -DHDF5_BUILD_UTILS=OFF -DHDF5_BUILD_EXAMPLES=OFF \
  -DBUILD_TESTING=OFF -DHDF5_BUILD_DOC=OFF -DHDF5_ENABLE_Z_LIB_SUPPORT=ON -DZLIB_USE_EXTERNAL=OFF \
  -DHDF5_ENABLE_SZIP_SUPPORT=OFF -DHDF5_ENABLE_PARALLEL=OFF -DHDF5_ENABLE_THREADSAFE=OFF \
  -DHDF5_ENABLE_DEPRECATED_SYMBOLS=ON -DHDF5_NO_PACKAGES=ON >&2
cmake --build "$bld" -j "${MGTRAIN_FUZZ_JOBS:-1}" >&2
cmake --install "$bld" >&2
echo "$stamp" >"$prefix/.mgtrain-stamp"
rm -rf "$bld"
echo "$prefix"
