// RUN: h3c-opt %s --h3-assign-reduction-order -split-input-file -verify-diagnostics

// A row-parallel candidate whose K cannot be cut into whole k_step chunks per unit: U = 1 is the only choice, and
// a hand-written U = 8 conflicts with it.
func.func @wrong_units(%x: !h3.act<B, S, 40, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[transformer_blocks.3.attn.to_out.0] carries order #h3.order<k_chunks, k_step = 16, units = 8, acc = f32> but the contract requires #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>}}
  %y = h3.linear %x {K = 40 : i64, N = 24 : i64, bias = [], weight = ["w"], order = #h3.order<k_chunks, k_step = 16, units = 8, acc = f32>, nodes = ["transformer_blocks.3.attn.to_out.0"], values = ["y"]} : (!h3.act<B, S, 40, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

func.func @wrong_lanes(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[n] carries order #h3.order<lane_tree, lanes = 16, acc = f32> but the contract requires #h3.order<lane_tree, lanes = 32, acc = f32>}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], order = #h3.order<lane_tree, lanes = 16, acc = f32>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

// allreduce_tree completes a row-parallel linear's tree: h3-shard-tp creates it with that order, nothing assigns one.
func.func @allreduce_without_order(%p: !h3.act<B, S, 24, f32, parts = 2>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{'h3.allreduce_tree' op has no order: h3-shard-tp creates it with one}}
  %y = h3.allreduce_tree %p {N = 24 : i64, tp = 2 : i64, units = 2 : i64, bias = [], nodes = [], values = ["y"]} : (!h3.act<B, S, 24, f32, parts = 2>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}
