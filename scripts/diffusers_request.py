#!/usr/bin/env python3
"""h3c requests built by diffusers' MiniMax-H3 pipeline, and diffusers' own transformer forward on them.

Needs torch, numpy and diffusers (with MiniMax-H3) importable, e.g. PYTHONPATH=<diffusers>/src; nothing of h3c.

    diffusers_request.py make --checkpoint DIR --layout t2va|fl2va|ref2va [layout options] --seed S
                              [--steps N --step I] -o req.safetensors [--noise-out noise.safetensors]
        Runs the pipeline's preparation blocks (modular_pipelines/minimax_h3/before_denoise.py) on a request without
        the encoders: the packed layout (build_packed_sequence / build_ref2va_packed_sequence, float64 position_ids),
        the conditioning (keyframe / reference latents, stand-ins for the VAE's encodings drawn from the generator,
        noised to t = 0.999 by the scheduler's scale_noise and patchified, one draw per condition first), the initial
        noise (randn_tensor: the video latent tensor, patchified, then the audio rows, in the pipeline's draw order),
        both schedules (MiniMaxH3Scheduler, shifts 12 and 3) and the row timesteps of step I (build_row_timesteps).
        The prompt embeddings are a seeded stand-in for the text encoder. Writes the transformer's forward arguments
        as an h3c request (metadata h3c_condition_video_rows / h3c_condition_audio_rows) and, with --noise-out, the
        pipeline's initial noise of the generated rows (video [1, rows, C], audio [1, rows, C]) for
        `h3c generate --noise`.

    diffusers_request.py forward --checkpoint DIR --request req.safetensors --dtype float32|bfloat16
                                 [--device cuda|cpu] -o out.safetensors
        MiniMaxH3Transformer3DModel.from_pretrained(DIR, torch_dtype=...) (bfloat16 keeps the float32 modules of
        _keep_in_fp32_modules, as the released checkpoint runs), one forward on the request; writes sample and
        audio_sample as F32.

    diffusers_request.py compare --reference ref32.safetensors --bf16 ref16.safetensors H3C_OUT... [--factor 2]
        Relative Frobenius and max-abs error of each h3c output and of diffusers' bf16 run against diffusers' float32
        run; passes (exit 0) when every h3c output is within `factor` times diffusers' own bf16 error.

Layout options (latent geometry, as `h3c request make --layout`): --text N, --text-vision A:B (text rows of a vision
block, tagged video), --latent F,H,W or --num-frames/--height/--width, --audio-latents L, --keyframes first,last,
--ref image:H,W | audio:L | video:F,H,W[+audio:L] (repeatable, in order).
"""
import argparse
import json
import struct
import sys
import types

import numpy as np
import torch

DT = {"F64": (np.float64, 8), "F32": (np.float32, 4), "I64": (np.int64, 8), "BF16": (None, 2)}


def write_safetensors(path, tensors, metadata=None):
    """name -> numpy array (float64, float32 or int64), in h3c's layout rules (tiled data, header padded to 8)."""
    names = sorted(tensors, key=lambda n: (-tensors[n].dtype.itemsize, n))
    header, off = {}, 0
    codes = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    for n in names:
        a = np.ascontiguousarray(tensors[n])
        header[n] = {"dtype": codes[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for n in names:
            f.write(np.ascontiguousarray(tensors[n]).tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out, meta = {}, header.pop("__metadata__", {})
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = data[8 + n + b : 8 + n + e]
        if info["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=DT[info["dtype"]][0])
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta


def parse_list(s, n, what):
    v = [int(x) for x in s.split(",")]
    if len(v) != n:
        raise SystemExit(f"{what}: expected {n} comma-separated integers, got {s!r}")
    return v


def load_config(checkpoint):
    with open(f"{checkpoint}/config.json") as f:
        return json.load(f)


def cmd_make(a):
    from diffusers.modular_pipelines.minimax_h3 import before_denoise as bd
    from diffusers.modular_pipelines.minimax_h3 import modular_pipeline as mp
    from diffusers.schedulers import MiniMaxH3Scheduler
    from diffusers.utils.torch_utils import randn_tensor

    cfg = load_config(a.checkpoint)
    patch = tuple(cfg.get("patch_size", (1, 2, 2)))
    latent_channels, audio_channels_latent = cfg["in_channels"], cfg["audio_in_channels"]
    audio_channels = mp.MINIMAX_H3_AUDIO_CHANNELS
    tags = [mp.MINIMAX_H3_TEXT_TAG] * a.text
    for v in a.text_vision:
        lo, hi = (int(x) for x in v.split(":"))
        for i in range(lo, hi):
            tags[i] = mp.MINIMAX_H3_VIDEO_TAG
    text_token_tags = torch.tensor(tags, dtype=torch.long)
    if a.num_frames is not None:
        frames = mp.align_num_frames(a.num_frames, 17, 5)
        F = mp.video_latent_num_frames(frames, 17, 5)
        H, W = a.height // 16, a.width // 16
        L = mp.audio_latent_num_frames(frames)
    else:
        F, H, W = parse_list(a.latent, 3, "--latent")
        L = a.audio_latents
    if a.audio_latents is not None:
        L = a.audio_latents

    generator = torch.Generator("cpu").manual_seed(a.seed)
    stand_in = torch.Generator("cpu").manual_seed(a.seed + 1)  # the encoders' stand-ins, off the request's generator
    scheduler, audio_scheduler = MiniMaxH3Scheduler(shift=12.0), MiniMaxH3Scheduler(shift=3.0)
    keyframe_noise_aug = 0.999

    # The conditioning latents the encoders would produce, then the pipeline's conditioning step: one noise draw per
    # condition from the request's generator, scale_noise to t = 0.999, patchify.
    condition_latents, audio_condition_latents, references = [], [], []
    if a.layout == "fl2va":
        anchors = tuple(a.keyframes.split(","))
        condition_latents = [torch.randn((1, latent_channels, 1, H, W), generator=stand_in) for _ in anchors]
    elif a.layout == "ref2va":
        for r in a.ref:
            kind, rest = r.split(":", 1)
            if kind == "image":
                h, w = parse_list(rest, 2, "--ref")
                references.append(types.SimpleNamespace(kind="image", has_audio=False))
                condition_latents.append(torch.randn((1, latent_channels, 1, h, w), generator=stand_in))
            elif kind == "audio":
                references.append(types.SimpleNamespace(kind="audio", has_audio=True))
                audio_condition_latents.append(
                    torch.randn((int(rest) * audio_channels, audio_channels_latent), generator=stand_in))
            else:
                geo, _, aud = rest.partition("+audio:")
                f, h, w = parse_list(geo, 3, "--ref")
                references.append(types.SimpleNamespace(kind="video", has_audio=bool(aud)))
                if aud:
                    audio_condition_latents.append(
                        torch.randn((int(aud) * audio_channels, audio_channels_latent), generator=stand_in))
                condition_latents.append(torch.randn((1, latent_channels, f, h, w), generator=stand_in))
    packed = []
    for condition in condition_latents:
        noise = randn_tensor(condition.shape, generator=generator, dtype=torch.float32)
        noised = scheduler.scale_noise(condition, keyframe_noise_aug, noise)
        packed.append(bd.patchify_video_latents(noised, patch))
    condition_rows = torch.cat(packed) if packed else torch.zeros((0, latent_channels * patch[1] * patch[2]))

    # The layout.
    if a.layout == "ref2va":
        layout = bd.MiniMaxH3Ref2VAPrepareLayoutStep.build_ref2va_packed_sequence(
            text_token_tags, references, condition_latents, audio_condition_latents, F, H, W, L, patch,
            audio_channels, mp.MINIMAX_H3_AUDIO_TAG, mp.MINIMAX_H3_VIDEO_TAG)
    else:
        layout = bd.MiniMaxH3PrepareLayoutStep.build_packed_sequence(
            text_token_tags, F, H, W, L, patch, audio_channels, mp.MINIMAX_H3_AUDIO_TAG, mp.MINIMAX_H3_VIDEO_TAG,
            anchors if a.layout == "fl2va" else ())
    position_ids, token_tags, video_indices, audio_indices, text_indices, cv, ca = layout

    # The generated rows' noise, in the pipeline's draw order: the video latent tensor, then the audio rows.
    latents = randn_tensor((1, latent_channels, F, H, W), generator=generator, dtype=torch.float32)
    video_rows = bd.patchify_video_latents(latents, patch)
    audio_rows = randn_tensor((L * audio_channels, audio_channels_latent), generator=generator, dtype=torch.float32)
    all_video = torch.cat([condition_rows, video_rows])
    all_audio = torch.cat(audio_condition_latents + [audio_rows]) if audio_condition_latents else audio_rows

    # The schedules and this step's row timesteps.
    scheduler.set_timesteps(a.steps)
    audio_scheduler.set_timesteps(a.steps)
    t, ta = float(scheduler.timesteps[a.step]), float(audio_scheduler.timesteps[a.step])
    timestep, timestep_indices = bd.MiniMaxH3SetTimestepsStep.build_row_timesteps(
        video_indices, audio_indices, cv, ca, text_indices.numel(), t, ta, max(t, keyframe_noise_aug), 1.0)
    prompt_embeds = torch.randn((1, a.text, cfg["text_dim"]), generator=stand_in)

    write_safetensors(a.out, {
        "hidden_states": all_video[None].numpy().astype(np.float32),
        "audio_hidden_states": all_audio[None].numpy().astype(np.float32),
        "encoder_hidden_states": prompt_embeds.numpy().astype(np.float32),
        "timestep": timestep.numpy().astype(np.float32),
        "timestep_indices": timestep_indices.numpy().astype(np.int64),
        "token_tags": token_tags.numpy().astype(np.int64),
        "position_ids": position_ids.numpy(),  # float64, as the pipeline passes it
        "video_indices": video_indices.numpy().astype(np.int64),
        "audio_indices": audio_indices.numpy().astype(np.int64),
        "text_indices": text_indices.numpy().astype(np.int64),
    }, {"h3c_layout": a.layout, "h3c_condition_video_rows": cv, "h3c_condition_audio_rows": ca,
        "diffusers_seed": a.seed, "diffusers_step": a.step, "diffusers_steps": a.steps})
    if a.noise_out:
        write_safetensors(a.noise_out, {"video": video_rows[None].numpy().astype(np.float32),
                                        "audio": audio_rows[None].numpy().astype(np.float32)})
    print(f"wrote {a.out}: {a.layout} S={position_ids.shape[0]} Nt={a.text} Nv={all_video.shape[0]} "
          f"(conditioning {cv}) Na={all_audio.shape[0]} (reference {ca}) T={timestep.numel()} step {a.step}/{a.steps}")


def cmd_lora_make(a):
    """A LoRA adapter in the original checkpoint's naming (ai-toolkit's `diffusion_model.` prefix, fused qkv_proj and
    fc1 [gate; value], lora_A/lora_B float32, alpha-less) on every block linear and the blocks' AdaLN projections:
    diffusers converts it (MiniMaxH3LoraLoaderMixin.lora_state_dict) and h3c converts it (readLora), each by its own
    code."""
    cfg = load_config(a.checkpoint)
    g = torch.Generator().manual_seed(a.seed)
    hidden, inner = cfg["hidden_size"], cfg["num_attention_heads"] * cfg["attention_head_dim"]
    ffn = cfg.get("ffn_hidden_size") or cfg.get("intermediate_size")
    ck = {}
    for path in sorted(p for p in __import__("os").listdir(a.checkpoint) if p.endswith(".safetensors")):
        ck.update(read_safetensors(f"{a.checkpoint}/{path}")[0])
    if ffn is None:
        ffn = ck["transformer_blocks.0.ff.net.2.weight"].shape[1]
    r, out = a.rank, {}

    def add(module, rows, cols):
        out[f"diffusion_model.{module}.lora_A.weight"] = (torch.randn(r, cols, generator=g) * 0.05).numpy()
        out[f"diffusion_model.{module}.lora_B.weight"] = (torch.randn(rows, r, generator=g) * 0.05).numpy()

    for i in range(cfg["num_layers"]):
        add(f"blocks.{i}.attn.qkv_proj", 3 * inner, hidden)
        add(f"blocks.{i}.attn.out_proj", hidden, inner)
        add(f"blocks.{i}.mlp.fc1", 2 * ffn, hidden)
        add(f"blocks.{i}.mlp.fc2", hidden, ffn)
        ada = ck[f"transformer_blocks.{i}.adaln_proj.linear.weight"].shape
        add(f"blocks.{i}.adaln_proj.linear", ada[0], ada[1])
    write_safetensors(a.out, out)
    print(f"wrote {a.out}: {len(out) // 2} LoRA modules, rank {r}, original naming")


def merge_lora_like_diffusers(model, spec):
    """diffusers' own conversion of the file (lora_state_dict), then each adapted weight fused in float32 as
    diffusers' fuse_lora computes it (W + scale * alpha / r * B @ A, alpha = r for an alpha-less file) and cast to the
    model's dtype. (Loading through peft needs the peft package, which the GPU machine does not have.)"""
    from diffusers.loaders.lora_pipeline import MiniMaxH3LoraLoaderMixin

    path, _, scale = spec.rpartition(":") if ":" in spec else (spec, "", "1")
    tensors = {k: torch.from_numpy(v) for k, v in read_safetensors(path)[0].items()}
    sd = MiniMaxH3LoraLoaderMixin.lora_state_dict(tensors)
    sd = sd[0] if isinstance(sd, tuple) else sd
    n = 0
    with torch.no_grad():
        for k, down in sd.items():
            if not k.endswith(".lora_A.weight"):
                continue
            module = k[len("transformer."):-len(".lora_A.weight")]
            up = sd[k.replace(".lora_A.", ".lora_B.")]
            lin = model.get_submodule(module)
            w = lin.weight.data.float() + float(scale) * (up.float().to(lin.weight.device) @
                                                          down.float().to(lin.weight.device))
            lin.weight.data.copy_(w.to(lin.weight.dtype))
            n += 1
    print(f"merged {n} LoRA modules (diffusers' conversion) at scale {scale}")


def cmd_forward(a):
    from diffusers import MiniMaxH3Transformer3DModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[a.dtype]
    model = MiniMaxH3Transformer3DModel.from_pretrained(a.checkpoint, torch_dtype=dtype).to(a.device).eval()
    if a.lora:
        merge_lora_like_diffusers(model, a.lora)
    req, _ = read_safetensors(a.request)
    kw = {k: torch.from_numpy(v).to(a.device) for k, v in req.items()}
    with torch.no_grad():
        out = model(**kw, return_dict=False)
    write_safetensors(a.out, {"sample": out[0].float().cpu().numpy(), "audio_sample": out[1].float().cpu().numpy()})
    print(f"wrote {a.out}: diffusers {a.dtype} forward on {a.device}")


def errors(got, ref):
    d = got.astype(np.float64) - ref.astype(np.float64)
    den = np.linalg.norm(ref.astype(np.float64))
    return (float(np.linalg.norm(d) / den) if den > 0 else float(np.linalg.norm(d)), float(np.abs(d).max(initial=0)))


def cmd_compare(a):
    ref, _ = read_safetensors(a.reference)
    bf, _ = read_safetensors(a.bf16)
    ok = True
    for key in ("sample", "audio_sample"):
        if ref[key].size == 0:
            continue
        base = errors(bf[key], ref[key])
        print(f"  {key:12s} diffusers bf16 vs fp32: rel_frob {base[0]:.3e} max_abs {base[1]:.3e}")
        for path in a.h3c:
            h, _ = read_safetensors(path)
            e = errors(h[key], ref[key])
            good = e[0] <= a.factor * base[0]
            ok = ok and good
            ratio = f"{e[0] / base[0]:.2f}x" if base[0] > 0 else "n/a:"
            print(f"  {key:12s} {path}: rel_frob {e[0]:.3e} max_abs {e[1]:.3e} "
                  f"({ratio} diffusers' bf16 error) {'ok' if good else 'TOO LARGE'}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--checkpoint", required=True)
    m.add_argument("--layout", choices=["t2va", "fl2va", "ref2va"], required=True)
    m.add_argument("--text", type=int, default=0)
    m.add_argument("--text-vision", action="append", default=[])
    m.add_argument("--latent")
    m.add_argument("--num-frames", type=int)
    m.add_argument("--height", type=int)
    m.add_argument("--width", type=int)
    m.add_argument("--audio-latents", type=int)
    m.add_argument("--keyframes", default="first")
    m.add_argument("--ref", action="append", default=[])
    m.add_argument("--seed", type=int, required=True)
    m.add_argument("--steps", type=int, default=8)
    m.add_argument("--step", type=int, default=0)
    m.add_argument("-o", "--out", required=True)
    m.add_argument("--noise-out")
    f = sub.add_parser("forward")
    f.add_argument("--checkpoint", required=True)
    f.add_argument("--request", required=True)
    f.add_argument("--dtype", choices=["float32", "bfloat16"], required=True)
    f.add_argument("--device", default="cuda")
    f.add_argument("-o", "--out", required=True)
    f.add_argument("--lora", help="FILE[:SCALE] merged as diffusers converts and fuses it")
    lm = sub.add_parser("lora-make")
    lm.add_argument("--checkpoint", required=True)
    lm.add_argument("--rank", type=int, default=4)
    lm.add_argument("--seed", type=int, default=1)
    lm.add_argument("-o", "--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--reference", required=True)
    c.add_argument("--bf16", required=True)
    c.add_argument("--factor", type=float, default=2.0)
    c.add_argument("h3c", nargs="+")
    a = p.parse_args()
    if a.cmd == "make":
        if a.latent is None and a.num_frames is None:
            p.error("give --latent F,H,W or --num-frames/--height/--width")
        if a.audio_latents is None and a.num_frames is None:
            a.audio_latents = 0
        cmd_make(a)
        return 0
    if a.cmd == "forward":
        cmd_forward(a)
        return 0
    if a.cmd == "lora-make":
        cmd_lora_make(a)
        return 0
    return cmd_compare(a)


if __name__ == "__main__":
    sys.exit(main())
