"""The full forward in one run (issue 14): h3c's strict forward through the Python package (h3c.Transformer, the
resident engine: torch CUDA tensors in and out on the current stream), diffusers' MiniMaxH3Transformer3DModel eager
and with regional torch.compile (its repeated blocks compiled), h3c's forward again (the GPU is power-capped: a run
on a hot GPU is slower, so h3c is timed on both sides of diffusers), and `h3c generate` of N model evaluations. Each
timed line carries the mean SM clock and board power (nvidia-smi) during it.

All on the GPU machine: torch, diffusers' source on PYTHONPATH (carried, nothing installed), the h3c Python package
(`python/`, built by scripts/gpu-test.sh into build-gpu/python) and an h3c plan for the config. Random weights for
diffusers (their values do not change its speed), synthetic weights for h3c. CUDA events, warm-ups first, medians.

    python3 bench/forward_bench.py --h3c build-gpu/bin/h3c --plan carry/plans/full --out OUT.jsonl \
        [--config full] [--text 512 --audio 157 --video 8,30,32] [--reps 5] [--generate-steps 11] [--skip-compile]
        [--alt-plan LABEL=PATH ...] [--h3c-only]

--h3c-only leaves diffusers out: the plans (--plan, then each --alt-plan) are timed in turn twice, for a tuning's
effect on the whole forward at the same board state (no diffusers source needed).

Writes one JSON line per measurement to --out and prints a table.
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(fn, reps, warmup=2):
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms), ms


class GpuSampler:
    """nvidia-smi every 50 ms while a measurement runs: mean SM clock (MHz) and power (W), so that runs on a hot,
    power-capped GPU can be told from runs on a cool one (the full forward is power-bound on the H200), and the most
    device memory in use (`mem_peak_gib`: every process's, as the driver counts it; what an engine that allocates
    outside torch's caching allocator holds). Without nvidia-smi it measures nothing (extra stays empty)."""

    def __enter__(self):
        self.extra, self.mem_peak_gib = {}, None
        try:
            self.p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,memory.used",
                                       "--format=csv,noheader,nounits", "-lms", "50"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.p = None
        return self

    def __exit__(self, *exc):
        if self.p is None:
            return False
        self.p.terminate()
        out, _ = self.p.communicate()
        rows = []
        for line in out.splitlines():
            try:
                mhz, watts, mib = (float(x) for x in line.split(","))
                rows.append((mhz, watts, mib))
            except ValueError:
                pass
        if rows:
            self.extra = {"sm_mhz": round(statistics.mean(r[0] for r in rows)), "watts": round(statistics.mean(r[1] for r in rows))}
            self.mem_peak_gib = max(r[2] for r in rows) / 1024
        return False


def load_request(path, device):
    """The request's tensors under diffusers' forward argument names, BF16 as torch.bfloat16."""
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from st_numpy import read  # the scripts' safetensors reader (BF16 as int16 bit patterns)

    arrays, dtypes, _ = read(path)
    kw = {}
    for k, v in arrays.items():
        t = torch.from_numpy(np.array(v))
        kw[k] = (t.view(torch.bfloat16) if dtypes[k] == "BF16" else t).to(device)
    return kw


def diffusers_model(cfg, dtype):
    import torch
    from diffusers import MiniMaxH3Transformer3DModel

    # Built directly on the GPU in the target dtype (an F32 copy of 33B would not fit beside it), then the modules
    # diffusers keeps in float32 under from_pretrained(torch_dtype=bfloat16) are made float32 again.
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model = MiniMaxH3Transformer3DModel(**cfg)
    finally:
        torch.set_default_dtype(prev)
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, mod in model.named_modules():
        if name and any(k in name for k in keep):  # substrings of the name, as diffusers matches them
            mod.float()
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--h3c", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default="full")
    ap.add_argument("--text", type=int, default=512)
    ap.add_argument("--audio", type=int, default=157)
    ap.add_argument("--video", default="8,30,32")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--generate-steps", type=int, default=11, help="sigma points: steps - 1 model evaluations")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--alt-plan", action="append", default=[], metavar="LABEL=PATH",
                    help="another plan of the same config (a tuning), timed beside --plan on both sides of diffusers")
    ap.add_argument("--h3c-only", action="store_true",
                    help="no diffusers: the plans timed in turn twice (a tuning's effect on the forward)")
    a = ap.parse_args()
    alts = []
    for spec in a.alt_plan:
        label, eq, path = spec.partition("=")
        if not eq or not label or not os.path.isfile(os.path.join(path, "plan.json")):
            ap.error(f"--alt-plan {spec}: expected LABEL=PATH of a plan folder (with plan.json)")
        alts.append((label, path))

    import torch

    rows = []

    def record(name, ms, **extra):
        r = {"name": name, "ms": round(ms, 3), **extra}
        rows.append(r)
        print(f"{name:55s} {ms:10.1f} ms" + "".join(f"  {k}={v}" for k, v in extra.items()), flush=True)

    tmp = tempfile.mkdtemp(prefix="h3c-forward-bench-")
    fp = os.path.join(tmp, "fp.json")
    req = os.path.join(tmp, "req.safetensors")
    subprocess.run([a.h3c, "fingerprint", "derive", "--config", a.config, "-o", fp], check=True, capture_output=True)
    subprocess.run([a.h3c, "request", "make", "--config", a.config, "--text", str(a.text), "--audio", str(a.audio),
                    "--video", a.video, "--timesteps", "2", "--seed", "5", "--dtype", "BF16", "-o", req], check=True,
                   capture_output=True)
    cfg = json.load(open(fp))["config"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, config {a.config}, request {req}", flush=True)

    def h3c_forward(when):
        """h3c through the Python package: the resident engine, torch tensors in and out (timed before and after
        diffusers, so that neither side alone runs on the hotter GPU); then each --alt-plan the same way, one engine
        at a time (an 80 GB GPU holds one copy of the weights)."""
        import h3c

        kw = load_request(req, "cuda")
        for label, plan in [("", a.plan)] + alts:
            t0 = time.time()
            tr = h3c.Transformer(plan=plan, synthetic=7, device="cuda", mode="strict")
            tag = f" [{label}]" if label else ""
            with torch.no_grad():
                out = tr(**kw, return_dict=False)
                torch.cuda.synchronize()
                record(f"h3c first forward (JIT + weights + forward){tag}, {when}", (time.time() - t0) * 1e3)
                # the output's bytes: every plan of the same contract gives the same ones
                digest = hashlib.sha256(b"".join(t.contiguous().view(torch.uint8).cpu().numpy().tobytes()
                                                 for t in out if torch.is_tensor(t))).hexdigest()[:16]
                with GpuSampler() as g:
                    med, _ = timed(lambda: tr(**kw, return_dict=False), a.reps, warmup=1)
                record(f"h3c strict forward (Python, resident engine){tag}, {when}", med, S=S, sha=digest, **g.extra)
            del tr, out
            torch.cuda.empty_cache()
        del kw

    pos = load_request(req, "cpu")["position_ids"]
    S = int(pos.shape[-2]) if pos.dim() >= 2 else int(pos.shape[0])
    def write_rows():
        with open(a.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    if a.h3c_only:
        h3c_forward("pass 1")
        h3c_forward("pass 2")
        write_rows()
        return
    h3c_forward("before diffusers")

    # 1. diffusers, bf16 (the released mixed precision), eager and with its repeated blocks compiled.
    torch.backends.cuda.matmul.allow_tf32 = False
    model = diffusers_model(cfg, torch.bfloat16)
    kw = load_request(req, "cuda")
    with torch.no_grad():
        with GpuSampler() as g:
            med, _ = timed(lambda: model(**kw, return_dict=False), a.reps)
        record("diffusers eager (bf16)", med, S=S, **g.extra)
        if not a.skip_compile:
            t0 = time.time()
            if hasattr(model, "compile_repeated_blocks"):
                model.compile_repeated_blocks(fullgraph=True)
                how = "compile_repeated_blocks(fullgraph=True)"
            else:
                for blocks in ("transformer_blocks", "refiner_blocks"):
                    for blk in getattr(model, blocks, []):
                        blk.compile(fullgraph=True)
                how = "torch.compile per block"
            model(**kw, return_dict=False)
            torch.cuda.synchronize()
            record(f"diffusers regional compile, first call ({how})", (time.time() - t0) * 1e3)
            with GpuSampler() as g:
                med, _ = timed(lambda: model(**kw, return_dict=False), a.reps)
            record("diffusers regional torch.compile (bf16)", med, S=S, **g.extra)
    peak = torch.cuda.max_memory_allocated() / 2**30
    # The compiled blocks' code caches hold the model (its 61.7 GiB of weights) until dynamo forgets them: on an 80 GB
    # GPU h3c's forward after diffusers ran out of memory while they lived.
    del model, kw
    import gc
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    print(f"diffusers peak allocated {peak:.1f} GiB", flush=True)

    h3c_forward("after diffusers")

    # 3. `h3c generate`: N - 1 model evaluations with weights loaded once per process.
    if a.generate_steps > 1:
        out = os.path.join(tmp, "traj")
        t0 = time.time()
        p = subprocess.run([a.h3c, "generate", "--config", a.config, "--synthetic", "7", "--plan", a.plan, "--inputs",
                            req, "--steps", str(a.generate_steps), "--seed", "3", "--device", "gpu", "--mode", "strict",
                            "--out", out], capture_output=True, text=True)
        wall = (time.time() - t0) * 1e3
        if p.returncode != 0:
            print(p.stderr[-2000:])
            record("h3c generate FAILED", wall)
        else:
            record(f"h3c generate, {a.generate_steps - 1} evaluations (process wall)", wall)

    write_rows()


if __name__ == "__main__":
    main()
