#!/usr/bin/env python3
"""Checks a GPU run with nodes bound `native` against an all-row run of the same plan and request (scripts/gpu-e2e.sh).

    check_native_ledger.py ROW.json NATIVE.json --native ID [--native ID ...] [--audit-bound B] [--bits-differ]

Both ledgers carry --hash-nodes hashes. Checks, each printed:
  - the nodes of the ops covering the --native ids are recorded `native` (and the given ids requested native); every
    other node `row`;
  - every node before the first native one has the row run's output hashes (nothing upstream changed);
  - with --audit-bound (NATIVE.json from --mode audit): each native node's audit max_rel against the fp64 reference
    is finite and <= B;
  - with --bits-differ: every output of the native op differs from the row run (without it, only reported: a library
    GEMM may add in the contract's own k_chunks order and reproduce the row bits). How many of the ops downstream
    (reading its results, transitively) differ is reported, never required: a perturbation of a few bf16 ulps can
    round away in a later residual or norm (measured on the tiny config with the fp64 reference bound instead).
Exit 0 when every check holds, 1 otherwise.
"""
import argparse
import json
import math
import sys


def hashes(node):
    return {o["value"]: o.get("hash") for o in node["outputs"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("row")
    ap.add_argument("native")
    ap.add_argument("--native", dest="ids", action="append", required=True)
    ap.add_argument("--audit-bound", type=float)
    ap.add_argument("--bits-differ", action="store_true")
    a = ap.parse_args()
    row = json.load(open(a.row))["nodes"]
    nat = json.load(open(a.native))["nodes"]
    rowById = {n["id"]: n for n in row}
    problems = []

    nativeOps = {n["op_index"] for n in nat if n["id"] in a.ids}
    if not nativeOps:
        problems.append(f"none of {a.ids} is in {a.native}")
    for n in nat:
        want = "native" if n["op_index"] in nativeOps else "row"
        if n["actual"] != want:
            problems.append(f"{n['id']}: actual {n['actual']}, expected {want}")
        if n["id"] in a.ids and n["requested"] != "native":
            problems.append(f"{n['id']}: requested {n['requested']}, expected native")
    first = next((i for i, n in enumerate(nat) if n["op_index"] in nativeOps), None)
    if first is None:
        problems.append("no native node recorded")
        first = len(nat)
    print(f"native nodes: {[n['id'] for n in nat if n['actual'] == 'native']}")

    upstream = len(problems)
    for n in nat[:first]:
        if any(h is None for h in hashes(n).values()):
            problems.append(f"{n['id']}: no output hash (run with --hash-nodes)")
        elif hashes(n) != hashes(rowById[n["id"]]):
            problems.append(f"{n['id']} (before the native op) differs from the row run")
    print(f"{first} nodes before the first native node, {len(problems) - upstream} of them unlike the row run")

    if a.audit_bound is not None:
        for n in nat[first:]:
            if n["actual"] != "native":
                continue
            au = n.get("audit")
            if au is None:
                problems.append(f"{n['id']}: no audit entry (run with --mode audit)")
                continue
            rel = au["max_rel"]
            rel = math.inf if rel is None else rel  # the ledger writes a non-finite error as null
            rowRel = rowById[n["id"]].get("audit", {}).get("max_rel", math.nan)
            print(f"{n['id']}: audit max_rel {rel:.3e} (row run: "
                  f"{math.inf if rowRel is None else rowRel:.3e}), bound {a.audit_bound}")
            if not (math.isfinite(rel) and rel <= a.audit_bound):
                problems.append(f"{n['id']}: audit max_rel {rel} exceeds {a.audit_bound}")

    # Downstream ops: those reading a value the native op wrote, transitively (per op, in execution order).
    tainted, seen, downstream, differ = set(), set(), 0, 0
    for n in nat[first:]:
        if n["op_index"] in seen:
            continue
        seen.add(n["op_index"])
        reads = {i["value"] for i in n["inputs"]}
        if n["op_index"] not in nativeOps and not reads & tainted:
            continue
        tainted |= set(hashes(n))
        mine, theirs = hashes(n), hashes(rowById[n["id"]])
        same = [v for v in mine if mine[v] == theirs.get(v)]
        if n["op_index"] in nativeOps:
            print(f"native op ({n['op']}): {len(mine) - len(same)} of {len(mine)} outputs unlike the row run")
            if same and a.bits_differ:
                problems.append(f"{n['id']} (op {n['op']}): native output(s) {same} equal to the row run")
            continue
        downstream += 1
        differ += not same
    print(f"{downstream} ops read the native results (transitively): {differ} with every output unlike the row run")

    for p in problems:
        print("FAIL " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
