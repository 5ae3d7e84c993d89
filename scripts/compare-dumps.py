#!/usr/bin/env python3
"""Compares two H3C_DUMP_VALUES folders (e.g. a CPU run and a GPU run of the same plan and request) op by op, in op
order, and names the first value whose bits differ, with its largest difference; then a summary of all values.
  compare-dumps.py A_DIR B_DIR [--all]
Exit status 0 when every value common to both is byte-equal."""
import os
import sys

import numpy as np


def main():
    a_dir, b_dir = sys.argv[1], sys.argv[2]
    show_all = "--all" in sys.argv[3:]
    names = sorted(set(os.listdir(a_dir)) & set(os.listdir(b_dir)))
    only = sorted(set(os.listdir(a_dir)) ^ set(os.listdir(b_dir)))
    if only:
        print(f"{len(only)} files in only one folder, e.g. {only[:3]}")
    differ = 0
    for n in names:
        dt = np.int64 if n.endswith(".i64.bin") else np.float32
        x, y = np.fromfile(os.path.join(a_dir, n), dt), np.fromfile(os.path.join(b_dir, n), dt)
        if x.shape == y.shape and x.tobytes() == y.tobytes():
            if show_all:
                print(f"equal     {n}")
            continue
        differ += 1
        if x.shape != y.shape:
            print(f"SHAPE     {n}: {x.shape} vs {y.shape}")
        else:
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            i = int(np.argmax(np.where(np.isnan(d), np.inf, d)))
            print(f"DIFFERENT {n}: {int(np.count_nonzero(x != y))} of {x.size} elements, max |diff| {d.max():.3e} "
                  f"at {i} ({x[i]} vs {y[i]}), first at {int(np.argmax(x != y))}")
        if differ >= 8 and not show_all:
            print("...")
            break
    print(f"{len(names)} values compared, {differ} differ{' (stopped early)' if differ >= 8 and not show_all else ''}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
