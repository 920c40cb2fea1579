# Sourced by the scripts: build directory, parallelism and what mpirun needs as root.
MGTRAIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MGTRAIN_BUILD=${MGTRAIN_BUILD:-$MGTRAIN_ROOT/build}
MGTRAIN_JOBS=${MGTRAIN_JOBS:-$(nproc)}
if [ "$(id -u)" -eq 0 ]; then
  # Open MPI refuses to run as root unless told twice.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Quiet, predictable single-node runs: no attempts at networks this machine lacks.
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

mgtrain_build() {  # mgtrain_build <build type> [extra cmake args]
  local type=$1; shift
  cmake -S "$MGTRAIN_ROOT" -B "$MGTRAIN_BUILD" -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
  cmake --build "$MGTRAIN_BUILD" -j "$MGTRAIN_JOBS"
}

# Converts Debian's Fashion-MNIST (IDX) to data/fashion_mnist_{train,test}.h5 unless present.
prepare_fashion_mnist() {  # prepare_fashion_mnist <mgtrain binary>
  local mgtrain=$1 raw=/usr/share/datasets/fashion-mnist split
  mkdir -p "$MGTRAIN_ROOT/data"
  for split in train:train t10k:test; do
    local out="$MGTRAIN_ROOT/data/fashion_mnist_${split#*:}.h5"
    [ -f "$out" ] || "$mgtrain" data convert --images "$raw/${split%%:*}-images-idx3-ubyte.gz" \
      --labels "$raw/${split%%:*}-labels-idx1-ubyte.gz" --out "$out"
  done
}
