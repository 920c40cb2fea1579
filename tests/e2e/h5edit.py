#!/usr/bin/env python3
"""Edits an HDF5 file in place with h5py, for tests that damage or forge checkpoints.
Usage: h5edit.py FILE OP ARGS...
  delattr OBJ NAME             removes attribute NAME of group or dataset OBJ ("/", "/optimizer")
  setint OBJ NAME VALUE        writes an integer attribute (its stored type stays)
  setstr OBJ NAME VALUE        writes a string attribute (its stored type stays)
  setfloat DATASET INDEX VALUE [keep-crc]  writes one float32 element ("inf", "nan" too) and the
                               dataset's crc32 attribute to match, as a writer would have (keep-crc:
                               the old checksum stays, as after damage)
  fill DATASET VALUE           writes VALUE into every float32 element, the crc32 attribute to match
  unlink PATH                  removes the link PATH (a group or dataset)
  hollow DATASET N             replaces DATASET by a one-dimensional one of N elements of its type,
                               its attributes kept, nothing written (HDF5 would read fill values)
"""
import sys
import zlib

import h5py
import numpy


def main():
    path, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with h5py.File(path, "r+") as f:
        if op == "delattr":
            del f[args[0]].attrs[args[1]]
        elif op == "setint":
            f[args[0]].attrs.modify(args[1], int(args[2]))
        elif op == "setstr":
            f[args[0]].attrs.modify(args[1], args[2])
        elif op == "setfloat":
            dataset = f[args[0]]
            values = dataset[()].astype("<f4").reshape(-1)
            values[int(args[1])] = float(args[2])
            dataset[...] = values.reshape(dataset.shape)
            if args[3:] != ["keep-crc"]:
                dataset.attrs.modify("crc32", numpy.uint32(zlib.crc32(values.tobytes())))
        elif op == "fill":
            dataset = f[args[0]]
            values = numpy.full(dataset.shape, float(args[1]), dtype="<f4")
            dataset[...] = values
            dataset.attrs.modify("crc32", numpy.uint32(zlib.crc32(values.tobytes())))
        elif op == "unlink":
            del f[args[0]]
        elif op == "hollow":
            old = f[args[0]]
            dtype, attrs = old.dtype, dict(old.attrs)
            del f[args[0]]
            new = f.create_dataset(args[0], shape=(int(args[1]),), dtype=dtype)
            for name, value in attrs.items():
                new.attrs[name] = value
        else:
            sys.exit(f"h5edit.py: unknown operation {op}")


main()
