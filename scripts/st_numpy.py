"""safetensors files as NumPy arrays for the Python package's test scripts (test/python/test_h3c.py,
scripts/gpu-python-check.py), with a checkpoint row overwritten in place and the ledger's entry for a non-finite
output; no dependency but NumPy. BF16 tensors come back as their int16 bit patterns (NumPy has no bfloat16; torch:
torch.from_numpy(a).view(torch.bfloat16))."""
import json
import os
import struct

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BF16": np.int16}


def read(path):
    """(name -> array, name -> safetensors dtype, metadata)."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", {})
    arrays, dtypes = {}, {}
    for k, v in head.items():
        a, z = v["data_offsets"]
        arrays[k] = np.frombuffer(b[8 + n + a:8 + n + z], dtype=DTYPES[v["dtype"]]).reshape(v["shape"])
        dtypes[k] = v["dtype"]
    return arrays, dtypes, meta


def write(path, arrays, dtypes=None):
    """A safetensors file of name -> array; `dtypes` names a tensor's safetensors dtype where the array's own does not
    say it (BF16 tensors as int16 bit patterns)."""
    codes = {v: k for k, v in DTYPES.items() if k != "BF16"}
    head, off, names = {}, 0, sorted(arrays)
    for k in names:
        a = np.ascontiguousarray(arrays[k])
        code = (dtypes or {}).get(k) or codes[a.dtype.type]
        head[k] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    text = json.dumps(head).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for k in names:
            f.write(np.ascontiguousarray(arrays[k]).tobytes())


def overwrite_row(folder, name, row, value):
    """Row `row` of the 2-D tensor `name` (F32) in a checkpoint folder's safetensors files set to `value`, in place
    (the tests' overflowing weights: a finite value loads, and the outputs it feeds overflow). Returns the row's
    length."""
    for file in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
        with open(os.path.join(folder, file), "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            entry = json.loads(f.read(n)).get(name)
            if entry is None:
                continue
            if entry["dtype"] != "F32" or len(entry["shape"]) != 2:
                raise ValueError(f"{name} is {entry['dtype']} {entry['shape']}, expected a F32 matrix")
            cols = entry["shape"][1]
            f.seek(8 + n + entry["data_offsets"][0] + 4 * row * cols)
            f.write(np.full(cols, value, dtype=np.float32).tobytes())
            return cols
    raise ValueError(f"{name} is in no safetensors file of {folder}")


def non_finite_entry(name, values):
    """What the ledger records for an output holding NaN / Inf ("output NAME: 2 NaN, 1 Inf (first: element 37,
    -Inf)", flat row-major index), computed with NumPy apart from the runtime's own scan; None when all are finite."""
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(flat))
    if bad.size == 0:
        return None
    nan = int(np.isnan(flat).sum())
    v = flat[bad[0]]
    value = "NaN" if np.isnan(v) else "-Inf" if v < 0 else "+Inf"
    return f"output {name}: {nan} NaN, {bad.size - nan} Inf (first: element {bad[0]}, {value})"
