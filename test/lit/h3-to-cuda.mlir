// RUN: h3c-opt --h3-to-cuda %s | FileCheck %s
// The CUDA translation prints, once per distinct kernel, the source the kernel emitter produces from the op's plan
// entry: the op's shape and order attributes become the kernel's compile-time constants; host ops print nothing.

// CHECK-NOT: rope_table
// CHECK: // ---- kernel rms_norm_h24_[[H1:[0-9a-f]+]] (entry h3c_rms_norm_h24_[[H1]]) for rms_norm [a.norm]
// CHECK: #define RN_ENTRY h3c_rms_norm_h24_[[H1]]
// CHECK-NEXT: #define RN_H 24
// CHECK-NEXT: #define RN_EPS 0x1.4f8b58p-17f
// CHECK-NEXT: #define RN_HAS_W 1
// CHECK: extern "C" __global__
// A second op with the same kernel reuses it (no second copy).
// CHECK-NOT: for rms_norm [b.norm]
// CHECK: // ---- kernel linear_sm90_k128_n24_gres_{{[0-9a-f]+}} {{.*}} for linear [transformer_blocks.0.attn.to_out.0, transformer_blocks.0.gate_residual_attn]
// CHECK: extern "C" __global__
module attributes {h3.arch = "sm_90a"} {
  func.func @f(%x: !h3.act<B, S, 24, bf16> {h3.name = "@x"}, %a: !h3.act<B, S, 128, bf16> {h3.name = "@a"},
               %t: !h3.act<T3, 144, bf16> {h3.name = "@t"}, %ts: !h3.act<S, 1, i64> {h3.name = "@ts"},
               %tags: !h3.act<S, 1, i64> {h3.name = "@tags"}, %p: !h3.act<S, 3, f32> {h3.name = "@p"},
               %ti: !h3.act<Nt, 1, i64> {h3.name = "@ti"}, %vi: !h3.act<Nv, 1, i64> {h3.name = "@vi"},
               %ai: !h3.act<Na, 1, i64> {h3.name = "@ai"}) {
    %cos, %sin = h3.rope_table %p, %ti, %vi, %ai {rotary_dim = 12 : i64, theta = 1.0e+04 : f64, nodes = ["rope"], values = ["rope:cos", "rope:sin"]} : (!h3.act<S, 3, f32>, !h3.act<Nt, 1, i64>, !h3.act<Nv, 1, i64>, !h3.act<Na, 1, i64>) -> (!h3.act<S, 12, f32>, !h3.act<S, 12, f32>)
    %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = ["a.norm.weight"], order = #h3.order<lane_tree, lanes = 32, acc = f32>, nodes = ["a.norm"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
    %z = h3.rms_norm %y {eps = 1.0e-05 : f64, weight = ["b.norm.weight"], order = #h3.order<lane_tree, lanes = 32, acc = f32>, nodes = ["b.norm"], values = ["z"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
    %g = h3.linear %a, %z, %t, %ts, %tags {K = 128 : i64, N = 24 : i64, bias = [], weight = ["transformer_blocks.0.attn.to_out.0.weight"], epilogue = #h3.epilogue<gate_residual>, chunk = 2 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["transformer_blocks.0.attn.to_out.0", "transformer_blocks.0.gate_residual_attn"], values = ["g"]} : (!h3.act<B, S, 128, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
    return
  }
}


// At tp > 1 a rank's to_out has the full K and its 12 of 24 output columns; the layout ops are listed, not
// translated (the runtime performs them).
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline="tp=2" | h3c-opt --h3-to-cuda | FileCheck %s --check-prefix=TP2
// TP2: // ---- all_gather of transformer_blocks.0.attn.attention: performed by the runtime
// TP2: // ---- kernel linear_sm90_k32_n12_gres_{{[0-9a-f]+}} {{.*}} for linear [transformer_blocks.0.attn.to_out.0, transformer_blocks.0.gate_residual_attn]
