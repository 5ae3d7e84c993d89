#!/usr/bin/env python3
"""h3c's gradients against torch autograd of diffusers' MiniMaxH3Transformer3DModel (issue 22), within diffusers' own
bf16 noise. scripts/gpu-diffusers-check.sh runs it (H3C_DIFFUSERS_ONLY_GRAD=1: this part only).

    diffusers_grad_check.py grads --checkpoint DIR --request req.safetensors --seed S -o dy.safetensors
        A fixed random loss gradient: dL/d(sample) [B, Nv, in_channels * prod(patch_size)] and dL/d(audio_sample)
        [B, Na, audio_in_channels], standard normal F32 from NumPy's PCG64 seeded with S (shapes from the request and
        the folder's config.json), for `h3c backward --grads` (docs/contract.md section 14). Every row gets one, the
        conditioning rows too: the loss is arbitrary, the check is of its gradients. Needs NumPy only.

    diffusers_grad_check.py backward --checkpoint DIR --request req.safetensors --grads dy.safetensors
                                     --dtype float32,bfloat16,float64 [--device cuda|cpu] -o PREFIX
        diffusers' gradients of L = sum(sample * dy_sample) + sum(audio_sample * dy_audio_sample): the model loaded as
        the forward check loads it (MiniMaxH3Transformer3DModel.from_pretrained(DIR, torch_dtype=...); bfloat16 keeps
        the float32 modules of _keep_in_fp32_modules, the released mixed precision; float64 is the float32 load cast
        by model.double(), to measure the float32 reference itself), the request's tensors as forward's keyword
        arguments (h3c's request names are diffusers' argument names), no TF32, loss.backward(). Differentiated:
        hidden_states, audio_hidden_states, encoder_hidden_states and every parameter; the rest of the request (the
        timestep values, the position ids the rope table is computed from, the index and tag tensors) is
        conditioning, as in h3c's contract (no gradient is taken of the rope and timestep tables). Writes, for each
        dtype of the list (one process: diffusers is imported once), PREFIX.<dtype>.safetensors under h3c
        backward's names: the three inputs by the request's names, every parameter by its diffusers name; F32
        (F64 for float64, whose input leaves are float64 too).

    diffusers_grad_check.py compare --reference ref32.safetensors --bf16 ref16.safetensors H3C_GRADS
                                    [--factor 2] [--f32-floor 2^-16] [--max-error 0.5] [--worst 10]
                                    [--float64 ref64.safetensors] [--mutate swap-swiglu-halves]
        Per gradient tensor (the three inputs and every weight), the relative Frobenius error against the float32
        reference of h3c's and of diffusers' bfloat16 gradients. A tensor passes when h3c's error is at most
        max(`factor` x diffusers' own bf16 error, `f32-floor`) (the factor is the forward check's bound,
        diffusers_request.py compare) and at most `max-error` (where diffusers' bf16 gradient is itself mostly noise,
        2x its error bounds nothing). The floor, 2^-16 by default, is F32 rounding, 128x below bf16's unit roundoff:
        a gradient that diffusers' bf16 run computes in F32 from the loss gradient alone (the output heads' biases,
        float32 modules: the sum of dy over rows) matches its float32 run bit for bit, and h3c's F32 sum in the
        contract's row order differs from torch's by rounding only. A tensor whose reference is exactly zero passes
        only when both are exactly zero. With --float64 (the same autograd in float64), also the float32
        reference's own error, which must be far below the bf16 errors for the check to mean anything. Prints the
        input gradients, the worst tensors by ratio and a summary. Exit 0: all pass; 1: some tensor's error is too large; 2: the files
        do not match (a gradient missing or extra in any file, a shape or dtype mismatch, a non-finite value), which
        no error bound excuses. --mutate swap-swiglu-halves swaps the two halves of h3c's every ff.net.0.proj.weight
        gradient ([value; gate] <-> [gate; value], the layout the native checkpoint differs in) first: the check
        must then fail with exit 1 (the shell script runs this to show that the comparison can fail).

Needs torch, numpy and diffusers (with MiniMax-H3) importable for `backward` (e.g. PYTHONPATH=<diffusers>/src).
"""
import argparse
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diffusers_request import errors, load_config, read_safetensors, write_safetensors  # noqa: E402

# The forward's inputs that carry a gradient (h3c backward's input gradient names, diffusers' argument names).
ACTIVATION_INPUTS = ("hidden_states", "audio_hidden_states", "encoder_hidden_states")
OUTPUTS = ("sample", "audio_sample")


def output_shapes(checkpoint, request):
    cfg = load_config(checkpoint)
    patch = int(np.prod(cfg.get("patch_size", (1, 2, 2))))
    video, audio = request["hidden_states"].shape, request["audio_hidden_states"].shape
    return {"sample": (video[0], video[1], cfg["in_channels"] * patch),
            "audio_sample": (audio[0], audio[1], cfg["audio_in_channels"])}


def cmd_grads(a):
    req, _ = read_safetensors(a.request)
    shapes = output_shapes(a.checkpoint, req)
    rng = np.random.Generator(np.random.PCG64(a.seed))
    dy = {name: rng.standard_normal(shapes[name]).astype(np.float32) for name in OUTPUTS}
    write_safetensors(a.out, dy, {"h3c_grad_seed": a.seed})
    print(f"wrote {a.out}: dL/d(sample) {list(shapes['sample'])}, dL/d(audio_sample) {list(shapes['audio_sample'])}, "
          f"standard normal, seed {a.seed}")
    return 0


def diffusers_grads(torch, model_cls, a, dtype, req, dy):
    """diffusers' gradients of the loss, as float32 (float64 for the float64 run) NumPy arrays by h3c's names."""
    load = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float32}[dtype]
    model = model_cls.from_pretrained(a.checkpoint, torch_dtype=load)
    if dtype == "float64":
        model = model.double()
    model = model.to(a.device).eval()
    kw = {k: torch.from_numpy(v).to(a.device) for k, v in req.items()}
    for name in ACTIVATION_INPUTS:
        if name not in kw:
            raise SystemExit(f"{a.request}: no tensor '{name}'")
        if dtype == "float64":  # the leaves themselves, so their gradients are not rounded to float32 on the way
            kw[name] = kw[name].double()
        kw[name].requires_grad_(True)
    params = dict(model.named_parameters())
    for p in params.values():
        p.requires_grad_(True)
        p.grad = None
    out = model(**kw, return_dict=False)
    loss = None
    for name, y in zip(OUTPUTS, out):
        if name not in dy:
            raise SystemExit(f"{a.grads}: no tensor '{name}'")
        if tuple(dy[name].shape) != tuple(y.shape):
            raise SystemExit(f"{a.grads}:{name}: shape {list(dy[name].shape)}, the output's is {list(y.shape)}")
        # The product in the output's dtype (float32 but in the float64 run: the output heads are float32
        # modules), so dL/dy is dy exactly.
        term = (y * torch.from_numpy(dy[name]).to(a.device, y.dtype)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    grads = {name: kw[name].grad for name in ACTIVATION_INPUTS}
    grads.update({name: p.grad for name, p in params.items()})
    missing = sorted(n for n, g in grads.items() if g is None)
    if missing:
        raise SystemExit(f"diffusers {dtype}: no gradient reached {len(missing)} tensors, e.g. {missing[:5]}")
    keep = torch.float64 if dtype == "float64" else torch.float32
    return {n: g.detach().to(keep).cpu().numpy() for n, g in grads.items()}, float(loss), len(params)


def cmd_backward(a):
    import torch
    from diffusers import MiniMaxH3Transformer3DModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    req, _ = read_safetensors(a.request)
    dy, _ = read_safetensors(a.grads)
    for dtype in a.dtype.split(","):
        if dtype not in ("float32", "bfloat16", "float64"):
            raise SystemExit(f"--dtype: {dtype!r} is none of float32, bfloat16, float64")
        arrays, loss, n = diffusers_grads(torch, MiniMaxH3Transformer3DModel, a, dtype, req, dy)
        path = f"{a.out}.{dtype}.safetensors"
        write_safetensors(path, arrays, {"diffusers_dtype": dtype, "device": a.device, "torch": torch.__version__})
        print(f"wrote {path}: diffusers {dtype} autograd on {a.device}: {len(ACTIVATION_INPUTS)} input and {n} "
              f"parameter gradients, loss {loss:.6e}")
    return 0


def mutate_swap_swiglu_halves(grads):
    n = 0
    for name, g in grads.items():
        if name.endswith("ff.net.0.proj.weight"):
            h = g.shape[0] // 2
            grads[name] = np.concatenate([g[h:], g[:h]])
            n += 1
    if n == 0:
        raise SystemExit("--mutate swap-swiglu-halves: no ff.net.0.proj.weight gradient to swap")
    print(f"  (mutated: the halves of {n} ff.net.0.proj.weight gradients swapped; this comparison must fail)")


def structural_problems(files):
    """Every file must hold the same names with the same shapes, finite values: (label, grads) pairs in; the list of
    problems out (empty when they match)."""
    problems = []
    (ref_label, ref), rest = files[0], files[1:]
    for label, grads in rest:
        extra, missing = sorted(set(grads) - set(ref)), sorted(set(ref) - set(grads))
        if missing:
            problems.append(f"{label}: {len(missing)} gradients of {ref_label} missing, e.g. {missing[:5]}")
        if extra:
            problems.append(f"{label}: {len(extra)} gradients {ref_label} lacks, e.g. {extra[:5]}")
        for name in sorted(set(grads) & set(ref)):
            if grads[name].shape != ref[name].shape:
                problems.append(f"{label}:{name}: shape {list(grads[name].shape)}, {ref_label}'s is "
                                f"{list(ref[name].shape)}")
    for name in ACTIVATION_INPUTS:
        if name not in ref:
            problems.append(f"{ref_label}: no input gradient '{name}'")
    for label, grads in files:
        bad = sorted(n for n, g in grads.items() if not np.all(np.isfinite(g)))
        if bad:
            problems.append(f"{label}: non-finite values in {len(bad)} gradients, e.g. {bad[:5]}")
    return problems


def verdicts(ref, bf16, h3c, factor, floor, max_error):
    """One row per gradient: its h3c and bf16 relative errors, the error h3c is allowed, and the verdict."""
    rows = []
    for name in sorted(ref):
        r = ref[name].astype(np.float64)
        norm = float(np.linalg.norm(r))
        eh, eb = errors(h3c[name], r)[0], errors(bf16[name], r)[0]
        # errors() gives absolute norms against an exact zero: only exact zeros agree with it.
        allowed = min(max(factor * eb, floor), max_error) if norm > 0 else 0.0
        rows.append(types.SimpleNamespace(name=name, shape=tuple(r.shape), norm=norm, h3c=eh, bf16=eb,
                                          allowed=allowed, floored=norm > 0 and factor * eb < floor,
                                          ok=eh <= allowed and (norm > 0 or eb == 0.0)))
    return rows


def ratio(x, y):
    return x / y if y > 0 else (0.0 if x == 0 else float("inf"))


def cmd_compare(a):
    ref, _ = read_safetensors(a.reference)
    bf16, _ = read_safetensors(a.bf16)
    h3c, _ = read_safetensors(a.h3c)
    files = [("reference " + a.reference, ref), ("bf16 " + a.bf16, bf16), ("h3c " + a.h3c, h3c)]
    if a.float64:
        ref64, _ = read_safetensors(a.float64)
        files.append(("float64 " + a.float64, ref64))
    problems = structural_problems(files)
    if problems:
        for p in problems[:20]:
            print(f"  MISMATCH {p}")
        print(f"  {len(problems)} structural mismatches: nothing compared")
        return 2
    if a.mutate == "swap-swiglu-halves":
        mutate_swap_swiglu_halves(h3c)
    rows = verdicts(ref, bf16, h3c, a.factor, a.f32_floor, a.max_error)
    fmt = "  {:<52s} {:>10s} {:>9s} {:>9s} {:>9s} {:>8s} {:>8s} {}"
    head = fmt.format("gradient", "shape", "|ref|", "h3c rel", "bf16 rel", "h3c/bf16", "/allowed", "")

    def line(r):
        return fmt.format(r.name[-52:], "x".join(map(str, r.shape)), f"{r.norm:.2e}", f"{r.h3c:.2e}", f"{r.bf16:.2e}",
                          f"{ratio(r.h3c, r.bf16):.2f}x", f"{ratio(r.h3c, r.allowed):.2f}",
                          ("ok" if r.ok else "TOO LARGE") + (" (F32 floor)" if r.floored else ""))

    print(f"  h3c {a.h3c} against diffusers' float32 autograd, {len(rows)} gradients (allowed: h3c's relative "
          f"error <= max({a.factor:g} x diffusers' own bf16 error, {a.f32_floor:.1e}), and <= {a.max_error:g})")
    print(head)
    print("  inputs:")
    for r in rows:
        if r.name in ACTIVATION_INPUTS:
            print(line(r))
    worst = sorted(rows, key=lambda r: (r.ok, -ratio(r.h3c, r.allowed)))[:a.worst]
    print(f"  worst {len(worst)} by h3c's error / allowed:")
    for r in worst:
        print(line(r))
    failed = [r for r in rows if not r.ok]
    scaled = [r for r in rows if not r.floored and r.norm > 0]
    top = max(scaled, key=lambda r: ratio(r.h3c, r.bf16)) if scaled else None
    print(f"  summary: {len(rows) - len(failed)} of {len(rows)} gradients within the bound"
          + (f"; h3c/bf16 median {np.median([ratio(r.h3c, r.bf16) for r in scaled]):.2f}x, max "
             f"{ratio(top.h3c, top.bf16):.2f}x ({top.name})" if top else "")
          + f"; {len(rows) - len(scaled)} at the F32 floor or zero; h3c rel error median "
          f"{np.median([r.h3c for r in rows]):.2e}, diffusers bf16 median {np.median([r.bf16 for r in rows]):.2e}"
          + (f"; {len(failed)} TOO LARGE, e.g. {failed[0].name}" if failed else ""))
    if a.float64:
        e32 = [(errors(ref[n], ref64[n].astype(np.float64))[0], n) for n in ref]
        worst32 = max(e32)
        print(f"  the float32 reference against float64: rel error max {worst32[0]:.2e} ({worst32[1]}), median "
              f"{np.median([e for e, _ in e32]):.2e}")
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grads")
    g.add_argument("--checkpoint", required=True)
    g.add_argument("--request", required=True)
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("-o", "--out", required=True)
    b = sub.add_parser("backward")
    b.add_argument("--checkpoint", required=True)
    b.add_argument("--request", required=True)
    b.add_argument("--grads", required=True)
    b.add_argument("--dtype", required=True, help="float32, bfloat16, float64 or a comma-separated list of them")
    b.add_argument("--device", default="cuda")
    b.add_argument("-o", "--out", required=True, help="prefix: writes PREFIX.<dtype>.safetensors per dtype")
    c = sub.add_parser("compare")
    c.add_argument("--reference", required=True)
    c.add_argument("--bf16", required=True)
    c.add_argument("--factor", type=float, default=2.0)
    c.add_argument("--f32-floor", type=float, default=2.0 ** -16)
    c.add_argument("--max-error", type=float, default=0.5)
    c.add_argument("--float64", help="the same autograd in float64: reports the float32 reference's own error")
    c.add_argument("--worst", type=int, default=10)
    c.add_argument("--mutate", choices=["swap-swiglu-halves"])
    c.add_argument("h3c")
    a = p.parse_args()
    return {"grads": cmd_grads, "backward": cmd_backward, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
