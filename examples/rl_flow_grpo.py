#!/usr/bin/env python3
"""Reinforcement learning on the same bits: a Flow-GRPO loop over h3c (docs/contract.md section 14).

A rollout engine samples trajectories with the SDE sampler and records each step's transition log-probability; a
trainer recomputes every step's log-probability through the same transformer under torch autograd. Because both
compute the same bits, the importance ratio exp(logprob_trainer - logprob_rollout) is exactly 1 and the KL exactly 0
at every step, before any update. After an optimizer step the trainer pushes its weights into both engines (a hot
update, rounded to bfloat16 once), and the next iteration's rollout and recompute agree again, bit for bit.

    python3 examples/rl_flow_grpo.py [--h3c build/bin/h3c] [--config tiny] [--iterations 2] [--steps 3]
                                     [--group 2] [--rollout-device cpu|cuda] [--train-device cpu|cuda] [--plans DIR]
                                     [--lora-rank R]

It compiles two plans of the config with `h3c compile`: the fused one the rollouts run and the unfused one with the
generated backward (`--backward`) the trainer runs, each on its device (the trainer's default: the rollouts'). On one
device the two compute the same bits by the contract; a CPU trainer of GPU rollouts agrees only where the GPU's
attention exp2 happens to round as the CPU's (the tiny config). The weights are synthetic (`--synthetic SEED`); a real run passes checkpoint=DIR to both Transformers.
The request layout is text-to-video+audio (no conditioning rows): every packed row is conditioned on the video
timestep except the audio rows (the audio timestep), as `h3c generate` builds them.

With --lora-rank R it trains LoRA adapters only (the base weights frozen): both plans carry unmerged adapter slots of
rank R (docs/contract.md section 13), the trainer's compiled with `--trainable lora` (its backward computes the
adapters' gradients and no base weight's), the adapters start as LoRA does (lora_down random, lora_up zero: the
first rollout is the base model's) and every update writes the stepped adapters into both engines' slots. The
rollout plan is then compiled unfused too (`--no-fuse`): a fused plan stacks q, k and v into one `to_qkv` slot
pair, while the trainer's unfused plan has a slot pair per projection, and an update names the slots of its plan.

The trainer's float32 masters live on its device (`parameters(..., device=trainer.device)`): on the GPU the
backward writes their gradients device to device and the optimizer steps them there; each update is cast on the
rollout engine's device.

Start your own loop from `rollout()` and `train_step()`: replace the reward, the advantage and the trainable set.
Exit status 0 only if every recomputed log-probability equals its rollout's.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

import h3c

VIDEO_SHIFT, AUDIO_SHIFT = 12.0, 3.0  # `h3c generate`'s defaults (--video-shift, --audio-shift)


def load_request(path):
    """A request file as name -> numpy array (the reader the tests use: scripts/st_numpy.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    import st_numpy
    return st_numpy.read(path)[0]


def step_request(base, x_video, x_audio, t_video, t_audio):
    """The model inputs of one step: the latents and the row timesteps (runtime/request_layout.cpp rowTimesteps for a
    request without conditioning rows: the video timestep everywhere, the audio timestep on the audio rows; the
    timestep table is the sorted distinct values, each row indexing its own)."""
    S = base["token_tags"].size
    row = np.full(S, t_video, dtype=np.float32)
    row[base["audio_indices"].reshape(-1)] = np.float32(t_audio)
    table = np.unique(row)
    req = dict(base)
    req["hidden_states"], req["audio_hidden_states"] = x_video, x_audio
    req["timestep"] = table.astype(np.float32)
    req["timestep_indices"] = np.searchsorted(table, row).astype(np.int64)
    return req


class SdeLogProb(torch.autograd.Function):
    """The SDE transition's log-probability of `next` given the step's latents and the model's velocity v: its value
    is h3c.sde_step's (the rollout's bits: a fixed-order double sum, trajectory/sampler.h), its gradient the exact
    derivative of the formula: mean = ode + coef * eps with ode = r x + (1 - r) (x + s_t v) and eps = x - t v, so
    d mean / d v = (1 - r) s_t - coef t, and d logprob / d mean = (next - mean) / scale^2."""

    @staticmethod
    def forward(ctx, v, sched, i, noise_level, x, z):
        nxt, mean, _, logprob = h3c.sde_step(sched, i, noise_level, v.detach().numpy(), x, z)
        k = h3c.sde_constants(sched, i, noise_level)
        t = np.float64(sched.timesteps[i])
        r = np.float64(sched.sigmas[i + 1]) / np.float64(sched.sigmas[i])
        dmean_dv = (1.0 - r) * (1.0 - t) - np.float64(k["coef"]) * t
        ctx.dlogprob_dv = (nxt.astype(np.float64) - mean.astype(np.float64)) / np.float64(k["scale"]) ** 2 * dmean_dv
        ctx.next = nxt
        return torch.tensor(logprob, dtype=torch.float64)

    @staticmethod
    def backward(ctx, g):
        return torch.from_numpy(ctx.dlogprob_dv * float(g)).to(torch.float32), None, None, None, None, None


def rollout(engine, base, seed, steps, noise_level):
    """One SDE trajectory (no autograd): per step the inputs, the noise, the sampled latents and the log-probability
    of each modality, as a rollout engine records them."""
    video, audio = h3c.Scheduler(VIDEO_SHIFT), h3c.Scheduler(AUDIO_SHIFT)
    video.set_timesteps(steps + 1)
    audio.set_timesteps(steps + 1)
    xv = h3c.philox_normals(seed, 0, 0, base["hidden_states"].size).reshape(base["hidden_states"].shape)
    xa = h3c.philox_normals(seed, 1, 0, base["audio_hidden_states"].size).reshape(base["audio_hidden_states"].shape)
    record = []
    for i in range(video.num_steps):
        req = step_request(base, xv, xa, video.timesteps[i], audio.timesteps[i])
        with torch.no_grad():
            vv, va = engine(**req, return_dict=False)
        zv = h3c.philox_normals(seed, 0, 1 + i, xv.size).reshape(xv.shape)
        za = h3c.philox_normals(seed, 1, 1 + i, xa.size).reshape(xa.shape)
        nv, _, _, lv = h3c.sde_step(video, i, noise_level, np.asarray(vv), xv, zv)
        na, _, _, la = h3c.sde_step(audio, i, noise_level, np.asarray(va), xa, za)
        record.append({"req": req, "z": (zv, za), "x": (xv, xa), "logprob": (lv, la)})
        xv, xa = nv, na
    return {"steps": record, "final": (xv, xa), "scheds": (video, audio)}


def reward(traj):
    """A stand-in reward (replace it with yours): how close the final video latents are to zero."""
    return -float(np.mean(np.square(traj["final"][0], dtype=np.float64)))


def train_step(trainer, params, trajs, noise_level, lr):
    """One GRPO update over a group of trajectories: every step's log-probability recomputed under autograd (checked
    against the rollout's: ratio exactly 1), the clipped surrogate with group-normalized advantages, one SGD step.
    Returns the number of steps whose recomputed log-probability differed from the rollout's (0 is the point)."""
    rewards = np.array([reward(t) for t in trajs])
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
    opt = torch.optim.SGD(params.values(), lr=lr)
    opt.zero_grad()
    mismatches = 0
    for a, traj in zip(adv, trajs):
        video, audio = traj["scheds"]
        for i, st in enumerate(traj["steps"]):
            vv, va = trainer(**st["req"], return_dict=False)  # one autograd node: the generated backward
            lv = SdeLogProb.apply(vv, video, i, noise_level, st["x"][0], st["z"][0])
            la = SdeLogProb.apply(va, audio, i, noise_level, st["x"][1], st["z"][1])
            old_v, old_a = st["logprob"]
            if float(lv) != old_v or float(la) != old_a:
                mismatches += 1
            ratio = torch.exp((lv - old_v) + (la - old_a))  # exactly 1 where the bits agree
            loss = -float(a) * torch.clamp(ratio, 0.8, 1.2) / len(traj["steps"])
            loss.backward()
    opt.step()
    return mismatches, rewards


def compile_plans(tool, config, out, lora_rank=0):
    """The two plans and the request into `out` (what --plans takes); lora_rank > 0: with adapter slots, the trainer
    training them only."""
    subprocess.run([tool, "fingerprint", "derive", "--config", config, "-o", f"{out}/fp.json"], check=True)
    lora = ["--lora-rank", str(lora_rank)] if lora_rank else []
    subprocess.run([tool, "compile", f"{out}/fp.json", *lora, *(["--no-fuse"] if lora_rank else []),
                    "-o", f"{out}/rollout"], check=True, capture_output=True)
    subprocess.run([tool, "compile", f"{out}/fp.json", "--backward", *lora,
                    *(["--trainable", "lora"] if lora_rank else []), "-o", f"{out}/train"], check=True,
                   capture_output=True)
    subprocess.run([tool, "request", "make", "--config", config, "--text", "5", "--audio", "3", "--video", "2,2,2",
                    "--seed", "1", "-o", f"{out}/request.safetensors"], check=True, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--h3c", default=os.environ.get("H3C_TOOL", "h3c"), help="the h3c command (compiles the plans)")
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group", type=int, default=2, help="trajectories per update (GRPO's group)")
    ap.add_argument("--noise-level", type=float, default=0.7)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--trainable", default="*attn.to_q.*,*attn.to_v.*,proj_out.*",
                    help="comma-separated name globs of the trained weights (with --lora-rank: the adapters)")
    ap.add_argument("--lora-rank", type=int, default=0,
                    help="train LoRA adapters of this rank (a multiple of 64) only, the base weights frozen")
    ap.add_argument("--rollout-device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--train-device", choices=("cpu", "cuda"), help="the trainer's device (default: --rollout-device)")
    ap.add_argument("--plans", help="a folder with rollout/, train/ and request.safetensors made by compile_plans "
                                    "(a machine without `h3c compile`, e.g. the GPU machine); default: compile here")
    ap.add_argument("--compile-only", metavar="DIR", help="only write the plans and the request into DIR (for --plans)")
    args = ap.parse_args()
    if args.compile_only:
        os.makedirs(args.compile_only, exist_ok=True)
        compile_plans(args.h3c, args.config, args.compile_only, args.lora_rank)
        return 0
    work = args.plans
    if not work:
        work = tempfile.mkdtemp(prefix="h3c-rl-")
        compile_plans(args.h3c, args.config, work, args.lora_rank)
    base = load_request(f"{work}/request.safetensors")
    engine = h3c.Transformer(f"{work}/rollout", synthetic=5, device=args.rollout_device)
    trainer = h3c.Transformer(f"{work}/train", synthetic=5, device=args.train_device or args.rollout_device)
    print(f"rollouts on {engine.device}, trainer on {trainer.device}")
    if args.lora_rank:
        # The F32 masters where the trainer runs (device="cuda": the backward writes their .grad device to device).
        params = trainer.parameters("lora", device=trainer.device)
        # LoRA's initialisation: lora_down random, lora_up zero (the adapted model starts as the base model).
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1 if n.endswith(".lora_down") else torch.zeros(p.shape))
        trainer.push_parameters()
        engine.update_weights([(n, p.detach().to(engine.device)) for n, p in params.items()])
    else:
        params = trainer.parameters(args.trainable.split(","), device=trainer.device)
    print(f"training {len(params)} tensors ({sum(p.numel() for p in params.values())} values)")
    total = 0
    for it in range(args.iterations):
        trajs = [rollout(engine, base, seed=100 * it + g, steps=args.steps, noise_level=args.noise_level)
                 for g in range(args.group)]
        mismatches, rewards = train_step(trainer, params, trajs, args.noise_level, args.lr)
        n = sum(len(t["steps"]) for t in trajs)
        print(f"iteration {it}: {n} steps recomputed, {n - mismatches} log-probabilities byte-equal to the rollout's "
              f"(ratio exactly 1, KL exactly 0), mean reward {rewards.mean():.6g}; {trainer.backwards_from_kept_forward} "
              "backwards so far started from their forward's kept values (the GPU; the CPU runs the forward again)")
        total += mismatches
        # The stepped weights into both engines: the trainer's own (its next recompute) and the rollout engine's
        # (the next rollouts), the same rounding for both.
        before = {n: trainer.read_weight_bytes(n) for n in params}
        trainer.push_parameters()
        engine.update_weights([(n, p.detach().to(engine.device)) for n, p in params.items()])
        changed = sum(int(np.count_nonzero(np.frombuffer(before[n], np.uint8) !=
                                           np.frombuffer(trainer.read_weight_bytes(n), np.uint8))) for n in params)
        print(f"iteration {it}: the update changed {changed} bytes of the trained weights (the rollout engine got the "
              "same update)")
    if total:
        print(f"FAILED: {total} steps' log-probabilities differed between rollout and trainer")
        return 1
    print("OK: every recomputed log-probability equals its rollout's, before and after the updates")
    return 0


if __name__ == "__main__":
    sys.exit(main())

