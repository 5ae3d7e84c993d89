"""safetensors files as NumPy arrays, for the Python package's test scripts (test/python/test_h3c.py,
scripts/gpu-python-check.py); no dependency but NumPy. BF16 tensors come back as their int16 bit patterns (NumPy has
no bfloat16; torch: torch.from_numpy(a).view(torch.bfloat16))."""
import json
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
