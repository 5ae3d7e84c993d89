#!/usr/bin/env python3
"""Re-verify h3c's sealed artifacts from Python, independently of the C++ code (standard library only).

    h3c_sealed.py ledger L.json                  the ledger's seal
    h3c_sealed.py trajectory TRAJ [--recompute]  seals, the hash chain, final.json, the initial latents and the
                                                 latest state, per-item hashes, the SDE log-probability formula;
                                                 --recompute (needs --save-tensors) also recomputes every step's
                                                 update (the ODE Euler step, or the SDE mean and sum_sq) from the
                                                 saved velocities and latents with the formulas of docs/contract.md

A seal is sha256 of the canonical JSON of the object without "seal". The canonical form is what this script writes:
json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False) of the parsed file, UTF-8. h3c writes
floats as Python's repr so the two agree byte for byte. Exit status 0 when everything checks, 1 otherwise (the first
problem is printed, naming the file).
"""
import hashlib
import json
import math
import os
import struct
import sys

LOG_SQRT_2PI = 0.91893853320467274178


class Problem(Exception):
    pass


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def seal_of(obj):
    copy = dict(obj)
    copy.pop("seal", None)
    return hashlib.sha256(canonical(copy)).hexdigest()


def load_json(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def check_seal(obj, where):
    if obj.get("seal") != seal_of(obj):
        raise Problem(f"{where}: seal mismatch (Python's canonical JSON hashes to {seal_of(obj)})")


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes), reading the format by hand (8-byte length, JSON header, data)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + b : base + e])
    return out


def f32_tensor(tensors, name, shape, where):
    if name not in tensors:
        raise Problem(f"{where}: tensor {name!r} missing")
    dtype, sh, raw = tensors[name]
    if dtype != "F32" or list(sh) != list(shape):
        raise Problem(f"{where}: {name} is {dtype} {sh}, expected F32 {shape}")
    return raw


def item_hashes(raw, items):
    if items == 0:
        return []
    per = len(raw) // items
    return [hashlib.sha256(raw[b * per : (b + 1) * per]).hexdigest() for b in range(items)]


def floats(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


_F = struct.Struct("<f")


def f32(x):
    """Round a double to float32 (nearest even). Every F32 op below is evaluated exactly in double first: products of
    floats are exact, and + - / sqrt rounded twice (double, then float) equal the single float rounding."""
    return _F.unpack(_F.pack(x))[0]


def verify_ledger(path):
    led = load_json(path)
    check_seal(led, path)
    print(f"OK ledger {path}: seal {led['seal']}")


def sde_constants(sigmas, timesteps, i, a):
    s, sn = sigmas[i], sigmas[i + 1]
    dt = f32(sn - s)
    s1 = sigmas[1] if s == 1.0 else s
    ratio = f32(s / f32(1.0 - s1))
    std = f32(f32(math.sqrt(ratio)) * f32(a))
    scale = f32(std * f32(math.sqrt(f32(-dt))))
    q = f32(f32(std * std) / f32(2.0 * s))
    coef = f32(q * dt)
    return std, scale, coef


def euler(x, v, sigmas, timesteps, i):
    sig_t = f32(1.0 - timesteps[i])
    r = f32(sigmas[i + 1] / sigmas[i])
    omr = f32(1.0 - r)
    x0 = f32(x + f32(sig_t * v))
    return f32(f32(r * x) + f32(omr * x0))


def recompute_step(header, rec, prev, tens, where):
    """The update of step i from the previous latents and the saved velocity, compared with the saved latents."""
    i = rec["step"]
    sde = header["sampler"]["kind"] == "sde"
    for m in ("video", "audio"):
        B, rows, cols = header["noise"][m]["shape"]
        cond = header["condition_rows"][m]
        sig, ts = header["sigmas"][m], header["timesteps"][m]
        x = prev[m]
        v = floats(f32_tensor(tens, f"velocity.{m}", [B, rows, cols], where))
        nxt = floats(f32_tensor(tens, f"latent.{m}", [B, rows, cols], where))
        if sde:
            std, scale, coef = sde_constants(sig, ts, i, header["sampler"]["noise_level"])
            e = rec["sde"][m]
            if (e["std"], e["scale"]) != (std, scale):
                raise Problem(f"{where}: sde.{m} std/scale {e['std']}/{e['scale']} != recomputed {std}/{scale}")
            t = ts[i]
        for b in range(B):
            item = b * rows * cols
            for k in range(item, item + cond * cols):
                if nxt[k] != x[k] and not (math.isnan(nxt[k]) and math.isnan(x[k])):
                    raise Problem(f"{where}: {m} item {b}: a conditioning row changed (element {k})")
            sum_sq = 0.0
            for k in range(item + cond * cols, item + rows * cols):
                ode = euler(x[k], v[k], sig, ts, i)
                if not sde:
                    if struct.pack("<f", ode) != struct.pack("<f", nxt[k]):
                        raise Problem(f"{where}: {m} element {k}: Euler step gives {ode!r}, the trajectory {nxt[k]!r}")
                    continue
                eps = f32(x[k] - f32(t * v[k]))
                mu = f32(ode + f32(coef * eps))
                d = nxt[k] - mu
                sum_sq = sum_sq + d * d
            if sde:
                got = rec["sde"][m]["items"][b]["sum_sq"]
                if struct.pack("<d", got) != struct.pack("<d", sum_sq):
                    raise Problem(f"{where}: sde.{m} item {b}: sum_sq {got!r} != recomputed {sum_sq!r}")
        prev[m] = nxt


def check_sde(header, rec, where):
    if header["sampler"]["kind"] != "sde":
        if rec["sde"] is not None:
            raise Problem(f"{where}: an ODE record carries SDE data")
        return
    for m in ("video", "audio"):
        e = rec["sde"][m]
        scale, log_scale, count = e["scale"], e["log_scale"], e["count"]
        ref = math.log(scale)
        if abs(ref - log_scale) > 2 * math.ulp(ref):
            raise Problem(f"{where}: sde.{m}.log_scale {log_scale!r} is not log(scale) = {ref!r}")
        for b, it in enumerate(e["items"]):
            lp = -(it["sum_sq"] / (2.0 * (scale * scale))) - count * (log_scale + LOG_SQRT_2PI)
            if struct.pack("<d", lp) != struct.pack("<d", it["logprob"]):
                raise Problem(f"{where}: sde.{m} item {b}: logprob {it['logprob']!r} != formula {lp!r}")


def verify_trajectory(d, recompute):
    hp = os.path.join(d, "header.json")
    header = load_json(hp)
    check_seal(header, hp)
    if header.get("schema") != "h3c-trajectory-v2":
        raise Problem(f"{hp}: schema {header.get('schema')!r} is not h3c-trajectory-v2")
    shapes = {m: header["noise"][m]["shape"] for m in ("video", "audio")}
    init = read_safetensors(os.path.join(d, "initial.safetensors"))
    latents = {}
    for m in ("video", "audio"):
        raw = f32_tensor(init, m, shapes[m], "initial.safetensors")
        if hashlib.sha256(raw).hexdigest() != header["noise"][m]["sha256"]:
            raise Problem(f"initial.safetensors: {m} does not hash to header.json's noise.{m}.sha256")
        if item_hashes(raw, shapes[m][0]) != header["noise"][m]["items"]:
            raise Problem(f"initial.safetensors: {m} items do not hash to header.json's noise.{m}.items")
        latents[m] = floats(raw)
    prev = header["seal"]
    n = header["num_steps"]
    sealed = 0
    last = None
    for i in range(n):
        rp = os.path.join(d, "steps", f"step-{i:05d}.json")
        if not os.path.exists(rp):
            break
        rec = load_json(rp)
        check_seal(rec, rp)
        if rec["step"] != i or rec["prev"] != prev:
            raise Problem(f"{rp}: chain broken (step {rec['step']}, prev {rec['prev']})")
        check_sde(header, rec, rp)
        if rec["tensors"] is not None:
            tp = os.path.join(d, "steps", rec["tensors"]["file"])
            with open(tp, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != rec["tensors"]["sha256"]:
                    raise Problem(f"{tp}: sha256 differs from {rp}")
            tens = read_safetensors(tp)
            for kind in ("velocity", "latent"):
                for m in ("video", "audio"):
                    raw = f32_tensor(tens, f"{kind}.{m}", shapes[m], tp)
                    if item_hashes(raw, shapes[m][0]) != rec[kind][m]["items"]:
                        raise Problem(f"{tp}: {kind}.{m} items do not hash to {rp}")
            if recompute:
                recompute_step(header, rec, latents, tens, tp)
        elif recompute:
            raise Problem(f"{rp}: --recompute needs the saved tensors (generate --save-tensors)")
        prev = rec["seal"]
        last = rec
        sealed += 1
    sp = os.path.join(d, f"state-{sealed:05d}.safetensors")
    state = read_safetensors(sp)
    for m in ("video", "audio"):
        want = header["noise"][m]["sha256"] if last is None else last["latent"][m]["sha256"]
        if hashlib.sha256(f32_tensor(state, m, shapes[m], sp)).hexdigest() != want:
            raise Problem(f"{sp}: {m} latents do not hash to the sealed value")
    fp = os.path.join(d, "final.json")
    complete = os.path.exists(fp)
    if complete:
        fin = load_json(fp)
        check_seal(fin, fp)
        if fin["prev"] != prev or fin["num_steps"] != n or sealed != n:
            raise Problem(f"{fp}: does not close the chain")
    print(f"OK trajectory {d}: {sealed} of {n} steps sealed{' and complete' if complete else ''}"
          f"{', every step recomputed' if recompute else ''} ({header['sampler']['kind']})")


def main(argv):
    if len(argv) < 3 or argv[1] not in ("ledger", "trajectory"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        if argv[1] == "ledger":
            verify_ledger(argv[2])
        else:
            verify_trajectory(argv[2], "--recompute" in argv[3:])
    except Problem as e:
        print(f"FAIL {e}")
        return 1
    except (OSError, KeyError, ValueError, TypeError) as e:
        print(f"FAIL {argv[2]}: unreadable ({type(e).__name__}: {e})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
