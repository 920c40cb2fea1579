#!/usr/bin/env bash
# Fixture: converts the real Fashion-MNIST (Debian's dataset-fashion-mnist) to the HDF5 format once.
set -euo pipefail
: "${MGTRAIN:?}" "${DATA_DIR:?}"
raw=/usr/share/datasets/fashion-mnist
mkdir -p "$DATA_DIR"
# Converted again when missing, or written by a converter that did not add row checksums yet.
for split in train test; do
  "$MGTRAIN" data inspect "$DATA_DIR/$split.h5" 2>/dev/null | grep -q "^checksums: *'/row_crc32'" ||
    rm -f "$DATA_DIR/$split.h5"
done
[ -f "$DATA_DIR/train.h5" ] || "$MGTRAIN" data convert --images $raw/train-images-idx3-ubyte.gz \
  --labels $raw/train-labels-idx1-ubyte.gz --out "$DATA_DIR/train.h5"
[ -f "$DATA_DIR/test.h5" ] || "$MGTRAIN" data convert --images $raw/t10k-images-idx3-ubyte.gz \
  --labels $raw/t10k-labels-idx1-ubyte.gz --out "$DATA_DIR/test.h5"
"$MGTRAIN" data inspect "$DATA_DIR/train.h5" | grep -q 60000 || { echo "train.h5 does not hold 60000 samples"; exit 1; }
