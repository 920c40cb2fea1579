#!/usr/bin/env python3
"""Writes IDX files (uncompressed) holding the samples of some classes of an IDX pair, for
`mgtrain data convert`: a task derived from Fashion-MNIST (fewer classes, fewer samples).

Usage: idx_subset.py IMAGES LABELS OUT_PREFIX FIRST_CLASS LAST_CLASS [LIMIT [SHIFT]]
Keeps the samples labelled FIRST_CLASS..LAST_CLASS, the first LIMIT of them (0: all), labels
lowered by SHIFT; writes OUT_PREFIX-images.idx and OUT_PREFIX-labels.idx.
"""
import gzip
import struct
import sys


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return shape, data[4 + 4 * dims :]


def write_idx(path, shape, body):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, len(shape)]))
        f.write(struct.pack(">" + "I" * len(shape), *shape))
        f.write(body)


def main():
    images, labels, prefix = sys.argv[1:4]
    first, last = int(sys.argv[4]), int(sys.argv[5])
    limit = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    shift = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    ishape, pixels = read_idx(images)
    _, ys = read_idx(labels)
    row = ishape[1] * ishape[2]
    kept_x, kept_y = bytearray(), bytearray()
    for i, y in enumerate(ys):
        if first <= y <= last:
            kept_x += pixels[i * row : (i + 1) * row]
            kept_y.append(y - shift)
            if limit and len(kept_y) == limit:
                break
    write_idx(prefix + "-images.idx", (len(kept_y), ishape[1], ishape[2]), bytes(kept_x))
    write_idx(prefix + "-labels.idx", (len(kept_y),), bytes(kept_y))


if __name__ == "__main__":
    main()
