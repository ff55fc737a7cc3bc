#!/usr/bin/env python3
"""Cross-check attnlab's safetensors reader and writer against the official Python package.

Usage: python3 scripts/check_safetensors.py path/to/attnlab_tests
Needs `pip install safetensors numpy`. Run manually (the C++ suite does not need Python):
  1. writes python.safetensors with the official package (every dtype attnlab reads, metadata,
     an empty tensor and a scalar),
  2. runs the C++ test SafetensorsXCheck.PythonInterop, which verifies that file byte for byte and
     writes attnlab.safetensors with the same contents,
  3. loads attnlab.safetensors with safetensors.safe_open (numpy) and safetensors.deserialize and
     compares every tensor and the metadata.
Element formulas match tests/io/test_safetensors_xcheck.cpp; all values are exact in their dtype.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import TensorSpec, deserialize, safe_open, serialize_file

SPECS = [  # name, safetensors dtype, shape  (keep in sync with the C++ test)
    ("h.0.attn.c_attn.weight", "F32", [3, 5, 7]),
    ("h.0.ln_1.weight", "BF16", [33]),
    ("half", "F16", [2, 3]),
    ("ids", "I32", [4, 4]),
    ("tokens", "U16", [7]),
    ("u", "U32", [5]),
    ("long", "I64", [2, 2]),
    ("empty", "F32", [0, 4]),
    ("scalar", "F32", []),
]
METADATA = {"note": 'ünïcode "quoted"'}
SPEC_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "I32": "int32",
              "U16": "uint16", "U32": "uint32", "I64": "int64"}
NUMPY_OK = {"F32", "F16", "I32", "U16", "U32", "I64"}  # numpy has no bfloat16


def expected(dtype, shape):
    """The tensor as a numpy array (BF16 as its uint16 bit patterns)."""
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.uint64)
    if dtype == "F32":
        a = ((i * 37 % 1000).astype(np.int64) - 500).astype(np.float32) / np.float32(64)
    elif dtype == "BF16":
        f = ((i * 37 % 256).astype(np.int64) - 128).astype(np.float32) / np.float32(4)
        a = (f.view(np.uint32) >> 16).astype(np.uint16)  # exact: the values fit in 8 bits
    elif dtype == "F16":
        a = (((i * 37 % 2048).astype(np.int64) - 1024).astype(np.float32) / 16).astype(np.float16)
    elif dtype == "I32":
        a = (i * np.uint64(2654435761) & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
    elif dtype == "U16":
        a = (i * np.uint64(40503) & np.uint64(0xFFFF)).astype(np.uint16)
    elif dtype == "U32":
        a = (i * np.uint64(2654435761) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    elif dtype == "I64":
        with np.errstate(over="ignore"):
            a = (i * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
    return np.array(a.reshape(shape), order="C")  # (ascontiguousarray would make 0-d 1-d)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tests = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as d:
        arrays = {name: expected(dt, shape) for name, dt, shape in SPECS}
        specs = {name: TensorSpec(dtype=SPEC_DTYPE[dt], shape=shape,
                                  data_ptr=arrays[name].ctypes.data,
                                  data_len=arrays[name].nbytes)
                 for name, dt, shape in SPECS}
        serialize_file(specs, os.path.join(d, "python.safetensors"),
                       metadata={"producer": "python", **METADATA})
        print("wrote python.safetensors with safetensors", __import__("safetensors").__version__)

        env = dict(os.environ, ATTNLAB_SAFETENSORS_XCHECK_DIR=d)
        r = subprocess.run([tests, "--gtest_filter=SafetensorsXCheck.PythonInterop"], env=env,
                           capture_output=True, text=True)
        print(r.stdout[-2000:], r.stderr[-2000:])
        if r.returncode != 0 or "[  PASSED  ] 1 test" not in r.stdout:
            sys.exit("FAIL: the C++ side of the cross-check failed (see above)")

        path = os.path.join(d, "attnlab.safetensors")
        with safe_open(path, framework="numpy") as f:
            meta = dict(f.metadata())
            # attnlab's hash of the tensor bytes (src/io/data_hash.h): 16 hex digits.
            if not re.fullmatch(r"[0-9a-f]{16}", meta.pop("attnlab_data_hash", "")):
                failures.append(f"attnlab_data_hash missing or malformed: {f.metadata()}")
            if meta != {"producer": "attnlab", **METADATA}:
                failures.append(f"metadata: {f.metadata()}")
            if sorted(f.keys()) != sorted(arrays):
                failures.append(f"names: {sorted(f.keys())}")
            for name, dt, shape in SPECS:
                if dt not in NUMPY_OK:
                    continue
                got = f.get_tensor(name)
                if got.dtype != arrays[name].dtype or list(got.shape) != shape or \
                        got.tobytes() != arrays[name].tobytes():
                    failures.append(f"safe_open {name}: {got.dtype} {got.shape}")
        with open(path, "rb") as fh:
            for name, info in deserialize(fh.read()):  # every dtype, BF16 included, as raw bytes
                dt = dict((n, t) for n, t, _ in SPECS)[name]
                if info["dtype"] != dt or info["shape"] != list(arrays[name].shape) or \
                        bytes(info["data"]) != arrays[name].tobytes():
                    failures.append(f"deserialize {name}: {info['dtype']} {info['shape']}")
    if failures:
        sys.exit("FAIL:\n  " + "\n  ".join(failures))
    print(f"OK: {len(SPECS)} tensors (F32 BF16 F16 I32 U16 U32 I64, empty, scalar) and metadata "
          "agree in both directions")


if __name__ == "__main__":
    main()
