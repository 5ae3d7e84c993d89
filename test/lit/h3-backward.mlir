// RUN: h3c-opt %s --h3-assign-reduction-order --h3-backward -split-input-file | FileCheck %s
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-backward -split-input-file | h3c-opt -split-input-file | FileCheck %s
// h3-backward (docs/contract.md section 14) on the tiny config's unfused transformer block (the AdaLN table an
// argument: its own gradient is not written yet) and refiner block: the gradient ops in the reverse of the forward's
// op order, the saved activations as arguments under their forward names, a value read by several ops summed by
// h3.grad_add in visiting order, the AdaLN table's chunk gradients summed at full width, weight gradients named on
// their ops, the input's and the table's gradients returned.

// CHECK-LABEL: func.func @backward
// CHECK-SAME: %[[G:[^:]*]]: !h3.act<B, S, 24, f32> {h3.name = "@grad:transformer_blocks.0.gate_residual_ff"}
// CHECK-SAME: {h3.name = "transformer_blocks.0.adaln_proj"}
// CHECK-SAME: -> (!h3.act<T3, 144, f32> {h3.name = "grad:transformer_blocks.0.adaln_proj"}, !h3.act<B, S, 24, f32> {h3.name = "grad:x"})
// CHECK: %[[DY:.*]], %[[DT5:.*]] = h3.gate_residual_grad %[[G]], {{.*}}chunk = 5 : i64
// CHECK-SAME: order = #h3.order<row_units, units = 128, k_step = 16, acc = f32>
// CHECK-NEXT: h3.linear_grad_w %[[DY]], %{{.*}} {{{.*}}grads = ["grad:transformer_blocks.0.ff.net.2.weight"]{{.*}}order = #h3.order<row_units
// CHECK-NEXT: %[[DS:.*]] = h3.linear_grad_x %[[DY]] {{{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, values = ["grad:transformer_blocks.0.ff.swiglu"]
// CHECK-SAME: -> !h3.act<B, S, 32, f32>
// CHECK-NEXT: %[[DF:.*]] = h3.swiglu_grad %[[DS]]
// CHECK-SAME: -> !h3.act<B, S, 64, f32>
// CHECK-NEXT: h3.linear_grad_w %[[DF]]
// CHECK-NEXT: %[[DN2:.*]] = h3.linear_grad_x %[[DF]]
// CHECK-NEXT: %[[DX2:.*]], %[[DT34:.*]] = h3.norm_modulate_grad %[[DN2]], {{.*}}grads = ["grad:transformer_blocks.0.norm2.weight"]{{.*}}scale_chunk = 4 : i64, shift_chunk = 3 : i64
// The residual stream: gate_residual_ff's dz plus norm2's dx, in that order.
// CHECK-NEXT: %[[R1:.*]] = h3.grad_add %[[G]], %[[DX2]]
// CHECK-NEXT: %[[T1:.*]] = h3.grad_add %[[DT5]], %[[DT34]]
// CHECK-NEXT: %[[DO:.*]], %[[DT2:.*]] = h3.gate_residual_grad %[[R1]], {{.*}}chunk = 2 : i64
// CHECK-NEXT: %[[T2:.*]] = h3.grad_add %[[T1]], %[[DT2]]
// CHECK-NEXT: h3.linear_grad_w %[[DO]]
// CHECK-NEXT: %[[DA:.*]] = h3.linear_grad_x %[[DO]]
// CHECK-NEXT: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = h3.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[DA]] {{{.*}}order = #h3.order<row_units
// CHECK-NEXT: %[[RK:.*]] = h3.rope_grad %[[DK]]
// CHECK-NEXT: %[[RQ:.*]] = h3.rope_grad %[[DQ]]
// CHECK-NEXT: %[[NK:.*]] = h3.rms_norm_grad %[[RK]], {{.*}}grads = ["grad:transformer_blocks.0.attn.norm_k.weight"], group = 16 : i64
// CHECK-NEXT: %[[NQ:.*]] = h3.rms_norm_grad %[[RQ]]
// norm1 is read by to_q, to_k and to_v: its gradient is v's part, + k's, + q's (the backward visits v first).
// CHECK-NEXT: h3.linear_grad_w %[[DV]], %[[N1:[^ ]*]] {{{.*}}grads = ["grad:transformer_blocks.0.attn.to_v.weight"]
// CHECK-NEXT: %[[XV:.*]] = h3.linear_grad_x %[[DV]]
// CHECK-NEXT: h3.linear_grad_w %[[NK]], %[[N1]]
// CHECK-NEXT: %[[XK:.*]] = h3.linear_grad_x %[[NK]]
// CHECK-NEXT: %[[XVK:.*]] = h3.grad_add %[[XV]], %[[XK]]
// CHECK-NEXT: h3.linear_grad_w %[[NQ]], %[[N1]]
// CHECK-NEXT: %[[XQ:.*]] = h3.linear_grad_x %[[NQ]]
// CHECK-NEXT: %[[XN1:.*]] = h3.grad_add %[[XVK]], %[[XQ]]
// CHECK-NEXT: %[[DX1:.*]], %[[DT01:.*]] = h3.norm_modulate_grad %[[XN1]], {{.*}}scale_chunk = 1 : i64, shift_chunk = 0 : i64
// CHECK-NEXT: %[[DX:.*]] = h3.grad_add %[[R1]], %[[DX1]]
// CHECK-NEXT: %[[DT:.*]] = h3.grad_add %[[T2]], %[[DT01]]
// CHECK-NEXT: return %[[DT]], %[[DX]]
func.func @forward(%36: !h3.act<T3, 144, bf16> {h3.name = "transformer_blocks.0.adaln_proj"}, %x: !h3.act<B, S, 24, bf16> {h3.name = "x"}, %ts_index: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>, %cos: !h3.act<S, 12, f32>, %sin: !h3.act<S, 12, f32>) -> !h3.act<B, S, 24, bf16> {
  %37 = h3.norm_modulate %x, %36, %ts_index, %tags {eps = 1.000000e-05 : f64, nodes = ["transformer_blocks.0.norm1"], num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, scale_chunk = 1 : i64, shift_chunk = 0 : i64, values = ["transformer_blocks.0.norm1"], weight = ["transformer_blocks.0.norm1.weight"]} : (!h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  %38 = h3.linear %37 {K = 24 : i64, N = 32 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_q"], values = ["transformer_blocks.0.attn.to_q"], weight = ["transformer_blocks.0.attn.to_q.weight"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %39 = h3.linear %37 {K = 24 : i64, N = 32 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_k"], values = ["transformer_blocks.0.attn.to_k"], weight = ["transformer_blocks.0.attn.to_k.weight"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %40 = h3.linear %37 {K = 24 : i64, N = 32 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_v"], values = ["transformer_blocks.0.attn.to_v"], weight = ["transformer_blocks.0.attn.to_v.weight"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %41 = h3.qk_norm %38 {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_q"], values = ["transformer_blocks.0.attn.norm_q"], weight = ["transformer_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %42 = h3.qk_norm %39 {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_k"], values = ["transformer_blocks.0.attn.norm_k"], weight = ["transformer_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %43 = h3.rope %41, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], rotary_dim = 12 : i64, values = ["transformer_blocks.0.attn.rope_q"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, bf16>
  %44 = h3.rope %42, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], rotary_dim = 12 : i64, values = ["transformer_blocks.0.attn.rope_k"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, bf16>
  %45 = h3.attention %43, %44, %40 {head_dim = 16 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["transformer_blocks.0.attn.attention"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %46 = h3.linear %45 {K = 32 : i64, N = 24 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_out.0"], values = ["transformer_blocks.0.attn.to_out.0"], weight = ["transformer_blocks.0.attn.to_out.0.weight"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 24, bf16>
  %47 = h3.gate_residual %x, %46, %36, %ts_index, %tags {chunk = 2 : i64, nodes = ["transformer_blocks.0.gate_residual_attn"], num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, values = ["transformer_blocks.0.gate_residual_attn"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  %48 = h3.norm_modulate %47, %36, %ts_index, %tags {eps = 1.000000e-05 : f64, nodes = ["transformer_blocks.0.norm2"], num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, scale_chunk = 4 : i64, shift_chunk = 3 : i64, values = ["transformer_blocks.0.norm2"], weight = ["transformer_blocks.0.norm2.weight"]} : (!h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  %49 = h3.linear %48 {K = 24 : i64, N = 64 : i64, bias = [], nodes = ["transformer_blocks.0.ff.net.0.proj"], values = ["transformer_blocks.0.ff.net.0.proj"], weight = ["transformer_blocks.0.ff.net.0.proj.weight"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  %50 = h3.swiglu %49 {nodes = ["transformer_blocks.0.ff.swiglu"], values = ["transformer_blocks.0.ff.swiglu"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, bf16>
  %51 = h3.linear %50 {K = 32 : i64, N = 24 : i64, bias = [], nodes = ["transformer_blocks.0.ff.net.2"], values = ["transformer_blocks.0.ff.net.2"], weight = ["transformer_blocks.0.ff.net.2.weight"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 24, bf16>
  %52 = h3.gate_residual %47, %51, %36, %ts_index, %tags {chunk = 5 : i64, nodes = ["transformer_blocks.0.gate_residual_ff"], num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, values = ["transformer_blocks.0.gate_residual_ff"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return %52 : !h3.act<B, S, 24, bf16>
}

// -----

// The refiner block: rms_norm with a weight, the plain residuals (the gradient passes through unchanged), no rope.
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %[[G:[^:]*]]: !h3.act<B, Nt, 24, f32> {h3.name = "@grad:token_refiner.refiner_blocks.0.residual_ff"}
// CHECK: h3.linear_grad_w %[[G]]
// CHECK-NEXT: h3.linear_grad_x %[[G]]
// CHECK: h3.rms_norm_grad {{.*}}grads = ["grad:token_refiner.refiner_blocks.0.norm2.weight"], group = 24 : i64
// CHECK: h3.grad_add %[[G]],
// CHECK-NOT: h3.rope_grad
// CHECK: h3.attention_grad
// CHECK: h3.rms_norm_grad {{.*}}grads = ["grad:token_refiner.refiner_blocks.0.norm1.weight"], group = 24 : i64
// CHECK: return
func.func @forward(%2: !h3.act<B, Nt, 24, bf16> {h3.name = "text"}) -> !h3.act<B, Nt, 24, bf16> {
  %3 = h3.rms_norm %2 {eps = 1.000000e-05 : f64, nodes = ["token_refiner.refiner_blocks.0.norm1"], values = ["token_refiner.refiner_blocks.0.norm1"], weight = ["token_refiner.refiner_blocks.0.norm1.weight"]} : (!h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %4 = h3.linear %3 {K = 24 : i64, N = 32 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_q"], values = ["token_refiner.refiner_blocks.0.attn.to_q"], weight = ["token_refiner.refiner_blocks.0.attn.to_q.weight"]} : (!h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %5 = h3.linear %3 {K = 24 : i64, N = 32 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_k"], values = ["token_refiner.refiner_blocks.0.attn.to_k"], weight = ["token_refiner.refiner_blocks.0.attn.to_k.weight"]} : (!h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %6 = h3.linear %3 {K = 24 : i64, N = 32 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_v"], values = ["token_refiner.refiner_blocks.0.attn.to_v"], weight = ["token_refiner.refiner_blocks.0.attn.to_v.weight"]} : (!h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %7 = h3.qk_norm %4 {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, nodes = ["token_refiner.refiner_blocks.0.attn.norm_q"], values = ["token_refiner.refiner_blocks.0.attn.norm_q"], weight = ["token_refiner.refiner_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %8 = h3.qk_norm %5 {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, nodes = ["token_refiner.refiner_blocks.0.attn.norm_k"], values = ["token_refiner.refiner_blocks.0.attn.norm_k"], weight = ["token_refiner.refiner_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %9 = h3.attention %7, %8, %6 {head_dim = 16 : i64, heads = 2 : i64, nodes = ["token_refiner.refiner_blocks.0.attn.attention"], values = ["token_refiner.refiner_blocks.0.attn.attention"]} : (!h3.act<B, Nt, 32, bf16>, !h3.act<B, Nt, 32, bf16>, !h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %10 = h3.linear %9 {K = 32 : i64, N = 24 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_out.0"], values = ["token_refiner.refiner_blocks.0.attn.to_out.0"], weight = ["token_refiner.refiner_blocks.0.attn.to_out.0.weight"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %11 = h3.residual %2, %10 {nodes = ["token_refiner.refiner_blocks.0.residual_attn"], values = ["token_refiner.refiner_blocks.0.residual_attn"]} : (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %12 = h3.rms_norm %11 {eps = 1.000000e-05 : f64, nodes = ["token_refiner.refiner_blocks.0.norm2"], values = ["token_refiner.refiner_blocks.0.norm2"], weight = ["token_refiner.refiner_blocks.0.norm2.weight"]} : (!h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %13 = h3.linear %12 {K = 24 : i64, N = 64 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.ff.net.0.proj"], values = ["token_refiner.refiner_blocks.0.ff.net.0.proj"], weight = ["token_refiner.refiner_blocks.0.ff.net.0.proj.weight"]} : (!h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 64, bf16>
  %14 = h3.swiglu %13 {nodes = ["token_refiner.refiner_blocks.0.ff.swiglu"], values = ["token_refiner.refiner_blocks.0.ff.swiglu"]} : (!h3.act<B, Nt, 64, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %15 = h3.linear %14 {K = 32 : i64, N = 24 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.ff.net.2"], values = ["token_refiner.refiner_blocks.0.ff.net.2"], weight = ["token_refiner.refiner_blocks.0.ff.net.2.weight"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %16 = h3.residual %11, %15 {nodes = ["token_refiner.refiner_blocks.0.residual_ff"], values = ["token_refiner.refiner_blocks.0.residual_ff"]} : (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 24, bf16>
  return %16 : !h3.act<B, Nt, 24, bf16>
}
