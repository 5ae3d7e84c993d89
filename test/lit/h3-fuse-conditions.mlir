// RUN: h3c-opt %s --h3-fuse -split-input-file | FileCheck %s
// The safety conditions of each h3-fuse pattern: when one fails, the ops stay apart (and nothing else changes).

// A use of to_q before to_v: the fused op (at to_v) would not dominate it.
// CHECK-LABEL: func.func @qkv_use_before_v
// CHECK-NOT: h3.qkv_linear
// CHECK: h3.linear {{.*}}nodes = ["transformer_blocks.0.attn.to_q"]
// CHECK: h3.linear {{.*}}nodes = ["transformer_blocks.0.attn.to_k"]
// CHECK: h3.silu
// CHECK: h3.linear {{.*}}nodes = ["transformer_blocks.0.attn.to_v"]
func.func @qkv_use_before_v(%x: !h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) {
  %q = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["wq"], nodes = ["transformer_blocks.0.attn.to_q"], values = ["q"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %k = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["wk"], nodes = ["transformer_blocks.0.attn.to_k"], values = ["k"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %u = h3.silu %q {nodes = ["u"], values = ["u"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %v = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["wv"], nodes = ["transformer_blocks.0.attn.to_v"], values = ["v"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %o = h3.attention %q, %k, %v {heads = 2 : i64, head_dim = 16 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %o, %u : !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>
}

// -----

// q/k/v with different reduction orders: one GEMM cannot follow both.
// CHECK-LABEL: func.func @qkv_orders_differ
// CHECK-NOT: h3.qkv_linear
// CHECK: return
func.func @qkv_orders_differ(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16> {
  %q = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["wq"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["transformer_blocks.0.attn.to_q"], values = ["q"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %k = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["wk"], nodes = ["transformer_blocks.0.attn.to_k"], values = ["k"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %v = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["wv"], nodes = ["transformer_blocks.0.attn.to_v"], values = ["v"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %o = h3.attention %q, %k, %v {heads = 2 : i64, head_dim = 16 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %o : !h3.act<B, S, 32, bf16>
}

// -----

// Norms with different eps are two kernels' worth of constants.
// CHECK-LABEL: func.func @qk_norm_eps_differ
// CHECK-NOT: h3.qk_norm_rope
// CHECK: h3.qk_norm
// CHECK: h3.qk_norm
func.func @qk_norm_eps_differ(%q: !h3.act<B, S, 32, bf16>, %k: !h3.act<B, S, 32, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) {
  %a = h3.qk_norm %q {heads = 2 : i64, head_dim = 16 : i64, eps = 1.0e-05 : f64, weight = ["nq"], nodes = ["transformer_blocks.0.attn.norm_q"], values = ["a"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %b = h3.qk_norm %k {heads = 2 : i64, head_dim = 16 : i64, eps = 1.0e-06 : f64, weight = ["nk"], nodes = ["transformer_blocks.0.attn.norm_k"], values = ["b"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %a, %b : !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>
}

// -----

// rope_q and rope_k read different tables: the norms fuse, the ropes stay.
// CHECK-LABEL: func.func @rope_tables_differ
// CHECK: %[[Q:.*]], %[[K:.*]] = h3.qk_norm_rope %{{.*}}, %{{.*}} {{{.*}}nodes = ["transformer_blocks.0.attn.norm_q", "transformer_blocks.0.attn.norm_k"]{{.*}}rotary_dim = 0
// CHECK-NEXT: h3.rope %[[Q]]
// CHECK-NEXT: h3.rope %[[K]]
func.func @rope_tables_differ(%q: !h3.act<B, S, 32, bf16>, %k: !h3.act<B, S, 32, bf16>, %c: !h3.act<S, 12, f32>, %s: !h3.act<S, 12, f32>, %c2: !h3.act<S, 12, f32>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) {
  %a = h3.qk_norm %q {heads = 2 : i64, head_dim = 16 : i64, eps = 1.0e-05 : f64, weight = ["nq"], nodes = ["transformer_blocks.0.attn.norm_q"], values = ["a"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %b = h3.qk_norm %k {heads = 2 : i64, head_dim = 16 : i64, eps = 1.0e-05 : f64, weight = ["nk"], nodes = ["transformer_blocks.0.attn.norm_k"], values = ["b"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  %ra = h3.rope %a, %c, %s {heads = 2 : i64, head_dim = 16 : i64, rotary_dim = 12 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], values = ["ra"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, bf16>
  %rb = h3.rope %b, %c2, %s {heads = 2 : i64, head_dim = 16 : i64, rotary_dim = 12 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], values = ["rb"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, bf16>
  return %ra, %rb : !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>
}

// -----

// The linear's result is read twice: folding it into the residual would lose the other reader's value.
// CHECK-LABEL: func.func @epilogue_two_readers
// CHECK: h3.linear
// CHECK-NOT: epilogue
// CHECK-SAME: values
// CHECK: h3.residual
func.func @epilogue_two_readers(%x: !h3.act<B, Nt, 32, bf16>, %r: !h3.act<B, Nt, 24, bf16>) -> (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 24, bf16>) {
  %y = h3.linear %x {K = 32 : i64, N = 24 : i64, bias = [], weight = ["w"], nodes = ["token_refiner.refiner_blocks.0.attn.to_out.0"], values = ["y"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %z = h3.residual %r, %y {nodes = ["token_refiner.refiner_blocks.0.residual_attn"], values = ["z"]} : (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 24, bf16>
  return %z, %y : !h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 24, bf16>
}

// -----

// Producer and consumer of different blocks (and top-level linears, which have no block) are not fused.
// CHECK-LABEL: func.func @epilogue_other_block
// CHECK: h3.linear
// CHECK-NOT: epilogue
// CHECK-SAME: values
// CHECK: h3.residual
// CHECK: h3.linear
// CHECK-NOT: epilogue
// CHECK-SAME: values
// CHECK: h3.swiglu
func.func @epilogue_other_block(%x: !h3.act<B, Nt, 32, bf16>, %r: !h3.act<B, Nt, 24, bf16>) -> (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 16, bf16>) {
  %y = h3.linear %x {K = 32 : i64, N = 24 : i64, bias = [], weight = ["w"], nodes = ["token_refiner.refiner_blocks.0.ff.net.2"], values = ["y"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %z = h3.residual %r, %y {nodes = ["token_refiner.refiner_blocks.1.residual_ff"], values = ["z"]} : (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 24, bf16>) -> !h3.act<B, Nt, 24, bf16>
  %f = h3.linear %x {K = 32 : i64, N = 32 : i64, bias = [], weight = ["w2"], nodes = ["context_embedder"], values = ["f"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 32, bf16>
  %s = h3.swiglu %f {nodes = ["swiglu"], values = ["s"]} : (!h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 16, bf16>
  return %z, %s : !h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 16, bf16>
}

// -----

// The linear is the residual stream (x), not the added branch (y): no epilogue computes that.
// CHECK-LABEL: func.func @epilogue_stream_operand
// CHECK: h3.linear
// CHECK-NOT: epilogue
// CHECK-SAME: values
// CHECK: h3.gate_residual
func.func @epilogue_stream_operand(%x: !h3.act<B, S, 32, bf16>, %b: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16> {
  %y = h3.linear %x {K = 32 : i64, N = 24 : i64, bias = [], weight = ["w"], nodes = ["transformer_blocks.0.attn.to_out.0"], values = ["y"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 24, bf16>
  %z = h3.gate_residual %y, %b, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, nodes = ["transformer_blocks.0.gate_residual_attn"], values = ["z"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return %z : !h3.act<B, S, 24, bf16>
}

// -----

// Already sharded (h3-fuse runs before h3-shard-tp): left alone.
// CHECK-LABEL: func.func @sharded_swiglu
// CHECK: h3.linear
// CHECK-NOT: epilogue
// CHECK-SAME: values
// CHECK: h3.swiglu
func.func @sharded_swiglu(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16> {
  %f = h3.linear %x {K = 24 : i64, N = 64 : i64, bias = [], weight = ["w"], nodes = ["transformer_blocks.0.ff.net.0.proj"], values = ["f"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  %s = h3.swiglu %f {shard = #h3.shard<column, tp = 2>, nodes = ["transformer_blocks.0.ff.swiglu"], values = ["s"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, bf16>
  return %s : !h3.act<B, S, 32, bf16>
}

// -----

// time_embedder.act read by a second op: time_embed would hide its value.
// CHECK-LABEL: func.func @time_act_two_readers
// CHECK-NOT: h3.time_embed
// CHECK: h3.linear
// CHECK: h3.silu
// CHECK: h3.linear
func.func @time_act_two_readers(%s: !h3.act<T, 8, f32>) -> (!h3.act<T, 16, f32>, !h3.act<T, 24, f32>) {
  %h = h3.linear %s {K = 8 : i64, N = 24 : i64, bias = ["b1"], weight = ["w1"], nodes = ["time_embedder.linear_1"], values = ["h"]} : (!h3.act<T, 8, f32>) -> !h3.act<T, 24, f32>
  %a = h3.silu %h {nodes = ["time_embedder.act"], values = ["a"]} : (!h3.act<T, 24, f32>) -> !h3.act<T, 24, f32>
  %e = h3.linear %a {K = 24 : i64, N = 16 : i64, bias = ["b2"], weight = ["w2"], nodes = ["time_embedder.linear_2"], values = ["e"]} : (!h3.act<T, 24, f32>) -> !h3.act<T, 16, f32>
  return %e, %a : !h3.act<T, 16, f32>, !h3.act<T, 24, f32>
}

// -----

// The time MLP on any F32 [T, freq_dim] input (here a function argument) fuses; time_embed reads that input.
// CHECK-LABEL: func.func @time_mlp_on_argument
// CHECK-SAME: (%[[S:.*]]: !h3.act<T, 8, f32>)
// CHECK-NEXT: %[[E:.*]] = h3.time_embed %[[S]] {bias = ["b1", "b2"], freq_dim = 8 : i64, hidden = 24 : i64, nodes = ["time_embedder.linear_1", "time_embedder.act", "time_embedder.linear_2"], out_dim = 16 : i64, values = ["e"], weight = ["w1", "w2"]}
// CHECK-NEXT: return %[[E]]
func.func @time_mlp_on_argument(%s: !h3.act<T, 8, f32>) -> !h3.act<T, 16, f32> {
  %h = h3.linear %s {K = 8 : i64, N = 24 : i64, bias = ["b1"], weight = ["w1"], nodes = ["time_embedder.linear_1"], values = ["h"]} : (!h3.act<T, 8, f32>) -> !h3.act<T, 24, f32>
  %a = h3.silu %h {nodes = ["time_embedder.act"], values = ["a"]} : (!h3.act<T, 24, f32>) -> !h3.act<T, 24, f32>
  %e = h3.linear %a {K = 24 : i64, N = 16 : i64, bias = ["b2"], weight = ["w2"], nodes = ["time_embedder.linear_2"], values = ["e"]} : (!h3.act<T, 24, f32>) -> !h3.act<T, 16, f32>
  return %e : !h3.act<T, 16, f32>
}
