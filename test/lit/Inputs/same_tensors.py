# Compares the tensors (names, dtypes, shapes, bytes) of two safetensors files, ignoring __metadata__ (which names
# the plan). Exit 0 when equal, 1 with the first difference otherwise.
import json, struct, sys


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


a, b = load(sys.argv[1]), load(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit(f"different tensors: {sorted(a)} vs {sorted(b)}")
for k in sorted(a):
    if a[k] != b[k]:
        sys.exit(f"tensor {k} differs")
print(f"equal: {', '.join(sorted(a))}")
