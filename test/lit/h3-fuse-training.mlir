// RUN: h3c-opt %S/h3-backward.mlir -split-input-file --h3-assign-reduction-order --h3-backward --h3-fuse="training=true" | FileCheck %s
// RUN: h3c-opt %s -split-input-file --h3-fuse="training=true" -verify-diagnostics | FileCheck %s --check-prefix=KEEP
// h3-fuse training=true (docs/contract.md section 5: a --backward plan's forward, after h3-backward): only a block's
// norm_q / norm_k + rope_q / rope_k become one h3.qk_norm_rope, whose outputs keep the rope outputs' names (the
// backward's attention gradient reads them); the backward is left as h3-backward wrote it (rope_grad, rms_norm_grad
// on the fused op's q and k); the refiner's norms without rope stay apart; fc1 takes its swiglu in and keeps its own
// output, which swiglu_grad reads, as the second result `swiglu_x` under the linear's value name; the gate_residuals
// stay apart (gate_residual_grad reads the linear's output for the table's gradient, which trains here).

// CHECK-LABEL: func.func @forward
// CHECK-NOT: h3.qkv_linear
// CHECK: h3.qk_norm_rope {{.*}}nodes = ["transformer_blocks.0.attn.norm_q", "transformer_blocks.0.attn.norm_k", "transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k"]
// CHECK-SAME: values = ["transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k"]
// CHECK-NOT: h3.rope %
// CHECK-NOT: h3.qk_norm %
// CHECK: h3.gate_residual %
// CHECK: %{{.*}}, %{{.*}} = h3.linear {{.*}}epilogue = #h3.epilogue<swiglu>, nodes = ["transformer_blocks.0.ff.net.0.proj", "transformer_blocks.0.ff.swiglu"]
// CHECK-SAME: values = ["transformer_blocks.0.ff.swiglu", "transformer_blocks.0.ff.net.0.proj"]
// CHECK-NOT: h3.swiglu %
// CHECK: h3.gate_residual %
// CHECK-LABEL: func.func @backward
// CHECK: h3.rope_grad
// CHECK: h3.rms_norm_grad
// CHECK-LABEL: func.func @forward
// CHECK: h3.qk_norm %{{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.norm_q"]
// CHECK: h3.qk_norm %{{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.norm_k"]
// CHECK-NOT: qk_norm_rope

// A backward that reads a norm's output (here by name; h3-backward never writes one): the four ops stay apart.
// KEEP-LABEL: func.func @forward
// KEEP: h3.qk_norm
// KEEP: h3.qk_norm
// KEEP: h3.rope
// KEEP: h3.rope
// KEEP-NOT: qk_norm_rope
func.func @forward(%q: !h3.act<B, S, 32, bf16> {h3.name = "q"}, %k: !h3.act<B, S, 32, bf16> {h3.name = "k"}, %cos: !h3.act<S, 12, f32> {h3.name = "cos"}, %sin: !h3.act<S, 12, f32> {h3.name = "sin"}) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) {
  %0 = h3.qk_norm %q {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_q"], order = #h3.order<lane_tree, lanes = 32, acc = f32>, values = ["transformer_blocks.0.attn.norm_q"], weight = ["transformer_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %1 = h3.qk_norm %k {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_k"], order = #h3.order<lane_tree, lanes = 32, acc = f32>, values = ["transformer_blocks.0.attn.norm_k"], weight = ["transformer_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %2 = h3.rope %0, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], rotary_dim = 12 : i64, values = ["transformer_blocks.0.attn.rope_q"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, bf16>
  %3 = h3.rope %1, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], rotary_dim = 12 : i64, values = ["transformer_blocks.0.attn.rope_k"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, bf16>
  return %2, %3 : !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>
}
func.func @backward(%n: !h3.act<B, S, 32, bf16> {h3.name = "transformer_blocks.0.attn.norm_q"}) {
  return
}

// -----

// A module without a backward: the training form refuses it (it fuses only around what a backward reads).
// expected-error @+1 {{h3-fuse training=true: the module has no func @backward with named arguments}}
module {
  func.func @forward(%x: !h3.act<B, S, 32, bf16> {h3.name = "x"}) -> !h3.act<B, S, 32, bf16> {
    return %x : !h3.act<B, S, 32, bf16>
  }
}
