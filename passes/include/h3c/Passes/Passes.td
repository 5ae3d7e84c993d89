// The h3 passes. Each runs on the module (the importer's single func) and is tested by test/lit/<flag>.mlir.
#ifndef H3C_PASSES_TD
#define H3C_PASSES_TD

include "mlir/Pass/PassBase.td"

def H3AssignReductionOrder : Pass<"h3-assign-reduction-order", "mlir::ModuleOp"> {
  let summary = "Give every reducing op its fixed reduction order (docs/contract.md section 4)";
  let description = [{
    linear-like ops get `#h3.order<k_chunks, k_step = 16, units = 1, acc = f32>` (K in one chain); row norms get
    `lane_tree` (32 lanes); attention gets `flash` (kv_block 128). The order depends only on the op kind and pinned
    constants, never on rows, batch, the sp/tp degrees or arch. An existing, different order is an error.
  }];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

def H3VerifyStrict : Pass<"h3-verify-strict", "mlir::ModuleOp"> {
  let summary = "Fail on any reduction without an order or any op no qualified fixed-order kernel implements";
  let description = [{
    Every reducing op (OrderedReduction) carries the order docs/contract.md section 4 pins, nothing else carries
    one, and the kernel emitter has a qualified fixed-order kernel for every op on `arch`. A pure check: the IR
    is left unchanged.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"", "Target architecture (sm_90a, sm_100a)">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

def H3Fuse : Pass<"h3-fuse", "mlir::ModuleOp"> {
  let summary = "Fuse qkv, qk-norm + rope, linear epilogues (gate_residual, residual, swiglu) and the time MLP";
  let description = [{
    to_q/to_k/to_v -> h3.qkv_linear; norm_q/norm_k(/rope_q/rope_k) -> h3.qk_norm_rope; to_out/fc2 +
    gate_residual or residual and fc1 + swiglu -> h3.linear with an epilogue; time_embedder linear_1/act/linear_2
    -> h3.time_embed on the time_proj sinusoid (h3.timestep_sinusoid stays a host op). norm_modulate is already
    one op. With `training` (a `--backward` plan's forward, after h3-backward, which differentiates the unfused
    forward): norm_q/norm_k + rope_q/rope_k -> h3.qk_norm_rope only, where no norm output is an argument of func
    @backward (the rope outputs keep their names, which the backward reads); the other fusions would drop values
    the gradients read. A fused op lists every node id it covers, in node order. One rewrite pattern per fusion, applied by
    the greedy driver; each pattern checks the exact producer/consumer shape it fuses.
    Then, for arch = sm_90a with wgmma and tp = 1 only: a qkv_linear and the qk_norm_rope that normalizes (and
    rotates) its q and k -> one qkv_linear with `epilogue = #h3.epilogue<qk_norm_rope>` (the Hopper GEMM applies
    it in registers; head_dim 128 and a rotary width that is a multiple of 16 only, else the two ops stay apart).
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"\"", "Target architecture: sm_90a enables the Hopper-only fusion">,
    Option<"wgmma", "wgmma", "bool", /*default=*/"true", "sm_90a: the bf16 linears run on the Hopper (wgmma) kernel">,
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel degree the module will be split over">,
    Option<"qkEpilogue", "qk-epilogue", "bool", /*default=*/"true",
           "sm_90a: fuse qk_norm_rope into the qkv GEMM's epilogue (false keeps the two ops apart, for comparisons)">,
    Option<"training", "training", "bool", /*default=*/"false",
           "After h3-backward: only the fusions whose inner values func @backward does not read (qk_norm + rope -> "
           "qk_norm_rope: rope's gradient reads cos and sin only, the norm's its input), never the qkv epilogue">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

def H3Lora : Pass<"h3-lora", "mlir::ModuleOp"> {
  let summary = "Unmerged LoRA: a fixed-order low-rank path beside every targeted linear (docs/contract.md section 13)";
  let description = [{
    For every h3.linear / h3.qkv_linear one of whose nodes is a target module (a node id equal to a name of
    `targets` or ending in "." + it, as PEFT matches target_modules): an h3.lora_down of its x over the down slot
    `<module>.lora_down` [G x rank, K] (G = 3 for qkv, else 1), whose result becomes the op's last operand, the up
    slot `<module>.lora_up` [its weight rows, G x rank] its last weight and `lora_k = G x rank` (the qkv module is
    `<attn>.to_qkv`). The slots are recorded in the module's `h3.adapter_slots` ({name: [rows, cols]}) for the plan
    emitter. Runs after h3-fuse (the fused ops carry the path) and before h3-shard-tp, which refuses it for tp > 1.
    rank 0 changes nothing. Errors: a rank that is not a multiple of 64, a target op whose x or weights are not
    bf16, a second run.
  }];
  let options = [
    Option<"rank", "rank", "int64_t", /*default=*/"0", "Adapter slot rank per weight matrix (a multiple of 64; 0: none)">,
    ListOption<"targets", "targets", "std::string", "Target module names (default: the attention and feed-forward linears)">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

def H3Backward : Pass<"h3-backward", "mlir::ModuleOp"> {
  let summary = "Derive the backward function of the forward (docs/contract.md section 14)";
  let description = [{
    Adds `func @backward` beside the module's one forward func: its arguments are the gradients of the forward's
    results (f32, `h3.name = "@grad:<value>"`) and then the forward values it reads (saved activations, named as in
    the forward: the plan's two functions share these values); its results are the gradients of the forward's
    floating arguments (`h3.name = "grad:<argument>"`). The forward's ops are visited in reverse: each gets its
    gradient ops (h3.linear_grad_x / _w, h3.rms_norm_grad, ...), a value read by several ops the h3.grad_add of
    their parts in that order, and weight gradients are named on the ops that compute them (`grads`). Runs on the
    unfused, unsharded graph (before h3-fuse, h3-lora and the shard passes): a fused op is an error naming it. The
    host's tables (rope_table, timestep_sinusoid) are conditioning: no gradient goes to them or through them.
    An unmerged LoRA path (h3-lora on the unfused graph) is differentiated as the two GEMMs it is: the up slot's
    and the down slot's gradients by h3.linear_grad_w, the path's input gradient by h3.linear_grad_x, named after
    the base linear's node. `trainable` (plan/include/h3c/plan/trainable.h: globs over tensor names, "lora" for the
    adapter slots; default all) selects the tensors that get gradients: a frozen tensor's gradient is computed by no
    op (a linear_grad_w with none left is not emitted), and gradient ops whose results nothing reads are removed.
    The function records the patterns as `h3.trainable`.
  }];
  let options = [
    ListOption<"trainable", "trainable", "std::string",
               "Tensors that get gradients: globs over tensor names, \"lora\" for the adapter slots (default: all)">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect", "::mlir::func::FuncDialect"];
}

def H3FuseGrad : Pass<"h3-fuse-grad", "mlir::ModuleOp"> {
  let summary = "Fuse gradient sums into their dX / norm gradient, rope_grad into the qk-norm's, LoRA dX into the base dX; round g once; save lse";
  let description = [{
    An h3.grad_add(a, b) one of whose parts is an h3.linear_grad_x result read by nothing else, whose other part is
    defined before that op (so it is ready when the op runs), becomes that op's `residual`: the op's result is the
    sum, named as the grad_add's was. The sum is the same F32 addition (docs/contract.md section 14), in the dX
    kernel's epilogue, so the gradients keep their bits and the backward saves the grad_add's pass over three F32
    tensors and dX's own store. The later part is taken first (b: the consumer visited last), so a chain of parts
    fuses link by link; a sum whose parts are no such dX but one is an h3.norm_modulate_grad's dx read only there,
    the other defined before it, becomes that op's `residual` likewise. A qk_norm's h3.rms_norm_grad whose dy is an
    h3.rope_grad's dx read nowhere else takes the rope_grad in (its tables as `rope_tables`, `rotary_dim`; dy
    rotated back as it is read: the same values). Then an F32 gradient that two or more linear gradients multiply as
    bf(g) (a bf16 weight's dX, a dW without a bias gradient) gets one h3.grad_round before the first of them, which
    they all read: g rounded once, the same bits (folded into the op computing g where that op can store bf16 and
    nothing else reads the F32 g). A bf16 linear's dX whose residual is a LoRA down path's dX (the down slot
    `<module>.lora_down`, N = the rank, at most 64, its g bf16) read nowhere else takes that dX in (`lora_t` = the
    path's g, `lora_k` = its N, the down slot its second weight): the path's residual, then the path's dX, then its
    own dX are added as the two ops added them. Last, each forward h3.attention that an h3.attention_grad differentiates gets its
    `lse` result (the row statistics of its walk), func @backward an argument of that value, and the attention_grad
    reads it instead of rerunning the walk. With `swiglu-dx` a bf16 linear's dX that only an h3.swiglu_grad reads
    takes that op in (`swiglu_x`): off by default, since the Hopper dX kernel runs swiglu_grad's arithmetic in its
    consumers' epilogue slower than the two ops apart (fc2's dX of the 33B LoRA step 4.79-4.98 ms against 2.38 ms,
    H100, bench/NOTES.md 2026-12-07). Runs after h3-backward; nothing else changes.
  }];
  let options = [
    Option<"swigluDx", "swiglu-dx", "bool", /*default=*/"false",
           "take a swiglu_grad into the dX that is its dy (slower on Hopper today)">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect", "::mlir::func::FuncDialect"];
}

def H3ShardTp : Pass<"h3-shard-tp", "mlir::ModuleOp"> {
  let summary = "Split the transformer blocks over tp ranks by columns only; every collective a bf16 all-gather";
  let description = [{
    Every GEMM of a transformer block becomes column-parallel with the full K (`#h3.shard<column, tp = N,
    segments = k>`): the AdaLN table (each chunk split alike), q/k/v (by heads), fc1 (value and gate halves alike),
    to_out and fc2 (by output columns); the q/k norms, rope, attention, swiglu and gate_residual follow their
    operands' columns. Attributes and types become the rank's. `h3.all_gather {axis = cols}` makes a rank's columns
    whole where an op reads the whole value (norm_modulate, to_out / fc2's input, the block's output);
    `h3.split {axis = cols}` keeps a rank's columns of a whole value where an op reads it by columns. No reduction
    is split, so every N gives the tp = 1 bits. The refiner and top-level ops stay replicated. An impossible split
    is an error naming the op.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel degree">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

def H3ShardSeq : Pass<"h3-shard-seq", "mlir::ModuleOp"> {
  let summary = "Split the packed rows over sp ranks (sequence parallel); all-gather k/v and the output heads";
  let description = [{
    The packed stream and its row metadata (pack's outputs, the rope tables) are split by rows where they are made
    (`h3.split {axis = rows}`, domain S -> Sr, a rank's contiguous range of S); every value computed from them is a
    rank's rows. Attention all-gathers its keys and values by rows (`h3.all_gather {axis = rows}`, canonical
    order) so each rank attends its own query rows over every key; unpack reads the all-gathered output heads.
    Every row's bits equal sp = 1's. Runs after h3-shard-tp (the two compose: sp x tp ranks).
  }];
  let options = [
    Option<"sp", "sp", "int64_t", /*default=*/"1", "Sequence-parallel degree">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

def H3PlanBuffers : Pass<"h3-plan-buffers", "mlir::ModuleOp"> {
  let summary = "Liveness-based activation slots; reports the peak bytes for a token count";
  let description = [{
    Walks the func in launch order, frees a value after its last use and gives each value a slot, reusing a
    free slot of the same row domain (slots grow to their largest value). Writes the slot of every value
    (`h3.slots` on ops, `h3.slot` on arguments) and `h3.buffers` on the module: the slot table and, for `tokens`
    rows (S = tokens, Nt = Nv = Na <= S bounded by S, T = 1, B = 1), the live peak and the total slot bytes.
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", /*default=*/"8192", "Packed rows S for the peak report">,
  ];
  let dependentDialects = ["::h3c::h3ir::H3Dialect"];
}

#endif
