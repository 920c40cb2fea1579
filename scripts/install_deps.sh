#!/usr/bin/env bash
# Installs the Debian packages mgtrain needs, skipping what is already there. Called by every entry
# point (demo.sh, test.sh, .ci/run); safe to run again. Works as root or as a user with sudo.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  openmpi-bin libopenmpi-dev
  libhdf5-dev hdf5-tools zlib1g-dev
  # CRC-32 of rows and checkpoints (zlib's values, several times faster than zlib's)
  libdeflate-dev
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  # the data reader's fiber (core/src/sdk/idle_core.cpp)
  libboost-context-dev
  libdnnl-dev libgtest-dev
  # JSON lines out and in (header-only); SHA-256 for `mgtrain verify`
  nlohmann-json3-dev libssl-dev
  # PNG and JPEG decoding for `mgtrain data convert --image-folder`
  libpng-dev libjpeg62-turbo-dev
  # ONNX's protobuf messages for `mgtrain export` (onnx/onnx-ml.pb.h, libonnx_proto)
  libonnx-dev libprotobuf-dev
  # SentencePiece tokenizers for `mgtrain data tokenizer` and token files (datasets/tokenizer.cpp)
  libsentencepiece-dev
  dataset-fashion-mnist
  # English text for the language-model tests and example (/usr/share/games/fortunes)
  fortunes
  # the format check (scripts/check_format.sh, .clang-format)
  clang-format
  # the TensorBoard and ONNX Runtime tests: a venv for tensorboard, onnxruntime, onnx from PyPI
  python3 python3-venv
  # the data-checking tests edit HDF5 files (virtual datasets, lzf) with h5py
  python3-h5py
  # the timeline test: Perfetto's trace processor (WebAssembly, from a PyPI wheel) runs on Node.js
  nodejs
  # the Slurm test: a real one-node cluster (libpmix-dev: Slurm's PMIx plugin loads libpmix.so)
  slurmctld slurmd slurm-client munge libpmix-dev
  # the tests across simulated nodes: network namespaces, a bridge, veths, tc (ip, tc); unshare,
  # nsenter and flock come with util-linux
  iproute2 util-linux
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
