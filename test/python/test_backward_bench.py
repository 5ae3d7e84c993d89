#!/usr/bin/env python3
"""bench/backward_bench.py without a GPU: its torch LoRA adapters against the formula y = x W^T + (x D^T) U^T, its
diffusers control flow (eager, regional compile with the checkpoint outside and inside the compiled blocks, the
fallback from one to the other, the run deadline) on a CPU stand-in with diffusers' module names and checkpointing
hooks (torch.compile replaced by a marker), and its h3c cases end to end through the CPU reference at the tiny config
(plans compiled here; the child's check that the step filled every gradient is part of it).

Run by ctest with PYTHONPATH=<build>/python, H3C_TOOL=<build>/bin/h3c, H3C_SOURCE_DIR; exits 77 (skipped) without
torch. The h3c test is skipped when `h3c compile` is missing (a build without MLIR)."""
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

SRC = os.environ.get("H3C_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.environ.get("H3C_TOOL", "")
BENCH = os.path.join(SRC, "bench", "backward_bench.py")
sys.path.insert(0, os.path.join(SRC, "bench"))
import backward_bench as bb  # noqa: E402

H = 16


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.to_q, self.to_k, self.to_v = (nn.Linear(H, H, bias=False) for _ in range(3))
        self.norm_q = nn.Linear(H, H)  # a linear of the block that no adapter slot serves
        self.to_out = nn.ModuleList([nn.Linear(H, H, bias=False), nn.Dropout(0.0)])

    def forward(self, x):
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        return self.to_out[0](F.softmax(q @ k.transpose(-1, -2), -1) @ v)


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(H, 4 * H, bias=False)

    def forward(self, x):
        a, g = self.proj(x).chunk(2, -1)
        return a * F.silu(g)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.ModuleList([SwiGLU(), nn.Dropout(0.0), nn.Linear(2 * H, H, bias=False)])

    def forward(self, x):
        return self.net[2](self.net[0](x))


class MiniMaxH3TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.ff, self.adaln_proj = Attn(), FeedForward(), nn.Linear(H, H)

    def forward(self, x, temb, idx, rope):
        x = x + self.attn(x * (1 + self.adaln_proj(temb)).index_select(0, idx) + rope[0])
        return x + self.ff(x)


class MiniMaxH3TokenRefinerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.ff = Attn(), FeedForward()

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.ff(x)


def checkpointed(owner, block, *args):
    """diffusers' block loop: its checkpoint function when gradient checkpointing is on, else the block."""
    if torch.is_grad_enabled() and owner.gradient_checkpointing:
        return owner._gradient_checkpointing_func(block, *args)
    return block(*args)


class Refiner(nn.Module):
    def __init__(self):
        super().__init__()
        self.refiner_blocks = nn.ModuleList([MiniMaxH3TokenRefinerBlock() for _ in range(2)])
        self.gradient_checkpointing = False

    def forward(self, x):
        for b in self.refiner_blocks:
            x = checkpointed(self, b, x)
        return x


class StandIn(nn.Module):
    """diffusers' MiniMaxH3Transformer3DModel as far as the bench sees it: module names, _repeated_blocks,
    enable / disable_gradient_checkpointing (torch.utils.checkpoint, non-reentrant, of module.__call__),
    compile_repeated_blocks, forward(**request, return_dict=False) -> (sample, audio_sample)."""
    _repeated_blocks = ["MiniMaxH3TransformerBlock", "MiniMaxH3TokenRefinerBlock"]

    def __init__(self, fail_outer=False):
        super().__init__()
        self.proj_in, self.proj_out = nn.Linear(8, H), nn.Linear(H, 8)
        self.token_refiner = Refiner()
        self.transformer_blocks = nn.ModuleList([MiniMaxH3TransformerBlock() for _ in range(3)])
        self.gradient_checkpointing = False
        self.fail_outer, self.outer, self.checkpoints = fail_outer, False, 0

    def _set(self, on):
        def ckpt(module, *args):
            self.checkpoints += 1
            return torch.utils.checkpoint.checkpoint(module.__call__, *args, use_reentrant=False)

        for m in self.modules():
            if hasattr(m, "gradient_checkpointing"):
                m.gradient_checkpointing, m._gradient_checkpointing_func = on, ckpt

    def enable_gradient_checkpointing(self):
        self._set(True)

    def disable_gradient_checkpointing(self):
        self._set(False)

    def compile_repeated_blocks(self, **kw):
        self.outer = True
        for m in self.modules():
            if type(m).__name__ in self._repeated_blocks:
                m.compile(**kw)

    def forward(self, hidden_states, text, return_dict=True):
        inner = any(type(m).__name__ == "Checkpointed" for m in self.modules())
        if self.fail_outer and self.outer and not inner:
            raise RuntimeError("Unsupported: a stand-in for dynamo refusing the outer arrangement")
        x = torch.cat([self.token_refiner(text), self.proj_in(hidden_states)], 1)
        temb, idx = torch.ones(2, H), torch.zeros(x.shape[1], dtype=torch.long)
        rope = (torch.zeros(x.shape[1], H),)
        for b in self.transformer_blocks:
            x = checkpointed(self, b, x, temb, idx, rope)
        o = self.proj_out(x)
        return o[:, 3:], o[:, :3]


class Args:
    modes, skip_eager, skip_compile, compile_ckpt, case_timeout, reps, warmup = ["lora64", "full"], False, False, "both", 60, 2, 1


def run(args, time_left=lambda: float("inf"), **model_kw):
    """run_diffusers on the stand-in (no CUDA: torch.cuda's calls made harmless, Module.compile a marker)."""
    built, rows = [], []

    def model(cfg, dtype):
        built.append(StandIn(**model_kw))
        return built[-1]

    def record(case, mode, status="ok", **kv):
        rows.append({"case": case, "mode": mode, "status": status, **kv})

    saved = (bb.diffusers_model, bb.load_request, getattr(nn.Module, "compile", None),
             {f: getattr(torch.cuda, f) for f in ("synchronize", "empty_cache", "reset_peak_memory_stats",
                                                  "max_memory_allocated")})
    bb.diffusers_model = model
    bb.load_request = lambda req, dev: {"hidden_states": torch.randn(1, 5, 8), "text": torch.randn(1, 3, H)}
    nn.Module.compile = lambda self, **kw: setattr(self, "_compiled_call_impl", None)
    for f in saved[3]:
        setattr(torch.cuda, f, (lambda *a, **k: 0) if f == "max_memory_allocated" else (lambda *a, **k: None))
    try:
        bb.run_diffusers(args, {}, None, record, time_left)
    finally:
        bb.diffusers_model, bb.load_request = saved[0], saved[1]
        if saved[2] is None:
            del nn.Module.compile
        else:
            nn.Module.compile = saved[2]
        for f, fn in saved[3].items():
            setattr(torch.cuda, f, fn)
    return built[0], rows


# LoRA parameters of the stand-in: 5 blocks x (to_q, to_k, to_v, to_out.0: 64 x 16 + 16 x 64; ff.net.0.proj:
# 64 x 16 + 64 x 64; ff.net.2: 64 x 32 + 16 x 64).
LORA_PARAMS = 5 * (4 * 2048 + 5120 + 3072)


class BackwardBench(unittest.TestCase):
    def test_lora_targets_and_formula(self):
        torch.manual_seed(0)
        m = StandIn()
        names = bb.lora_target_names(m)
        self.assertEqual(len(names), 5 * 6)
        self.assertFalse([n for n in names if "norm_q" in n or "adaln" in n or "proj_" in n.split(".")[0]])
        base = m.transformer_blocks[1].attn.to_out[0]
        bb.add_lora(m, names, 64)
        w = m.transformer_blocks[1].attn.to_out[0]
        self.assertIs(w.base, base)
        x = torch.randn(5, H, dtype=torch.float64)
        w.double()
        want = x @ base.weight.T + (x @ w.lora_down.T) @ w.lora_up.T
        self.assertLess((w(x) - want).abs().max().item(), 1e-12)
        self.assertEqual(sum(p.numel() for n, p in m.named_parameters() if ".lora_" in n), LORA_PARAMS)
        bb.remove_lora(m, names)
        self.assertIs(m.transformer_blocks[1].attn.to_out[0], base)
        self.assertFalse([n for n, _ in m.named_parameters() if ".lora_" in n])

    def test_rows_for_tokens(self):
        self.assertEqual(bb.rows_for_tokens(8349), (512, 157, "8,30,32"))
        for s in (64, 2048, 5000):
            t, a, v = bb.rows_for_tokens(s)
            self.assertEqual(t + a + int(v.split(",")[2]), s)

    def test_every_case_runs_and_trains_what_it_says(self):
        model, rows = run(Args())
        self.assertEqual([(r["case"], r["mode"], r["status"]) for r in rows],
                         [(c, m, "ok") for c in ("diffusers eager", "diffusers compile", "diffusers compile/in")
                          for m in ("lora64", "full")])
        self.assertEqual({r["trainable"] for r in rows if r["mode"] == "lora64"}, {LORA_PARAMS})
        self.assertEqual({r["trainable"] for r in rows if r["mode"] == "full"},
                         {sum(p.numel() for p in StandIn().parameters())})
        self.assertEqual(sum(p.numel() for p in model.parameters()), 0)  # the weights freed for h3c's children
        # the stand-in's norm_q (weight and bias, 5 blocks) is never read: no gradient, said in the note
        self.assertEqual({r.get("note") for r in rows if r["mode"] == "full"},
                         {"10 of 50 trainable tensors unread: no .grad"})
        self.assertGreater(model.checkpoints, 0)  # diffusers' own checkpoint function ran (eager, outer)
        self.assertEqual(sum(type(m).__name__ == "Checkpointed" for m in model.modules()), 5)

    def test_inner_runs_where_outer_failed(self):
        a = Args()
        a.compile_ckpt, a.modes = "auto", ["lora64"]
        model, rows = run(a, fail_outer=True)
        self.assertEqual([(r["case"], r["status"]) for r in rows],
                         [("diffusers eager", "ok"), ("diffusers compile", "error"), ("diffusers compile/in", "ok")])
        lora = [n for n, _ in model.named_parameters() if ".lora_" in n]
        self.assertEqual(len(lora), 60)
        self.assertTrue(all(".inner." in n for n in lora))  # the adapters sit in the wrapped blocks
        _, rows = run(a)  # outer works: no inner case
        self.assertEqual([r["case"] for r in rows], ["diffusers eager", "diffusers compile"])

    def test_deadline_skips_and_says_so(self):
        _, rows = run(Args(), time_left=lambda: 5.0)
        self.assertEqual({r["status"] for r in rows}, {"skipped"})
        self.assertEqual(len(rows), 6)

    @unittest.skipUnless(TOOL and subprocess.run([TOOL, "compile", "--help"], capture_output=True,
                                                 text=True).stdout.find("--backward") >= 0, "no `h3c compile`")
    def test_h3c_cases_on_the_cpu_reference(self):
        tmp = tempfile.mkdtemp(prefix="h3c-backward-bench-test-")
        fp = os.path.join(tmp, "tiny.json")
        subprocess.run([TOOL, "fingerprint", "derive", "--config", "tiny", "-o", fp], check=True, capture_output=True)
        for name, extra in (("tiny-backward-lora64-ckpt", ["--lora-rank", "64", "--trainable", "lora"]),
                            ("tiny-backward-ckpt", [])):
            subprocess.run([TOOL, "compile", fp, "--backward", "--checkpoint", "blocks", *extra, "-o",
                            os.path.join(tmp, name)], check=True, capture_output=True)
        out = os.path.join(tmp, "rows.jsonl")
        p = subprocess.run([sys.executable, BENCH, "--h3c", TOOL, "--plans", tmp, "--config", "tiny", "--tokens", "40",
                            "--h3c-device", "cpu", "--h3c-cli", "--reps", "1", "--warmup", "0", "--out", out],
                           capture_output=True, text=True, timeout=240)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        import json
        rows = [json.loads(line) for line in open(out)]
        self.assertEqual([(r["case"], r["mode"], r["status"]) for r in rows],
                         [("h3c python", "lora64", "ok"), ("h3c cli", "lora64", "ok"), ("h3c python", "full", "ok"),
                          ("h3c cli", "full", "ok")], p.stdout[-3000:])
        # the rank-64 slots of the tiny config (hidden 24, 2 heads x 16, ffn 32), R (K + N) per linear: q, k, v
        # (24 -> 32), out (32 -> 24), ff in (24 -> 2 x 32), ff out (32 -> 24), in 2 blocks and 2 refiner blocks
        self.assertEqual(rows[0]["trainable"], 4 * 64 * (3 * (24 + 32) + (32 + 24) + (24 + 64) + (32 + 24)))
        self.assertTrue(p.stdout.rstrip().splitlines()[-1].startswith("ms/step:"))  # the table comes last


if __name__ == "__main__":
    unittest.main()
