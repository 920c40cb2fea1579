#!/usr/bin/env bash
# Data a run must refuse before step 1, and a data file cut short while it is read. Each case ends
# with one line naming the file and what is wrong, a non-zero exit and no rank left running.
# Usage: data_checks.sh CASE
#   cut_short        train.h5 truncated, then restored, over and over while two ranks read it: 8
#                    runs (4 with the reader as a fiber on the step's core, 4 as a thread), each
#                    ends with "is now N bytes, was M" (or "ended before byte B"), never a SIGBUS
#   virtual_missing  /x a virtual dataset whose source file is gone: refused by train (data.train,
#                    then data.test) and by data inspect, naming the source; one whose sources
#                    leave rows unmapped: refused by data inspect
#   label_range      a label 10 in row 59999 of data.train (num_classes 10): refused before step 1
#   mean_string      /x's attribute mean a string: refused naming it (train and data inspect)
#   std_missing      /x's attribute std deleted beside mean: refused naming it
#   statistics_range /x's attribute mean 1e300 or NaN, std 1e-45 or 0: refused naming the attribute
#                    (train and data inspect), not left to become a non-finite gradient
#   dangling_link    /x an external link to a missing file (or one lacking /x), /y a soft link to
#                    nothing: refused naming the link's target; one that leads to /x is read
#   big_endian       the same float32 rows little- and big-endian, checksums over the stored bytes:
#                    both train to the same bits (read from the file or from memory); a changed
#                    byte of the big-endian file fails its checksum
#   csv_overflow     data convert --csv with 1e300 in a feature column: refused naming the line
#                    and column, no file written
#   lzf              /x compressed with lzf, which Debian's HDF5 lacks: refused naming the filter
# The data files are edited with h5py (Debian: python3-h5py, from scripts/install_deps.sh).
source "$(dirname "$0")/lib.sh"
case=$1
python=$(h5py_python)
write_config run.ini "[data]" "train = $WORK/train.h5" "test = " "[train]" "log_every = 1" "progress = lines"

# No step was taken: no checkpoint and no step's line in LOG.
no_step_taken() {
  ! ls ckpt/step-*.h5 >/dev/null 2>&1 || fail "a checkpoint was written before the data was refused"
  ! grep -q '^epoch [0-9]*/[0-9]* step ' "$1" || { cat "$1"; fail "steps ran before the data was refused"; }
}

# Trains on run.ini; expects one error line matching EXPECT, a non-zero exit and no step.
expect_refused() {  # expect_refused EXPECT
  local rc=0
  run_np 2 180 train --config run.ini >run.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat run.log; fail "exit $rc"; }
  one_error_line run.log
  grep -q "$1" run.log || { cat run.log; fail "no line matches /$1/"; }
  no_step_taken run.log
  no_ranks_left
}

# data inspect FILE refuses it with one error line matching EXPECT.
expect_inspect_refused() {  # expect_inspect_refused FILE EXPECT
  local rc=0
  "$MGTRAIN" data inspect "$1" >inspect.log 2>&1 || rc=$?
  [ $rc -ne 0 ] || { cat inspect.log; fail "data inspect accepted '$1'"; }
  one_error_line inspect.log
  grep -q "$2" inspect.log || { cat inspect.log; fail "no line matches /$2/"; }
}

case $case in
cut_short)
  cp "$DATA_DIR/train.h5" train.h5
  cp train.h5 whole.h5
  bytes=$(stat -c %s train.h5)
  write_config run.ini "[data]" "train = $WORK/train.h5" "test = " "[train]" "epochs = 50" "log_every = 1" \
    "progress = lines" "[checkpoint]" "every_steps = 0"
  for run in 1 2 3 4 5 6 7 8; do
    # Runs 5 to 8 leave the ranks unbound: each rank's reader is then a thread of its own.
    bind=(); [ "$run" -le 4 ] || bind=(--bind-to none)
    # The job's shell opens run.log when it starts, after the loop below may have read it: the
    # previous run's log must not be there to be read as this run's.
    rm -rf ckpt run.log; rc=0
    timeout --kill-after=10 180 mpirun -np 2 --oversubscribe "${bind[@]}" "$MGTRAIN" train --config run.ini \
      >run.log 2>&1 &
    job=$!
    for _ in $(seq 600); do grep -qs '^epoch [0-9]*/[0-9]* step ' run.log && break; sleep 0.1; done
    grep -q '^epoch [0-9]*/[0-9]* step ' run.log || { kill $job; cat run.log; fail "run $run took no step"; }
    # Cut short and restored over and over, so that some cuts fall between the reader's check of
    # the file's size and its copies out of the mapping: a SIGBUS there, unless the copy is guarded.
    for _ in $(seq 200); do
      kill -0 $job 2>/dev/null || break
      truncate -s 4096 train.h5
      dd if=whole.h5 of=train.h5 conv=notrunc status=none
    done
    wait $job || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat run.log; fail "run $run: exit $rc"; }
    ! grep -qi 'sigbus\|bus error\|signal 7' run.log || { cat run.log; fail "run $run: a SIGBUS"; }
    # Every rank that read the file while it was short says so, one line each, and nothing else.
    cut="mgtrain: error: \[rank [01]\] data file '$WORK/train.h5' \(is now [0-9]* bytes\|ended before byte [0-9]* while it was read\), was $bytes when the run opened it"
    grep -q "$cut" run.log || { cat run.log; fail "run $run: no line says the file was cut short"; }
    ! grep "mgtrain: error:" run.log | grep -vq "$cut" || { cat run.log; fail "run $run: another error line"; }
    cmp -s train.h5 whole.h5 || fail "train.h5 was not restored"
    no_ranks_left
    echo "run $run: $(grep 'mgtrain: error:' run.log)"
  done
  ;;
virtual_missing)
  # x.h5 holds the samples; train.h5's /x maps them, its /y and attributes are its own.
  "$python" - "$DATA_DIR/train.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File("x.h5", "w") as xf, h5py.File("train.h5", "w") as f:
    xf.create_dataset("x", data=src["x"][...])
    layout = h5py.VirtualLayout(shape=src["x"].shape, dtype=src["x"].dtype)
    layout[...] = h5py.VirtualSource("x.h5", "x", shape=src["x"].shape)
    x = f.create_virtual_dataset("x", layout, fillvalue=0)
    for k, v in src["x"].attrs.items(): x.attrs[k] = v
    f.create_dataset("y", data=src["y"][...])
    for k, v in src.attrs.items(): f.attrs[k] = v
PY
  # Accepted while its source is there, from another directory too (beside the file, as HDF5 finds it).
  (cd / && "$MGTRAIN" data inspect "$WORK/train.h5" >"$WORK/inspect.log" 2>&1) ||
    { cat inspect.log; fail "a virtual dataset whose source is beside it was refused"; }
  cp train.h5 test.h5
  rm x.h5
  expect="data file '$WORK/train.h5': dataset '/x' is virtual and maps its rows 0..59999 to source dataset '/x' of 'x.h5', a file that does not exist"
  expect_refused "$expect"
  expect_inspect_refused "$WORK/train.h5" "$expect"
  write_config run.ini "[data]" "train = $DATA_DIR/train.h5" "test = $WORK/test.h5" "[train]" "log_every = 1" \
    "progress = lines"
  expect_refused "data.test: data file '$WORK/test.h5': dataset '/x' is virtual and maps its rows 0..59999 to source dataset '/x' of 'x.h5', a file that does not exist"
  # Rows that no source maps read as zeros too.
  "$python" - <<'PY'
import h5py, numpy as np
with h5py.File("part.h5", "w") as f:
    f.create_dataset("rows", data=np.ones((100, 4), dtype="u1"))
    layout = h5py.VirtualLayout(shape=(200, 4), dtype="u1")
    layout[0:100] = h5py.VirtualSource(".", "rows", shape=(100, 4))
    f.create_virtual_dataset("x", layout, fillvalue=0)
    f.create_dataset("y", data=np.zeros(200, dtype="i4"))
PY
  expect_inspect_refused "$WORK/part.h5" "data file '$WORK/part.h5': dataset '/x' is virtual and declares 200 rows but its sources map 400 of its 800 values"
  ;;
label_range)
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'f["y"][59999] = 10; assert f.attrs.get("num_classes", f["x"].attrs.get("num_classes")) == 10'
  expect_refused "data file '$WORK/train.h5': dataset '/y' row 59999 has label 10, expected 0 <= label < 10 (num_classes)"
  ;;
mean_string)
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'x = f["x"]; v = float(x.attrs["mean"]); del x.attrs["mean"]; x.attrs["mean"] = str(v)'
  expect="data file '$WORK/train.h5': attribute 'mean' of '/x' has type string, expected numbers (one, or one per channel of the samples)"
  expect_refused "$expect"
  expect_inspect_refused "$WORK/train.h5" "$expect"
  ;;
std_missing)
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'del f["x"].attrs["std"]; assert "std" not in f.attrs'
  expect="data file '$WORK/train.h5': attribute 'mean' is there but 'std' is not, expected both (normalisation) or neither"
  expect_refused "$expect"
  expect_inspect_refused "$WORK/train.h5" "$expect"
  ;;
statistics_range)
  # A mean float32 cannot hold made every sample -inf: blamed on a non-finite gradient in fc1.
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'f["x"].attrs["mean"] = np.float64(1e300)'
  expect="data file '$WORK/train.h5': attribute 'mean' of '/x' is 1e+300, expected a finite number of magnitude at most 3.40282e+38 (float32)"
  expect_refused "$expect"
  expect_inspect_refused "$WORK/train.h5" "$expect"
  h5py_edit train.h5 'f["x"].attrs["mean"] = np.float64("nan")'
  expect_inspect_refused "$WORK/train.h5" "attribute 'mean' of '/x' is nan, expected a finite number"
  # A std whose inverse float32 cannot hold, and one of 0.
  for sd in 1e-45 0; do
    cp "$DATA_DIR/train.h5" train.h5
    h5py_edit train.h5 "f['x'].attrs['std'] = np.float64($sd)"
    expect_refused "data file '$WORK/train.h5': attribute 'std' of '/x' is $sd, expected a number from 1.17549e-38 to 3.40282e+38"
  done
  ;;
dangling_link)
  # /x an external link to a file that is not there was "not a dataset".
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'del f["x"]; f["x"] = h5py.ExternalLink("missing.h5", "/x")'
  expect="data file '$WORK/train.h5': dataset '/x' is an external link to '/x' in 'missing.h5', a file that does not exist (expected the samples"
  expect_refused "$expect"
  expect_inspect_refused "$WORK/train.h5" "$expect"
  # To a file that is there but lacks the object; a soft link to a path the file lacks.
  "$python" -c 'import h5py; h5py.File("other.h5", "w").create_dataset("z", data=[1])'
  h5py_edit train.h5 'del f["x"]; f["x"] = h5py.ExternalLink("other.h5", "/x")'
  expect_inspect_refused "$WORK/train.h5" "dataset '/x' is an external link to '/x' in 'other.h5', which has no object '/x'"
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'del f["y"]; f["y"] = h5py.SoftLink("/labels")'
  expect_inspect_refused "$WORK/train.h5" "dataset '/y' is a soft link to '/labels', which the file does not have (expected the labels"
  # A link that leads to its data is read through.
  "$python" - "$DATA_DIR/train.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File("x.h5", "w") as xf:
    src.copy("x", xf)
PY
  cp "$DATA_DIR/train.h5" train.h5
  h5py_edit train.h5 'del f["x"]; f["x"] = h5py.ExternalLink("x.h5", "/x")'
  "$MGTRAIN" data inspect train.h5 >inspect.log 2>&1 || { cat inspect.log; fail "an external link to x.h5 was refused"; }
  ;;
big_endian)
  # The same float32 rows stored little- and big-endian, each file's checksums over its stored
  # bytes: the big-endian one was called damaged. Both train to the same bits.
  "$python" - "$DATA_DIR/train.h5" <<'PY'
import sys, struct, zlib, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as src:
    x = src["x"][:1024].astype(np.float32)
    y = src["y"][:1024].astype(np.int32)
for name, dtype in (("le.h5", "<f4"), ("be.h5", ">f4")):
    stored = x.astype(dtype)
    crc = [zlib.crc32(struct.pack("<i", int(label)), zlib.crc32(row.tobytes())) for row, label in zip(stored, y)]
    with h5py.File(name, "w") as f:
        f.attrs["num_classes"] = 10
        xd = f.create_dataset("x", data=stored, chunks=(64,) + x.shape[1:])
        xd.attrs["mean"] = 72.9
        xd.attrs["std"] = 90.0
        f.create_dataset("y", data=y)
        c = f.create_dataset("row_crc32", data=np.array(crc, dtype="<u4"))
        c.attrs["datasets"] = np.array([b"x", b"y"])
    assert h5py.File(name, "r")["x"].dtype.byteorder == dtype[0]
PY
  for file in le be; do
    for in_memory in false true; do
      run_np 2 180 train --config run.ini --data.train="$WORK/$file.h5" --data.in_memory=$in_memory \
        --checkpoint.dir="$WORK/ckpt_${file}_$in_memory" >"$file.log" 2>&1 || { cat "$file.log"; fail "training on $file.h5 (data.in_memory = $in_memory)"; }
    done
  done
  for run in be_false le_true be_true; do
    "$MGTRAIN" compare ckpt_le_false/step-8.h5 "ckpt_$run/step-8.h5" >compare.log ||
      { cat compare.log; fail "ckpt_$run differs from the little-endian run"; }
  done
  # A stored value changed is still damage, found when its row is read.
  h5py_edit be.h5 'x = f["x"]; row = x[5]; row.reshape(-1)[3] += 1; x[5] = row'
  rc=0
  run_np 2 180 train --config run.ini --data.train="$WORK/be.h5" --checkpoint.dir="$WORK/ckpt_damaged" \
    >damaged.log 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat damaged.log; fail "exit $rc"; }
  one_error_line damaged.log | grep -q "data file '$WORK/be.h5': row 5 of '/x' and '/y' fails its checksum" ||
    { cat damaged.log; fail "the changed row of be.h5 passed its checksum"; }
  ;;
csv_overflow)
  printf '0,1,2,3\n1,4,5,6\n2,7,1e300,8\n' >f.csv
  rc=0
  "$MGTRAIN" data convert --csv f.csv --shape 3 --out f.h5 >convert.log 2>&1 || rc=$?
  [ $rc -ne 0 ] || { cat convert.log; fail "1e300 was converted"; }
  one_error_line convert.log
  grep -q "CSV file 'f.csv' line 3: column 2 is '1e300', expected a number that fits a float32" convert.log ||
    { cat convert.log; fail "no line names line 3, column 2"; }
  [ ! -e f.h5 ] || fail "f.h5 was written"
  ;;
lzf)
  "$python" - "$DATA_DIR/train.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File("train.h5", "w") as f:
    for k, v in src.attrs.items(): f.attrs[k] = v
    for name in src:
        if name == "x":
            x = f.create_dataset("x", data=src["x"][...], chunks=(64,) + src["x"].shape[1:], compression="lzf")
            for k, v in src["x"].attrs.items(): x.attrs[k] = v
        else:
            src.copy(name, f)
PY
  expect="data file '$WORK/train.h5': dataset '/x' is compressed with the HDF5 filter 'lzf' (filter id 32000), which this HDF5 does not have"
  expect_refused "$expect"
  expect_inspect_refused "$WORK/train.h5" "$expect"
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
