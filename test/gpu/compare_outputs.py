#!/usr/bin/env python3
"""Compares two h3c output (or request) safetensors files, tensor by tensor.
  compare_outputs.py equal A B            -> byte-equal (exit 1 otherwise)
  compare_outputs.py bound A B X          -> relative Frobenius error of B against reference A <= X (prints it)
  compare_outputs.py item A B4 I          -> A (batch 1) byte-equal to item I of B4 (batch > 1)
  compare_outputs.py slice IN OUT I       -> writes batch item I of a request IN as a batch-1 request OUT"""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

BATCHED = {"hidden_states", "audio_hidden_states", "encoder_hidden_states", "sample", "audio_sample"}


def main():
    mode, a_path, b_path = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "slice":
        r = load_file(a_path)
        i = int(sys.argv[4])
        save_file({k: (np.ascontiguousarray(v[i:i + 1]) if k in BATCHED else v) for k, v in r.items()}, b_path)
        return 0
    a, b = load_file(a_path), load_file(b_path)
    if sorted(a) != sorted(b):
        print(f"tensor names differ: {sorted(a)} vs {sorted(b)}")
        return 1
    ok = True
    equal = 0
    for k in sorted(a):
        x, y = a[k], b[k]
        if mode == "item":
            y = y[int(sys.argv[4]):int(sys.argv[4]) + 1]
        if mode in ("equal", "item"):
            same = x.shape == y.shape and x.tobytes() == y.tobytes()
            diff = "" if same else f" (max |diff| {np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))) if x.shape == y.shape else 'shape'})"
            print(f"{k}: {'byte-equal' if same else 'DIFFERENT'} {list(x.shape)}{diff}")
            ok &= same
        else:
            bound = float(sys.argv[4])
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            if not np.all(np.isfinite(y64)):
                print(f"{k}: non-finite values")
                ok = False
                continue
            rel = np.linalg.norm(y64 - x64) / max(np.linalg.norm(x64), 1e-300)
            mx = np.max(np.abs(y64 - x64)) if x.size else 0.0
            same = x.shape == y.shape and x.tobytes() == y.tobytes()
            equal += same
            print(f"{k}: rel_frob {rel:.3e} max_abs {mx:.3e} ref_rms {np.sqrt(np.mean(x64 ** 2)) if x.size else 0:.3e} "
                  f"(bound {bound:g}) {list(x.shape)}{' byte-equal' if same else ''}")
            ok &= rel <= bound
    if mode == "bound":
        print(f"{len(a)} tensors, {equal} byte-equal, {'all' if ok else 'NOT all'} within the bound")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
