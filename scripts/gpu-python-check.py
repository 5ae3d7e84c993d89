#!/usr/bin/env python3
"""The Python package on the GPU (issue 16), called by scripts/gpu-test.sh. Needs torch with CUDA, the package built
for this Python (PYTHONPATH=<build-gpu>/python) and the h3c binary of the same build ($H3C); prints PASS/FAIL lines
and ends with "N passed, N failed" (a machine without CUDA prints one SKIP line and exits 0).

    gpu-python-check.py --h3c H3C --plans DIR --tmp DIR [--configs tiny,small[,full]] [--repeats 20]
                        [--diffusers-src carry/diffusers/src]

For each config (synthetic weights; full is the 33B at 8,349 tokens, BF16 request):
  1. torch CUDA tensors in and out (all ten arguments on the device, on a non-default stream too, or the metadata on
     the host), byte-equal to the file `h3c run --device gpu` writes for the same request, and the ledger byte-equal
     to its ledger file; a NaN device activation refused, the next forward unchanged; the H3C_PROFILE phases of a
     forward (FIGURE line) within its wall time; (tiny) outputs that overflow to NaN / Inf (class Overflow), scanned
     on the device: refused in strict mode with the entry `h3c run --device gpu` records, returned in audit mode;
  2. the call overhead: the Python call's wall time per forward (median of --repeats, synchronized) against the
     forward time `h3c run` reports (H3C_GPU_PROFILE=1, device events), printed as FIGURE lines;
With --diffusers-src (tiny): 3. one step of diffusers' own denoise loop blocks (MiniMaxH3LoopDenoiser +
MiniMaxH3LoopSchedulerStep) with pipe.transformer = h3c.Transformer, on a request the pipeline's blocks built
(scripts/diffusers_request.py make): the velocity equals `h3c run --device gpu`'s bits and lies near diffusers' own
float32 transformer in the same block (relative Frobenius error printed, < 2e-2).
4. (tiny-backward-lora in --plans) a LoRA training step with CUDA masters (parameters(..., device="cuda"): the
   gradient kernels write into their .grad) against host masters: every .grad byte-equal, each on its masters' device.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import types

import numpy as np

try:
    import torch
except ImportError:
    print("SKIP: no torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(0)
import h3c

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_numpy  # noqa: E402

passed = failed = 0


def result(ok, what, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f"\n    {detail}" if detail else ""), flush=True)


def tool(H, *args, env=None):
    r = subprocess.run([H, *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise RuntimeError(f"h3c {' '.join(map(str, args))}: {r.stderr.strip()[-800:]}")
    return r


def read_st(path):
    """(name -> (array, safetensors dtype), metadata); BF16 as int16 bits."""
    arrays, dtypes, meta = st_numpy.read(path)
    return {k: (arrays[k], dtypes[k]) for k in arrays}, meta


def to_torch(req, device):
    out = {}
    for k, (a, dtype) in req.items():
        t = torch.from_numpy(a.copy())
        out[k] = (t.view(torch.bfloat16) if dtype == "BF16" else t).to(device)
    return out


def cli_gpu(a, cfg, plan, req, tag):
    o, led = f"{a.tmp}/{tag}.gpu.safetensors", f"{a.tmp}/{tag}.gpu_ledger.json"
    r = tool(a.h3c, "run", "--config", cfg, "--synthetic", 7, "--plan", plan, "--inputs", req, "--out", o,
             "--device", "gpu", "--ledger", led, env={"H3C_GPU_PROFILE": "1"})
    m = re.search(r"forward ([0-9.]+) ms", r.stderr)
    with open(led) as f:
        return read_st(o)[0], f.read(), float(m.group(1)) if m else float("nan")


class Overflow:
    """Outputs that overflow (row 3 of proj_out.weight at 3e38: finite, so it loads; channel 3 of the video output
    becomes NaN / Inf): the engine scans the caller's CUDA outputs on the device, never copying them back. Per
    request: audit mode returns them byte-equal to `h3c run --device gpu --mode audit`'s, with its very ledger (whose
    entry comes from the host scan of the bytes the CLI downloaded) and the entry NumPy finds; strict mode raises
    h3c.Error with that entry, as `h3c run` exits 2 with it. One engine per mode for every request: a scan's counts
    must not carry into the next forward (the requests differ in size, so their entries differ)."""

    def __init__(self, a, cfg, plan):
        self.a, self.cfg, self.plan = a, cfg, plan
        self.ck = f"{a.tmp}/{cfg}-overflow-ckpt"
        shutil.rmtree(self.ck, ignore_errors=True)
        tool(a.h3c, "checkpoint", "synth", "--config", cfg, "--seed", 7, "--out", self.ck)
        st_numpy.overwrite_row(self.ck, "proj_out.weight", 3, 3.0e38)
        self.audit = h3c.Transformer(plan=plan, checkpoint=self.ck, device="cuda", mode="audit", config=cfg)
        self.strict = h3c.Transformer(plan=plan, checkpoint=self.ck, device="cuda", config=cfg)

    def check(self, name, path, kw):
        a, cfg, tag = self.a, self.cfg, f"{self.cfg}-{name}-overflow"
        run = ["run", "--config", cfg, "--checkpoint", self.ck, "--plan", self.plan, "--inputs", path,
               "--device", "gpu"]
        o, led = f"{a.tmp}/{tag}.gpu.safetensors", f"{a.tmp}/{tag}.gpu_ledger.json"
        tool(a.h3c, *run, "--mode", "audit", "--out", o, "--ledger", led)
        want = read_st(o)[0]
        with open(led) as f:
            ledger = f.read()
        r = subprocess.run([a.h3c, *run, "--out", f"{a.tmp}/{tag}.strict.safetensors", "--ledger",
                            f"{a.tmp}/{tag}.strict.json"], capture_output=True, text=True)
        v, au = self.audit(**kw, return_dict=False)
        torch.cuda.synchronize()
        vh, ah = v.cpu().numpy(), au.cpu().numpy()
        entries = [e for e in (st_numpy.non_finite_entry("sample", vh), st_numpy.non_finite_entry("audio_sample", ah))
                   if e]
        first = int(entries[0].split("first: element ")[1].split(",")[0]) if entries else -1
        result(v.is_cuda and vh.tobytes() == want["sample"][0].tobytes() and
               ah.tobytes() == want["audio_sample"][0].tobytes(),
               f"[{cfg}/{name}] overflowing weights, audit: CUDA outputs byte-equal to h3c run --device gpu's")
        result(len(entries) == 1 and entries[0].startswith("output sample: ") and first % vh.shape[-1] == 3 and
               self.audit.ledger["header"].get("non_finite") == entries,
               f"[{cfg}/{name}] overflowing weights: the device scan's ledger entry is the one NumPy finds",
               f"numpy {entries}, ledger {self.audit.ledger['header'].get('non_finite')}")
        result(self.audit.ledger_json == ledger and not self.audit.ledger["accepted"],
               f"[{cfg}/{name}] overflowing weights, audit: ledger byte-equal to h3c run's (its host scan)")
        offender = f"\n  non-finite {entries[0]}" if entries else "(no entry)"
        result(r.returncode == 2 and offender in r.stderr,
               f"[{cfg}/{name}] overflowing weights: h3c run strict exits 2", r.stderr.strip()[-300:])
        try:
            self.strict(**kw)
            result(False, f"[{cfg}/{name}] overflowing weights, strict: h3c.Error naming the output")
        except h3c.Error as e:
            result(e.where == "--mode strict" and offender in str(e) and not self.strict.ledger["accepted"],
                   f"[{cfg}/{name}] overflowing weights, strict: h3c.Error naming the output", str(e)[:300])


def check_config(a, cfg):
    plan = f"{a.plans}/{cfg}"
    if not os.path.exists(f"{plan}/plan.json"):
        result(False, f"[{cfg}] no plan at {plan}")
        return
    reqs = {"a": ["--text", 7, "--audio", 5, "--video", "2,3,4", "--timesteps", 2, "--seed", 3],
            "b": ["--text", 4, "--audio", 3, "--video", "1,3,4", "--batch", 2, "--timesteps", 3, "--shuffle",
                  "--seed", 4, "--dtype", "BF16"],
            "c": ["--layout", "fl2va", "--text", 6, "--text-vision", "1:3", "--latent", "5,4,6", "--audio-latents", 3,
                  "--keyframes", "first,last", "--seed", 5]}
    if cfg == "full":
        reqs = {"s8349": ["--text", 512, "--audio", 157, "--video", "8,30,32", "--timesteps", 2, "--seed", 5,
                          "--dtype", "BF16"]}
    t0 = time.perf_counter()
    t = h3c.Transformer(plan=plan, synthetic=7, device="cuda", config=cfg)
    overflow = Overflow(a, cfg, plan) if cfg == "tiny" else None
    for name, args in reqs.items():
        tag = f"{cfg}-{name}"
        path = f"{a.tmp}/{tag}.req.safetensors"
        tool(a.h3c, "request", "make", "--config", cfg, *args, "-o", path)
        want, ledger, cli_ms = cli_gpu(a, cfg, plan, path, tag)
        req, _ = read_st(path)
        kw = to_torch(req, "cuda")
        first = time.perf_counter()
        out = t(**kw)
        torch.cuda.synchronize()
        if name == next(iter(reqs)):
            print(f"    [{cfg}] construction + first call {first - t0:.2f} s + {time.perf_counter() - first:.2f} s")
        ok = (out.sample.is_cuda and out.sample.dtype == torch.float32 and
              out.sample.cpu().numpy().tobytes() == want["sample"][0].tobytes() and
              out.audio_sample.cpu().numpy().tobytes() == want["audio_sample"][0].tobytes())
        result(ok, f"[{cfg}/{name}] torch CUDA tensors in and out, byte-equal to h3c run --device gpu")
        result(t.ledger_json == ledger, f"[{cfg}/{name}] ledger byte-equal to h3c run's")
        # The caller's non-default stream: inputs produced there, the forward ordered after them.
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            kw2 = {k: (v * 1 if v.is_floating_point() else v.clone()) for k, v in kw.items()}
            v2, a2 = t(**kw2, return_dict=False)
        s.synchronize()
        result(torch.equal(v2, out.sample) and torch.equal(a2, out.audio_sample),
               f"[{cfg}/{name}] on a non-default stream, the same bits")
        # Host and device tensors together (the metadata on the host, the activations on the device): the engine
        # reads each where it is, the same bits and the same ledger.
        mixed = {k: (v if k.endswith("hidden_states") else v.cpu()) for k, v in kw.items()}
        v3, a3 = t(**mixed, return_dict=False)
        result(torch.equal(v3, out.sample) and torch.equal(a3, out.audio_sample) and t.ledger_json == ledger,
               f"[{cfg}/{name}] host metadata with device activations, the same bits and ledger")
        # A NaN in a device activation is refused before anything runs (the engine's read-back checks it), and the
        # next forward is the same as ever (the engine's kept request buffers are refilled).
        bad = dict(kw)
        bad["hidden_states"] = kw["hidden_states"].clone()
        bad["hidden_states"].view(-1)[1] = float("nan")
        try:
            t(**bad)
            result(False, f"[{cfg}/{name}] a NaN device activation raises h3c.Error")
        except h3c.Error as e:
            result("finite" in str(e), f"[{cfg}/{name}] a NaN device activation raises h3c.Error", str(e)[:200])
        v4, _ = t(**kw, return_dict=False)
        result(torch.equal(v4, out.sample) and t.ledger_json == ledger, f"[{cfg}/{name}] after the error, the same bits")
        if overflow:
            overflow.check(name, path, kw)
        # Where a forward's wall time goes (the phases H3C_PROFILE prints), against the call's own wall time.
        torch.cuda.synchronize()
        w0 = time.perf_counter()
        t(**kw, return_dict=False)
        wall = (time.perf_counter() - w0) * 1e3
        ph = t._engine.last_profile
        cxx = sum(ph[k] for k in ("read_request", "bind_device", "engine", "verdict"))
        inner = sum(v for k, v in ph.items() if k.startswith("engine."))
        result(0 < cxx <= wall and inner <= ph["engine"] + 1e-3,
               f"[{cfg}/{name}] the profile's phases lie within the call", f"{ph} wall {wall:.3f}")
        print(f"FIGURE [{cfg}/{name}] forward phases: wall {wall:.3f} ms = python {wall - cxx:.3f} + " +
              " + ".join(f"{k} {v:.3f}" for k, v in sorted(ph.items())), flush=True)
        # Call overhead: Python wall per forward against the forward time the CLI measured on the device.
        times = []
        for _ in range(a.repeats if cfg != "full" else max(3, a.repeats // 4)):
            torch.cuda.synchronize()
            w0 = time.perf_counter()
            t(**kw, return_dict=False)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - w0) * 1e3)
        med = statistics.median(times)
        print(f"FIGURE [{cfg}/{name}] python call {med:.3f} ms per forward (median of {len(times)}, min "
              f"{min(times):.3f}), h3c run forward {cli_ms:.3f} ms (device events): overhead {med - cli_ms:+.3f} ms",
              flush=True)
    # Bad input is an exception, and the engine keeps working.
    try:
        t(**{**kw, "token_tags": kw["token_tags"][:-1]})
        result(False, f"[{cfg}] a bad request raises h3c.Error")
    except h3c.Error as e:
        result("token_tags" in str(e), f"[{cfg}] a bad request raises h3c.Error", str(e)[:200])


def write_bf16_update(path, tensors):
    """A safetensors file of BF16 tensors (name -> torch bfloat16 tensor), for `h3c run --update`."""
    arrays = {n: v.detach().cpu().view(torch.int16).numpy() for n, v in tensors.items()}
    st_numpy.write(path, arrays, {n: "BF16" for n in arrays})


def check_updates(a, cfg):
    """Hot updates on the GPU (issue 21): CUDA float32 tensors rounded by torch on the device, CPU bfloat16 and
    pinned host tensors, against `h3c run --device gpu --update FILE` holding torch's rounded values (outputs and
    ledger byte for byte: the weights record hashed on the device included); a refused update (NaN on the device)
    changes nothing; going back restores the first bits and identity (tiny, small; the speed: bench/update_bench.py)."""
    plan = f"{a.plans}/{cfg}"
    t = h3c.Transformer(plan=plan, synthetic=7, device="cuda", config=cfg)
    path = f"{a.tmp}/{cfg}-update.req.safetensors"
    tool(a.h3c, "request", "make", "--config", cfg, "--text", 7, "--audio", 5, "--video", "2,3,4", "--seed", 3,
         *(["--dtype", "BF16"] if cfg == "full" else []), "-o", path)
    req, _ = read_st(path)
    kw = to_torch(req, "cuda")
    base = t(**kw, return_dict=False)[0].clone()
    ident = t.weights
    if cfg == "full":  # the whole-model update's speed is bench/update_bench.py's
        return
    names = ["transformer_blocks.0.attn.to_q.weight", "transformer_blocks.1.ff.net.0.proj.weight"]
    shapes = {n: tuple(int(x) for x in s) for n, s in t._engine.weight_shapes.items()}
    g = torch.Generator(device="cuda").manual_seed(5)
    new = {n: torch.randn(shapes[n], generator=g, device="cuda") * 0.02 for n in names}
    write_bf16_update(f"{a.tmp}/{cfg}-update.safetensors", {n: v.to(torch.bfloat16) for n, v in new.items()})
    o, led = f"{a.tmp}/{cfg}-update.gpu.safetensors", f"{a.tmp}/{cfg}-update.gpu_ledger.json"
    tool(a.h3c, "run", "--config", cfg, "--synthetic", 7, "--plan", plan, "--inputs", path, "--out", o,
         "--device", "gpu", "--ledger", led, "--update", f"{a.tmp}/{cfg}-update.safetensors")
    want = read_st(o)[0]
    with open(led) as f:
        ledger = f.read()
    t.update_weights(new)
    v = t(**kw, return_dict=False)[0]
    result(v.cpu().numpy().tobytes() == want["sample"][0].tobytes() and not torch.equal(v, base),
           f"[{cfg}] update_weights from CUDA float32 tensors: outputs byte-equal to h3c run --update (torch's bf16)")
    result(t.ledger_json == ledger, f"[{cfg}] after the update, the ledger (device-hashed weights record) is h3c run's")
    bad = {names[0]: new[names[0]].clone()}
    bad[names[0]].view(-1)[3] = float("nan")
    try:
        t.update_weights(bad)
        result(False, f"[{cfg}] a NaN CUDA tensor is refused")
    except h3c.Error as e:
        result("1 NaN" in str(e), f"[{cfg}] a NaN CUDA tensor is refused", str(e)[:200])
    v2 = t(**kw, return_dict=False)[0]
    result(torch.equal(v2, v) and t.weights["updates"] == 1, f"[{cfg}] the refused update changed nothing")
    # Back to the generator's values from host memory (pinned, and plain CPU bfloat16 tensors).
    back = {n: torch.empty(shapes[n], dtype=torch.bfloat16) for n in names}
    cold = h3c.Transformer(plan=plan, synthetic=7, device="cpu", config=cfg)
    for n in names:
        back[n].view(torch.int16).copy_(torch.from_numpy(
            np.frombuffer(cold._engine.read_weight(n), dtype=np.int16).reshape(shapes[n]).copy()))
    t.update_weights({names[0]: back[names[0]].pin_memory(), names[1]: back[names[1]]})
    v3 = t(**kw, return_dict=False)[0]
    result(torch.equal(v3, base) and t.weights["sha256"] == ident["sha256"],
           f"[{cfg}] updating back from host tensors restores the first bits and the weights identity")


def check_pipeline_step(a):
    """One step of diffusers' denoise loop blocks with the h3c transformer swapped in (tiny, fl2va)."""
    sys.path.insert(0, a.diffusers_src)
    from diffusers import MiniMaxH3Transformer3DModel
    from diffusers.modular_pipelines.minimax_h3 import denoise
    from diffusers.schedulers import MiniMaxH3Scheduler
    root = os.path.dirname(os.path.abspath(__file__))
    d, cfg, plan, step, steps = f"{a.tmp}/pipe", "tiny", f"{a.plans}/tiny", 2, 8
    os.makedirs(d, exist_ok=True)
    tool(a.h3c, "checkpoint", "synth", "--config", cfg, "--seed", 11, "--out", f"{d}/ckpt")
    req_path = f"{d}/fl2va.req.safetensors"
    subprocess.run(list(map(str, [sys.executable, f"{root}/diffusers_request.py", "make", "--checkpoint", f"{d}/ckpt",
                                  "--layout", "fl2va", "--text", 6, "--latent", "5,4,6", "--audio-latents", 4,
                                  "--keyframes", "first,last", "--steps", steps, "--step", step, "--seed", 5, "-o",
                                  req_path])), check=True, capture_output=True,
                   # the script imports diffusers itself: its source goes on the child's path (sys.path is ours only)
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(
                       [a.diffusers_src] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    o = f"{d}/fl2va.gpu.safetensors"
    tool(a.h3c, "run", "--config", cfg, "--checkpoint", f"{d}/ckpt", "--plan", plan, "--inputs", req_path, "--out", o,
         "--device", "gpu", "--ledger", f"{d}/ledger.json")
    want = read_st(o)[0]
    req, meta = read_st(req_path)
    kw = to_torch(req, "cuda")
    cv, ca = int(meta.get("h3c_condition_video_rows", 0)), int(meta.get("h3c_condition_audio_rows", 0))

    def one_step(transformer):
        sched, audio_sched = MiniMaxH3Scheduler(shift=12.0), MiniMaxH3Scheduler(shift=3.0)
        sched.set_timesteps(steps, device="cuda")
        audio_sched.set_timesteps(steps, device="cuda")
        comp = types.SimpleNamespace(transformer=transformer, scheduler=sched, audio_scheduler=audio_sched)
        bs = types.SimpleNamespace(
            row_timestep_plan={step: (kw["timestep"], kw["timestep_indices"])},
            denoiser_input_fields={k: kw[k] for k in ("token_tags", "position_ids", "video_indices", "audio_indices",
                                                      "text_indices")},
            latents=kw["hidden_states"][0].clone(), audio_latents=kw["audio_hidden_states"][0].clone(),
            prompt_embeds=kw["encoder_hidden_states"], attention_kwargs=None, num_condition_video_rows=cv,
            num_condition_audio_rows=ca, audio_timesteps=audio_sched.timesteps)
        t = sched.timesteps[step]
        sched._step_index, audio_sched._step_index = step, step  # the loop's position (set_begin_index is 0)
        denoise.MiniMaxH3LoopDenoiser()(comp, bs, step, t)
        v, va = bs.noise_pred.clone(), bs.audio_noise_pred.clone()
        denoise.MiniMaxH3LoopSchedulerStep()(comp, bs, step, t)
        return v, va, bs.latents

    h = h3c.Transformer(plan=plan, checkpoint=f"{d}/ckpt", device="cuda")
    v, va, lat = one_step(h)
    ok = (v.cpu().numpy().tobytes() == want["sample"][0].tobytes() and
          va.cpu().numpy().tobytes() == want["audio_sample"][0].tobytes())
    result(ok, "[pipeline] diffusers' denoise-loop blocks run with pipe.transformer = h3c.Transformer; the velocity "
               "is h3c run --device gpu's, bit for bit")
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = MiniMaxH3Transformer3DModel.from_pretrained(f"{d}/ckpt", torch_dtype=torch.float32).to("cuda").eval()
    rv, rva, rlat = one_step(ref)
    err = float(torch.linalg.norm((v - rv).double()) / torch.linalg.norm(rv.double()))
    lerr = float(torch.linalg.norm((lat - rlat).double()) / torch.linalg.norm(rlat.double()))
    result(err < 2e-2 and lerr < 2e-2, "[pipeline] the h3c step lies near diffusers' float32 transformer's step",
           f"velocity rel_frob {err:.3e}, latents after the scheduler step rel_frob {lerr:.3e}")


def check_device_grads(a):
    """The LoRA training step with CUDA masters (parameters(..., device="cuda"): the gradient kernels write into .grad)
    against host masters (gradients through the host): the same adapter values, the same loss, every .grad byte-equal,
    and the CUDA ones on the device."""
    plan = f"{a.plans}/tiny-backward-lora"
    if not os.path.exists(f"{plan}/plan.json"):
        print(f"gpu-python-check: device gradients skipped (no plan at {plan})")
        return
    path = f"{a.tmp}/tiny-train.req.safetensors"
    tool(a.h3c, "request", "make", "--config", "tiny", "--text", 7, "--audio", 5, "--video", "2,3,4", "--timesteps", 2,
         "--seed", 9, "-o", path)
    req, _ = read_st(path)
    grads = {}
    for where in ("cpu", "cuda"):
        t = h3c.Transformer(plan=plan, synthetic=7, device="cuda", config="tiny")
        params = t.parameters("lora", device=where)
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for n, q in params.items():
                q.copy_(torch.randn(q.shape, generator=g) * 0.05)
        t.push_parameters()
        kw = to_torch(req, "cuda")
        sample, audio = t(**kw, return_dict=False)
        ((sample.double() ** 2).mean() + (audio.double() ** 2).mean()).backward()
        grads[where] = {n: q.grad for n, q in params.items()}
        on = {q.grad.device.type for q in params.values()}
        result(on == {where}, f"[tiny-backward-lora] {where} masters: their .grad on {sorted(on)}")
    same = [n for n in grads["cpu"] if torch.equal(grads["cpu"][n], grads["cuda"][n].cpu())]
    result(len(same) == len(grads["cpu"]) > 0, "[tiny-backward-lora] gradients written into CUDA masters' memory "
           "== through the host, byte for byte", f"{len(same)} of {len(grads['cpu'])} tensors equal")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--h3c", required=True)
    p.add_argument("--plans", required=True)
    p.add_argument("--tmp", required=True)
    p.add_argument("--configs", default="tiny,small")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--diffusers-src", default="")
    a = p.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    print(f"python {sys.version.split()[0]} torch {torch.__version__} h3c module {h3c._h3c.__file__}")
    for cfg in a.configs.split(","):
        try:
            check_config(a, cfg)
        except Exception as e:  # noqa: BLE001 - one FAIL line per config, then go on
            result(False, f"[{cfg}] raised {type(e).__name__}", str(e)[:800])
        try:
            check_updates(a, cfg)
        except Exception as e:  # noqa: BLE001
            result(False, f"[{cfg}] updates raised {type(e).__name__}", str(e)[:800])
    try:
        check_device_grads(a)
    except Exception as e:  # noqa: BLE001
        result(False, f"[device gradients] raised {type(e).__name__}", str(e)[:800])
    if a.diffusers_src and os.path.isdir(a.diffusers_src):
        try:
            check_pipeline_step(a)
        except Exception as e:  # noqa: BLE001
            err = getattr(e, "stderr", None)  # a failed tool: its own message says why
            err = err.decode(errors="replace") if isinstance(err, bytes) else (err or "")
            result(False, f"[pipeline] raised {type(e).__name__}", (str(e)[:400] + "\n" + err[-1200:]).strip())
    else:
        print("gpu-python-check: diffusers pipeline step skipped (no diffusers source)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
