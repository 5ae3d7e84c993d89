"""h3c from Python: a compiled MiniMax-H3 plan run in-process on the caller's tensors.

    import h3c
    transformer = h3c.Transformer(plan="plans/full", checkpoint="MiniMax-H3/transformer", device="cuda")
    video, audio = transformer(hidden_states=..., audio_hidden_states=..., encoder_hidden_states=..., timestep=...,
                               timestep_indices=..., token_tags=..., position_ids=..., video_indices=...,
                               audio_indices=..., text_indices=..., return_dict=False)
    transformer.ledger   # the operator ledger of the last call (what `h3c run --ledger` writes)

`Transformer.forward` takes exactly the arguments of diffusers' `MiniMaxH3Transformer3DModel.forward` (names,
shapes, dtypes) and returns what it returns (an output with `.sample` / `.audio_sample`, or the tuple with
`return_dict=False`), so it can replace `pipe.transformer`. The engine underneath is resident (weights loaded and
kernels compiled once, at construction and the first call) and every forward computes the bits `h3c run` computes on
the same inputs.

Tensors cross by DLPack. On device="cuda", torch CUDA tensors are read and written in place: the three activations
are bound directly when they already have the plan's dtype and are contiguous (else converted on the device first:
float32 -> bfloat16 rounds to nearest even, as `h3c run`'s upload does), the outputs are written into tensors
allocated with torch on the caller's device, and all work runs on the caller's current stream. The request is also
read back to the host once (one device-to-host copy per tensor on that stream, into buffers the engine keeps across
forwards: a few MB), for the same validation and ledger hash as `h3c run`. On
device="cpu" (or host tensors on "cuda"), NumPy arrays or torch CPU tensors go in and the outputs come back in the
same kind, exported without a copy.

H3C_PROFILE=1 prints one line per forward on stderr that accounts for its whole wall time (the package's Python, the
request read-back, the engine's phases, the strict verdict), beside the engine's and the GPU executor's own lines.

Errors are `h3c.Error` (a RuntimeError) with the CLI's message ("<where>: <what>", `.where` and `.message`). In
strict mode an output holding NaN / Inf is one, as `h3c run` refuses it: the message names the output, its counts and
its first element (flat index) and value ("non-finite output sample: 2 NaN, 0 Inf (first: element 3, NaN)") and
nothing is returned; CUDA outputs are scanned where they are (one reduction kernel, no copy back). In audit and off
modes they come back and `transformer.ledger` records them.
Training (docs/contract.md section 14): on a plan compiled with `h3c compile --backward`, the transformer takes part
in torch autograd, on device="cpu" (the CPU reference) or "cuda" (the GPU's gradient kernels, with the weights the
engine holds on the device). `transformer.parameters(pattern)` gives float32 master copies of the
weights whose names match (leaf tensors with requires_grad, for a torch optimizer); a forward with grad mode on and
any of them or an activation requiring grad records one autograd node, whose backward runs the plan's backward
function (fixed-order F32 gradients, bitwise reproducible) on the loss's gradients of the two
outputs and fills the activations' and the parameters' `.grad`. The forward's outputs are the bits of a plain forward.
`parameters(pattern, device="cuda")` keeps the masters on the GPU: the backward then copies their gradients device to
device from its own memory, where host masters get theirs through the host (1.4 GB a step at LoRA rank 64 on the full
model).
On the GPU that forward is the backward's own (its values kept on the device for the node's backward, so a step runs
the forward once; a forward or backward run on the transformer in between makes the backward run it again, the same
bits: `transformer.backwards_from_kept_forward` counts the steps that reused it); a training forward writes no ledger.
After an optimizer step, `transformer.push_parameters()` writes the master copies into the engine (an update:
rounded to bfloat16 to nearest even), so the next forward (a rollout) runs with the stepped weights.
LoRA training: a plan compiled with `--backward --lora-rank R --trainable lora` trains the unmerged adapter slots
only (base weights frozen: no gradient op works for them); `transformer.parameters("lora")` gives the slots' master
copies (`<module>.lora_down` [R, in], `<module>.lora_up` [out, R], zero until set: initialise them under
torch.no_grad() and push_parameters()), whose `.grad` the backward fills; the scale is part of the up slot's values.
The sampler (`Scheduler`, `sde_step`, `philox_normals`) and the trajectory tools (`verify_trajectory`, `drift`) are
thin wrappers over the same C++ as `h3c generate` and `h3c trajectory`.
"""
import json
import os
import sys
import time

from . import _h3c
from ._h3c import Error, Scheduler, linspace_f32

__version__ = _h3c.version  # the h3c build's version (`h3c --version`); _h3c.build is its git commit

__all__ = ["Transformer", "TransformerOutput", "Error", "Scheduler", "scheduler_step", "sde_constants", "sde_step", "philox_normals",
           "linspace_f32", "verify_trajectory", "drift", "weights_identity"]

_ARGS = ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "timestep", "timestep_indices",
         "token_tags", "position_ids", "video_indices", "audio_indices", "text_indices")
_ACTIVATIONS = ("hidden_states", "audio_hidden_states", "encoder_hidden_states")


def _error(where, what):
    e = Error(f"{where}: {what}")
    e.where, e.message = where, what
    return e


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _exportable(x):
    """NumPy before 2.0 refuses to export a read-only array (np.frombuffer's) through DLPack: such an array is copied
    once here (host inputs are copied into the request anyway)."""
    return x.copy() if type(x).__module__ == "numpy" and not x.flags.writeable else x


_PROFILE = bool(os.environ.get("H3C_PROFILE") or os.environ.get("H3C_GPU_PROFILE"))


def _print_profile(n, total_ms, phases):
    """H3C_PROFILE: one line per forward that accounts for all of it. `python` is what the package's Python code
    took (argument checks, dtype conversions and output tensors on the device); the rest are the C++ phases:
    read_request (the request tensors into the engine's host buffers: device-to-host copies for CUDA tensors), bind
    (the device tensors' DLPack import), the engine's canonicalize, ledger_header, executor (the GPU forward, its
    launches and its synchronization), request_sha_wait (joining the hash that ran beside the executor),
    outputs_ledger, and the strict rule's verdict."""
    cxx = sum(phases.get(k, 0.0) for k in ("read_request", "bind_device", "engine", "verdict"))
    eng = phases.get("engine", 0.0) - sum(v for k, v in phases.items() if k.startswith("engine."))
    parts = [("python", total_ms - cxx), ("read_request", phases.get("read_request", 0.0)),
             ("bind", phases.get("bind_device", 0.0))]
    parts += [(k[len("engine."):], phases[k]) for k in ("engine.canonicalize", "engine.ledger_header",
                                                         "engine.executor", "engine.request_sha_wait",
                                                         "engine.outputs_ledger") if k in phases]
    parts += [("engine_other", eng), ("verdict", phases.get("verdict", 0.0))]
    sys.stderr.write(f"h3c python: forward {n}: {total_ms:.2f} ms = " +
                     " + ".join(f"{k} {v:.2f}" for k, v in parts) + "\n")


def _numpy(array):
    import numpy
    return numpy.from_dlpack(array)


class TransformerOutput:
    """diffusers' MiniMaxH3TransformerOutput: `.sample`, `.audio_sample`, indexable and iterable in that order."""

    def __init__(self, sample, audio_sample):
        self.sample, self.audio_sample = sample, audio_sample

    def to_tuple(self):
        return (self.sample, self.audio_sample)

    def __getitem__(self, k):
        return getattr(self, k) if isinstance(k, str) else self.to_tuple()[k]

    def __iter__(self):
        return iter(self.to_tuple())

    def __len__(self):
        return 2


class Transformer:
    """The resident h3c engine behind diffusers' transformer interface.

    plan: a plan folder (`h3c compile -o`) or its plan.json; checkpoint: a diffusers or native checkpoint folder, or
    synthetic: the seed of `h3c checkpoint synth` weights (exactly one); device: "cuda" or "cpu"; mode: "strict"
    (every node must run `row` and every weight and output value be finite, else h3c.Error), "audit" or "off";
    threads: CPU worker threads (0: all; never changes a bit); binds: `--bind GLOB=native|reference` rules; config: a
    config name or file that must match the plan's (as `h3c run --config`); hash_nodes: every op output's content
    hash in the ledger (`h3c run --hash-nodes`; compare two ledgers with `h3c ledger diff`)."""

    def __init__(self, plan, checkpoint=None, synthetic=None, device="cuda", mode="strict", threads=0, binds=(),
                 config=None, hash_nodes=False):
        if device not in ("cuda", "cpu"):
            raise _error("device", f"expected \"cuda\" or \"cpu\", got {device!r}")
        self._engine = _h3c.Engine(str(plan), None if checkpoint is None else str(checkpoint), synthetic,
                                   "gpu" if device == "cuda" else "cpu", mode, int(threads), list(binds),
                                   None if config is None else str(config), bool(hash_nodes))
        self.device = device
        self.config = json.loads(self._engine.config_json)
        self._channels = self._engine.output_channels
        self._want = None  # the plan's activation dtypes as torch dtypes (at the first CUDA forward)
        self._params = {}  # the trainable parameters (parameters()), by diffusers name
        # Training steps whose backward started from its forward's kept values (the GPU; the CPU reference and a
        # backward after another forward or backward on this transformer run the forward again: the same bits).
        self.backwards_from_kept_forward = 0

    @property
    def ledger(self):
        """The operator ledger of the last call (a dict; None before the first), sealed as `h3c run` seals it."""
        text = self._engine.ledger_json
        return json.loads(text) if text else None

    @property
    def ledger_json(self):
        """The last ledger exactly as `h3c run --ledger FILE` writes it."""
        return self._engine.ledger_json

    @property
    def weights(self):
        """The identity of the weights the next forward runs with, as its ledger records it under "weights":
        {"identity": "h3c-weights-v1", "hash": "h3c-sum128-v1", "sha256", "tensors": {name: hash}, "updates": N,
        "updated": [names]} (the first read hashes every tensor where it lives: on the GPU, on the device)."""
        return json.loads(self._engine.weights_record_json)

    def update_weights(self, tensors, qkv_layout="interleaved"):
        """Replaces weights in place, without a reload: `tensors` is a state dict or an iterable of (name, tensor),
        any subset, by diffusers name (`transformer_blocks.3.attn.to_q.weight`) or native name
        (`blocks.3.attn.qkv_proj.weight`, its q/k/v rows in `qkv_layout`: "interleaved" as the raw release, or
        "concat"); torch tensors (CPU or CUDA) or NumPy arrays, bfloat16 or float32. float32 values are rounded to
        the pinned dtype to nearest even (torch's `.to(torch.bfloat16)`; CUDA tensors are cast by torch on their
        device, host ones by h3c). Names, shapes and NaN / Inf (after the cast) are checked before anything changes:
        a refused update raises h3c.Error naming the tensor and leaves the weights as they were. The next forward is
        byte-equal to one of a Transformer loaded cold from a folder holding the same weights, and its ledger's
        "weights" record has their new identity. CUDA tensors are read on the current stream; the call returns
        when the update is done. `tensors` may also be the path of a .safetensors file or folder (what
        `h3c run --update` reads; a folder's config.json must match and gives the native q/k/v layout)."""
        if isinstance(tensors, (str, os.PathLike)):
            self._engine.update_from_files(os.fspath(tensors))
            return
        items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
        prepared, stream = [], 0
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
                raise _error("update", "expected a state dict or (name, tensor) pairs")
            name, x = item
            if not hasattr(x, "__dlpack__"):
                raise _error("update:" + name, f"expected a torch tensor or a NumPy array, got {type(x).__name__}")
            if _is_torch(x):
                x = x.detach()
                if x.is_cuda:
                    x, stream = self._device_update_tensor(name, x)
            prepared.append((name, _exportable(x)))
        self._engine.update_weights(prepared, qkv_layout, stream)

    def load_lora(self, path, scale=1.0):
        """Loads a LoRA adapter (diffusers' `load_lora_weights` file layouts and alpha rules: diffusers, PEFT, kohya,
        musubi-tuner, DiffSynth-Studio .safetensors). `path` is the file (or a folder holding one), or the adapter as
        a state dict / (name, tensor) pairs in one of those layouts (torch tensors or NumPy arrays, CPU or CUDA, as
        float32; read with the same rules through a temporary file, named "<state dict>" in the weights record). Merged: W + scale *
        alpha / r * B A in float32 in a fixed order and rounded once (docs/contract.md section 12), on the device for
        device="cuda". On a plan compiled with --lora-rank the modules its slots serve go in unmerged instead (section
        13: W untouched, for adapters that change every step: unload_lora() then load_lora() again). Adapters stack
        in load order; the weights record (`weights["lora"]`) lists them. The scale is fixed here: a forward's
        attention_kwargs={"scale": s} other than 1.0 is refused."""
        if isinstance(path, (str, os.PathLike)):
            self._engine.load_lora(os.fspath(path), float(scale))
            return
        import numpy as np
        items = list(path.items()) if hasattr(path, "items") else list(path)
        tensors = []
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
                raise _error("lora", "expected a path, a state dict or (name, tensor) pairs")
            name, x = item
            if _is_torch(x):
                import torch
                x = x.detach().to("cpu", torch.float32).numpy()
            x = np.ascontiguousarray(x, dtype=np.float32)
            tensors.append((name, list(x.shape), x.tobytes()))
        self._engine.load_lora_tensors(tensors, float(scale))

    def unload_lora(self):
        """Every weight the loaded adapters changed back to its value before the first, byte for byte."""
        self._engine.unload_loras()

    def _device_update_tensor(self, name, x):
        """A CUDA tensor of an update in the pinned dtype (torch's cast: round to nearest even) and contiguous,
        scanned for NaN / Inf on the device; returns it and the current stream."""
        import torch
        if self.device != "cuda":
            raise _error("update:" + name, "is a CUDA tensor; this transformer runs on the CPU")
        if x.dtype not in (torch.float32, torch.bfloat16):
            raise _error("update:" + name, f"is {x.dtype}; an update takes bfloat16 or float32 tensors")
        want = self._engine.update_dtype(name)
        if want:  # an unknown name is refused by the engine, naming it, before anything changes
            cast = x.to({"F32": torch.float32, "BF16": torch.bfloat16}[want]).contiguous()
            bad = ~torch.isfinite(cast)
            if bool(bad.any()):
                flat = cast.reshape(-1)
                nan = int(torch.isnan(flat).sum())
                first = int(bad.reshape(-1).nonzero()[0])
                value = float(flat[first])
                cast_note = f" after the cast to {want}" if cast.dtype != x.dtype else ""
                raise _error("update:" + name, f"holds non-finite values{cast_note}: {nan} NaN, "
                             f"{int(bad.sum()) - nan} Inf (first: element {first}, "
                             f"{'NaN' if value != value else ('+Inf' if value > 0 else '-Inf')}); nothing was updated")
            x = cast
        with torch.cuda.device(x.device):
            return x, torch.cuda.current_stream(x.device).cuda_stream

    def parameters(self, pattern="*", device="cpu"):
        """Float32 master copies of the weights the plan trains whose names match `pattern` (fnmatch over plan names:
        diffusers names and the adapter slots'; "lora" selects the adapter slots, as `h3c compile --trainable lora`;
        a list of patterns takes the union), as {name: leaf torch tensor with requires_grad}, registered as this
        transformer's trainable parameters (a second call replaces the set). A forward under grad mode then fills
        their `.grad` (see the module's "Training"); the engine itself keeps running its own bfloat16 weights until
        push_parameters(). A pattern that selects only tensors the plan freezes (its backward computes no gradient of
        them: `h3c compile --trainable`) raises h3c.Error naming them. `device`: where the masters live, "cpu" or
        "cuda" (device="cuda" transformers only): there the backward writes their gradients from its own device
        memory, no gradient passes through the host, and a torch optimizer steps them on the GPU."""
        import fnmatch
        import torch
        if not self._engine.has_backward:
            raise _error("parameters", "the plan has no backward function: compile it with `h3c compile --backward`")
        if device not in ("cpu", "cuda"):
            raise _error("parameters", f"device must be 'cpu' or 'cuda', got {device!r}")
        if device == "cuda" and self.device != "cuda":
            raise _error("parameters", "CUDA masters need a device='cuda' transformer (this one runs on the CPU)")
        pats = [pattern] if isinstance(pattern, str) else list(pattern)
        shapes, dtypes = self._engine.weight_shapes, self._engine.weight_dtypes
        slots, trained = set(self._engine.adapter_slots), set(self._engine.trainable_weights)

        def selects(p, n):
            return n in slots if p == "lora" else fnmatch.fnmatchcase(n, p)
        if not any(selects(p, n) for p in pats for n in shapes):
            raise _error("parameters", f"no weight matches {pats}")
        names = []
        for p in pats:
            hit = [n for n in sorted(shapes) if selects(p, n)]
            if hit and not any(n in trained for n in hit):
                raise _error("parameters", f"{p!r} selects only tensors this plan freezes (e.g. {hit[0]!r}; it "
                             f"trains {self._engine.trainable_patterns}: compile with `h3c compile --backward "
                             f"--trainable ...`)")
            names += [n for n in hit if n in trained and n not in names]
        names.sort()
        params = {}
        for n in names:
            raw = bytearray(self._engine.read_weight(n))
            t = torch.frombuffer(raw, dtype={"BF16": torch.bfloat16, "F32": torch.float32}[dtypes[n]])
            params[n] = t.reshape(shapes[n]).to(device=device, dtype=torch.float32).clone().requires_grad_(True)
        self._params = params
        return dict(params)

    def read_weight_bytes(self, name):
        """The bytes of weight `name` as the engine holds it now (its pinned dtype, row-major)."""
        return self._engine.read_weight(name)

    def push_parameters(self):
        """Writes the registered parameters (parameters()) into the engine: update_weights() of their current values,
        rounded to the pinned dtype to nearest even; the next forward runs with them."""
        if not self._params:
            raise _error("push_parameters", "no parameters registered: call parameters() first")
        self.update_weights([(n, p.detach()) for n, p in self._params.items()])

    def _wants_grad(self, given):
        """Whether this forward records an autograd node: a plan with a backward function, torch grad mode on, and a
        registered parameter or an activation that requires grad. (On a plan without one the outputs are plain
        tensors, as before: torch then says no gradient flows, at loss.backward().)"""
        if not self._engine.has_backward:
            return False
        if not any(_is_torch(x) for x in given.values()) and not self._params:
            return False
        import torch
        if not torch.is_grad_enabled():
            return False
        acts = [given[n] for n in _ACTIVATIONS if _is_torch(given[n])]
        return any(x.requires_grad for x in acts) or any(p.requires_grad for p in self._params.values())

    @property
    def forwards(self):
        return self._engine.forwards

    @property
    def plan_sha256(self):
        return self._engine.plan_sha256

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, hidden_states, audio_hidden_states, encoder_hidden_states, timestep, timestep_indices,
                token_tags, position_ids, video_indices, audio_indices, text_indices, attention_kwargs=None,
                return_dict=True):
        t0 = time.perf_counter() if _PROFILE else 0.0
        out = self._forward(hidden_states, audio_hidden_states, encoder_hidden_states, timestep, timestep_indices,
                            token_tags, position_ids, video_indices, audio_indices, text_indices, attention_kwargs)
        if _PROFILE:
            _print_profile(self._engine.forwards, (time.perf_counter() - t0) * 1e3, self._engine.last_profile)
        return TransformerOutput(*out) if return_dict else out

    def _forward(self, hidden_states, audio_hidden_states, encoder_hidden_states, timestep, timestep_indices,
                 token_tags, position_ids, video_indices, audio_indices, text_indices, attention_kwargs):
        if attention_kwargs and float(attention_kwargs.get("scale", 1.0)) != 1.0:
            raise _error("attention_kwargs", "h3c merges LoRA adapters with the scale given to load_lora(path, "
                         "scale); a per-call LoRA scale other than 1.0 cannot apply")
        given = dict(zip(_ARGS, (hidden_states, audio_hidden_states, encoder_hidden_states, timestep,
                                 timestep_indices, token_tags, position_ids, video_indices, audio_indices,
                                 text_indices)))
        for name, x in given.items():
            if not hasattr(x, "__dlpack__"):
                raise _error(name, f"expected a torch tensor or a NumPy array, got {type(x).__name__}")
        given = {n: _exportable(x) for n, x in given.items()}
        if self._wants_grad(given):
            return self._forward_autograd(given)
        torch_in = any(_is_torch(x) for x in given.values())
        if torch_in:
            given = {n: x.detach() for n, x in given.items()}
        on_cuda = torch_in and any(x.is_cuda for x in given.values())
        if on_cuda and self.device != "cuda":
            raise _error("device", "this transformer runs on the CPU; its inputs are CUDA tensors")
        if on_cuda:
            out = self._forward_cuda(given)
        else:
            if torch_in:
                import torch
                sample, audio = (torch.from_dlpack(a) for a in self._engine.forward(given, {}, None, None, 0))
            else:
                sample, audio = (_numpy(a) for a in self._engine.forward(given, {}, None, None, 0))
            out = (sample, audio)
        return out

    def _forward_autograd(self, given):
        """The forward as one autograd node (module docstring, "Training")."""
        import torch
        for n in _ACTIVATIONS:
            x = given[n]
            if not _is_torch(x):
                given[n] = x = torch.from_numpy(x)
            if x.is_cuda and self.device == "cpu":
                raise _error(n, "is a CUDA tensor; this transformer runs on the CPU")
        # The engine reads the request from host copies (as `h3c run` reads its file); the outputs and the
        # activations' gradients go back to the device the activations came from.
        host = {n: (x.detach().cpu() if _is_torch(x) else x) for n, x in given.items()}
        names = tuple(self._params)
        params = tuple(self._params[n] for n in names)
        sample, audio = _H3cFunction.get().apply(self, host, names, *(given[n] for n in _ACTIVATIONS), *params)
        return sample, audio

    def _forward_cuda(self, given):
        import torch
        dev = given["hidden_states"].device
        for name, x in given.items():
            if x.is_cuda and x.device != dev:
                raise _error(name, f"is on {x.device}, hidden_states on {dev}")
        # The request as given (CUDA tensors contiguous: no copy when they are) is read back to the host by the
        # engine itself, one copy per tensor on the current stream, into buffers it keeps across forwards: every
        # check and the ledger hash read those bytes, as `h3c run` reads its file.
        host = {n: x.contiguous() if x.is_cuda else x for n, x in given.items()}
        if self._want is None:
            self._want = {n: getattr(torch, {"F32": "float32", "BF16": "bfloat16"}[d])
                          for n, d in self._engine.input_dtypes.items()}
        want = self._want
        device = {}
        for n in _ACTIVATIONS:
            x = given[n]
            if x.is_cuda and x.is_floating_point():
                device[n] = x.to(want[n]).contiguous()  # no copy when dtype and layout already fit
        hs, ahs = given["hidden_states"].shape, given["audio_hidden_states"].shape
        c, ca = self._channels
        if len(hs) == 3 and len(ahs) == 3:
            sample = torch.empty((hs[0], hs[1], c), dtype=torch.float32, device=dev)
            audio = torch.empty((hs[0], ahs[1], ca), dtype=torch.float32, device=dev)
        else:  # let the engine name the bad shape
            sample = audio = torch.empty((0,), dtype=torch.float32, device=dev)
        with torch.cuda.device(dev):
            stream = torch.cuda.current_stream(dev).cuda_stream
            self._engine.forward(host, device, sample, audio, stream)
        return sample, audio


class _H3cFunction:
    """The torch.autograd.Function of a training forward, made at first use (torch is imported only then)."""
    _fn = None

    @classmethod
    def get(cls):
        if cls._fn is None:
            import torch

            class H3cForward(torch.autograd.Function):
                @staticmethod
                def forward(ctx, transformer, host, names, hidden_states, audio_hidden_states, encoder_hidden_states,
                            *params):
                    ctx.transformer, ctx.host, ctx.names = transformer, host, names
                    acts = (hidden_states, audio_hidden_states, encoder_hidden_states)
                    ctx.places = tuple((x.dtype, x.device) for x in acts)
                    ctx.param_places = tuple((q.shape, q.device) for q in params)
                    # The backward's own forward, its values kept on the GPU for this node's backward (the ticket):
                    # a step runs the forward once unless another forward or backward runs on the engine before it.
                    sample, audio, ctx.ticket = transformer._engine.forward_kept(host)
                    dev = hidden_states.device
                    return torch.from_dlpack(sample).to(dev), torch.from_dlpack(audio).to(dev)

                @staticmethod
                def backward(ctx, grad_sample, grad_audio):
                    t = ctx.transformer
                    hs = ctx.host["hidden_states"]
                    if grad_sample is None:  # the loss did not read that output
                        c, _ = t._channels
                        grad_sample = torch.zeros((hs.shape[0], hs.shape[1], c), dtype=torch.float32)
                    if grad_audio is None:
                        _, ca = t._channels
                        ahs = ctx.host["audio_hidden_states"]
                        grad_audio = torch.zeros((hs.shape[0], ahs.shape[1], ca), dtype=torch.float32)
                    # CUDA parameters get their gradients written by the engine's gradient kernels straight into
                    # these tensors (after the current stream's queued work, done before backward returns: no copy,
                    # and no second copy in the engine's memory); host ones as host tensors.
                    on_device = {n: torch.empty(shape, dtype=torch.float32, device=dv)
                                 for n, (shape, dv) in zip(ctx.names, ctx.param_places) if dv.type == "cuda"}
                    stream = 0
                    if on_device:
                        dev = next(iter(on_device.values())).device
                        stream = torch.cuda.current_stream(dev).cuda_stream
                    need = ctx.needs_input_grad[3:6]  # the three activations' (forward's arguments 3-5)
                    _, inputs, weights, kept = t._engine.backward(
                        ctx.host, grad_sample.detach().float().cpu().contiguous(),
                        grad_audio.detach().float().cpu().contiguous(), ctx.ticket,
                        {n: g.data_ptr() for n, g in on_device.items()}, stream, input_grads=any(need), outputs=False)
                    t.backwards_from_kept_forward += int(kept)
                    # An activation that does not require grad gets None (no copy to its device: at S = 8,349 the
                    # three F32 gradients' uploads were ~10 ms of a LoRA step the GPU waited for).
                    acts = tuple(torch.from_dlpack(inputs[n]).to(device=dv, dtype=d) if want else None
                                 for n, (d, dv), want in zip(_ACTIVATIONS, ctx.places, need))
                    return (None, None, None, *acts,
                            *(on_device[n] if n in on_device else torch.from_dlpack(weights[n]) for n in ctx.names))

            cls._fn = H3cForward
        return cls._fn


def weights_identity(tensors, config="full"):
    """The identity a ledger records for these weights (header["weights"]["sha256"], docs/contract.md section 11),
    computed on the host from a complete state dict (or (name, tensor) pairs) by diffusers name: every tensor of the
    config, bfloat16 or float32 (rounded to nearest even where the model pins bfloat16). A trainer compares it with
    the ledgers of the rollouts it trains on."""
    items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
    pairs = []
    for name, x in items:
        if _is_torch(x):
            x = x.detach().cpu()
        pairs.append((name, _exportable(x)))
    return _h3c.weights_identity(pairs, str(config))


def sde_constants(scheduler, i, noise_level):
    """The Flow-GRPO SDE constants of step i (trajectory/sampler.h): std, scale, coef, log_scale."""
    return _h3c.sde_constants(scheduler, i, noise_level)


def sde_step(scheduler, i, noise_level, velocity, sample, noise):
    """One SDE step over float32 host arrays: (next, mean, sum_sq, logprob), bit for bit `h3c generate`'s."""
    nxt, mean, sum_sq, logprob = _h3c.sde_step(scheduler, i, noise_level, _exportable(velocity),
                                               _exportable(sample), _exportable(noise))
    return _numpy(nxt), _numpy(mean), sum_sq, logprob


def scheduler_step(scheduler, i, velocity, sample):
    """The ODE (Euler) step of MiniMaxH3Scheduler over float32 host arrays; returns the next sample."""
    return _numpy(scheduler.step(i, _exportable(velocity), _exportable(sample)))


def philox_normals(seed, modality, draw, count):
    """`count` standard normals of the stream (seed, modality 0 video / 1 audio, draw 0 initial / 1 + i SDE)."""
    return _numpy(_h3c.philox_normals(seed, modality, draw, count))


def verify_trajectory(path):
    """`h3c trajectory verify`: {"valid", "complete", "sealed_steps", "num_steps", "problem", "notes"}."""
    return json.loads(_h3c.verify_trajectory(str(path)))


def drift(a, b, text=False):
    """`h3c trajectory drift A B --json` as a dict (and the text report too with text=True)."""
    j, t = _h3c.drift(str(a), str(b))
    return (json.loads(j), t) if text else json.loads(j)
