// RUN: h3c-opt %s --h3-assign-reduction-order -split-input-file -verify-diagnostics

// A hand-written order that differs from the contract's: another chunk width.
func.func @wrong_k_step(%x: !h3.act<B, S, 40, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[transformer_blocks.3.attn.to_out.0] carries order #h3.order<k_chunks, k_step = 32, units = 1, acc = f32> but the contract requires #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>}}
  %y = h3.linear %x {K = 40 : i64, N = 24 : i64, bias = [], weight = ["w"], order = #h3.order<k_chunks, k_step = 32, units = 1, acc = f32>, nodes = ["transformer_blocks.3.attn.to_out.0"], values = ["y"]} : (!h3.act<B, S, 40, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

func.func @wrong_lanes(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[n] carries order #h3.order<lane_tree, lanes = 16, acc = f32> but the contract requires #h3.order<lane_tree, lanes = 32, acc = f32>}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], order = #h3.order<lane_tree, lanes = 16, acc = f32>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}
