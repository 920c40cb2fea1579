#!/usr/bin/env bash
# Fixture: converts the real Fashion-MNIST (Debian's dataset-fashion-mnist) to the HDF5 format once.
set -euo pipefail
: "${MGTRAIN:?}" "${DATA_DIR:?}"
raw=/usr/share/datasets/fashion-mnist
mkdir -p "$DATA_DIR"
[ -f "$DATA_DIR/train.h5" ] || "$MGTRAIN" data convert --images $raw/train-images-idx3-ubyte.gz \
  --labels $raw/train-labels-idx1-ubyte.gz --out "$DATA_DIR/train.h5"
[ -f "$DATA_DIR/test.h5" ] || "$MGTRAIN" data convert --images $raw/t10k-images-idx3-ubyte.gz \
  --labels $raw/t10k-labels-idx1-ubyte.gz --out "$DATA_DIR/test.h5"
"$MGTRAIN" data inspect "$DATA_DIR/train.h5" | grep -q 60000 || { echo "train.h5 does not hold 60000 samples"; exit 1; }
