// RUN: h3c-opt %s --h3-shard-tp="tp=3" -split-input-file -verify-diagnostics
// RUN: not h3c-opt %s --h3-shard-tp="tp=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// Impossible splits name the op.
// ZERO: error: h3-shard-tp: tp must be >= 1, got 0

func.func @heads(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[transformer_blocks.0.attn.to_q] cannot split 2 heads over tp = 3}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], weight = ["a", "b", "c"], nodes = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return %q : !h3.act<B, S, 32, bf16>
}

// -----

// The Hopper fusion's qkv_linear with the qk_norm_rope epilogue is never split (h3-fuse keeps it apart when tp > 1).
func.func @qkv_norm_rope_epilogue(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 384, bf16> {
  // expected-error @+1 {{[transformer_blocks.0.attn.to_q] qkv_linear with the 'qk_norm_rope' epilogue cannot be split over tp = 3}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 3 : i64, head_dim = 128 : i64, bias = [], epilogue = #h3.epilogue<qk_norm_rope>, eps = 1.0e-05 : f64, rotary_dim = 0 : i64, weight = ["a", "b", "c", "d", "e"], nodes = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v", "transformer_blocks.0.attn.norm_q", "transformer_blocks.0.attn.norm_k"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 384, bf16>, !h3.act<B, S, 384, bf16>, !h3.act<B, S, 384, bf16>)
  return %q : !h3.act<B, S, 384, bf16>
}

// -----

func.func @out_columns(%x: !h3.act<B, S, 128, bf16>) -> !h3.act<B, S, 25, bf16> {
  // expected-error @+1 {{[transformer_blocks.0.ff.net.2] cannot split 25 output columns over tp = 3}}
  %y = h3.linear %x {K = 128 : i64, N = 25 : i64, bias = [], weight = ["w"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["transformer_blocks.0.ff.net.2"], values = ["y"]} : (!h3.act<B, S, 128, bf16>) -> !h3.act<B, S, 25, bf16>
  return %y : !h3.act<B, S, 25, bf16>
}

// -----

func.func @adaln_chunks(%t: !h3.act<T, 16, f32>) -> !h3.act<T3, 48, bf16> {
  // expected-error @+1 {{[transformer_blocks.0.adaln_proj] cannot split 8 columns of each AdaLN chunk over tp = 3}}
  %y = h3.adaln_table %t {K = 16 : i64, N = 144 : i64, rows_per_timestep = 3 : i64, num_chunks = 6 : i64, bias = [], weight = ["w"], nodes = ["transformer_blocks.0.adaln_proj"], values = ["y"]} : (!h3.act<T, 16, f32>) -> !h3.act<T3, 48, bf16>
  return %y : !h3.act<T3, 48, bf16>
}

// -----

func.func @ffn(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[transformer_blocks.0.ff.net.0.proj] cannot split 32 ffn columns (value and gate halves) over tp = 3}}
  %y = h3.linear %x {K = 24 : i64, N = 64 : i64, bias = [], weight = ["w"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["transformer_blocks.0.ff.net.0.proj"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  // expected-error @+1 {{[transformer_blocks.0.ff.swiglu] cannot split 32 ffn columns over tp = 3}}
  %z = h3.swiglu %y {nodes = ["transformer_blocks.0.ff.swiglu"], values = ["z"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, bf16>
  return %z : !h3.act<B, S, 32, bf16>
}
