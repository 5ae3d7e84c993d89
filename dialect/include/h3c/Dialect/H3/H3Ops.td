// The h3 ops: one per fingerprint node kind (docs/contract.md section 3), the fused ops of h3-fuse, and the layout
// ops of h3-shard-tp / h3-shard-seq. Operands are in the contract's operand order; the plan's "in" lists them the
// same way.
#ifndef H3C_DIALECT_H3_OPS_TD
#define H3C_DIALECT_H3_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributes.td"
include "h3c/Dialect/H3/H3Dialect.td"
include "h3c/Dialect/H3/H3Types.td"
include "h3c/Dialect/H3/H3Attrs.td"
include "h3c/Dialect/H3/H3Interfaces.td"

// Every op: `nodes` = the fingerprint node ids it implements (never empty, except for the layout ops, which implement
// none), `values` = the plan value name of each result.
defvar H3_Common = (ins StrArrayAttr:$nodes, StrArrayAttr:$values);

class H3_Op<string mnemonic, list<Trait> traits = []> : Op<H3_Dialect, mnemonic, traits> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

// An op that reduces under an order of kind `orderKind` (docs/contract.md section 4): it implements
// OrderedReduction; getReducedExtents() is written per op in H3Ops.cpp.
class H3_ReducingOp<string mnemonic, I32EnumAttrCase orderKind, list<Trait> traits = []>
    : H3_Op<mnemonic, !listconcat([H3_OrderedReductionOpInterface], traits)> {
  let extraClassDeclaration = [{
    static ::h3c::h3ir::OrderKind getRequiredOrderKind() { return ::h3c::h3ir::OrderKind::}] # orderKind.symbol # [{; }
    ::llvm::SmallVector<int64_t> getReducedExtents();
  }];
}

// ---- host-computed tables ----
def H3_RopeTableOp : H3_Op<"rope_table"> {
  let summary = "cos/sin tables of the 3-axis rotary embedding (host, double)";
  let description = [{
    Operands: position_ids [S,3] in packed order and the text/video/audio indices; the tables are produced in
    canonical row order (the indices give the permutation).
  }];
  let arguments = !con((ins H3_ActType:$positions, H3_ActType:$text_indices, H3_ActType:$video_indices,
                            H3_ActType:$audio_indices, I64Attr:$rotary_dim, F64Attr:$theta), H3_Common);
  let results = (outs H3_ActType:$cos, H3_ActType:$sin);
}

def H3_TimestepSinusoidOp : H3_Op<"timestep_sinusoid"> {
  let summary = "Sinusoidal timestep embedding (host): cat(cos, sin), flip_sin_to_cos, shift 0";
  let description = [{
    `time_proj`. It stays an op of its own after h3-fuse (the host computes it, like the rope tables);
    `h3.time_embed` reads its result.
  }];
  let arguments = !con((ins H3_ActType:$t, I64Attr:$freq_dim), H3_Common);
  let results = (outs H3_ActType:$y);
}

// ---- GEMMs ----
def H3_LinearOp : H3_ReducingOp<"linear", H3_OrderKChunks> {
  let summary = "y = out(x W^T + b) with an optional fused epilogue";
  let description = [{
    `epilogue` (`#h3.epilogue<...>`): none; residual (operands: residual stream x); gate_residual (operands:
    residual stream x, the AdaLN table, row metadata; gate = chunk `chunk` of `num_chunks` of the table row);
    swiglu (the result has N/2 columns). With `shard = #h3.shard<column, ...>` N and the result are the rank's
    columns (the epilogue operands are the rank's columns too).
    `lora_k` (h3-lora): an unmerged LoRA path; the last operand is then the h3.lora_down result t [rows, lora_k]
    and the last `weight` the up slot, and the chain continues over t's chunks (docs/contract.md section 13).
    `swiglu_x` (h3-fuse training=true, epilogue swiglu only): the second result, the linear's own output [v | g]
    (bf16 [rows, N]) that the backward reads as the swiglu's x, stored beside y: the bytes the unfused linear stores.
  }];
  let arguments = !con((ins H3_ActType:$x, Variadic<H3_ActType>:$epilogue_operands, I64Attr:$K, I64Attr:$N,
                            StrArrayAttr:$weight, StrArrayAttr:$bias,
                            DefaultValuedAttr<H3_EpilogueAttr, "::h3c::h3ir::Epilogue::none">:$epilogue,
                            OptionalAttr<I64Attr>:$chunk,
                            OptionalAttr<I64Attr>:$num_chunks, OptionalAttr<H3_RowIndexAttr>:$row_index,
                            OptionalAttr<H3_OrderAttr>:$order, OptionalAttr<H3_ShardAttr>:$shard,
                            OptionalAttr<I64Attr>:$lora_k), H3_Common);
  let results = (outs H3_ActType:$y, Optional<H3_ActType>:$swiglu_x);
}

def H3_AdalnTableOp : H3_ReducingOp<"adaln_table", H3_OrderKChunks> {
  let summary = "AdaLN modulation table: linear(bf(silu(temb))), viewed as [T * rows_per_timestep, cols]";
  let arguments = !con((ins H3_ActType:$temb, I64Attr:$K, I64Attr:$N, I64Attr:$rows_per_timestep,
                            I64Attr:$num_chunks, StrArrayAttr:$weight, StrArrayAttr:$bias,
                            OptionalAttr<H3_OrderAttr>:$order, OptionalAttr<H3_ShardAttr>:$shard), H3_Common);
  let results = (outs H3_ActType:$table);
}

def H3_QkvLinearOp : H3_ReducingOp<"qkv_linear", H3_OrderKChunks> {
  let summary = "Fused to_q/to_k/to_v: one GEMM with weight rows [Wq; Wk; Wv], three results";
  let description = [{
    `epilogue = #h3.epilogue<qk_norm_rope>` (h3-fuse on sm_90a with wgmma): the q and k results are also normed per
    head and, with the cos/sin `rope_tables`, rotated, exactly as h3.qk_norm_rope on the GEMM's bf16 q and k
    (docs/contract.md section 3); `weight` then lists [Wq, Wk, Wv, norm_q.weight, norm_k.weight], and `eps` and
    `rotary_dim` (0 without rope) are the norm's and the rope's. The order is the GEMM's k_chunks; the norm's sums of
    squares follow lane_tree (32 lanes), the only one there is.
    `lora_k` (h3-lora): as for h3.linear, the last operand (after the rope tables) is the LoRA input t and the
    last `weight` the up slot [3N, lora_k] (block diagonal: q, k and v each read their own third of t).
  }];
  let arguments = !con((ins H3_ActType:$x, Variadic<H3_ActType>:$rope_tables, I64Attr:$K, I64Attr:$heads,
                            I64Attr:$head_dim, StrArrayAttr:$weight, StrArrayAttr:$bias,
                            DefaultValuedAttr<H3_EpilogueAttr, "::h3c::h3ir::Epilogue::none">:$epilogue,
                            OptionalAttr<F64Attr>:$eps, OptionalAttr<I64Attr>:$rotary_dim,
                            OptionalAttr<H3_OrderAttr>:$order, OptionalAttr<H3_ShardAttr>:$shard,
                            OptionalAttr<I64Attr>:$lora_k), H3_Common);
  let results = (outs H3_ActType:$q_out, H3_ActType:$k_out, H3_ActType:$v_out);
}

def H3_LoraDownOp : H3_ReducingOp<"lora_down", H3_OrderKChunks> {
  let summary = "Unmerged LoRA down projection t = bf(x A^T) over an adapter slot (h3-lora)";
  let description = [{
    `weight` is the down slot [N, K] (an adapter slot of the plan, no tensor of the model); N = G x rank, a multiple
    of 64. The result is the last operand of the h3.linear / h3.qkv_linear with `lora_k = N` that reads the same x.
    An adapter is no part of the fingerprint: `nodes` is empty (docs/contract.md section 13).
  }];
  let arguments = !con((ins H3_ActType:$x, I64Attr:$K, I64Attr:$N, StrArrayAttr:$weight,
                            OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$t);
}

def H3_TimeEmbedOp : H3_ReducingOp<"time_embed", H3_OrderKChunks> {
  let summary = "Fused time_embedder (linear_1, silu, linear_2) on the host-computed sinusoid, F32";
  let description = [{
    The operand is the `h3.timestep_sinusoid` result (`time_proj`, [T, freq_dim] F32), which stays a host op of
    its own; this op covers linear_1 (K = freq_dim), act and linear_2 (K = hidden), each in the sequential F32
    order of docs/contract.md section 6.
  }];
  let arguments = !con((ins H3_ActType:$sinusoid, I64Attr:$freq_dim, I64Attr:$hidden, I64Attr:$out_dim,
                            StrArrayAttr:$weight, StrArrayAttr:$bias, OptionalAttr<H3_OrderAttr>:$order),
                       H3_Common);
  let results = (outs H3_ActType:$temb);
}

// ---- norms ----
def H3_RmsNormOp : H3_ReducingOp<"rms_norm", H3_OrderLaneTree> {
  let summary = "y = bf(bf(x * inv) * w), inv = 1/sqrt(ss/H + eps), ss by the lane_tree order";
  let arguments = !con((ins H3_ActType:$x, F64Attr:$eps, StrArrayAttr:$weight,
                            OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$y);
}

def H3_NormModulateOp : H3_ReducingOp<"norm_modulate", H3_OrderLaneTree> {
  let summary = "y = out(fma(rms_norm(x), bf(1 + scale), shift)), shift/scale = table chunks of the row";
  let description = [{
    `row_index` (`#h3.row_index<...>`): adaln (row = ts_index * 3 + tag; operands ts_index, tags) or timestep
    (row = ts_index; operand ts_index).
  }];
  let arguments = !con((ins H3_ActType:$x, H3_ActType:$table, Variadic<H3_ActType>:$row_meta, F64Attr:$eps,
                            StrArrayAttr:$weight, I64Attr:$shift_chunk, I64Attr:$scale_chunk,
                            I64Attr:$num_chunks, H3_RowIndexAttr:$row_index, OptionalAttr<H3_OrderAttr>:$order),
                       H3_Common);
  let results = (outs H3_ActType:$y);
}

def H3_QkNormOp : H3_ReducingOp<"qk_norm", H3_OrderLaneTree> {
  let summary = "rms_norm per head over head_dim channels";
  let arguments = !con((ins H3_ActType:$x, I64Attr:$heads, I64Attr:$head_dim, F64Attr:$eps,
                            StrArrayAttr:$weight, OptionalAttr<H3_OrderAttr>:$order,
                            OptionalAttr<H3_ShardAttr>:$shard), H3_Common);
  let results = (outs H3_ActType:$y);
}

def H3_RopeOp : H3_Op<"rope"> {
  let summary = "Partial rotary embedding, rotate-half, first rotary_dim channels of each head";
  let arguments = !con((ins H3_ActType:$x, H3_ActType:$cos, H3_ActType:$sin, I64Attr:$heads,
                            I64Attr:$head_dim, I64Attr:$rotary_dim, OptionalAttr<H3_ShardAttr>:$shard),
                       H3_Common);
  let results = (outs H3_ActType:$y);
}

def H3_QkNormRopeOp : H3_ReducingOp<"qk_norm_rope", H3_OrderLaneTree> {
  let summary = "Fused norm_q, norm_k (+ rope_q, rope_k when cos/sin are given)";
  let arguments = !con((ins H3_ActType:$q, H3_ActType:$k, Variadic<H3_ActType>:$rope_tables, I64Attr:$heads,
                            I64Attr:$head_dim, I64Attr:$rotary_dim, F64Attr:$eps, StrArrayAttr:$weight,
                            OptionalAttr<H3_OrderAttr>:$order, OptionalAttr<H3_ShardAttr>:$shard), H3_Common);
  let results = (outs H3_ActType:$q_out, H3_ActType:$k_out);
}

// ---- attention and elementwise ----
def H3_AttentionOp : H3_ReducingOp<"attention", H3_OrderFlash> {
  let summary = "softmax(q k^T / sqrt(d)) v per head per batch item over all rows of the domain (non-causal)";
  let description = [{
    `lse` (h3-fuse-grad, for the backward): each row's and head's L = mc + lg2(l) of the flash walk's final running
    max and sum (docs/contract.md section 14), f32 [rows, heads]: h3.attention_grad reads it instead of rerunning the
    walk.
  }];
  let arguments = !con((ins H3_ActType:$q, H3_ActType:$k, H3_ActType:$v, I64Attr:$heads, I64Attr:$head_dim,
                            OptionalAttr<H3_OrderAttr>:$order, OptionalAttr<H3_ShardAttr>:$shard), H3_Common);
  let results = (outs H3_ActType:$o, Optional<H3_ActType>:$lse);
}

def H3_SwigluOp : H3_Op<"swiglu"> {
  let summary = "y = bf(value * bf(silu(gate))), value = x[:, :F], gate = x[:, F:]";
  let arguments = !con((ins H3_ActType:$x, OptionalAttr<H3_ShardAttr>:$shard), H3_Common);
  let results = (outs H3_ActType:$y);
}

def H3_SiluOp : H3_Op<"silu"> {
  let summary = "y = x / (1 + expf(-x)), dtype kept";
  let arguments = !con((ins H3_ActType:$x), H3_Common);
  let results = (outs H3_ActType:$y);
}

def H3_ResidualOp : H3_Op<"residual"> {
  let summary = "z = bf(x + y)";
  let arguments = !con((ins H3_ActType:$x, H3_ActType:$y), H3_Common);
  let results = (outs H3_ActType:$z);
}

def H3_GateResidualOp : H3_Op<"gate_residual"> {
  let summary = "z = bf(fma(gate, y, x)), gate = table chunk of the row";
  let arguments = !con((ins H3_ActType:$x, H3_ActType:$y, H3_ActType:$table, Variadic<H3_ActType>:$row_meta,
                            I64Attr:$chunk, I64Attr:$num_chunks, H3_RowIndexAttr:$row_index), H3_Common);
  let results = (outs H3_ActType:$z);
}

// ---- packing ----
def H3_PackOp : H3_Op<"pack"> {
  let summary = "Packs text/video/audio rows into canonical order (text, video, audio) + per-row metadata";
  let arguments = !con((ins H3_ActType:$text, H3_ActType:$video, H3_ActType:$audio, H3_ActType:$text_indices,
                            H3_ActType:$video_indices, H3_ActType:$audio_indices, H3_ActType:$position_ids,
                            H3_ActType:$token_tags, H3_ActType:$timestep_indices), H3_Common);
  let results = (outs H3_ActType:$x, H3_ActType:$positions, H3_ActType:$tags, H3_ActType:$ts_index);
}

def H3_UnpackOp : H3_Op<"unpack"> {
  let summary = "Selects the canonical video rows and audio rows of the output heads, in input order";
  let arguments = !con((ins H3_ActType:$video, H3_ActType:$audio, Variadic<H3_ActType>:$row_meta), H3_Common);
  let results = (outs H3_ActType:$sample, H3_ActType:$audio_sample);
}

// ---- layout ops (h3-shard-tp, h3-shard-seq; docs/contract.md section 5.2) ----
def H3_AllGatherOp : H3_Op<"all_gather"> {
  let summary = "Every rank of a group receives the parts of all ranks: a copy, no arithmetic";
  let description = [{
    axis rows (`parts` = sp): each rank's rows of S (domain Sr) -> all rows of S in canonical order, same columns.
    axis cols (`parts` = tp): the full value's columns form `segments` equal segments; each rank holds part j of
    every segment; the result is the full width. `nodes` is empty.
  }];
  let arguments = (ins H3_ActType:$part, H3_AxisAttr:$axis, I64Attr:$parts,
                       DefaultValuedAttr<I64Attr, "1">:$segments, StrArrayAttr:$nodes, StrArrayAttr:$values);
  let results = (outs H3_ActType:$full);
}

def H3_SplitOp : H3_Op<"split"> {
  let summary = "Every rank keeps its own part of a value it holds in full: a local copy";
  let description = [{
    The inverse of h3.all_gather with the same attributes: axis rows keeps the rank's range of S (Sr), axis cols
    part j of every segment. `nodes` is empty.
  }];
  let arguments = (ins H3_ActType:$full, H3_AxisAttr:$axis, I64Attr:$parts,
                       DefaultValuedAttr<I64Attr, "1">:$segments, StrArrayAttr:$nodes, StrArrayAttr:$values);
  let results = (outs H3_ActType:$part);
}

include "h3c/Dialect/H3/H3GradOps.td"

#endif
