#!/usr/bin/env python3
"""Checks `h3c request make --layout` against diffusers' MiniMax-H3 pipeline, bit for bit.

    diffusers_layout_check.py --h3c build/bin/h3c [--tmp DIR]

Needs torch, numpy and diffusers (with MiniMax-H3) importable (e.g. PYTHONPATH=<diffusers>/src). For every case
below, h3c writes a request and diffusers builds the same layout with its own blocks
(MiniMaxH3PrepareLayoutStep.build_packed_sequence, MiniMaxH3Ref2VAPrepareLayoutStep.build_ref2va_packed_sequence,
MiniMaxH3SetTimestepsStep.build_row_timesteps): position_ids (float64 bits), token_tags, the three index tensors, the
conditioning row counts, timestep and timestep_indices must be equal. The cases cover frame counts where numpy's
pairwise sum, a sequential sum and CPython's sum() differ in the last ulp (16 frames and more), non-square and
pixel-space geometry, vision rows in the prompt, and every reference kind. Also compares the rotary inv_freq buffer
with h3c's float32 formula. Prints one PASS/FAIL line per case and "N passed, N failed"; exit 1 on any failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diffusers_request import read_safetensors  # noqa: E402

CASES = [
    ("t2va", ["--text", "5", "--text-vision", "1:3", "--latent", "3,4,6", "--audio-latents", "2"]),
    ("t2va", ["--text", "3", "--num-frames", "120", "--height", "768", "--width", "1344"]),
    ("t2va", ["--text", "0", "--latent", "2,84,48", "--audio-latents", "0"]),
    ("fl2va", ["--text", "4", "--latent", "17,6,10", "--audio-latents", "3", "--keyframes", "first,last"]),
    ("fl2va", ["--text", "2", "--latent", "37,4,4", "--audio-latents", "1", "--keyframes", "last"]),
    ("fl2va", ["--text", "2", "--latent", "130,2,2", "--audio-latents", "1", "--keyframes", "last,first"]),
    ("ref2va", ["--text", "6", "--text-vision", "2:4", "--latent", "5,4,6", "--audio-latents", "4",
                "--ref", "image:6,10", "--ref", "audio:5", "--ref", "video:17,4,6+audio:3", "--ref", "video:2,4,4"]),
    ("ref2va", ["--text", "3", "--latent", "16,4,4", "--audio-latents", "2", "--ref", "video:16,2,4+audio:30",
                "--ref", "image:4,4"]),
]
T_VIDEO, T_AUDIO = 0.25, 0.625


def cpython312_sum(iterable, start=0):
    """sum() of floats as CPython >= 3.12 computes it (Neumaier's compensated summation, gh-100425); older CPython
    adds sequentially. A video reference's rotary span is such a sum: h3c follows the current CPython."""
    xs = list(iterable)
    if not xs:
        return start
    s, c = start + xs[0], 0.0
    for x in xs[1:]:
        t = s + x
        c += (s - t) + x if abs(s) >= abs(x) else (x - t) + s
        s = t
    return s + c if c else s


def diffusers_layout(layout, args, bd, mp):
    opt = {}
    i = 0
    while i < len(args):
        k, v = args[i], args[i + 1]
        opt.setdefault(k, []).append(v)
        i += 2
    text = int(opt["--text"][0])
    tags = [1] * text
    for r in opt.get("--text-vision", []):
        lo, hi = (int(x) for x in r.split(":"))
        tags[lo:hi] = [0] * (hi - lo)
    text_tags = torch.tensor(tags, dtype=torch.long)
    if "--num-frames" in opt:
        frames = mp.align_num_frames(int(opt["--num-frames"][0]), 17, 5)
        F, H, W = mp.video_latent_num_frames(frames, 17, 5), int(opt["--height"][0]) // 16, int(opt["--width"][0]) // 16
        L = mp.audio_latent_num_frames(frames)
    else:
        F, H, W = (int(x) for x in opt["--latent"][0].split(","))
        L = int(opt["--audio-latents"][0])
    patch, ch = (1, 2, 2), mp.MINIMAX_H3_AUDIO_CHANNELS
    if layout != "ref2va":
        anchors = tuple(opt["--keyframes"][0].split(",")) if layout == "fl2va" else ()
        return bd.MiniMaxH3PrepareLayoutStep.build_packed_sequence(text_tags, F, H, W, L, patch, ch, 2, 0, anchors)
    refs, cond, aud = [], [], []
    for r in opt["--ref"]:
        kind, rest = r.split(":", 1)
        if kind == "image":
            h, w = (int(x) for x in rest.split(","))
            refs.append(types.SimpleNamespace(kind="image", has_audio=False))
            cond.append(torch.zeros((1, 4, 1, h, w)))
        elif kind == "audio":
            refs.append(types.SimpleNamespace(kind="audio", has_audio=True))
            aud.append(torch.zeros((int(rest) * ch, 6)))
        else:
            geo, _, a = rest.partition("+audio:")
            f, h, w = (int(x) for x in geo.split(","))
            refs.append(types.SimpleNamespace(kind="video", has_audio=bool(a)))
            if a:
                aud.append(torch.zeros((int(a) * ch, 6)))
            cond.append(torch.zeros((1, 4, f, h, w)))
    return bd.MiniMaxH3Ref2VAPrepareLayoutStep.build_ref2va_packed_sequence(
        text_tags, refs, cond, aud, F, H, W, L, patch, ch, 2, 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--h3c", required=True)
    p.add_argument("--tmp", default=None)
    a = p.parse_args()
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3RotaryPosEmbed
    from diffusers.modular_pipelines.minimax_h3 import before_denoise as bd
    from diffusers.modular_pipelines.minimax_h3 import modular_pipeline as mp

    tmp = a.tmp or tempfile.mkdtemp(prefix="h3c-layout-")
    passed = failed = 0
    print(f"python {sys.version.split()[0]} (sum() of floats is {'compensated' if sys.version_info >= (3, 12) else 'sequential'}), "
          f"torch {torch.__version__}, numpy {np.__version__}")
    for n, (layout, args) in enumerate(CASES):
        path = os.path.join(tmp, f"case{n}.safetensors")
        cmd = [a.h3c, "request", "make", "--config", "tiny", "--layout", layout, "--seed", "1", "--t-video",
               str(T_VIDEO), "--t-audio", str(T_AUDIO), "-o", path] + args
        r = subprocess.run(cmd, capture_output=True, text=True)
        name = f"[{n}] {layout} {' '.join(args)}"
        if r.returncode != 0:
            failed += 1
            print(f"FAIL {name}: h3c request make: {r.stderr.strip()}")
            continue
        got, meta = read_safetensors(path)
        pos, tags, vi, ai, ti, cv, ca = diffusers_layout(layout, args, bd, mp)
        note = ""
        if (sys.version_info < (3, 12) and got["position_ids"].shape == tuple(pos.shape)
                and not np.array_equal(got["position_ids"].view(np.uint64), pos.numpy().view(np.uint64))):
            # This interpreter's sum() is sequential; diffusers on CPython >= 3.12 computes the compensated one.
            import builtins
            saved, builtins.sum = builtins.sum, cpython312_sum
            try:
                pos = diffusers_layout(layout, args, bd, mp)[0]
            finally:
                builtins.sum = saved
            note = " (diffusers' layout with CPython >= 3.12's sum(); this Python's sequential sum differs in float64)"
        ts, tsi = bd.MiniMaxH3SetTimestepsStep.build_row_timesteps(vi, ai, cv, ca, ti.numel(), T_VIDEO, T_AUDIO,
                                                                  max(T_VIDEO, 0.999), 1.0)
        problems = []
        if got["position_ids"].dtype != np.float64 or got["position_ids"].shape != tuple(pos.shape):
            problems.append(f"position_ids {got['position_ids'].dtype} {got['position_ids'].shape} vs {tuple(pos.shape)}")
        else:
            diff = got["position_ids"].view(np.uint64) != pos.numpy().view(np.uint64)
            if diff.any():
                row, col = np.argwhere(diff)[0]
                f32same = np.array_equal(got["position_ids"].astype(np.float32), pos.numpy().astype(np.float32))
                problems.append(f"position_ids differ at {int(diff.sum())} entries, first [{row}][{col}]: h3c "
                                f"{got['position_ids'][row, col]!r} diffusers {pos[row, col].item()!r} (as float32, "
                                f"what the transformer uses: {'equal' if f32same else 'different'})")
        for key, ref in (("token_tags", tags), ("video_indices", vi), ("audio_indices", ai), ("text_indices", ti),
                         ("timestep_indices", tsi)):
            if not np.array_equal(got[key], ref.numpy()):
                problems.append(f"{key} differs")
        if not np.array_equal(got["timestep"].view(np.uint32), ts.numpy().astype(np.float32).view(np.uint32)):
            problems.append(f"timestep {got['timestep']} vs {ts.numpy()}")
        if (int(meta["h3c_condition_video_rows"]), int(meta["h3c_condition_audio_rows"])) != (cv, ca):
            problems.append(f"conditioning rows {meta['h3c_condition_video_rows']}/{meta['h3c_condition_audio_rows']}"
                            f" vs {cv}/{ca}")
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"PASS {name}: S={pos.shape[0]}, position_ids bit-identical, tags/indices/timesteps equal{note}")
    # inv_freq: h3c's float32 formula (runtime/lib/host_ops.cpp ropeInvFreq) against the module's buffer.
    for f in (2, 16):
        buf = MiniMaxH3RotaryPosEmbed(rope_freq_dim=f, rope_theta=10000.0).inv_freq.numpy()
        mine = np.array([np.float32(1.0) / np.float32(10000.0 ** float(np.float32(2 * i) / np.float32(2 * f)))
                         for i in range(f)], dtype=np.float32)
        same = np.array_equal(buf.view(np.uint32), mine.view(np.uint32))
        passed, failed = passed + same, failed + (not same)
        print(f"{'PASS' if same else 'FAIL'} rotary inv_freq (rope_freq_dim {f}) equals h3c's float32 formula"
              + ("" if same else f": {buf} vs {mine}"))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
