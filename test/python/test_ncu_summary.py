"""bench/ncu_summary.py on Nsight Compute CSV pages written here in ncu's format (quoted fields, thousands
separators, the profiler's ==PROF== lines mixed in, columns in another order): the metrics it keeps, the stall shares
it prints against the arithmetic of the sample counts, their order, and a page without the stall column reported by
name instead of failing. No GPU or ncu needed."""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "ncu_summary.py")

DETAILS = '''==PROF== Connected to process 1
"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"
"0","k","GPU Speed Of Light Throughput","Duration","us","892.30"
"0","k","GPU Speed Of Light Throughput","Elapsed Cycles","cycle","1,490,112"
"0","k","GPU Speed Of Light Throughput","DRAM Frequency","Ghz","2.62"
'''
# 5 lines; samples 1,200 / 300 / 2,500 / 0 / 1,000 of 5,000: 50.0 %, 24.0 %, 20.0 %, 6.0 %, 0.0 %
SOURCE = '''"Source","Instructions Executed","Warp Stall Sampling (Not-issued Samples)","Address","Warp Stall Sampling (All Samples)"
"HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24","1,000","100","0x0100","1,200"
"WARPGROUP.DEPBAR.LE gsb0, 0x1","1,000","250","0x0110","300"
"@!P0 BRA 0x1f0","250,000","2,400","0x0120","2,500"
"EXIT","132","0","0x0130","0"
"SYNCS.ARRIVE.TRANS64.RED.A1T0","1,000","900","0x0140","1,000"
'''


def run(details_text, source_text, top="3"):
    with tempfile.TemporaryDirectory() as d:
        dp, sp = os.path.join(d, "d.csv"), os.path.join(d, "s.csv")
        open(dp, "w").write(details_text)
        open(sp, "w").write(source_text)
        p = subprocess.run([sys.executable, SCRIPT, dp, sp, top], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()


def main():
    failures, checked = [], []

    def check(cond, what):
        checked.append(what)
        print(("PASS " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    out = run(DETAILS, SOURCE)
    check(any("Duration" in l and "892.30" in l for l in out), "the duration is kept")
    check(any("Elapsed Cycles" in l and "1,490,112" in l for l in out), "the cycle count is kept")
    check(not any("DRAM Frequency" in l for l in out), "a metric outside the list is left out")
    check(any("5 SASS lines" in l and "253,132 warp instructions" in l and "5,000 stall samples" in l for l in out),
          "line, instruction and sample totals (thousands separators read)")
    shares = [l for l in out if "%" in l and "0x" in l]
    check(len(shares) == 3, "the top 3 lines only")
    check(len(shares) == 3 and "50.0 %" in shares[0] and "0x0120" in shares[0] and "(not issued 48.0 %)" in shares[0],
          "the spin loop first, 2,500 of 5,000 samples = 50.0 %, 2,400 not issued = 48.0 %")
    check(len(shares) == 3 and "24.0 %" in shares[1] and "HGMMA" in shares[1], "the wgmma second, 1,200 / 5,000 = 24.0 %")
    check(len(shares) == 3 and "20.0 %" in shares[2] and "SYNCS" in shares[2], "the arrive third, 20.0 %")
    ops = [l for l in out if "instructions by opcode" in l]
    # executed 1,000 + 1,000 + 250,000 + 132 + 1,000 = 253,132: BRA 98.8 %, then HGMMA, WARPGROUP, SYNCS 0.4 %, EXIT 0.1 %
    check(len(ops) == 1 and re.search(r"BRA 98\.8 %, (HGMMA|WARPGROUP|SYNCS) 0\.4 %", ops[0]) and "EXIT 0.1 %" in ops[0]
          and "@" not in ops[0], "instructions grouped by opcode, predicates and modifiers dropped, shares of the total")
    out = run(DETAILS, SOURCE.replace("Warp Stall Sampling (All Samples)", "Something Else"))
    check(any("source page unreadable" in l and "no warp-stall column" in l for l in out),
          "a source page without the stall column is reported by name")
    # ncu 2025 (CUDA 13.0) opens the source page with a ("Kernel Name", name) line before the header (the H100 run of
    # 2026-12-07): the header is found by its address column
    out = run(DETAILS, '"Kernel Name","h3c_linear_sm90_k7168_n5376",\n' + SOURCE)
    shares = [l for l in out if "%" in l and "0x" in l]
    check(len(shares) == 3 and "50.0 %" in shares[0] and "0x0120" in shares[0],
          "a source page opening with its kernel's name is read from its header on")
    out = run("garbage\n", SOURCE, "1")
    check(any("details page unreadable" in l for l in out) and any("50.0 %" in l for l in out),
          "an unreadable details page does not hide the source page")
    print(f"{len(checked) - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
