#!/usr/bin/env bash
# Packs what scripts/device-check.sh needs on a GPU machine that has the CUDA, cuDNN and NCCL pip
# wheels but none of this project's other dependencies (Open MPI, HDF5, Boost, oneDNN):
#   bin/      the launcher, mgtrain-doctor and the GPU test binaries of a CUDA build
#   lib/      libmgtrain and every shared library these load that is neither glibc nor CUDA
#   gcc/      the GCC runtime (libstdc++, libgcc_s, libgomp), used there only if its own is older
#   plugins/  the built-in plugins (the optimizer tests load sgd and adam)
#   openmpi/  Open MPI's components, help texts and settings, for a singleton run
#   data/     Fashion-MNIST's 10,000 test images as IDX (for PyTorch) and as mgtrain's HDF5; English
#             text (fortunes' cookie file) as byte tokens
#   bench/    the PyTorch reference of the GPU benchmark (and the models it shares with the CPU one)
# CUDA libraries (cudart, cuBLAS, cuDNN, NCCL, the driver's) are never packed: the machine's own
# are the ones to test against. BUILD_DIR must be built for sm_90 (the default architectures).
# Usage: scripts/pack-device-libs.sh [BUILD_DIR] [OUT.tar.xz]
set -euo pipefail
build=${1:-build-gpu}
out=${2:-$build/device-bundle.tar.xz}
multiarch=/usr/lib/x86_64-linux-gnu
[[ -x $build/bin/mgtrain && -e $build/lib/libmgtrain.so ]] || { echo "no CUDA build in $build" >&2; exit 1; }
ls "$build"/bin/gpu_* >/dev/null 2>&1 || { echo "$build has no GPU tests: configure it with CUDA" >&2; exit 1; }
# The device is an H200 (sm_90): a build for other GPUs only would JIT or fail there.
grep -qE '^CMAKE_CUDA_ARCHITECTURES:STRING=.*90' "$build/CMakeCache.txt" ||
  { echo "$build is not built for sm_90 ($(grep '^CMAKE_CUDA_ARCHITECTURES' "$build/CMakeCache.txt")): configure it with the default architectures" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/device-bundle
mkdir -p "$root"/{bin,lib,gcc,plugins,openmpi,data,bench}
cp -L "$build"/bin/mgtrain "$build"/bin/mgtrain-doctor "$build"/bin/gpu_* "$root/bin/"
soname=$(objdump -p "$build/lib/libmgtrain.so" | awk '/SONAME/ {print $2}')
cp -L "$build/lib/libmgtrain.so" "$root/lib/$soname"
# The GPU path, which libmgtrain loads from its own directory.
cp -L "$build/lib/libmgtrain-gpu.so" "$root/lib/"
idx=/usr/share/datasets/fashion-mnist
cp "$idx"/t10k-images-idx3-ubyte.gz "$idx"/t10k-labels-idx1-ubyte.gz "$root/data/"
"$build/bin/mgtrain" data convert --images "$idx/t10k-images-idx3-ubyte.gz" --labels "$idx/t10k-labels-idx1-ubyte.gz" \
  --out "$root/data/train.h5" >/dev/null
# English text as byte tokens, for the language model's checks (Debian's fortunes package).
"$build/bin/mgtrain" data convert --text /usr/share/games/fortunes/cookie --out "$root/data/text.h5" >/dev/null
cp "$(dirname "$0")"/../benchmarks/pytorch_{gpu,ddp}.py "$root/bench/"
cp -L "$build"/plugins/libmgtrain-*.so "$root/plugins/"
cp -a $multiarch/openmpi/lib "$root/openmpi/lib"
rm -f "$root"/openmpi/lib/*.a "$root"/openmpi/lib/*.la "$root"/openmpi/lib/openmpi3/*.la
cp -a /usr/share/openmpi "$root/openmpi/share"
cp -a /etc/openmpi "$root/openmpi/etc"

# Every library any of these files loads, by the name the loader asks for.
glibc='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libnsl|libanl|libBrokenLocale|libthread_db|libnss_[a-z]+)\.so'
cuda='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z-]+|libnvrtc[a-z.-]*|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|libnvToolsExt)\.so'
gcc='^(libstdc\+\+|libgcc_s|libgomp|libatomic|libquadmath|libgfortran)\.so'
missing=0
while IFS= read -r file; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ $name =~ $glibc || $name =~ $cuda ]] && continue
    if [[ $path == "not" ]]; then
      echo "$file needs $name, which is not found here" >&2
      missing=1
      continue
    fi
    [[ $name == libmgtrain.so* ]] && continue
    if [[ $name =~ $gcc ]]; then dest=$root/gcc/$name; else dest=$root/lib/$name; fi
    [[ -e $dest ]] || cp -L "$path" "$dest"
  done < <(ldd "$file" 2>/dev/null)
done < <(find "$root" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
[[ $missing == 0 ]] || exit 1

echo "glibc the binaries need at least: $(objdump -T "$root"/bin/* "$root"/lib/* 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
XZ_OPT=${XZ_OPT:--6 -T0} tar -cJf "$out" -C "$stage" device-bundle
echo "$out: $(du -h "$out" | cut -f1) ($(du -sh "$root" | cut -f1) unpacked)"
