// The gradient ops of h3-backward (docs/contract.md section 14): the backward function's ops, one per forward node
// kind it differentiates. Gradients are f32 activations; `nodes` lists the forward nodes an op differentiates,
// `values` names its results (grad:<forward value>...). Weight gradients are no values: the op that computes one
// names it in `grads` (grad:<tensor>, in the order of `weight` then `bias`), as the forward names its weights.
// Where a forward op gathers AdaLN table chunks, its gradient op returns the table's gradient at full width, zero
// outside the chunks it reads, so several consumers' parts add up by h3.grad_add like any other gradient.
#ifndef H3C_DIALECT_H3_GRAD_OPS_TD
#define H3C_DIALECT_H3_GRAD_OPS_TD

def H3_GradAddOp : H3_Op<"grad_add"> {
  let summary = "c = a + b (F32): the gradient of a value several ops read, in the backward's visiting order";
  let arguments = !con((ins H3_ActType:$a, H3_ActType:$b), H3_Common);
  let results = (outs H3_ActType:$c);
}

def H3_GradRoundOp : H3_Op<"grad_round"> {
  let summary = "gb = bf(g): the bf16 rounding of an F32 gradient that several tensor-core gradient ops read";
  let description = [{
    h3-fuse-grad: the linear gradients of a bf16 weight multiply bf(g) (docs/contract.md section 14); where several
    read one g, they read this one rounding (bf16, g's shape) instead of each rounding g itself. The same bits. Where
    g is read by nothing else and computed by swiglu_grad (dx), rms_norm_grad (dx) or gate_residual_grad (dy), that
    op stores bf(g) itself (its result bf16) and no grad_round remains.
  }];
  let arguments = !con((ins H3_ActType:$g), H3_Common);
  let results = (outs H3_ActType:$gb);
}

def H3_LinearGradXOp : H3_ReducingOp<"linear_grad_x", H3_OrderKChunks, [AttrSizedOperandSegments]> {
  let summary = "dX = bf(g) W for a bf16 weight (k_chunks over N), the fma chain over N for an F32 one";
  let description = [{
    With `residual` (h3-fuse-grad: the h3.grad_add of this dX and a part of the same gradient computed before it),
    the result is residual + dX, one F32 addition per element after dX's own value: grad_add's sum, in the kernel's
    epilogue. g is F32, or bf16 when it is an h3.grad_round's result (bf(g) already: a bf16 weight's dX only).
    With `lora_t` and `lora_k` (h3-fuse-grad: the LoRA down path's dX that only this op read, as its residual), the
    second `weight` is the down slot [lora_k, K] and lora_t the bf16 gradient of the path's t [rows, lora_k]: the
    path's dX, lora_t down (its own k_chunks chain over lora_k from 0, residual + it where there is a residual), is
    the part this op's dX is added to. The same operations as the two ops, so the same bits.
    With `swiglu_x` (h3-fuse-grad: the h3.swiglu_grad that alone read this dX as its dy), x = [v | g] is that
    swiglu's input [rows, 2K] and the result is the swiglu_grad's dx [rows, 2K]: each element of dX (with its LoRA
    path, no residual) goes through swiglu_grad's own operations as the kernel stores it, so the same bits, and the
    F32 dX is neither written nor read.
  }];
  let arguments = !con((ins H3_ActType:$g, Optional<H3_ActType>:$residual, Optional<H3_ActType>:$lora_t,
                            Optional<H3_ActType>:$swiglu_x, I64Attr:$K, I64Attr:$N, StrArrayAttr:$weight,
                            OptionalAttr<H3_OrderAttr>:$order, OptionalAttr<I64Attr>:$lora_k), H3_Common);
  let results = (outs H3_ActType:$dx);
}

def H3_LinearGradWOp : H3_ReducingOp<"linear_grad_w", H3_OrderRowUnits> {
  let summary = "dW = bf(g)^T bf(x) and dbias = sum of g, by row_units over the token rows";
  let description = [{
    No result: the gradients are the tensors named in `grads` (grad:<weight>, then grad:<bias> when `bias` is
    given). `x` is the linear's input as the forward read it (a saved activation). g is F32, or bf16 (an
    h3.grad_round's result) when no bias gradient is computed: dbias sums the F32 g.
  }];
  let arguments = !con((ins H3_ActType:$g, H3_ActType:$x, I64Attr:$K, I64Attr:$N, StrArrayAttr:$weight,
                            StrArrayAttr:$bias, StrArrayAttr:$grads, OptionalAttr<H3_OrderAttr>:$order), H3_Common);
}

def H3_SwigluGradOp : H3_Op<"swiglu_grad"> {
  let summary = "dx = [dy * bf(silu(g)) | (dy * v) * silu'(g)] of swiglu over x = [v | g]";
  let arguments = !con((ins H3_ActType:$dy, H3_ActType:$x), H3_Common);
  let results = (outs H3_ActType:$dx);
}

def H3_RmsNormGradOp : H3_ReducingOp<"rms_norm_grad", H3_OrderRowUnits> {
  let summary = "rms_norm's (group = the row) or qk_norm's (group = head_dim) dx, and dw by row_units";
  let description = [{
    The row's dot of dn and x * inv follows lane_tree (section 4's tree); dw (when `weight` is given, named in
    `grads`) sums over the (row, group) pairs by row_units. With `rope_tables` (cos, sin) and `rotary_dim`
    (h3-fuse-grad: the h3.rope_grad whose dx only this op read, a qk_norm's group = head_dim), dy is the gradient of
    the rope's output, rotated back first by rope_grad's own operations: the same values, no F32 tensor between.
  }];
  let arguments = !con((ins H3_ActType:$dy, H3_ActType:$x, Variadic<H3_ActType>:$rope_tables, I64Attr:$group,
                            F64Attr:$eps, StrArrayAttr:$weight, StrArrayAttr:$grads,
                            OptionalAttr<I64Attr>:$rotary_dim, OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$dx);
}

def H3_NormModulateGradOp : H3_ReducingOp<"norm_modulate_grad", H3_OrderRowUnits, [AttrSizedOperandSegments]> {
  let summary = "norm_modulate's dx, its norm weight's gradient and its table's (shift and scale chunks, zero elsewhere)";
  let description = [{
    With `residual` (h3-fuse-grad: the h3.grad_add of this dx and a part of the same gradient computed before it,
    the residual stream's), dx is residual + dx, one F32 addition per element after dx's own value: grad_add's sum.
    Without `dtable` (h3-backward: nothing reads the table's gradient) the table's sums are not computed.
  }];
  let arguments = !con((ins H3_ActType:$dy, H3_ActType:$x, H3_ActType:$table, Variadic<H3_ActType>:$row_meta,
                            Optional<H3_ActType>:$residual,
                            F64Attr:$eps, StrArrayAttr:$weight, StrArrayAttr:$grads, I64Attr:$shift_chunk,
                            I64Attr:$scale_chunk, I64Attr:$num_chunks, H3_RowIndexAttr:$row_index,
                            OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$dx, Optional<H3_ActType>:$dtable);
}

def H3_GateResidualGradOp : H3_ReducingOp<"gate_residual_grad", H3_OrderRowUnits, [AttrSizedOperandSegments]> {
  let summary = "gate_residual's dy = dz * gate and its table's gradient (the gate chunk by row_units)";
  let description = [{
    The residual stream's gradient is dz itself (no op). Without `dtable` (h3-backward: nothing reads the table's
    gradient, e.g. LoRA training with the AdaLN tables frozen) the op computes dy alone and reads no `y`: the forward
    need not keep the linear's output for it.
  }];
  let arguments = !con((ins H3_ActType:$dz, Optional<H3_ActType>:$y, H3_ActType:$table, Variadic<H3_ActType>:$row_meta,
                            I64Attr:$chunk, I64Attr:$num_chunks, H3_RowIndexAttr:$row_index,
                            OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$dy, Optional<H3_ActType>:$dtable);
}

def H3_RopeGradOp : H3_Op<"rope_grad"> {
  let summary = "rope's dx: the transposed rotation of dy (the cos / sin tables get no gradient)";
  let arguments = !con((ins H3_ActType:$dy, H3_ActType:$cos, H3_ActType:$sin, I64Attr:$heads, I64Attr:$head_dim,
                            I64Attr:$rotary_dim), H3_Common);
  let results = (outs H3_ActType:$dx);
}

def H3_AttentionGradOp : H3_ReducingOp<"attention_grad", H3_OrderRowUnits> {
  let summary = "attention's dq, dk, dv (P recomputed; dk, dv one chain over the query rows, dq a fold over key units)";
  let description = [{
    The order's units are dq's key blocks: dq is the fold from +0, in unit order, of each 128-key unit's chain; dk
    and dv are one chain each over the item's query rows (docs/contract.md section 14).
    With `lse` (the forward attention's row statistics, h3-fuse-grad) the kernel reads L instead of rerunning the
    forward's key walk for it: the same L, so the same bits.
  }];
  let arguments = !con((ins H3_ActType:$q, H3_ActType:$k, H3_ActType:$v, H3_ActType:$o, H3_ActType:$do_,
                            Optional<H3_ActType>:$lse, I64Attr:$heads, I64Attr:$head_dim,
                            OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$dq, H3_ActType:$dk, H3_ActType:$dv);
}

def H3_SiluGradOp : H3_Op<"silu_grad"> {
  let summary = "dx = dy * silu'(x), silu'(x) = s * (1 + x * (1 - s)), s = 1 / (1 + expf(-x))";
  let arguments = !con((ins H3_ActType:$dy, H3_ActType:$x), H3_Common);
  let results = (outs H3_ActType:$dx);
}

def H3_AdalnTableGradOp : H3_ReducingOp<"adaln_table_grad", H3_OrderRowUnits> {
  let summary = "the AdaLN table's dW / dbias (row_units over the T timestep rows) and dtemb";
  let description = [{
    The table's gradient [T * rows, cols] is read as the GEMM's [T, N] output gradient g (a view, no copy); the
    GEMM's input is a = bf(silu(temb)). dW = bf(g)^T a and dbias = the sum of g by row_units over the T rows (one
    item); dtemb = (bf(g) W by k_chunks over N) * silu'(temb). Weight gradients are named in `grads`.
  }];
  let arguments = !con((ins H3_ActType:$dtable, H3_ActType:$temb, I64Attr:$K, I64Attr:$N,
                            I64Attr:$rows_per_timestep, StrArrayAttr:$weight, StrArrayAttr:$bias,
                            StrArrayAttr:$grads, OptionalAttr<H3_OrderAttr>:$order), H3_Common);
  let results = (outs H3_ActType:$dtemb);
}

def H3_PackGradOp : H3_Op<"pack_grad"> {
  let summary = "pack's gradient: the canonical rows of dx back to text, video and audio (a copy)";
  let description = [{
    Canonical order is text, video, audio (docs/contract.md section 1), each modality's rows in its input's order,
    so the three gradients are the row ranges [0, Nt), [Nt, Nt + Nv) and [Nt + Nv, S) of dx.
  }];
  let arguments = !con((ins H3_ActType:$dx), H3_Common);
  let results = (outs H3_ActType:$dtext, H3_ActType:$dvideo, H3_ActType:$daudio);
}

def H3_UnpackGradOp : H3_Op<"unpack_grad"> {
  let summary = "unpack's gradient: the samples' gradients into the canonical video / audio rows, zero elsewhere";
  let arguments = !con((ins H3_ActType:$dsample, H3_ActType:$daudio_sample), H3_Common);
  let results = (outs H3_ActType:$dvideo, H3_ActType:$daudio);
}

#endif
