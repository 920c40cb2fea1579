#!/usr/bin/env bash
# The metrics file and TensorBoard's event file on a full disk (a 64 KiB tmpfs, nearly filled): the
# run trains on and exits 0, warns once per file naming it and the reason, and each file holds only
# whole records: `mgtrain report` draws the metrics, the event file's TFRecords end where it ends.
# A parameter server's serving rank writes its own metrics file (metrics.rank<R>.jsonl), checked
# the same way. Mounting needs root: exit 77 (a skip) without it. The mount is removed however the
# test ends. With tensorboard_start the disk is full before the run: the event file cannot take
# even its first record, which is a warning like any other, and no empty event file is left.
# Usage: full_disk.sh metrics|param_server|tensorboard_start
: "${WORK:?}"
disk=$WORK/disk
umount "$disk" 2>/dev/null || true  # left by a run that was killed
source "$(dirname "$0")/lib.sh"
skip() { echo "SKIP: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
mkdir -p "$disk"
mount -t tmpfs -o size=64k tmpfs "$disk" || skip "cannot mount a tmpfs on $disk"
trap 'umount "$disk" 2>/dev/null || umount -l "$disk"' EXIT
trap 'exit 1' INT TERM
# Leave two pages (8 KiB) free: a few intervals fit, then writes fail part-way through a record.
dd if=/dev/zero of="$disk/filler" bs=4096 count=14 status=none 2>/dev/null || true

if [ "${1:-metrics}" = param_server ]; then
  # One server (rank 2) for two workers; the disk is full before the run starts.
  dd if=/dev/zero of="$disk/rest" bs=4096 count=2 status=none 2>/dev/null || true
  write_config run.ini "[metrics]" "file = $disk/metrics.jsonl" "[sync]" "name = param_server" "staleness = 1"
  run_np 3 300 train --config run.ini --train.max_steps=40 --train.log_every=5 --train.progress=lines \
    >out.log 2>err.log || { cat out.log err.log; fail "training failed: a full disk must not stop it"; }
  cat err.log
  grep -q "mgtrain: warning: \[rank 2\] metrics file '$disk/metrics.rank2.jsonl' cannot be .*: No space left on device; metrics are off for the rest of the run" err.log ||
    fail "no warning from the serving rank naming its metrics file and the reason"
  [ "$(grep -c 'metrics.rank2.jsonl' err.log)" = 1 ] || fail "the serving rank's warning is not given once"
  if [ -s "$disk/metrics.rank2.jsonl" ]; then
    python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$disk/metrics.rank2.jsonl" ||
      fail "a line of the serving rank's metrics is not JSON"
  fi
  echo PASS
  exit 0
fi
if [ "${1:-metrics}" = tensorboard_start ]; then
  dd if=/dev/zero of="$disk/rest" bs=4096 count=2 status=none 2>/dev/null || true
  write_config run.ini "[metrics]" "tensorboard_dir = $disk/tb"
  run_np 2 300 train --config run.ini --train.max_steps=20 --train.log_every=5 --train.progress=lines \
    >out.log 2>err.log || { cat out.log err.log; fail "training failed: a disk full at the start must not stop it"; }
  cat err.log
  grep -q "mgtrain: warning: tensorboard: cannot write event file '$disk/tb/events.out.tfevents\.[^']*': No space left on device; TensorBoard output is off" err.log ||
    fail "no warning naming the event file and the reason"
  ! ls "$disk"/tb/events.out.tfevents.* 2>/dev/null || fail "an empty event file was left: $(ls -l "$disk"/tb)"
  grep -q "^done: " out.log || fail "the run did not finish"
  echo PASS
  exit 0
fi
write_config run.ini "[metrics]" "file = $disk/metrics.jsonl" "tensorboard_dir = $disk/tb"
run_np 2 300 train --config run.ini --train.max_steps=60 --train.log_every=2 --train.progress=lines \
  >out.log 2>err.log || { cat out.log err.log; fail "training failed: a full disk must not stop it"; }
cat err.log
grep -qF "mgtrain: warning: metrics file '$disk/metrics.jsonl' cannot be written: No space left on device; metrics are off for the rest of the run" err.log ||
  fail "no warning naming the metrics file and the reason"
grep -q "mgtrain: warning: tensorboard: cannot write event file '$disk/tb/events.out.tfevents\.[^']*': No space left on device; TensorBoard output is off" err.log ||
  fail "no warning naming the event file and the reason"
[ "$(grep -c 'mgtrain: warning: metrics file' err.log)" = 1 ] || fail "the metrics warning is not given once"

# Whole lines only, each one JSON object, and the report draws them.
[ -s "$disk/metrics.jsonl" ] || fail "no metrics were written before the disk filled"
[ "$(tail -c 1 "$disk/metrics.jsonl" | od -An -c | tr -d ' ')" = '\n' ] || fail "the metrics file ends mid-line"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$disk/metrics.jsonl" ||
  fail "a metrics line is not JSON"
mkdir -p report && cp "$disk/metrics.jsonl" report/
"$MGTRAIN" report "$WORK/report" || fail "mgtrain report failed on the metrics file"

# Whole TFRecords only: length, masked CRC of it, data, masked CRC of the data, to the last byte.
python3 - "$disk"/tb/events.out.tfevents.* <<'PY' || fail "the event file ends mid-record"
import struct, sys
data = open(sys.argv[1], "rb").read()
at = records = 0
while at < len(data):
    if at + 12 > len(data):
        sys.exit(f"{len(data) - at} bytes at {at}: a cut record header")
    (length,) = struct.unpack_from("<Q", data, at)
    at += 12 + length + 4
    records += 1
if at != len(data):
    sys.exit(f"the last record runs {at - len(data)} bytes past the end")
print(f"{records} whole records")
PY
echo PASS
