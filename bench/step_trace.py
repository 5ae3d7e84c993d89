"""Where a training step's wall time goes on the GPU: one step under torch.profiler (CUPTI records every kernel of
the process, the engine's driver-API launches included), then the step's timeline reduced to what the GPU did not
do: the idle time inside each phase the caller marks (record_function ranges), the gaps by length (many short ones
mean the host's launches are slower than the kernels; a few long ones are host work between launches or a
synchronization) and the longest gaps with the kernels on either side.

    from step_trace import trace_step
    text = trace_step(lambda mark: ..., "trace.txt")   # the step calls mark("phase") as a context manager

Used by bench/backward_bench.py (H3C_BENCH_TRACE=FILE) for the h3c case.
"""
import json
import os
import tempfile

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Gap classes in microseconds: launch-bound, host work between launches, long host phases.
GAP_CLASSES = ((5.0, 50.0), (50.0, 1000.0), (1000.0, float("inf")))


def _union(intervals):
    """Sorted, merged [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _busy_in(merged, lo, hi):
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged)


def summarize(events, step_name="step"):
    """The text report of one traced step from chrome-trace events (a list of dicts with ph 'X')."""
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    steps = [e for e in spans if e["name"] == step_name]
    if not steps:
        return f"step trace: no '{step_name}' range in the trace"
    st = steps[-1]
    lo, hi = float(st["ts"]), float(st["ts"]) + float(st["dur"])
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS
           and float(e["ts"]) < hi and float(e["ts"]) + float(e["dur"]) > lo]
    gpu.sort(key=lambda e: float(e["ts"]))
    merged = _union([(max(lo, float(e["ts"])), min(hi, float(e["ts"]) + float(e["dur"]))) for e in gpu])
    busy = _busy_in(merged, lo, hi)
    lines = [f"step trace: wall {(hi - lo) / 1e3:.1f} ms, GPU busy {busy / 1e3:.1f} ms, idle {(hi - lo - busy) / 1e3:.1f}"
             f" ms, {len(gpu)} GPU activities"]
    for ph in sorted((e for e in spans if e is not st and lo <= float(e["ts"]) <= hi), key=lambda e: float(e["ts"])):
        a, b = float(ph["ts"]), float(ph["ts"]) + float(ph["dur"])
        pb = _busy_in(merged, a, b)
        lines.append(f"  phase {ph['name']:<24} at {(a - lo) / 1e3:8.1f} ms: {(b - a) / 1e3:8.1f} ms wall, GPU busy "
                     f"{pb / 1e3:8.1f}, idle {(b - a - pb) / 1e3:7.1f}")
    # Gaps between consecutive busy intervals, and the step's edges.
    gaps = []
    edges = [(lo, lo)] + [(s, e) for s, e in merged] + [(hi, hi)]
    for (s0, e0), (s1, _) in zip(edges, edges[1:]):
        if s1 - e0 > 0:
            gaps.append((s1 - e0, e0, s1))
    for a, b in GAP_CLASSES:
        sel = [g for g in gaps if a <= g[0] < b]
        lines.append(f"  gaps {a:>6.0f} us - {'' if b == float('inf') else f'{b:.0f} us':<8}: {len(sel):6d}, "
                     f"{sum(g[0] for g in sel) / 1e3:8.1f} ms")
    tiny = [g for g in gaps if g[0] < GAP_CLASSES[0][0]]
    lines.append(f"  gaps under {GAP_CLASSES[0][0]:.0f} us: {len(tiny)}, {sum(g[0] for g in tiny) / 1e3:.1f} ms")

    def kernel_around(t, before):
        best = None
        for e in gpu:
            s, f = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            if before and f <= t + 0.5:
                best = e
            if not before and s >= t - 0.5:
                return e["name"][:60]
        return best["name"][:60] if best else "(step edge)"

    lines.append("  longest gaps (ms into the step, length; the GPU activity before -> after):")
    for g, a, b in sorted(gaps, reverse=True)[:12]:
        lines.append(f"    {(a - lo) / 1e3:8.1f} ms  {g / 1e3:7.2f} ms  {kernel_around(a, True)} -> "
                     f"{kernel_around(b, False)}")
    return "\n".join(lines)


def trace_step(step, path, step_name="step"):
    """Runs step(mark) once under torch.profiler; writes the report to `path` and returns it. `mark(name)` is a
    record_function context manager for the step's phases."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(step_name):
            step(record_function)
            torch.cuda.synchronize()
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp) as f:
            trace = json.load(f)
    finally:
        os.unlink(tmp)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    text = summarize(events, step_name)
    with open(path, "w") as f:
        f.write(text + "\n")
    return text
