"""Reads a TensorBoard run with the `tensorboard` package's own readers and checks it against the
trainer's metrics.jsonl. Usage: read_tfevents.py TB_DIR METRICS_JSONL SCRATCH_DIR

- tensorboard.backend.event_processing.event_accumulator.EventAccumulator loads the scalars;
- tensorboard.compat.tensorflow_stub.pywrap_tensorflow.PyRecordReader_New (the reader
  TensorBoard itself uses when TensorFlow is absent) reads the raw TFRecords and checks both
  masked CRC-32Cs of every record; a copy with one flipped byte must fail that check.
"""
import glob
import json
import math
import os
import shutil
import struct
import sys

from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors as tb_errors
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

EXPECTED_STEPS = [20, 40, 60, 80, 100]


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def close(a, b, rtol=1e-6, atol=1e-9):
    return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def raw_records(path):
    """Every record's data, CRCs checked by tensorboard's reader (raises DataLossError)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path.encode(), 0, b"", None)
    out = []
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            return out
        out.append(reader.record())


def record_offsets(path):
    """(offset of data, length) of each record, from the framing alone."""
    with open(path, "rb") as f:
        data = f.read()
    pos, out = 0, []
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append((pos + 12, length))
        pos += 16 + length
    if pos != len(data):
        fail(f"{path}: framing does not end at the end of the file ({pos} vs {len(data)})")
    return out


def expect_crc_failure(original, scratch, offset, what, expected_reads):
    os.makedirs(scratch, exist_ok=True)
    bad = os.path.join(scratch, os.path.basename(original))
    shutil.copyfile(original, bad)
    with open(bad, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x5A]))
    reader = pywrap_tensorflow.PyRecordReader_New(bad.encode(), 0, b"", None)
    reads = 0
    try:
        while True:
            reader.GetNext()
            reads += 1
    except tb_errors.DataLossError as e:
        if what not in str(e):
            fail(f"corrupted copy: DataLossError '{e}' does not mention '{what}'")
        if reads != expected_reads:
            fail(f"corrupted copy: {reads} records read before the CRC failure, expected {expected_reads}")
        print(f"ok: flipped byte at offset {offset} detected: {e}")
    except tb_errors.OutOfRangeError:
        fail(f"corrupted copy (byte {offset} flipped) was read to the end without a CRC error")
    # TensorBoard's own loader stops at the bad record (it treats it as a truncated write).
    loaded = list(event_file_loader.RawEventFileLoader(bad).Load())
    if len(loaded) != expected_reads:
        fail(f"corrupted copy: RawEventFileLoader yielded {len(loaded)} records, expected {expected_reads}")
    shutil.rmtree(scratch)


def main():
    if len(sys.argv) != 4:
        fail("usage: read_tfevents.py TB_DIR METRICS_JSONL SCRATCH_DIR")
    tb_dir, metrics_path, scratch = sys.argv[1:]
    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    if len(files) != 1:
        fail(f"expected exactly one event file in {tb_dir} (rank 0 writes), found {files}")
    path = files[0]
    print(f"event file: {path} ({os.path.getsize(path)} bytes)")

    # Raw records, CRCs verified; the first is the file-version event.
    records = raw_records(path)
    if not records:
        fail(f"{path}: no records")
    first = event_pb2.Event.FromString(records[0])
    if first.file_version != "brain.Event:2":
        fail(f"first event's file_version is {first.file_version!r}, expected 'brain.Event:2'")
    if first.wall_time <= 0:
        fail(f"first event's wall_time is {first.wall_time}")
    for i, raw in enumerate(records[1:], 1):
        event = event_pb2.Event.FromString(raw)
        if not event.HasField("summary") or event.wall_time < first.wall_time - 1:
            fail(f"record {i} is not a summary event with a sane wall_time: {event}")
    print(f"ok: {len(records)} records, every length and data CRC checked by PyRecordReader_New")

    # Scalars through TensorBoard's accumulator, keeping every point.
    acc = EventAccumulator(tb_dir, size_guidance={SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()[SCALARS])
    metrics = [json.loads(line) for line in open(metrics_path) if line.strip()]
    steps = [m["step"] for m in metrics]
    if steps != EXPECTED_STEPS:
        fail(f"{metrics_path}: steps {steps}, expected {EXPECTED_STEPS}")
    ranks = len(metrics[0]["rank_step_ms"])
    if ranks != 2:
        fail(f"{metrics_path}: rank_step_ms has {ranks} entries, expected 2")
    wanted = {
        "train/loss": [m["loss"] for m in metrics],
        "train/accuracy": [m["accuracy"] for m in metrics],
        "train/learning_rate": [m["lr"] for m in metrics],
        "train/grad_norm": [m["grad_norm"] for m in metrics],
        "train/samples_per_s": [m["samples_per_s"] for m in metrics],
    }
    for r in range(ranks):
        wanted[f"step_time_ms/rank{r}"] = [m["rank_step_ms"][r] for m in metrics]
    missing = sorted(set(wanted) - tags)
    if missing:
        fail(f"scalar tags missing: {missing}; found {sorted(tags)}")
    for tag, values in wanted.items():
        points = acc.Scalars(tag)
        got_steps = [p.step for p in points]
        if got_steps != EXPECTED_STEPS:
            fail(f"{tag}: steps {got_steps}, expected {EXPECTED_STEPS}")
        for p, want in zip(points, values):
            # simple_value is a float32; the metrics file has the double to 9 digits.
            if not close(p.value, want):
                fail(f"{tag} at step {p.step}: event file {p.value!r}, metrics.jsonl {want!r}")
        print(f"ok: {tag}: {len(points)} points at {got_steps} match {os.path.basename(metrics_path)}")

    # A corrupted copy must fail tensorboard's CRC check: one byte in the middle of a record's
    # data (the 3rd record's), and one byte of a record's length.
    offsets = record_offsets(path)
    if len(offsets) != len(records):
        fail(f"framing has {len(offsets)} records, the reader found {len(records)}")
    data_at, length = offsets[2]
    expect_crc_failure(path, os.path.join(scratch, "data"), data_at + length // 2,
                       "failed event crc32 check", 2)
    expect_crc_failure(path, os.path.join(scratch, "length"), offsets[3][0] - 12,
                       "failed header crc32 check", 3)
    print("PASS")


if __name__ == "__main__":
    main()
