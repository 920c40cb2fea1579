#!/usr/bin/env bash
# Damaged training data at np=4: the job ends non-zero, one line names the file and the rows, and
# no rank is left running. Usage: corrupt_data.sh CASE
#   flipped     a byte of /x flipped: the row checksums (/row_crc32) catch it midway
#   unreadable  /x compressed (h5repack) and its compressed bytes damaged: HDF5 cannot read
#               those rows midway
#   truncated   the file cut short: refused before step 1
#   nonfinite   a float32 /x with a NaN in one row (valid HDF5, no checksums to fail): the reader
#               names the row and the rank that read it
source "$(dirname "$0")/lib.sh"
case=$1
write_config run.ini "[data]" "train = $WORK/train.h5" "[train]" "log_every = 100" "progress = lines"

damage() {  # damage FILE OFFSET: sixteen bytes inverted
  local file=$1 offset=$2
  python3 - "$file" "$offset" <<'PY'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at)
    data = bytes(b ^ 0xFF for b in f.read(16))
    f.seek(at)
    f.write(data)
PY
}

case $case in
flipped)
  cp "$DATA_DIR/train.h5" train.h5
  damage train.h5 $(( $(stat -c %s train.h5) / 2 ))
  expect="data file '$WORK/train.h5': row [0-9]* of '/x' and '/y' fails its checksum"
  ;;
unreadable)
  h5repack -f /x:GZIP=1 "$DATA_DIR/train.h5" train.h5
  damage train.h5 $(( $(stat -c %s train.h5) / 2 ))
  expect="data file '$WORK/train.h5': \(reading rows\{0,1\} [0-9.]* of dataset '/x' failed\|row [0-9]* of '/x' and '/y' fails its checksum\)"
  ;;
truncated)
  cp "$DATA_DIR/train.h5" train.h5
  truncate -s $(( $(stat -c %s train.h5) * 6 / 10 )) train.h5
  expect="data file '$WORK/train.h5' could not be opened: .*truncated"
  ;;
nonfinite)
  # 512 rows of 784 float features (0.5), one of them 12345.678: its float32 bytes become a NaN's.
  awk 'BEGIN { for (i = 0; i < 512; i++) { line = i % 10
               for (j = 0; j < 784; j++) line = line "," (i == 300 && j == 5 ? "12345.678" : "0.5"); print line } }' >f.csv
  "$MGTRAIN" data convert --csv f.csv --shape 784 --out f.h5 >/dev/null
  # Only /x and /y: row checksums would catch the change before the values are looked at.
  h5copy -i f.h5 -o train.h5 -s /x -d /x && h5copy -i f.h5 -o train.h5 -s /y -d /y
  python3 - train.h5 <<'PY'
import struct, sys
path = sys.argv[1]
data = open(path, "rb").read()
value = struct.pack("<f", 12345.678)
assert data.count(value) == 1, data.count(value)
open(path, "wb").write(data.replace(value, struct.pack("<I", 0x7FC00000)))
PY
  expect="mgtrain: error: \[rank [0-3]\] data file '$WORK/train.h5': row 300 of '/x' holds NaN at element 5"
  ;;
*) fail "unknown case $case" ;;
esac

rc=0
run_np 4 300 train --config run.ini >run.log 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat run.log; fail "exit $rc"; }
one_error_line run.log
grep -q "$expect" run.log || { cat run.log; fail "no line matches /$expect/"; }
no_ranks_left
echo PASS
