"""One Nsight Compute report in a few lines: the key metrics of its details page and the SASS lines holding the most
warp-stall samples (its source page, from the SourceCounters section), and the executed instructions grouped by
opcode (where a kernel's instructions go: two kernels of the same tile may differ by 2x in count, bench/NOTES.md
2026-12-07). bench/profile_linear.sh prints one per form.

    python3 bench/ncu_summary.py DETAILS.csv SOURCE.csv [N]

DETAILS.csv: `ncu -i REP --page details --csv`; SOURCE.csv: `ncu -i REP --page source --csv --print-source sass`.
Columns are found by name (ncu versions differ in their order); a page that cannot be read is reported, not fatal."""
import collections
import csv
import re
import sys

KEYS = ("Duration", "Elapsed Cycles", "SM Frequency", "Executed Ipc Active", "Executed Instructions",
        "L2 Cache Throughput", "DRAM Throughput", "Compute (SM) Throughput", "Memory Throughput",
        "Warp Cycles Per Issued Instruction", "Issued Warp Per Scheduler", "No Eligible", "Eligible Warps Per Scheduler",
        "L2 Hit Rate", "Registers Per Thread", "Dynamic Shared Memory Per Block")


def read_csv(path):
    with open(path, newline="", errors="replace") as f:
        return list(csv.reader(line for line in f if line.strip() and not line.startswith("==")))


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def column(header, *names):
    for name in names:
        for i, c in enumerate(header):
            if name.lower() in c.lower():
                return i
    return None


def details(path):
    rows = read_csv(path)
    head = rows[0]
    name, value, unit = head.index("Metric Name"), head.index("Metric Value"), head.index("Metric Unit")
    for r in rows[1:]:
        if len(r) > value and r[name] in KEYS:
            print(f"  {r[name]:40s} {r[value]:>14s} {r[unit]}")


def source(path, top):
    rows = read_csv(path)
    # ncu 2025's source page opens with a ("Kernel Name", name) line before its header: the header is the first row
    # naming the address column.
    start = next((i for i, r in enumerate(rows) if "Address" in r), 0)
    rows = rows[start:]
    head = rows[0]
    stall = column(head, "Warp Stall Sampling (All")
    if stall is None:
        raise ValueError(f"no warp-stall column among {len(head)} columns: {'|'.join(head)[:300]}")
    not_issued = column(head, "Warp Stall Sampling (Not")
    text, addr, executed = column(head, "Source"), column(head, "Address"), column(head, "Instructions Executed")
    body = [r for r in rows[1:] if len(r) > stall]
    total = sum(number(r[stall]) for r in body) or 1.0
    instr = sum(number(r[executed]) for r in body) if executed is not None else 0.0
    print(f"  {len(body)} SASS lines, {instr:,.0f} warp instructions executed, {total:,.0f} stall samples; the most:")
    for r in sorted(body, key=lambda r: -number(r[stall]))[:top]:
        extra = f"  (not issued {100 * number(r[not_issued]) / total:.1f} %)" if not_issued is not None else ""
        where = r[addr] if addr is not None else ""
        what = r[text][:88] if text is not None else ""
        print(f"  {100 * number(r[stall]) / total:5.1f} %  {where:>6s}  {what}{extra}")
    if executed is not None and text is not None and instr > 0:
        by_op = collections.Counter()
        for r in body:
            by_op[opcode(r[text])] += number(r[executed])
        print("  instructions by opcode: " + ", ".join(f"{op} {100 * n / instr:.1f} %" for op, n in by_op.most_common(16)))


def opcode(sass):
    """A SASS line's opcode without its predicate and modifiers: '@!UP1 HGMMA.64x256x16.F32.BF16 R24, ...' -> HGMMA."""
    return re.sub(r"^@!?U?P[T0-9]+\s+", "", sass.strip()).split(" ")[0].split(".")[0] or "?"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for fn, args in ((details, (sys.argv[1],)), (source, (sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 20))):
        try:
            fn(*args)
        except (OSError, ValueError, IndexError) as e:
            print(f"  ({fn.__name__} page unreadable: {e})")


if __name__ == "__main__":
    main()
