# Adapter slot values and gradient files for the LoRA backward tests (docs/contract.md sections 13 and 14).
#   make PLAN_JSON OUT SEED  writes F32 random values for every adapter slot of the plan ("adapter": true): lora_down
#                            normal(0, 0.1), lora_up normal(0, 0.02), as a safetensors file `--update` reads.
#   subset ALL PART KIND     every tensor of PART is in ALL with the same dtype, shape and bytes, and PART holds
#                            exactly the three input gradients and the tensors KIND selects ("lora": the adapter
#                            slots; else a substring of the name); exit 1 with the first difference otherwise.
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts"))
import st_numpy  # noqa: E402


def load(path):
    arrays, dtypes, _ = st_numpy.read(path)
    return {k: (dtypes[k], list(a.shape), a.tobytes()) for k, a in arrays.items()}


if sys.argv[1] == "make":
    plan = json.load(open(sys.argv[2]))
    rng = np.random.RandomState(int(sys.argv[4]))
    slots = {}
    for buf in plan["weights"]:
        for t in buf["tensors"]:
            if t.get("adapter"):
                std = 0.1 if t["name"].endswith(".lora_down") else 0.02
                slots[t["name"]] = rng.normal(0, std, size=t["shape"]).astype(np.float32)
    if not slots:
        sys.exit("the plan has no adapter slots")
    st_numpy.write(sys.argv[3], slots)
    print(f"wrote {len(slots)} adapter slots")
elif sys.argv[1] == "subset":
    a, b, kind = load(sys.argv[2]), load(sys.argv[3]), sys.argv[4]
    inputs = {"hidden_states", "audio_hidden_states", "encoder_hidden_states"}
    selected = lambda n: n.endswith((".lora_down", ".lora_up")) if kind == "lora" else kind in n
    want = sorted(n for n in a if n in inputs or selected(n))
    if sorted(b) != want:
        sys.exit(f"expected {len(want)} tensors {want[:5]}..., got {len(b)} {sorted(b)[:5]}...")
    for k in want:
        if a[k] != b[k]:
            sys.exit(f"tensor {k} differs")
    print(f"equal: {len(want) - 3} weight gradients and the 3 input gradients")
else:
    sys.exit("usage: adapter_slots.py make PLAN_JSON OUT SEED | subset ALL PART KIND")
