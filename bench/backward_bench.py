"""One training step (forward + backward) of the full model in one run (issue 22): diffusers'
MiniMaxH3Transformer3DModel under torch autograd, eager and with regional torch.compile (each repeated block
compiled, as bench/forward_bench.py does for the forward), bf16, per-block gradient checkpointing (diffusers'
enable_gradient_checkpointing: torch.utils.checkpoint, non-reentrant, around every transformer and token refiner
block), beside h3c's step through its Python package (h3c.Transformer on a plan compiled with --backward: one
torch.autograd.Function whose backward runs the plan's backward function on the GPU), each in two modes:

  lora64  rank-64 adapters on every block's attn.to_q / to_k / to_v / to_out.0, ff.net.0.proj and ff.net.2 (the
          modules the slots of `h3c compile --lora-rank 64` serve, docs/contract.md section 13, token refiner blocks
          included), base weights frozen; torch's adapters are plain nn.Linear wrappers (y = base(x) + up(down(x))),
          no peft needed;
  full    every parameter trainable (33B: bf16 weights and their bf16 gradients alone are 123 GiB; on a GPU where
          that does not fit the case says OOM and the bench goes on).

Regional compile with checkpointing comes in two arrangements (--compile-ckpt): "outer", what diffusers' own calls
give (enable_gradient_checkpointing() + compile_repeated_blocks(fullgraph=True): eager non-reentrant checkpoints
around the compiled blocks; table "diffusers compile"), and "inner", each block wrapped in the checkpoint and the
wrapper compiled (torchtitan's order; "diffusers compile/in"); by default inner runs only for a mode outer fails in.
h3c's step is what its package does: the autograd node's forward runs the engine's training forward (Engine::
forwardKept: the plan's forward, keeping in the arena what the backward reads, as the plan's checkpoint segments and
--keep say), and its backward runs `engine.backward` from there: each segment's recompute, then the plan's gradient
kernels, which write the CUDA masters' gradients straight into the .grad tensors it hands them (no copy).

The loss is the same for every case: mean(sample^2) + mean(audio_sample^2) (both outputs are F32). A step is
forward, loss, backward (the gradients left in .grad; no optimizer). Times are CUDA-synchronized wall times of whole
steps: the first step apart (compile / JIT / weight upload), then one warm-up, then the median of --reps. Each line
carries the mean SM clock and board power during the timed steps (nvidia-smi, forward_bench.GpuSampler), the peak
memory torch allocated (diffusers) and the most device memory in use (nvidia-smi, every process: h3c allocates
outside torch). The h3c cases run in child processes with a wall-clock limit (--case-timeout) so that a refusal, a
crash or a hang of the engine costs that case only; a diffusers case is cut by SIGALRM at the same limit. The table
comes last (a device call returns the end of the output); --out writes one JSON line per case.

    python3 bench/backward_bench.py --h3c build-gpu/bin/h3c --plans carry/plans --out OUT.jsonl \\
        [--config full] [--tokens 8349 | --text 512 --audio 157 --video 8,30,32] [--reps 3] [--modes lora64,full]
        [--skip-eager] [--skip-compile] [--compile-ckpt auto|outer|inner|both] [--skip-diffusers] [--skip-h3c]
        [--h3c-cli] [--h3c-first] [--case-timeout 240] [--deadline 540]

Plans (scripts/gpu-plans.sh with H3C_PLANS_BACKWARD_FULL=1): <plans>/<config>-backward-lora64-ckpt and
<plans>/<config>-backward-ckpt (or --plan-lora / --plan-full); a missing plan skips its h3c case. --h3c-cli also
times `h3c backward --device gpu` (one process: weights, JIT, forward, backward, gradients written) per plan. A quick
check: `--config small --tokens 2048` (the small config's plans). bench/backward_bench.sh builds h3c and the package
and runs this with diffusers' carried source.
"""
import argparse
import contextlib
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward_bench import GpuSampler, diffusers_model, load_request  # noqa: E402  (the forward bench's helpers)

MODES = ("lora64", "full")
LORA_RANK = 64
# The linears the adapter slots of `h3c compile --lora-rank R` serve (docs/contract.md section 13), by module name
# suffix inside a block, and the blocks that have them.
LORA_SUFFIXES = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "ff.net.0.proj", "ff.net.2")
LORA_BLOCKS = ("transformer_blocks.", "token_refiner.refiner_blocks.")
PLAN_NAMES = {"lora64": "{config}-backward-lora64-ckpt", "full": "{config}-backward-ckpt"}


def rows_for_tokens(s):
    """(text, audio, video grid) of about S packed rows in the full request's proportions (512 + 157 + 8*30*32 =
    8,349, which S = 8,349 gives as it is): other video row counts as one line of the grid (only the count matters
    to the speed)."""
    if s == 512 + 157 + 8 * 30 * 32:
        return 512, 157, "8,30,32"
    text = max(1, round(s * 512 / 8349))
    audio = max(1, round(s * 157 / 8349))
    video = s - text - audio
    if video < 1:
        raise SystemExit(f"--tokens {s}: too few rows for text, audio and video")
    return text, audio, f"1,1,{video}"


def synced_step_ms(step, device):
    import torch

    t0 = time.perf_counter()
    step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def measure(step, reps, warmup, device="cuda"):
    """The first step alone (compile, JIT, first allocations), `warmup` more, then `reps` timed; whole steps,
    synchronized (h3c's engine runs on its own streams, so one clock for both sides)."""
    first = synced_step_ms(step, device)
    for _ in range(warmup):
        step()
    with GpuSampler() as g:
        ms = [synced_step_ms(step, device) for _ in range(reps)]
    return first, ms, g


def loss_of(sample, audio):
    return sample.float().square().mean() + audio.float().square().mean()


# ---------------------------------------------------------------------------------------------------------------- torch
def lora_linear_class():
    import torch

    class LoraLinear(torch.nn.Module):
        """y = base(x) + up(down(x)): PEFT's unmerged adapter (scale folded into `up`, as h3c's up slot holds it),
        the frozen base nn.Linear inside. Random small adapter values (a zero `up` would make the gradient of `down`
        zero; the speed is the same)."""

        def __init__(self, base, rank):
            super().__init__()
            self.base = base
            w = base.weight
            self.lora_down = torch.nn.Parameter(torch.randn(rank, w.shape[1], device=w.device, dtype=w.dtype)
                                                * w.shape[1] ** -0.5)
            self.lora_up = torch.nn.Parameter(torch.randn(w.shape[0], rank, device=w.device, dtype=w.dtype)
                                              * (0.01 * rank ** -0.5))

        def forward(self, x):
            return self.base(x) + torch.nn.functional.linear(torch.nn.functional.linear(x, self.lora_down),
                                                              self.lora_up)

    return LoraLinear


def lora_target_names(model):
    import torch

    return [n for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.startswith(LORA_BLOCKS) and n.endswith(LORA_SUFFIXES)]


def set_submodule(model, name, module):
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)  # ModuleList children by "0" too


def add_lora(model, names, rank):
    cls = lora_linear_class()
    for n in names:
        set_submodule(model, n, cls(model.get_submodule(n), rank))


def remove_lora(model, names):
    for n in names:
        set_submodule(model, n, model.get_submodule(n).base)


def says_oom(text):
    """torch's "CUDA out of memory", the driver's CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation."""
    t = text.lower()
    return "out of memory" in t or "out_of_memory" in t or "memoryallocation" in t


def is_oom(e):
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return bool(oom and isinstance(e, oom)) or says_oom(str(e))


class CaseTimeout(Exception):
    pass


def with_alarm(seconds, fn):
    """fn() cut by SIGALRM after `seconds` (raised in the main thread between CUDA calls and Python steps)."""

    def fire(*_):
        raise CaseTimeout(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(max(1, int(seconds)))
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class CheckpointedBlock:
    """Made at first use (torch imported then): a block whose call is torch.utils.checkpoint (non-reentrant) of the
    block, for the "inner" compile variant, where each wrapper is compiled and the checkpoint is inside the compiled
    region (torchtitan's order: activation checkpointing applied to each block, then the block compiled)."""
    _cls = None

    @classmethod
    def wrap(cls, block):
        import torch
        import torch.utils.checkpoint  # not imported by `import torch`

        if cls._cls is None:
            class Checkpointed(torch.nn.Module):
                def __init__(self, inner):
                    super().__init__()
                    self.inner = inner

                def forward(self, *args):
                    return torch.utils.checkpoint.checkpoint(self.inner, *args, use_reentrant=False)

            cls._cls = Checkpointed
        return cls._cls(block)


def repeated_block_names(model):
    """The modules compile_repeated_blocks compiles (diffusers' `_repeated_blocks` classes), by name."""
    kinds = set(getattr(model, "_repeated_blocks", None) or ())
    return [n for n, m in model.named_modules() if type(m).__name__ in kinds]


def run_diffusers(a, cfg, req, record, time_left):
    """The diffusers cases on one model: eager, then regional compile, each in the modes asked for. The compile
    variant "outer" is what diffusers' own calls give (enable_gradient_checkpointing() + compile_repeated_blocks():
    eager non-reentrant checkpoints around compiled blocks); "inner" checkpoints inside each compiled block. With
    --compile-ckpt auto (default) inner runs for a mode only when outer failed for it (not for an OOM or a timeout)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dyn = getattr(torch, "_dynamo", None)
    if dyn is not None:  # 50 + 2 blocks share one graph per mode; leave room for the modes' recompiles
        for k in ("cache_size_limit", "recompile_limit"):
            if hasattr(dyn.config, k):
                setattr(dyn.config, k, max(getattr(dyn.config, k), 64))
    t0 = time.time()
    model = diffusers_model(cfg, torch.bfloat16)
    model.enable_gradient_checkpointing()
    for p in model.parameters():
        p.requires_grad_(False)
    kw = load_request(req, "cuda")
    st = {"lora": False, "names": lora_target_names(model), "variant": "eager"}
    print(f"diffusers model built in {time.time() - t0:.1f} s: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B "
          f"parameters, {len(st['names'])} LoRA targets", flush=True)

    def set_mode(mode):
        """LoRA wrappers in (lora64) or out (full), requires_grad to match; the trainable tensors."""
        if (mode == "lora64") != st["lora"]:
            if mode == "lora64":
                add_lora(model, st["names"], LORA_RANK)
            else:
                remove_lora(model, st["names"])
            st["lora"] = mode == "lora64"
        trainable = []
        for n, p in model.named_parameters():
            p.requires_grad_(mode == "full" or ".lora_" in n)
            if p.requires_grad:
                trainable.append(p)
        return trainable

    def set_variant(variant):
        if variant == st["variant"]:
            return
        if variant == "outer":
            model.compile_repeated_blocks(fullgraph=True)  # compiles at the first call
        else:  # inner: the outer variant's compiled calls undone, each block wrapped and the wrapper compiled
            if st["lora"]:  # the wrappers change the blocks' module names: the LoRA targets are found again after
                remove_lora(model, st["names"])
                st["lora"] = False
            for m in model.modules():
                if getattr(m, "_compiled_call_impl", None) is not None:
                    m._compiled_call_impl = None
            model.disable_gradient_checkpointing()
            for n in repeated_block_names(model):
                w = CheckpointedBlock.wrap(model.get_submodule(n))
                set_submodule(model, n, w)
                w.compile(fullgraph=True)
            st["names"] = lora_target_names(model)
        st["variant"] = variant

    def run_case(case, mode, trainable):
        def step():
            for p in trainable:
                p.grad = None
            sample, audio = model(**kw, return_dict=False)
            loss_of(sample, audio).backward()

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        extra = {"trainable": sum(p.numel() for p in trainable)}
        status = "ok"
        try:
            first, ms, g = with_alarm(min(a.case_timeout, time_left() - 10), lambda: measure(step, a.reps, a.warmup))
            # A step that left the adapters (every one is read) or all tensors without a gradient did not do the
            # work it claims; a parameter the forward does not read gets none in any step (a note says how many).
            unset = sum(p.grad is None for p in trainable)
            if unset == len(trainable) or unset and mode == "lora64":
                raise RuntimeError(f"the step left {unset} of {len(trainable)} trainable tensors without .grad")
            if unset:
                extra["note"] = f"{unset} of {len(trainable)} trainable tensors unread: no .grad"
            record(case, mode, ms=statistics.median(ms), first_ms=first, all_ms=ms,
                   peak_gib=torch.cuda.max_memory_allocated() / 2**30, smi_gib=g.mem_peak_gib, **g.extra, **extra)
        except CaseTimeout as e:
            status = "timeout"
            record(case, mode, status=status, note=str(e), peak_gib=torch.cuda.max_memory_allocated() / 2**30, **extra)
        except Exception as e:  # noqa: BLE001 (an OOM, or anything else: the bench goes on)
            status = "OOM" if is_oom(e) else "error"
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            print(f"{case} {mode}: {status}: {type(e).__name__}: {str(e)[-1500:]}", flush=True)
            record(case, mode, status=status, note=first_line[:120],
                   peak_gib=torch.cuda.max_memory_allocated() / 2**30, **extra)
        for p in trainable:
            p.grad = None
        gc.collect()
        torch.cuda.empty_cache()
        return status

    variants = [] if a.skip_compile else (["outer", "inner"] if a.compile_ckpt == "both" else
                                          ["inner"] if a.compile_ckpt == "inner" else ["outer"])
    plan = ([] if a.skip_eager else [("eager", m) for m in a.modes]) + [(v, m) for v in variants for m in a.modes]
    outer_failed = []
    if a.compile_ckpt == "auto" and not a.skip_compile:
        plan += [("inner", m) for m in a.modes]  # run only for the modes outer failed for (below)
    names = {"eager": "diffusers eager", "outer": "diffusers compile", "inner": "diffusers compile/in"}
    for variant, mode in plan:
        if a.compile_ckpt == "auto" and variant == "inner" and mode not in outer_failed:
            continue
        if time_left() < 30:
            record(names[variant], mode, status="skipped", note="run deadline")
            continue
        try:
            set_variant(variant)
        except Exception as e:  # noqa: BLE001
            record(names[variant], mode, status="error", note=f"setting up {variant}: {str(e).splitlines()[0][:100]}")
            continue
        status = run_case(names[variant], mode, set_mode(mode))
        if variant == "outer" and status == "error":
            outer_failed.append(mode)
    # The weights freed even where a compile cache still refers to the modules: h3c's children need the memory.
    for p in model.parameters():
        p.grad = None
        p.data = torch.empty(0, device=p.device, dtype=p.dtype)
    if dyn is not None and hasattr(dyn, "reset"):
        dyn.reset()


# ------------------------------------------------------------------------------------------------------------------ h3c
def h3c_child(spec):
    """One h3c case in this (child) process: prints one `H3C_RESULT {json}` line last, whatever happens."""
    result = {"status": "error"}
    # H3C_BENCH_PROFILE=FILE: the case under cProfile, its functions by own time into FILE (where a step's host time
    # goes: the engine's calls are single entries, torch's copies and the autograd node their own).
    prof_path = os.environ.get("H3C_BENCH_PROFILE")
    prof = None
    if prof_path:
        import cProfile
        prof = cProfile.Profile()
    try:
        with GpuSampler() as life:  # the most device memory in use over the child's life (weights, arena, ...)
            if prof:
                prof.enable()
            try:
                _h3c_case(spec, result)
            finally:
                if prof:
                    prof.disable()
                    import pstats
                    with open(prof_path, "w") as f:
                        pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(30)
        if life.mem_peak_gib is not None:
            result["smi_gib"] = life.mem_peak_gib
    except Exception as e:  # noqa: BLE001 (h3c.Error, a CUDA error, ...: reported, not raised)
        msg = str(e).strip()
        print(f"h3c: {type(e).__name__}: {msg[-3000:]}", file=sys.stderr, flush=True)
        result.update(status="OOM" if says_oom(msg) else "error",
                      note=(msg.splitlines() or [type(e).__name__])[0][:160])
    print("H3C_RESULT " + json.dumps(result), flush=True)


def _h3c_case(spec, result):
    import torch

    import h3c

    dev = spec["device"]
    t0 = time.time()
    # One worker thread on the CPU (a local check; the GPU's engine takes no CPU threads to speak of).
    tr = h3c.Transformer(plan=spec["plan"], synthetic=7, device=dev, mode="strict", threads=1 if dev == "cpu" else 0)
    kw = load_request(spec["request"], dev)
    if spec["mode"] == "lora64":
        # The masters on the engine's device: the backward writes their gradients there (no host round trip).
        params = tr.parameters("lora", device="cuda" if dev == "cuda" else "cpu")
        with torch.no_grad():  # random small adapters, as the torch side's (values do not change the speed)
            for n, p in params.items():
                p.copy_(torch.randn(p.shape) * (p.shape[1] ** -0.5 if n.endswith("lora_down") else 0.01 * p.shape[1] ** -0.5))
        tr.push_parameters()
        result["trainable"] = sum(p.numel() for p in params.values())
    else:
        # Every tensor trains: the engine computes all weight gradients whatever is registered, so no F32 master
        # copies are made (33B of them would not fit the host); an activation that requires grad records the node.
        params = {}
        kw["hidden_states"] = kw["hidden_states"].detach().requires_grad_(True)
    result["setup_ms"] = (time.time() - t0) * 1e3

    def step(mark=lambda _name: contextlib.nullcontext()):
        # `mark(phase)`: a context around each phase (step_trace's record_function; none when timed).
        for p in params.values():
            p.grad = None
        kw["hidden_states"].grad = None
        with mark("h3c forward"):
            sample, audio = tr(**kw, return_dict=False)
        with mark("loss"):
            loss = loss_of(sample, audio)
        with mark("loss.backward"):
            loss.backward()

    first, ms, g = measure(step, spec["reps"], spec["warmup"], device=dev)
    # H3C_BENCH_TRACE=FILE: one more step under torch.profiler, its GPU idle time by phase and gap (step_trace.py).
    trace_path = os.environ.get("H3C_BENCH_TRACE")
    if trace_path and dev == "cuda":
        from step_trace import trace_step
        print(trace_step(step, trace_path), file=sys.stderr, flush=True)
    # The step must have gone through the plan's backward: every registered parameter (or the activation) has a
    # gradient, else the times are those of a forward alone.
    got = [p.grad is not None for p in params.values()] or [kw["hidden_states"].grad is not None]
    if not all(got):
        raise RuntimeError(f"the step left {got.count(False)} of {len(got)} gradients unset")
    result.update(status="ok", ms=statistics.median(ms), first_ms=first, all_ms=ms, **g.extra)


def run_limited(cmd, timeout):
    """(returncode, stdout, stderr), returncode None when `cmd` ran past `timeout` seconds: then its whole process
    group is killed (the child's nvidia-smi sampler with it, which would otherwise outlive it)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, err


def run_h3c_python(a, plan, req, mode, timeout):
    spec = {"plan": plan, "request": req, "mode": mode, "reps": a.reps, "warmup": a.warmup, "device": a.h3c_device}
    rc, out, err = run_limited([sys.executable, os.path.abspath(__file__), "--h3c-child", json.dumps(spec)], timeout)
    if rc is None:
        print(f"h3c python {mode}: timed out after {timeout:g} s; output tail:\n{out[-800:]}{err[-1500:]}", flush=True)
        return {"status": "timeout", "note": f"over {timeout:g} s"}
    lines = [ln for ln in out.splitlines() if ln.startswith("H3C_RESULT ")]
    res = json.loads(lines[-1][len("H3C_RESULT "):]) if lines else {
        "status": "error", "note": f"child exited {rc} without a result"}
    if res.get("status") != "ok":
        print(f"h3c python {mode}: {res.get('status')} (exit {rc}); stderr tail:\n{err[-2500:]}", flush=True)
    elif os.environ.get("H3C_PROFILE"):  # the engine's host phases of the last steps (H3C_PROFILE's stderr lines)
        phases = [ln for ln in err.splitlines() if ln.startswith(("h3c gpu:", "h3c engine:"))]
        print(f"h3c python {mode}: the engine's host phases, last steps:\n" + "\n".join(phases[-6:]), flush=True)
    return res


def run_h3c_cli(a, plan, req, mode, timeout, tmp):
    """`h3c backward --device gpu` as one process (weights, JIT, forward, backward, gradients written): its wall."""
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from st_numpy import read, write

    arrays, _, _ = read(req)
    hs, ahs = arrays["hidden_states"].shape, arrays["audio_hidden_states"].shape
    cfg = json.load(open(os.path.join(plan, "plan.json")))["config"]
    cv = cfg["in_channels"] * int(np.prod(cfg["patch_size"]))
    rng = np.random.default_rng(3)
    grads = os.path.join(tmp, f"grads_{mode}.safetensors")
    write(grads, {"sample": rng.standard_normal((hs[0], hs[1], cv), dtype=np.float32) * 1e-3,
                  "audio_sample": rng.standard_normal((ahs[0], ahs[1], cfg["audio_in_channels"]), dtype=np.float32)
                  * 1e-3})
    out = os.path.join(tmp, f"cli_{mode}.safetensors")
    cmd = [a.h3c, "backward", "--config", a.config, "--synthetic", "7", "--plan", plan, "--inputs", req, "--grads",
           grads, "-o", out, "--device", "gpu" if a.h3c_device == "cuda" else "cpu"]
    t0 = time.time()
    try:
        with GpuSampler() as g:
            rc, _, err = run_limited(cmd, timeout)
    finally:
        for f in (out, grads):
            if os.path.exists(f):
                os.remove(f)
    wall = (time.time() - t0) * 1e3
    if rc is None:
        print(f"h3c cli {mode}: timed out after {timeout:g} s; stderr tail:\n{err[-1500:]}", flush=True)
        return {"status": "timeout", "note": f"over {timeout:g} s"}
    if rc != 0:
        last = (err.strip().splitlines() or ["(no stderr)"])[-1]
        print(f"h3c cli {mode}: exit {rc}: {err[-2000:]}", flush=True)
        return {"status": "OOM" if says_oom(err) else "error", "note": last[:160]}
    return {"status": "ok", "ms": wall, "note": "process wall (weights, JIT, forward, backward, write)",
            "smi_gib": g.mem_peak_gib, **g.extra}


# ---------------------------------------------------------------------------------------------------------------- table
def print_table(rows, header):
    compile_ms = {}  # the fastest regional compile variant of each mode
    for r in rows:
        if r["case"].startswith("diffusers compile") and r.get("ms"):
            compile_ms[r["mode"]] = min(r["ms"], compile_ms.get(r["mode"], r["ms"]))
    print("\n== " + header)
    print(f"{'case':20s} {'mode':6s} {'status':8s} {'ms/step':>10s} {'first ms':>10s} {'peak GiB':>9s} "
          f"{'smi GiB':>8s} {'SM MHz':>7s} {'W':>5s} {'/compile':>9s}  note")
    for r in rows:
        ms = r.get("ms")
        ratio = f"{ms / compile_ms[r['mode']]:.2f}x" if ms and r["mode"] in compile_ms else "-"

        def f(k, fmt):
            v = r.get(k)
            return format(v, fmt) if isinstance(v, (int, float)) else "-"

        print(f"{r['case']:20s} {r['mode']:6s} {r['status']:8s} {f('ms', '10.1f'):>10s} {f('first_ms', '10.0f'):>10s} "
              f"{f('peak_gib', '9.1f'):>9s} {f('smi_gib', '8.1f'):>8s} {f('sm_mhz', '7d'):>7s} {f('watts', '5d'):>5s} "
              f"{ratio:>9s}  {r.get('note', '')}")
    print("ms/step: median of the timed steps (after the first and the warm-up); peak GiB: torch's max allocated "
          "(diffusers); smi GiB: most device memory in use (nvidia-smi, all processes; h3c's own allocations); "
          "/compile: ms/step over diffusers regional torch.compile's of the same mode (the faster variant; "
          "compile/in: the checkpoint inside each compiled block)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--h3c", help="the h3c binary (request make, fingerprint derive, --h3c-cli)")
    ap.add_argument("--plans", help="folder with <config>-backward-lora64-ckpt/ and <config>-backward-ckpt/")
    ap.add_argument("--plan-lora", help="the lora64 plan (default <plans>/<config>-backward-lora64-ckpt)")
    ap.add_argument("--plan-full", help="the full-gradient plan (default <plans>/<config>-backward-ckpt)")
    ap.add_argument("--out", help="one JSON line per case")
    ap.add_argument("--config", default="full")
    ap.add_argument("--tokens", type=int, help="packed rows S (text, audio and video in the full request's shares)")
    ap.add_argument("--text", type=int, default=512)
    ap.add_argument("--audio", type=int, default=157)
    ap.add_argument("--video", default="8,30,32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps after the first")
    ap.add_argument("--modes", default="lora64,full", help="comma-separated: lora64, full")
    ap.add_argument("--skip-eager", action="store_true")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--compile-ckpt", default="auto", choices=("auto", "outer", "inner", "both"),
                    help="where the checkpoint sits for regional compile: outer (diffusers' enable_gradient_"
                         "checkpointing around compile_repeated_blocks' blocks), inner (inside each compiled block), "
                         "both, or auto: outer, and inner for a mode where outer fails")
    ap.add_argument("--skip-diffusers", action="store_true")
    ap.add_argument("--skip-h3c", action="store_true")
    ap.add_argument("--h3c-cli", action="store_true", help="also time `h3c backward` per plan (process wall)")
    ap.add_argument("--h3c-first", action="store_true", help="the h3c cases before diffusers' (default after)")
    ap.add_argument("--h3c-device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: the CPU reference (a local check of the h3c path at a tiny config; no diffusers)")
    ap.add_argument("--case-timeout", type=float, default=240.0, help="seconds per case")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="seconds for the whole run (0: none); cases that would pass it are cut short or skipped "
                         "so that the table still prints")
    ap.add_argument("--h3c-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.h3c_child:
        h3c_child(json.loads(a.h3c_child))
        return
    if not a.h3c:
        ap.error("--h3c is required")
    a.modes = [m for m in a.modes.split(",") if m]
    for m in a.modes:
        if m not in MODES:
            ap.error(f"--modes: unknown mode {m!r} (expected {', '.join(MODES)})")
    if a.tokens:
        a.text, a.audio, a.video = rows_for_tokens(a.tokens)
    start = time.time()

    def time_left():
        return (a.deadline - (time.time() - start)) if a.deadline > 0 else float("inf")

    import torch

    if a.h3c_device == "cuda" and not torch.cuda.is_available():
        print("backward-bench: SKIP: torch sees no CUDA device")
        return
    if a.h3c_device == "cpu":
        a.skip_diffusers = True

    rows = []

    def record(case, mode, status="ok", **kv):
        r = {"case": case, "mode": mode, "status": status, **kv}
        rows.append(r)
        print(f"{case} {mode}: {status}" + "".join(f" {k}={round(v, 1) if isinstance(v, float) else v}"
                                                    for k, v in kv.items() if k != "all_ms"), flush=True)

    tmp = tempfile.mkdtemp(prefix="h3c-backward-bench-")
    fp, req = os.path.join(tmp, "fp.json"), os.path.join(tmp, "req.safetensors")
    subprocess.run([a.h3c, "fingerprint", "derive", "--config", a.config, "-o", fp], check=True, capture_output=True)
    subprocess.run([a.h3c, "request", "make", "--config", a.config, "--text", str(a.text), "--audio", str(a.audio),
                    "--video", a.video, "--timesteps", "2", "--seed", "5", "--dtype", "BF16", "-o", req], check=True,
                   capture_output=True)
    cfg = json.load(open(fp))["config"]
    t, h, w = (int(x) for x in a.video.split(","))
    S = a.text + a.audio + t * h * w
    dev_name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    header = (f"forward + backward, config {a.config} ({cfg['num_layers']} blocks, hidden {cfg['hidden_size']}), "
              f"S = {S:,} (text {a.text}, audio {a.audio}, video {a.video}), torch {torch.__version__}, {dev_name}")
    print(header, flush=True)

    def h3c_cases():
        for mode in a.modes:
            plan = getattr(a, "plan_lora" if mode == "lora64" else "plan_full") or (
                os.path.join(a.plans, PLAN_NAMES[mode].format(config=a.config)) if a.plans else None)
            kinds = ["h3c python"] + (["h3c cli"] if a.h3c_cli else [])
            for kind in kinds:
                if not plan or not os.path.isfile(os.path.join(plan, "plan.json")):
                    record(kind, mode, status="skipped", note=f"no plan {plan}")
                    continue
                left = time_left()
                if left < 20:
                    record(kind, mode, status="skipped", note="run deadline")
                    continue
                timeout = min(a.case_timeout, left - 10)
                res = (run_h3c_python(a, plan, req, mode, timeout) if kind == "h3c python"
                       else run_h3c_cli(a, plan, req, mode, timeout, tmp))
                status = res.pop("status")
                record(kind, mode, status=status, **res)

    if a.h3c_first and not a.skip_h3c:
        h3c_cases()
    if not a.skip_diffusers:
        run_diffusers(a, cfg, req, record, time_left)
        gc.collect()  # the model went with run_diffusers' frame; its memory back to the driver for h3c's children
        torch.cuda.empty_cache()
        print(f"after diffusers: torch holds {torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated, "
              f"{torch.cuda.memory_reserved() / 2**30:.2f} GiB reserved", flush=True)
    if not a.h3c_first and not a.skip_h3c:
        h3c_cases()

    if a.out:
        with open(a.out, "w") as f:
            for r in rows:
                f.write(json.dumps({**r, "S": S, "config": a.config, "device": dev_name}) + "\n")
    print_table(rows, header)


if __name__ == "__main__":
    main()
