#!/usr/bin/env python3
"""The Python package against the command line (CPU): every forward of h3c.Transformer is compared with the files
`h3c run` writes for the same request (outputs and ledger byte for byte), errors with the CLI's own stderr on the same
bad request, the sampler with torch's grids (test/fixtures/sampler) and `h3c generate`'s sealed trajectories, verify
and drift with `h3c trajectory ... --json`.

Run by ctest with PYTHONPATH=<build>/python, H3C_TOOL=<build>/bin/h3c, H3C_SOURCE_DIR; exits 77 (skipped) when NumPy
or `h3c compile` is missing."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    print("SKIP: no numpy")
    sys.exit(77)
import h3c

TOOL = os.environ["H3C_TOOL"]
SRC = os.environ["H3C_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SRC, "scripts"))
import st_numpy  # noqa: E402
TMP = tempfile.mkdtemp(prefix="h3c-python-")
DT = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}  # what write_st writes


def tool(*args, ok=True):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError(f"h3c {' '.join(map(str, args))} failed:\n{r.stdout}{r.stderr}")
    return r


def read_st(path):
    """A safetensors file as name -> NumPy array (BF16 as int16 bits)."""
    return st_numpy.read(path)[0]


def write_st(path, tensors, bf16=()):
    """`bf16`: names whose arrays are int16 BF16 bit patterns."""
    st_numpy.write(path, tensors, {k: "BF16" for k in bf16})


def setUpModule():
    r = tool("compile", "--help", ok=False)
    if "--arch" not in r.stdout:
        print("SKIP: this h3c has no compile command")
        sys.exit(77)
    tool("fingerprint", "derive", "--config", "tiny", "-o", f"{TMP}/fp.json")
    tool("compile", f"{TMP}/fp.json", "--arch", "sm_90a", "-o", f"{TMP}/plan")
    tool("compile", f"{TMP}/fp.json", "--arch", "sm_90a", "--sp", 2, "--tp", 2, "-o", f"{TMP}/plan22")
    tool("compile", f"{TMP}/fp.json", "--arch", "sm_90a", "--lora-rank", 64, "-o", f"{TMP}/plan_lora")
    tool("checkpoint", "synth", "--config", "tiny", "--seed", 11, "--out", f"{TMP}/ckpt")
    tool("request", "make", "--config", "tiny", "--text", 5, "--audio", 3, "--video", "2,2,2", "--seed", 1,
         "-o", f"{TMP}/a.safetensors")
    tool("request", "make", "--config", "tiny", "--text", 4, "--audio", 5, "--video", "1,3,2", "--batch", 2,
         "--timesteps", 3, "--shuffle", "--seed", 2, "-o", f"{TMP}/b.safetensors")
    tool("request", "make", "--config", "tiny", "--layout", "fl2va", "--text", 6, "--latent", "3,4,4",
         "--audio-latents", 4, "--keyframes", "first,last", "--seed", 3, "-o", f"{TMP}/c.safetensors")
    tool("request", "make", "--config", "tiny", "--text", 3, "--audio", 2, "--video", "1,2,2", "--dtype", "BF16",
         "--seed", 4, "-o", f"{TMP}/d.safetensors")


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def cli_run(plan, req, weights, tag, *extra):
    out, led = f"{TMP}/{tag}.out.safetensors", f"{TMP}/{tag}.ledger.json"
    tool("run", "--config", "tiny", *weights, "--plan", plan, "--inputs", req, "--out", out, "--device", "cpu",
         "--ledger", led, *extra)
    with open(led) as f:
        return read_st(out), f.read()


class TransformerAgainstCli(unittest.TestCase):
    def check(self, t, plan, weights, reqs, as_torch=False, extra=()):
        for name in reqs:
            req = f"{TMP}/{name}.safetensors"
            want, ledger = cli_run(plan, req, weights, f"{os.path.basename(plan)}-{name}-{os.path.basename(weights[1])}",
                                   *extra)
            args = read_st(req)
            if as_torch:
                import torch
                args = {k: torch.from_numpy(v.copy()) for k, v in args.items()}
            out = t(**args)
            got = [np.asarray(x) for x in out]
            self.assertEqual(got[0].dtype, np.float32)
            self.assertEqual(got[0].tobytes(), want["sample"].tobytes(), name)
            self.assertEqual(got[1].tobytes(), want["audio_sample"].tobytes(), name)
            self.assertEqual(got[0].shape, want["sample"].shape)
            self.assertEqual(t.ledger_json, ledger, name)  # the very file `h3c run --ledger` wrote
            self.assertTrue(t.ledger["accepted"])

    def test_hash_nodes_ledger_is_the_clis(self):
        t = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu", hash_nodes=True)
        self.check(t, f"{TMP}/plan", ["--synthetic", "5"], ["b"], extra=("--hash-nodes",))
        self.assertEqual(t.ledger["header"]["node_hash"], "h3c-sum128-v1")

    def test_synthetic_many_requests_one_engine(self):
        t = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu", mode="strict")
        self.check(t, f"{TMP}/plan", ["--synthetic", "5"], ["a", "b", "c", "a"])
        self.assertEqual(t.forwards, 4)

    def test_checkpoint_and_parallel_plan(self):
        t = h3c.Transformer(plan=f"{TMP}/plan22", checkpoint=f"{TMP}/ckpt", device="cpu", config="tiny")
        self.check(t, f"{TMP}/plan22", ["--checkpoint", f"{TMP}/ckpt"], ["b", "c"])

    def test_torch_cpu_tensors_and_bf16_inputs(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        t = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu")
        self.check(t, f"{TMP}/plan", ["--synthetic", "5"], ["a"], as_torch=True)
        # BF16 activations (the request file holds BF16; torch gives them as torch.bfloat16).
        want, _ = cli_run(f"{TMP}/plan", f"{TMP}/d.safetensors", ["--synthetic", "5"], "bf16")
        args = {k: torch.from_numpy(v.copy()) for k, v in read_st(f"{TMP}/d.safetensors").items()}
        for k in ("hidden_states", "audio_hidden_states", "encoder_hidden_states"):
            args[k] = args[k].view(torch.bfloat16)
        video, audio = t(**args, return_dict=False)
        self.assertIsInstance(video, torch.Tensor)
        self.assertEqual(video.numpy().tobytes(), want["sample"].tobytes())
        self.assertEqual(audio.numpy().tobytes(), want["audio_sample"].tobytes())
        # A strided (transposed back) view reads the same values.
        hs = args["hidden_states"].transpose(1, 2).contiguous().transpose(1, 2)
        self.assertFalse(hs.is_contiguous())
        video2, _ = t(**{**args, "hidden_states": hs}, return_dict=False)
        self.assertTrue(torch.equal(video, video2))


class WeightUpdates(unittest.TestCase):
    Q = "transformer_blocks.0.attn.to_q.weight"
    OUT = "transformer_blocks.1.attn.to_out.0.weight"

    def test_update_weights_equals_the_clis_update_and_refusals_change_nothing(self):
        ck = read_st(f"{TMP}/ckpt/diffusion_pytorch_model.safetensors")
        rng = np.random.default_rng(3)
        # float32 values for BF16 weights whose rounding is known by construction: BF16 bit patterns b with low halves
        # below 0x8000 (round to b) or above (round to b + 1, away from zero in magnitude).
        new, rounded = {}, {}
        for n in (self.Q, self.OUT):
            b = (rng.integers(0x3C00, 0x3D00, size=ck[n].shape) | (rng.integers(0, 2, size=ck[n].shape) << 15))
            up = rng.integers(0, 2, size=ck[n].shape)
            low = np.where(up == 1, 0x9000 + rng.integers(0, 0x7000, size=ck[n].shape),
                           rng.integers(0, 0x8000, size=ck[n].shape))
            new[n] = ((b.astype(np.uint32) << 16) | low.astype(np.uint32)).view(np.float32)
            rounded[n] = (b + up).astype(np.uint16).view(np.int16)
        write_st(f"{TMP}/update.safetensors", rounded, bf16=rounded.keys())
        want, ledger = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"], "update",
                               "--update", f"{TMP}/update.safetensors")
        t = h3c.Transformer(plan=f"{TMP}/plan", checkpoint=f"{TMP}/ckpt", device="cpu")
        args = read_st(f"{TMP}/a.safetensors")
        before = [np.asarray(x).tobytes() for x in t(**args)]
        identity = t.weights["sha256"]
        t.update_weights(new)  # a state dict of float32 arrays
        got = [np.asarray(x) for x in t(**args)]
        by_file = h3c.Transformer(plan=f"{TMP}/plan", checkpoint=f"{TMP}/ckpt", device="cpu")
        by_file.update_weights(f"{TMP}/update.safetensors")  # the file h3c run --update reads
        self.assertEqual(np.asarray(by_file(**args)[0]).tobytes(), want["sample"].tobytes())
        self.assertEqual(got[0].tobytes(), want["sample"].tobytes())
        self.assertEqual(got[1].tobytes(), want["audio_sample"].tobytes())
        self.assertNotEqual(got[0].tobytes(), before[0])
        self.assertEqual(t.ledger_json, ledger)  # the CLI's ledger byte for byte, weights record included
        self.assertEqual(t.weights["updated"], sorted(new))
        self.assertNotEqual(t.weights["sha256"], identity)
        # Refused: a NaN (after a good tensor), an unknown name, a wrong shape: nothing changes.
        bad = new[self.Q].copy()
        bad[1, 2] = np.nan
        for tensors, says in (([(self.OUT, new[self.OUT]), (self.Q, bad)], "1 NaN, 0 Inf (first: element"),
                              ([("transformer_blocks.0.attn.to_w.weight", bad)], "no weight tensor of the plan"),
                              ({self.Q: bad[:, :-1]}, "has shape")):
            with self.assertRaises(h3c.Error) as e:
                t.update_weights(tensors)
            self.assertIn(says, str(e.exception))
        again = [np.asarray(x) for x in t(**args)]
        self.assertEqual(again[0].tobytes(), want["sample"].tobytes())
        self.assertEqual(t.weights["updates"], 1)
        # Back to the checkpoint's values by name (float32 arrays holding its BF16 values exactly), from a generator.
        t.update_weights((n, (ck[n].astype(np.uint16).astype(np.uint32) << 16).view(np.float32)) for n in new)
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), before[0])
        self.assertEqual(t.weights["sha256"], identity)
        # A trainer's own computation of the identity, from the folder's tensors (float32 widened for the F32 ones).
        _, dtypes, _ = st_numpy.read(f"{TMP}/ckpt/diffusion_pytorch_model.safetensors")
        state = {n: (v if dtypes[n] != "BF16" else (v.astype(np.uint16).astype(np.uint32) << 16).view(np.float32))
                 for n, v in ck.items()}
        self.assertEqual(h3c.weights_identity(state, "tiny"), identity)
        state.pop(self.Q)
        with self.assertRaises(h3c.Error):
            h3c.weights_identity(state, "tiny")


    def test_load_lora_equals_the_clis_lora_and_unloads(self):
        # A diffusers-layout adapter (transformer.<module>.lora_A/B.weight, float32, alpha-less: alpha = rank).
        rng = np.random.default_rng(7)
        ck = read_st(f"{TMP}/ckpt/diffusion_pytorch_model.safetensors")
        lora = {}
        for n in (self.Q, self.OUT):
            out, inn = ck[n].shape
            m = "transformer." + n[:-len(".weight")]
            lora[m + ".lora_A.weight"] = (rng.standard_normal((4, inn)) * 0.1).astype(np.float32)
            lora[m + ".lora_B.weight"] = (rng.standard_normal((out, 4)) * 0.1).astype(np.float32)
        write_st(f"{TMP}/lora.safetensors", lora)
        want, ledger = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", ["--synthetic", "5"], "lora",
                               "--lora", f"{TMP}/lora.safetensors:0.5")
        t = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu")
        args = read_st(f"{TMP}/a.safetensors")
        before = np.asarray(t(**args)[0]).tobytes()
        identity = t.weights["sha256"]
        t.load_lora(f"{TMP}/lora.safetensors", scale=0.5)
        got = [np.asarray(x) for x in t(**args)]
        self.assertEqual(got[0].tobytes(), want["sample"].tobytes())
        self.assertEqual(got[1].tobytes(), want["audio_sample"].tobytes())
        self.assertNotEqual(got[0].tobytes(), before)
        self.assertEqual(t.ledger_json, ledger)
        self.assertEqual([(x["scale"], x["modules"], x["format"]) for x in t.weights["lora"]], [(0.5, 2, "diffusers")])
        with self.assertRaises(h3c.Error) as e:
            t(**args, attention_kwargs={"scale": 0.3})
        self.assertIn("load_lora", str(e.exception))
        t.unload_lora()
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), before)
        self.assertEqual(t.weights["sha256"], identity)
        write_st(f"{TMP}/bad_lora.safetensors", {"transformer.nowhere.lora_A.weight": lora[m + ".lora_A.weight"],
                                                 "transformer.nowhere.lora_B.weight": lora[m + ".lora_B.weight"]})
        with self.assertRaises(h3c.Error):
            t.load_lora(f"{TMP}/bad_lora.safetensors")
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), before)

    def test_unmerged_lora_equals_the_clis_and_leaves_the_base_weights(self):
        # A plan with LoRA slots (h3c compile --lora-rank 64): the adapter goes into the slots, unmerged
        # (docs/contract.md section 13); with empty slots the outputs are the plain plan's.
        rng = np.random.default_rng(9)
        ck = read_st(f"{TMP}/ckpt/diffusion_pytorch_model.safetensors")
        lora = {}
        for n in (self.Q, self.OUT):
            out, inn = ck[n].shape
            m = "transformer." + n[:-len(".weight")]
            lora[m + ".lora_A.weight"] = (rng.standard_normal((8, inn)) * 0.1).astype(np.float32)
            lora[m + ".lora_B.weight"] = (rng.standard_normal((out, 8)) * 0.1).astype(np.float32)
        write_st(f"{TMP}/lora_un.safetensors", lora)
        plain, _ = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", ["--synthetic", "5"], "plain")
        want, ledger = cli_run(f"{TMP}/plan_lora", f"{TMP}/a.safetensors", ["--synthetic", "5"], "lora_un",
                               "--lora", f"{TMP}/lora_un.safetensors:0.5")
        t = h3c.Transformer(plan=f"{TMP}/plan_lora", synthetic=5, device="cpu")
        args = read_st(f"{TMP}/a.safetensors")
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), plain["sample"].tobytes())
        q = np.asarray(t._engine.read_weight(self.Q)).tobytes()  # W before the adapter
        t.load_lora(f"{TMP}/lora_un.safetensors", scale=0.5)
        got = [np.asarray(x) for x in t(**args)]
        self.assertEqual(got[0].tobytes(), want["sample"].tobytes())
        self.assertEqual(got[1].tobytes(), want["audio_sample"].tobytes())
        self.assertNotEqual(got[0].tobytes(), plain["sample"].tobytes())
        self.assertEqual(t.ledger_json, ledger)
        self.assertEqual([x["mode"] for x in t.weights["lora"]], ["unmerged"])
        self.assertEqual(np.asarray(t._engine.read_weight(self.Q)).tobytes(), q)  # W untouched
        t.unload_lora()
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), plain["sample"].tobytes())
        # The same adapter as a state dict (a trainer's, every step): the same bytes, named "<state dict>".
        t.load_lora(lora, scale=0.5)
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), want["sample"].tobytes())
        self.assertEqual(t.weights["lora"][0]["path"], "<state dict>")
        t.unload_lora()
        with self.assertRaises(h3c.Error):
            t.load_lora({"transformer.nowhere.lora_A.weight": lora[next(iter(lora))]})
        self.assertEqual(np.asarray(t(**args)[0]).tobytes(), plain["sample"].tobytes())


class Training(unittest.TestCase):
    """torch autograd through a plan compiled with --backward (CPU reference): the gradients loss.backward() leaves in
    the activations' and the parameters' .grad are the bytes `h3c backward` writes for the same request and output
    gradients; the forward under autograd is the fused plan's `h3c run` output byte for byte (the rollout's bits);
    after an optimizer step, push_parameters() gives the forward `h3c run --update` computes with the stepped weights
    rounded to bfloat16 (rounded here with integer arithmetic, not by h3c)."""
    PATTERNS = ["*attn.to_q.*", "norm_out.*", "proj_out.*", "time_embed.*", "transformer_blocks.0.ff.*"]

    @classmethod
    def setUpClass(cls):
        try:
            import torch  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("no torch")
        tool("compile", f"{TMP}/fp.json", "--backward", "-o", f"{TMP}/plan_bw")

    def args(self):
        import torch
        return {k: torch.from_numpy(v.copy()) for k, v in read_st(f"{TMP}/a.safetensors").items()}

    def test_gradients_are_the_clis_and_the_forward_is_the_rollouts(self):
        import torch
        t = h3c.Transformer(plan=f"{TMP}/plan_bw", checkpoint=f"{TMP}/ckpt", device="cpu")
        params = t.parameters(self.PATTERNS)
        self.assertGreater(len(params), 10)
        self.assertTrue(all(p.dtype == torch.float32 and p.requires_grad for p in params.values()))
        args = self.args()
        for n in ("hidden_states", "audio_hidden_states", "encoder_hidden_states"):
            args[n].requires_grad_(True)
        sample, audio = t(**args, return_dict=False)
        self.assertTrue(sample.requires_grad and audio.requires_grad)
        self.assertIsNone(t.ledger)  # a training forward writes no ledger (the rollout's forward does)
        rollout, _ = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"], "train_fwd")
        self.assertEqual(sample.detach().numpy().tobytes(), rollout["sample"].tobytes())
        self.assertEqual(audio.detach().numpy().tobytes(), rollout["audio_sample"].tobytes())
        g = torch.Generator().manual_seed(7)
        w, w2 = torch.randn(sample.shape, generator=g), torch.randn(audio.shape, generator=g)
        ((sample * w).sum() + (audio * w2).sum()).backward()  # d loss / d outputs = w, w2 exactly
        write_st(f"{TMP}/train_g.safetensors", {"sample": w.numpy(), "audio_sample": w2.numpy()})
        tool("backward", "--config", "tiny", "--checkpoint", f"{TMP}/ckpt", "--plan", f"{TMP}/plan_bw", "--inputs",
             f"{TMP}/a.safetensors", "--grads", f"{TMP}/train_g.safetensors", "-o", f"{TMP}/train_out.safetensors")
        want = read_st(f"{TMP}/train_out.safetensors")
        for n in ("hidden_states", "audio_hidden_states", "encoder_hidden_states"):
            self.assertEqual(args[n].grad.numpy().tobytes(), want[n].astype(np.float32).tobytes(), n)
        for n, p in params.items():
            self.assertEqual(p.grad.shape, p.shape, n)
            self.assertEqual(p.grad.numpy().tobytes(), want[n].tobytes(), n)
            self.assertTrue(bool(p.grad.abs().sum() > 0), n)
        self.assertEqual(t.backwards_from_kept_forward, 0)  # the CPU reference keeps nothing: it ran the forward again
        # Again, from a fresh engine: the same bits.
        t2 = h3c.Transformer(plan=f"{TMP}/plan_bw", checkpoint=f"{TMP}/ckpt", device="cpu")
        p2 = t2.parameters(self.PATTERNS)
        s2, a2 = t2(**self.args(), return_dict=False)
        ((s2 * w).sum() + (a2 * w2).sum()).backward()
        for n in params:
            self.assertEqual(p2[n].grad.numpy().tobytes(), params[n].grad.numpy().tobytes(), n)
        # Under no_grad, or without parameters and grad-requiring activations: a plain forward, no graph.
        with torch.no_grad():
            s3, _ = t2(**self.args(), return_dict=False)
        self.assertFalse(s3.requires_grad)
        self.assertEqual(s3.numpy().tobytes(), rollout["sample"].tobytes())

    def test_optimizer_step_then_push_is_the_clis_update(self):
        import torch
        t = h3c.Transformer(plan=f"{TMP}/plan_bw", checkpoint=f"{TMP}/ckpt", device="cpu")
        params = t.parameters(self.PATTERNS)
        opt = torch.optim.SGD(params.values(), lr=0.05)
        sample, audio = t(**self.args(), return_dict=False)
        (sample.square().mean() + audio.square().mean()).backward()
        opt.step()
        t.push_parameters()
        after = t(**{k: v.detach() for k, v in self.args().items()}, return_dict=False)
        # The stepped float32 values rounded to bfloat16 to nearest even, by integer arithmetic on their bits.
        # (Tensors the model pins to float32 keep their values.)
        dtypes = t._engine.weight_dtypes
        self.assertIn("F32", [dtypes[n] for n in params])  # the pattern holds both kinds
        rounded = {}
        for n, p in params.items():
            if dtypes[n] == "F32":
                rounded[n] = p.detach().numpy().copy()
                continue
            bits = p.detach().numpy().view(np.uint32).astype(np.uint64)
            r = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            rounded[n] = r.astype(np.uint16).view(np.int16)
        write_st(f"{TMP}/train_update.safetensors", rounded, bf16=[n for n in rounded if dtypes[n] == "BF16"])
        want, _ = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"], "train_upd",
                          "--update", f"{TMP}/train_update.safetensors")
        before, _ = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"], "train_fwd0")
        self.assertEqual(after[0].detach().numpy().tobytes(), want["sample"].tobytes())
        self.assertEqual(after[1].detach().numpy().tobytes(), want["audio_sample"].tobytes())
        self.assertNotEqual(want["sample"].tobytes(), before["sample"].tobytes())

    def test_rl_example_logprobs_are_the_rollouts_before_and_after_updates(self):
        r = subprocess.run([sys.executable, os.path.join(SRC, "examples", "rl_flow_grpo.py"), "--h3c", TOOL,
                            "--iterations", "2", "--steps", "2"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("OK: every recomputed log-probability equals its rollout's", r.stdout)
        changed = [int(line.split("changed ")[1].split()[0]) for line in r.stdout.splitlines() if "changed" in line]
        self.assertEqual(len(changed), 2)
        self.assertTrue(all(c > 0 for c in changed), r.stdout)  # the updates did change the weights

    def test_sde_logprob_gradient_against_central_differences(self):
        import torch
        sys.path.insert(0, os.path.join(SRC, "examples"))
        import rl_flow_grpo
        s = h3c.Scheduler(12.0)
        s.set_timesteps(4)
        rng = np.random.default_rng(5)
        x, z = rng.standard_normal((1, 40)).astype(np.float32), rng.standard_normal((1, 40)).astype(np.float32)
        v = torch.from_numpy(rng.standard_normal((1, 40)).astype(np.float32)).requires_grad_(True)
        i, a = 1, 0.7
        lp = rl_flow_grpo.SdeLogProb.apply(v, s, i, a, x, z)
        self.assertEqual(float(lp), h3c.sde_step(s, i, a, v.detach().numpy(), x, z)[3])
        lp.backward()
        # The log-probability of a fixed `next` as the velocity moves: exactly quadratic in v, so a central difference
        # is exact up to the F32 roundings of the step. `next` is the sample drawn at v (kept fixed).
        nxt = h3c.sde_step(s, i, a, v.detach().numpy(), x, z)[0]
        k = h3c.sde_constants(s, i, a)

        def logprob_of_next(vv):
            mean = h3c.sde_step(s, i, a, vv, x, np.zeros_like(z))[1].astype(np.float64)
            return -np.sum((nxt.astype(np.float64) - mean) ** 2) / (2 * np.float64(k["scale"]) ** 2)
        for j in (0, 7, 39):
            d = np.zeros((1, 40), np.float32)
            d[0, j] = 0.05
            v0 = v.detach().numpy()
            fd = (logprob_of_next(v0 + d) - logprob_of_next(v0 - d)) / 0.1
            self.assertAlmostEqual(float(v.grad[0, j]), fd, delta=1e-3 * max(1.0, abs(fd)))

    def test_refusals(self):
        t = h3c.Transformer(plan=f"{TMP}/plan", checkpoint=f"{TMP}/ckpt", device="cpu")
        with self.assertRaisesRegex(h3c.Error, "compile --backward"):
            t.parameters()
        tb = h3c.Transformer(plan=f"{TMP}/plan_bw", checkpoint=f"{TMP}/ckpt", device="cpu")
        with self.assertRaisesRegex(h3c.Error, "no weight matches"):
            tb.parameters("no_such_tensor*")
        with self.assertRaisesRegex(h3c.Error, "no parameters registered"):
            tb.push_parameters()
        # CUDA masters (their gradients filled on the device) need a GPU transformer; other places are refused.
        with self.assertRaisesRegex(h3c.Error, "parameters: CUDA masters need a device='cuda' transformer"):
            tb.parameters("*", device="cuda")
        with self.assertRaisesRegex(h3c.Error, "parameters: device must be 'cpu' or 'cuda', got 'tpu'"):
            tb.parameters("*", device="tpu")


class TrainingLora(unittest.TestCase):
    """LoRA training through a plan compiled with --backward --lora-rank 64 --trainable lora (CPU reference): only the
    adapter slots are parameters (base weights frozen); set through push_parameters(), their .grad after
    loss.backward() is the bytes `h3c backward --update` writes with the same slot values (rounded to bfloat16 here by
    integer arithmetic, not by h3c); an SGD step and push give the forward `h3c run --update` computes with the
    stepped slots; the base weights are not parameters of such a plan."""

    @classmethod
    def setUpClass(cls):
        try:
            import torch  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("no torch")
        tool("compile", f"{TMP}/fp.json", "--backward", "--lora-rank", 64, "--trainable", "lora",
             "-o", f"{TMP}/plan_lora_bw")

    @staticmethod
    def bf16_bits(a):
        """float32 values rounded to bfloat16 to nearest even, as int16 bit patterns (no NaN here)."""
        bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).view(np.int16)

    def start(self):
        """A transformer with its adapters set to random values (down std 0.1, up std 0.02) and pushed."""
        import torch
        t = h3c.Transformer(plan=f"{TMP}/plan_lora_bw", checkpoint=f"{TMP}/ckpt", device="cpu")
        params = t.parameters("lora")
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for n, p in params.items():
                self.assertEqual(float(p.abs().sum()), 0.0, n)  # slots start at zero
                p.copy_(torch.randn(p.shape, generator=g) * (0.1 if n.endswith(".lora_down") else 0.02))
        t.push_parameters()
        return t, params

    def args(self):
        import torch
        return {k: torch.from_numpy(v.copy()) for k, v in read_st(f"{TMP}/a.safetensors").items()}

    def slots_file(self, params, tag):
        path = f"{TMP}/{tag}.safetensors"
        write_st(path, {n: self.bf16_bits(p.detach().numpy()) for n, p in params.items()}, bf16=list(params))
        return path

    def test_adapter_gradients_are_the_clis(self):
        import torch
        t, params = self.start()
        self.assertEqual(sorted(params), t._engine.adapter_slots)
        self.assertEqual(len(params), 48)
        self.assertEqual(params["transformer_blocks.0.attn.to_q.lora_down"].shape, (64, 24))
        slots = self.slots_file(params, "lora_slots")
        # The engine holds exactly the pushed values' bfloat16 roundings.
        for n in ("transformer_blocks.0.attn.to_q.lora_down", "token_refiner.refiner_blocks.1.ff.net.2.lora_up"):
            self.assertEqual(t.read_weight_bytes(n), read_st(slots)[n].tobytes(), n)
        args = self.args()
        args["hidden_states"].requires_grad_(True)
        sample, audio = t(**args, return_dict=False)
        rollout, _ = cli_run(f"{TMP}/plan_lora_bw", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"],
                             "lora_fwd", "--update", slots)
        self.assertEqual(sample.detach().numpy().tobytes(), rollout["sample"].tobytes())
        g = torch.Generator().manual_seed(8)
        w, w2 = torch.randn(sample.shape, generator=g), torch.randn(audio.shape, generator=g)
        ((sample * w).sum() + (audio * w2).sum()).backward()
        write_st(f"{TMP}/lora_g.safetensors", {"sample": w.numpy(), "audio_sample": w2.numpy()})
        tool("backward", "--config", "tiny", "--checkpoint", f"{TMP}/ckpt", "--plan", f"{TMP}/plan_lora_bw",
             "--inputs", f"{TMP}/a.safetensors", "--update", slots, "--grads", f"{TMP}/lora_g.safetensors",
             "-o", f"{TMP}/lora_out.safetensors")
        want = read_st(f"{TMP}/lora_out.safetensors")
        self.assertEqual(sorted(want), sorted(list(params) + ["hidden_states", "audio_hidden_states",
                                                              "encoder_hidden_states"]))
        self.assertEqual(args["hidden_states"].grad.numpy().tobytes(), want["hidden_states"].tobytes())
        for n, p in params.items():
            self.assertEqual(p.grad.numpy().tobytes(), want[n].tobytes(), n)
            self.assertTrue(bool(p.grad.abs().sum() > 0), n)

    def test_sgd_step_then_push_is_the_clis_update(self):
        import torch
        t, params = self.start()
        opt = torch.optim.SGD(params.values(), lr=0.5)
        sample, audio = t(**self.args(), return_dict=False)
        (sample.square().mean() + audio.square().mean()).backward()
        before = {n: p.detach().clone() for n, p in params.items()}
        opt.step()
        self.assertTrue(any(not torch.equal(before[n], p.detach()) for n, p in params.items()))
        t.push_parameters()
        after = t(**{k: v.detach() for k, v in self.args().items()}, return_dict=False)
        want, _ = cli_run(f"{TMP}/plan_lora_bw", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"],
                          "lora_upd", "--update", self.slots_file(params, "lora_stepped"))
        old, _ = cli_run(f"{TMP}/plan_lora_bw", f"{TMP}/a.safetensors", ["--checkpoint", f"{TMP}/ckpt"],
                         "lora_old", "--update", self.slots_file(before, "lora_before"))
        self.assertEqual(after[0].detach().numpy().tobytes(), want["sample"].tobytes())
        self.assertEqual(after[1].detach().numpy().tobytes(), want["audio_sample"].tobytes())
        self.assertNotEqual(want["sample"].tobytes(), old["sample"].tobytes())

    def test_rl_example_with_lora_adapters(self):
        r = subprocess.run([sys.executable, os.path.join(SRC, "examples", "rl_flow_grpo.py"), "--h3c", TOOL,
                            "--iterations", "2", "--steps", "2", "--lora-rank", "64"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("training 48 tensors", r.stdout)
        self.assertIn("OK: every recomputed log-probability equals its rollout's", r.stdout)
        changed = [int(line.split("changed ")[1].split()[0]) for line in r.stdout.splitlines() if "changed" in line]
        self.assertEqual(len(changed), 2)
        self.assertTrue(all(c > 0 for c in changed), r.stdout)

    def test_frozen_base_weights_are_no_parameters(self):
        t = h3c.Transformer(plan=f"{TMP}/plan_lora_bw", checkpoint=f"{TMP}/ckpt", device="cpu")
        with self.assertRaisesRegex(h3c.Error, "selects only tensors this plan freezes"):
            t.parameters("*attn.to_q.weight")
        # A glob over every tensor gives the trained ones (the slots), the frozen ones left out.
        self.assertEqual(sorted(t.parameters("*")), t._engine.adapter_slots)
        self.assertEqual(sorted(t.parameters("*.to_q.lora_*")),
                         [n for n in t._engine.adapter_slots if ".to_q.lora_" in n])


class Version(unittest.TestCase):
    def test_version_is_the_clis(self):
        words = tool("--version").stdout.split()  # "h3c <version> (build <commit>)"
        self.assertEqual(h3c.__version__, words[1])
        self.assertEqual(h3c._h3c.build, words[3].rstrip(")"))


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu")
        cls.args = read_st(f"{TMP}/a.safetensors")

    def same_as_cli(self, name, args):
        """The bad request through the CLI (stderr 'h3c: error: MSG') and through Python (h3c.Error MSG)."""
        path = f"{TMP}/bad-{name}.safetensors"
        write_st(path, args)
        r = tool("run", "--config", "tiny", "--synthetic", 5, "--plan", f"{TMP}/plan", "--inputs", path, "--out",
                 f"{TMP}/bad.out", "--device", "cpu", "--ledger", f"{TMP}/bad.json", ok=False)
        self.assertEqual(r.returncode, 2)
        with self.assertRaises(h3c.Error) as e:
            self.t(**args)
        self.assertEqual("h3c: error: " + str(e.exception), r.stderr.strip().splitlines()[-1])
        self.assertTrue(e.exception.where)

    def test_bad_requests_raise_the_cli_message(self):
        a = self.args
        self.same_as_cli("tags", {**a, "token_tags": a["token_tags"][:-1]})
        self.same_as_cli("nan", {**a, "hidden_states": np.full_like(a["hidden_states"], np.nan)})
        self.same_as_cli("i32", {**a, "video_indices": a["video_indices"].astype(np.int32)})
        overlap = a["text_indices"].copy()
        overlap[1] = overlap[0]
        self.same_as_cli("overlap", {**a, "text_indices": overlap})
        self.same_as_cli("ts", {**a, "timestep": np.array([1.5], dtype=np.float32)})

    def test_python_level_errors(self):
        a = self.args
        with self.assertRaises(h3c.Error):
            self.t(**{**a, "timestep": [0.5]})  # not a tensor
        with self.assertRaises(h3c.Error):
            self.t(**a, attention_kwargs={"scale": 0.5})
        with self.assertRaises(TypeError):
            self.t(hidden_states=a["hidden_states"])
        with self.assertRaises(h3c.Error):
            h3c.Transformer(plan=f"{TMP}/plan", device="cpu")  # neither checkpoint nor synthetic
        with self.assertRaises(h3c.Error):
            h3c.Transformer(plan=f"{TMP}/nowhere", synthetic=1, device="cpu")
        with self.assertRaises(h3c.Error):
            h3c.Transformer(plan=f"{TMP}/plan", synthetic=1, device="tpu")
        with self.assertRaises(h3c.Error):
            h3c.Transformer(plan=f"{TMP}/plan", synthetic=1, device="cpu", config="small")
        # The engine is still usable after every failure.
        self.assertEqual(len(self.t(**a, return_dict=False)), 2)

    def test_profile_accounts_for_the_forward_and_errors_leave_no_trace(self):
        a = self.args
        first = self.t(**a, return_dict=False)
        with self.assertRaises(h3c.Error):  # read into the engine's kept request, then refused
            self.t(**{**a, "hidden_states": np.full_like(a["hidden_states"], np.nan)})
        again = self.t(**a, return_dict=False)
        self.assertEqual(first[0].tobytes(), again[0].tobytes())
        ph = self.t._engine.last_profile
        for k in ("read_request", "bind_device", "engine", "verdict", "engine.canonicalize", "engine.ledger_header",
                  "engine.executor", "engine.request_sha_wait", "engine.outputs_ledger"):
            self.assertGreaterEqual(ph[k], 0.0, k)
        self.assertLessEqual(sum(v for k, v in ph.items() if k.startswith("engine.")), ph["engine"] + 1e-3)
        # H3C_PROFILE=1: one line per forward whose parts add up to its total.
        code = ("import h3c, sys; sys.path.insert(0, sys.argv[2]); import st_numpy; "
                "t = h3c.Transformer(plan=sys.argv[1], synthetic=5, device='cpu'); "
                "a = st_numpy.read(sys.argv[3])[0]; t(**a); t(**a)")
        r = subprocess.run([sys.executable, "-c", code, f"{TMP}/plan", os.path.join(SRC, "scripts"),
                            f"{TMP}/a.safetensors"], capture_output=True, text=True,
                           env={**os.environ, "H3C_PROFILE": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.startswith("h3c python: forward ")]
        self.assertEqual(len(lines), 2, r.stderr)
        for line in lines:
            total = float(line.split(" ms = ")[0].rsplit(": ", 1)[1])
            parts = [float(p.split()[-1]) for p in line.split(" ms = ")[1].split(" + ")]
            self.assertAlmostEqual(sum(parts), total, delta=0.01 * len(parts) + 1e-9)
            self.assertIn("executor", line)
            self.assertIn("request_sha_wait", line)

    def test_hostile_inputs_are_refused_as_by_the_cli(self):
        """The checks `h3c run` makes on its inputs hold for the Python package too (they live in the runtime)."""
        a = self.args
        ck = f"{TMP}/ckpt-hostile"
        shutil.copytree(f"{TMP}/ckpt", ck)
        with open(f"{ck}/config.json") as f:
            cfg = json.load(f)
        with open(f"{ck}/config.json", "w") as f:
            json.dump({**cfg, "norm_eps": 1e-3}, f)  # same tensors, another model
        with self.assertRaises(h3c.Error) as e:
            h3c.Transformer(plan=f"{TMP}/plan", checkpoint=ck, device="cpu")
        self.assertIn("norm_eps", str(e.exception))
        with open(f"{ck}/config.json", "w") as f:
            json.dump(cfg, f)
        # One NaN weight: refused in strict mode, recorded (and not accepted) in audit mode, on every forward.
        name = "transformer_blocks.0.attn.to_q.weight"
        path = [os.path.join(ck, n) for n in os.listdir(ck) if n.endswith(".safetensors")][0]
        with open(path, "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            entry = json.loads(f.read(n))[name]
            self.assertEqual(entry["dtype"], "BF16")
            f.seek(8 + n + entry["data_offsets"][0] + 2 * 5)
            f.write(struct.pack("<H", 0x7FC0))
        with self.assertRaises(h3c.Error) as e:
            h3c.Transformer(plan=f"{TMP}/plan", checkpoint=ck, device="cpu")(**a)
        self.assertIn(name, str(e.exception))
        t = h3c.Transformer(plan=f"{TMP}/plan", checkpoint=ck, device="cpu", mode="audit")
        for _ in range(2):
            t(**a)
            self.assertFalse(t.ledger["accepted"])
            self.assertIn(f"weight {name}: 1 NaN", " ".join(t.ledger["header"]["non_finite"]))
        # A --bind glob that matches no node, and a thread count outside the CLI's range.
        with self.assertRaises(h3c.Error) as e:
            h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu", binds=["transformer_block.*=reference"])(**a)
        self.assertIn("matches no node", str(e.exception))
        with self.assertRaises(h3c.Error):
            h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu", threads=100000)

    def test_non_finite_outputs_are_refused_in_strict_mode(self):
        """Finite weights that overflow (row 3 of proj_out.weight at 3e38 loads: no input or weight check refuses it)
        give NaN / Inf in channel 3 of the video output. Strict: h3c.Error with the CLI's offender line (the output,
        its counts, its first element and value), no outputs; audit: the outputs and the CLI's very ledger."""
        a = self.args
        ck = f"{TMP}/ckpt-overflow"
        shutil.copytree(f"{TMP}/ckpt", ck)
        st_numpy.overwrite_row(ck, "proj_out.weight", 3, 3.0e38)
        weights = ["--checkpoint", ck]
        r = tool("run", "--config", "tiny", *weights, "--plan", f"{TMP}/plan", "--inputs", f"{TMP}/a.safetensors",
                 "--out", f"{TMP}/overflow.out", "--device", "cpu", "--ledger", f"{TMP}/overflow.json", ok=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertFalse(os.path.exists(f"{TMP}/overflow.out"))
        cli_offenders = [l.strip() for l in r.stderr.splitlines() if l.strip().startswith("non-finite output")]
        want, ledger = cli_run(f"{TMP}/plan", f"{TMP}/a.safetensors", weights, "overflow-audit", "--mode", "audit")
        audit = h3c.Transformer(plan=f"{TMP}/plan", checkpoint=ck, device="cpu", mode="audit")
        video, audio = audit(**a, return_dict=False)
        self.assertEqual(video.tobytes(), want["sample"].tobytes())
        self.assertEqual(audit.ledger_json, ledger)
        self.assertFalse(audit.ledger["accepted"])
        # The entries as NumPy finds them: the poke did overflow, in channel 3 only.
        entries = [e for e in (st_numpy.non_finite_entry("sample", video),
                               st_numpy.non_finite_entry("audio_sample", audio)) if e]
        self.assertEqual(len(entries), 1, entries)
        first = int(entries[0].split("first: element ")[1].split(",")[0])
        self.assertEqual(first % video.shape[-1], 3, entries)
        self.assertEqual(audit.ledger["header"]["non_finite"], entries)
        self.assertEqual(cli_offenders, ["non-finite " + entries[0]])
        strict = h3c.Transformer(plan=f"{TMP}/plan", checkpoint=ck, device="cpu")
        with self.assertRaises(h3c.Error) as e:
            strict(**a)
        self.assertEqual(e.exception.where, "--mode strict")
        self.assertIn("\n  non-finite " + entries[0], str(e.exception))
        self.assertFalse(strict.ledger["accepted"])
        self.assertEqual(strict.ledger["header"]["non_finite"], entries)

    def test_strict_rule(self):
        t = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu", binds=["*=reference"])
        with self.assertRaises(h3c.Error) as e:
            t(**self.args)
        self.assertIn("not run `row`", str(e.exception))
        self.assertFalse(t.ledger["accepted"])  # the evidence stays readable
        off = h3c.Transformer(plan=f"{TMP}/plan", synthetic=5, device="cpu", mode="off", binds=["*=reference"])
        self.assertEqual(off(**self.args).sample.shape, self.args["hidden_states"].shape)


class SamplerAndTrajectories(unittest.TestCase):
    def test_scheduler_grids_are_torchs(self):
        with open(f"{SRC}/test/fixtures/sampler/torch_sigmas.json") as f:
            fixture = json.load(f)
        for g in fixture["grids"]:
            s = h3c.Scheduler(g["shift"])
            s.set_timesteps(g["steps"])
            bits = lambda v: [struct.unpack("<I", struct.pack("<f", x))[0] for x in v]  # noqa: E731
            self.assertEqual(bits(s.sigmas), g["sigmas"], g)
            self.assertEqual(bits(s.timesteps), g["timesteps"], g)
        with self.assertRaises(h3c.Error):
            h3c.Scheduler(-1.0)

    def test_generate_steps_recomputed_in_python(self):
        """`h3c generate` (SDE, saved tensors) re-stepped with the Python sampler, bit for bit."""
        traj = f"{TMP}/traj"
        tool("generate", "--config", "tiny", "--synthetic", 5, "--plan", f"{TMP}/plan", "--inputs",
             f"{TMP}/a.safetensors", "--steps", 4, "--seed", 9, "--sampler", "sde", "--noise-level", 0.7,
             "--save-tensors", "--device", "cpu", "--out", traj)
        s = h3c.Scheduler(12.0)
        s.set_timesteps(4)
        init = read_st(f"{traj}/initial.safetensors")["video"]
        n = init.size
        self.assertEqual(h3c.philox_normals(9, 0, 0, n).tobytes(), init.reshape(-1).tobytes())
        x = init.copy()
        for i in range(s.num_steps):
            st = read_st(f"{traj}/steps/step-{i:05d}.safetensors")
            with open(f"{traj}/steps/step-{i:05d}.json") as f:
                rec = json.load(f)
            z = h3c.philox_normals(9, 0, 1 + i, n).reshape(x.shape)
            x, mean, sum_sq, logprob = h3c.sde_step(s, i, 0.7, st["velocity.video"], x, z)
            self.assertEqual(x.tobytes(), st["latent.video"].tobytes(), i)
            self.assertEqual(sum_sq, rec["sde"]["video"]["items"][0]["sum_sq"])
            self.assertEqual(logprob, rec["sde"]["video"]["items"][0]["logprob"])
            self.assertEqual(h3c.sde_constants(s, i, 0.7)["scale"], rec["sde"]["video"]["scale"])
        v = h3c.verify_trajectory(traj)
        cli = json.loads(tool("trajectory", "verify", traj, "--json").stdout)
        self.assertEqual(v, cli)
        self.assertTrue(v["complete"])
        # ODE: one Euler step of the Python scheduler equals a step of the trajectory.
        ode = f"{TMP}/traj-ode"
        tool("generate", "--config", "tiny", "--synthetic", 5, "--plan", f"{TMP}/plan", "--inputs",
             f"{TMP}/a.safetensors", "--steps", 3, "--seed", 9, "--save-tensors", "--device", "cpu", "--out", ode)
        st = read_st(f"{ode}/steps/step-00000.safetensors")
        x0 = read_st(f"{ode}/initial.safetensors")["audio"]
        a = h3c.Scheduler(3.0)
        a.set_timesteps(3)
        self.assertEqual(h3c.scheduler_step(a, 0, st["velocity.audio"], x0).tobytes(),
                         st["latent.audio"].tobytes())
        d = h3c.drift(traj, ode)
        self.assertEqual(d, json.loads(tool("trajectory", "drift", traj, ode, "--json", ok=False).stdout))
        self.assertFalse(d["identical"])
        self.assertTrue(h3c.drift(traj, traj)["identical"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
