#!/usr/bin/env python3
"""Edits an HDF5 file in place through the system's libhdf5 (ctypes), for tests that damage or
forge checkpoints without h5py. Usage: h5edit.py FILE OP ARGS...
  delattr OBJ NAME             removes attribute NAME of group or dataset OBJ ("/", "/optimizer")
  setint OBJ NAME VALUE        writes an integer attribute (int64 in memory; the stored type stays)
  setstr OBJ NAME VALUE        writes a variable-length string attribute
  setfloat DATASET INDEX VALUE [keep-crc]  writes one float32 element ("inf", "nan" too) and the
                               dataset's crc32 attribute to match, as a writer would have (keep-crc:
                               the old checksum stays, as after damage)
  unlink PATH                  removes the link PATH (a group or dataset)
"""
import ctypes
import ctypes.util
import struct
import sys
import zlib


def load():
    for name in ("hdf5_serial", "hdf5"):
        path = ctypes.util.find_library(name)
        if path:
            return ctypes.CDLL(path)
    for path in ("libhdf5_serial.so", "libhdf5.so"):
        try:
            return ctypes.CDLL(path)
        except OSError:
            pass
    sys.exit("h5edit.py: libhdf5 not found")


lib = load()
hid = ctypes.c_int64
for fn in ("H5Fopen", "H5Oopen", "H5Aopen", "H5Aget_type", "H5Dopen2", "H5Dget_space"):
    getattr(lib, fn).restype = hid
lib.H5Fopen.argtypes = [ctypes.c_char_p, ctypes.c_uint, hid]
lib.H5Oopen.argtypes = [hid, ctypes.c_char_p, hid]
lib.H5Aopen.argtypes = [hid, ctypes.c_char_p, hid]
lib.H5Adelete.argtypes = [hid, ctypes.c_char_p]
lib.H5Awrite.argtypes = [hid, hid, ctypes.c_void_p]
lib.H5Aget_type.argtypes = [hid]
lib.H5Dopen2.argtypes = [hid, ctypes.c_char_p, hid]
lib.H5Dget_space.argtypes = [hid]
lib.H5Sget_simple_extent_npoints.argtypes = [hid]
lib.H5Sget_simple_extent_npoints.restype = ctypes.c_int64
lib.H5Dread.argtypes = [hid, hid, hid, hid, hid, ctypes.c_void_p]
lib.H5Dwrite.argtypes = [hid, hid, hid, hid, hid, ctypes.c_void_p]
lib.H5Ldelete.argtypes = [hid, ctypes.c_char_p, hid]
for fn in ("H5Oclose", "H5Aclose", "H5Tclose", "H5Dclose", "H5Sclose", "H5Fclose"):
    getattr(lib, fn).argtypes = [hid]
lib.H5open()
NATIVE_INT64 = hid.in_dll(lib, "H5T_NATIVE_LLONG_g").value
NATIVE_UINT32 = hid.in_dll(lib, "H5T_NATIVE_UINT_g").value
NATIVE_FLOAT = hid.in_dll(lib, "H5T_NATIVE_FLOAT_g").value
ACC_RDWR, DEFAULT, ALL = 1, 0, 0


def check(value, what):
    if value < 0:
        sys.exit(f"h5edit.py: {what} failed")
    return value


def main():
    path, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    f = check(lib.H5Fopen(path.encode(), ACC_RDWR, DEFAULT), f"opening {path}")
    if op == "delattr":
        obj = check(lib.H5Oopen(f, args[0].encode(), DEFAULT), f"opening {args[0]}")
        check(lib.H5Adelete(obj, args[1].encode()), f"deleting attribute {args[1]} of {args[0]}")
        lib.H5Oclose(obj)
    elif op in ("setint", "setstr"):
        obj = check(lib.H5Oopen(f, args[0].encode(), DEFAULT), f"opening {args[0]}")
        attr = check(lib.H5Aopen(obj, args[1].encode(), DEFAULT), f"opening attribute {args[1]}")
        if op == "setint":
            value = ctypes.c_int64(int(args[2]))
            check(lib.H5Awrite(attr, NATIVE_INT64, ctypes.byref(value)), "writing the attribute")
        else:
            stored = check(lib.H5Aget_type(attr), "reading the attribute's type")
            value = ctypes.c_char_p(args[2].encode())
            check(lib.H5Awrite(attr, stored, ctypes.byref(value)), "writing the attribute")
            lib.H5Tclose(stored)
        lib.H5Aclose(attr)
        lib.H5Oclose(obj)
    elif op == "setfloat":
        dset = check(lib.H5Dopen2(f, args[0].encode(), DEFAULT), f"opening {args[0]}")
        space = check(lib.H5Dget_space(dset), "reading the dataspace")
        n = lib.H5Sget_simple_extent_npoints(space)
        lib.H5Sclose(space)
        values = (ctypes.c_float * n)()
        check(lib.H5Dread(dset, NATIVE_FLOAT, ALL, ALL, DEFAULT, values), "reading the dataset")
        values[int(args[1])] = float(args[2])
        check(lib.H5Dwrite(dset, NATIVE_FLOAT, ALL, ALL, DEFAULT, values), "writing the dataset")
        if args[3:] == ["keep-crc"]:
            lib.H5Dclose(dset)
            check(lib.H5Fclose(f), "closing the file")
            return
        crc = ctypes.c_uint32(zlib.crc32(struct.pack(f"<{n}f", *values)) & 0xFFFFFFFF)
        attr = check(lib.H5Aopen(dset, b"crc32", DEFAULT), "opening attribute crc32")
        check(lib.H5Awrite(attr, NATIVE_UINT32, ctypes.byref(crc)), "writing attribute crc32")
        lib.H5Aclose(attr)
        lib.H5Dclose(dset)
    elif op == "unlink":
        check(lib.H5Ldelete(f, args[0].encode(), DEFAULT), f"removing {args[0]}")
    else:
        sys.exit(f"h5edit.py: unknown operation {op}")
    check(lib.H5Fclose(f), "closing the file")


main()
