// RUN: h3c-opt %s -split-input-file -verify-diagnostics
// Verifier errors of the h3 ops, types and attributes (shapes, dtypes, attribute ranges), each naming the node.

func.func @no_nodes(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{'h3.silu' op lists no fingerprint node ids in 'nodes'}}
  %y = h3.silu %x {nodes = [], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @values_count(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[n] has 2 value names for 1 results}}
  %y = h3.silu %x {nodes = ["n"], values = ["y", "z"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @duplicate_node(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[n] lists node 'n' twice}}
  %y = h3.silu %x {nodes = ["n", "n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @linear_k(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] input must have 32 columns, got 24}}
  %y = h3.linear %x {K = 32 : i64, N = 8 : i64, bias = [], weight = ["w"], nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @linear_n(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] output must have 8 columns, got 9}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 9, bf16>
  return
}

// -----

func.func @swiglu_x_without_swiglu(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] swiglu_x is a result of the swiglu epilogue only}}
  %y, %sx = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], nodes = ["lin"], values = ["y", "x"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 8, bf16>, !h3.act<B, S, 8, bf16>)
  return
}

// -----

func.func @swiglu_x_width(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] swiglu_x must have 16 columns, got 8}}
  %y, %sx = h3.linear %x {K = 24 : i64, N = 16 : i64, bias = [], epilogue = #h3.epilogue<swiglu>, weight = ["w"], nodes = ["lin", "sw"], values = ["y", "x"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 8, bf16>, !h3.act<B, S, 8, bf16>)
  return
}

// -----

func.func @swiglu_x_dtype(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] swiglu_x must be 'bf16', got 'f32'}}
  %y, %sx = h3.linear %x {K = 24 : i64, N = 16 : i64, bias = [], epilogue = #h3.epilogue<swiglu>, weight = ["w"], nodes = ["lin", "sw"], values = ["y", "x"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 8, bf16>, !h3.act<B, S, 16, f32>)
  return
}

// -----

func.func @linear_rows(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] output: rows B x S vs B x Nt}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, Nt, 8, bf16>
  return
}

// -----

func.func @linear_weights(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] 'weight' must list 1 tensor names, got 2}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["a", "b"], nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @linear_input_dtype(%x: !h3.act<B, S, 24, i64>) {
  // expected-error @+1 {{[lin] input must be bf16 or f32}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, i64>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

// The epilogue is an enum: an unknown one does not parse.
func.func @linear_epilogue(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+2 {{expected ::h3c::h3ir::Epilogue to be one of: none, residual, gate_residual, swiglu}}
  // expected-error @+1 {{failed to parse H3_EpilogueAttr parameter 'value'}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], epilogue = #h3.epilogue<gelu>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

// The string spelling of earlier IR is not an epilogue.
func.func @linear_epilogue_string(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{'h3.linear' op attribute 'epilogue' failed to satisfy constraint}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], epilogue = "none", nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @row_index_enum(%x: !h3.act<B, S, 24, bf16>, %y: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+2 {{expected ::h3c::h3ir::RowIndex to be one of: adaln, timestep}}
  // expected-error @+1 {{failed to parse H3_RowIndexAttr parameter 'value'}}
  %z = h3.gate_residual %x, %y, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<tag>, nodes = ["g"], values = ["z"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @linear_swiglu_width(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] output must have 4 columns, got 8}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], epilogue = #h3.epilogue<swiglu>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @linear_gate_chunk(%x: !h3.act<B, S, 32, bf16>, %r: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[lin] chunk 6 out of range [0, 6)}}
  %y = h3.linear %x, %r, %t, %ts, %tags {K = 32 : i64, N = 24 : i64, bias = [], weight = ["w"], epilogue = #h3.epilogue<gate_residual>, chunk = 6 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @linear_gate_meta(%x: !h3.act<B, S, 32, bf16>, %r: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[lin] row_index 'adaln' needs 2 row metadata operands, got 1}}
  %y = h3.linear %x, %r, %t, %ts {K = 32 : i64, N = 24 : i64, bias = [], weight = ["w"], epilogue = #h3.epilogue<gate_residual>, chunk = 2 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @replicated_over_ranks(%x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{a replicated op records tp = 1 and one segment}}
  %y = h3.linear %x {K = 32 : i64, N = 24 : i64, bias = [], weight = ["w"], shard = #h3.shard<replicated, tp = 2>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

// Sequence parallel: a rank's queries (Sr) attend all keys (S); keys of another domain are an error.
func.func @attention_rank_keys(%q: !h3.act<B, Sr, 32, bf16>, %k: !h3.act<B, Nt, 32, bf16>) {
  // expected-error @+1 {{[a] k: rows B x Sr vs B x Nt}}
  %o = h3.attention %q, %k, %k {heads = 2 : i64, head_dim = 16 : i64, nodes = ["a"], values = ["o"]} : (!h3.act<B, Sr, 32, bf16>, !h3.act<B, Nt, 32, bf16>, !h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Sr, 32, bf16>
  return
}

// -----

func.func @linear_order_kind(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] carries order 'lane_tree' but needs 'k_chunks'}}
  %y = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], order = #h3.order<lane_tree, lanes = 32, acc = f32>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

// OrderedReduction's verifier: an order of another kind than the op type requires.
func.func @attention_order_kind(%q: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{[a] carries order 'k_chunks' but needs 'flash'}}
  %o = h3.attention %q, %q, %q {heads = 2 : i64, head_dim = 16 : i64, order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["a"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @time_embed_order_kind(%s: !h3.act<T, 8, f32>) {
  // expected-error @+1 {{[te] carries order 'lane_tree' but needs 'k_chunks'}}
  %y = h3.time_embed %s {freq_dim = 8 : i64, hidden = 24 : i64, out_dim = 16 : i64, bias = [], weight = ["a", "b"], order = #h3.order<lane_tree, lanes = 32, acc = f32>, nodes = ["te"], values = ["y"]} : (!h3.act<T, 8, f32>) -> !h3.act<T, 16, f32>
  return
}

// -----

// Layout ops (section 5.2): rows move between Sr and S, columns keep the rows and split evenly; no node.
func.func @gather_rows_domain(%k: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{moves between a rank's rows (Sr) and all of S, got S and S}}
  %g = h3.all_gather %k {axis = #h3.axis<rows>, parts = 2 : i64, nodes = [], values = ["g"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @gather_cols_width(%x: !h3.act<B, S, 12, bf16>) {
  // expected-error @+1 {{each of 2 ranks holds 16 of 32 columns, got 12}}
  %g = h3.all_gather %x {axis = #h3.axis<cols>, parts = 2 : i64, nodes = [], values = ["g"]} : (!h3.act<B, S, 12, bf16>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @split_cols_segments(%x: !h3.act<T3, 36, bf16>) {
  // expected-error @+1 {{36 columns do not form 6 segments of 4 parts}}
  %p = h3.split %x {axis = #h3.axis<cols>, parts = 4 : i64, segments = 6 : i64, nodes = [], values = ["p"]} : (!h3.act<T3, 36, bf16>) -> !h3.act<T3, 9, bf16>
  return
}

// -----

func.func @split_dtype(%x: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{part and full value differ in dtype or batch axis}}
  %p = h3.split %x {axis = #h3.axis<rows>, parts = 2 : i64, nodes = [], values = ["p"]} : (!h3.act<S, 1, i64>) -> !h3.act<Sr, 1, f32>
  return
}

// -----

func.func @layout_nodes(%x: !h3.act<B, Sr, 8, bf16>) {
  // expected-error @+1 {{a layout op implements no node}}
  %g = h3.all_gather %x {axis = #h3.axis<rows>, parts = 2 : i64, nodes = ["k"], values = ["g"]} : (!h3.act<B, Sr, 8, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @layout_axis(%x: !h3.act<B, Sr, 8, bf16>) {
  // expected-error @+2 {{expected ::h3c::h3ir::Axis to be one of: rows, cols}}
  // expected-error @+1 {{failed to parse H3_AxisAttr parameter}}
  %g = h3.all_gather %x {axis = #h3.axis<diagonal>, parts = 2 : i64, nodes = [], values = ["g"]} : (!h3.act<B, Sr, 8, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @adaln_rows(%t: !h3.act<T, 16, f32>) {
  // expected-error @+1 {{[ada] rows_per_timestep must be 1 or 3, got 2}}
  %y = h3.adaln_table %t {K = 16 : i64, N = 432 : i64, rows_per_timestep = 2 : i64, num_chunks = 6 : i64, bias = [], weight = ["w"], nodes = ["ada"], values = ["y"]} : (!h3.act<T, 16, f32>) -> !h3.act<T3, 144, bf16>
  return
}

// -----

func.func @adaln_domain(%t: !h3.act<T, 16, f32>) {
  // expected-error @+1 {{[ada] table must have row domain T3, got T}}
  %y = h3.adaln_table %t {K = 16 : i64, N = 432 : i64, rows_per_timestep = 3 : i64, num_chunks = 6 : i64, bias = [], weight = ["w"], nodes = ["ada"], values = ["y"]} : (!h3.act<T, 16, f32>) -> !h3.act<T, 144, bf16>
  return
}

// -----

func.func @qkv_heads(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[q] q/k/v must have heads x head_dim = 32 columns, got 30}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], weight = ["a", "b", "c"], nodes = ["q"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 30, bf16>, !h3.act<B, S, 30, bf16>, !h3.act<B, S, 30, bf16>)
  return
}

// -----

func.func @qkv_epilogue_weights(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[q] 'weight' must list 5 tensor names, got 3}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], epilogue = #h3.epilogue<qk_norm_rope>, eps = 1.0e-05 : f64, rotary_dim = 0 : i64, weight = ["a", "b", "c"], nodes = ["q"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return
}

// -----

func.func @qkv_epilogue_needs_eps(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[q] the qk_norm_rope epilogue needs a positive eps and rotary_dim}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], epilogue = #h3.epilogue<qk_norm_rope>, rotary_dim = 0 : i64, weight = ["a", "b", "c", "d", "e"], nodes = ["q"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return
}

// -----

func.func @qkv_epilogue_tables(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[q] rotary_dim must be 0 without rope tables}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], epilogue = #h3.epilogue<qk_norm_rope>, eps = 1.0e-05 : f64, rotary_dim = 12 : i64, weight = ["a", "b", "c", "d", "e"], nodes = ["q"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return
}

// -----

func.func @qkv_plain_has_no_eps(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[q] eps, rotary_dim and rope tables belong to the qk_norm_rope epilogue}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], eps = 1.0e-05 : f64, weight = ["a", "b", "c"], nodes = ["q"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return
}

// -----

func.func @qkv_other_epilogue(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[q] qkv_linear's epilogue is none or qk_norm_rope, got 'swiglu'}}
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], epilogue = #h3.epilogue<swiglu>, weight = ["a", "b", "c"], nodes = ["q"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return
}

// -----

func.func @linear_qk_norm_rope(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[l] epilogue 'qk_norm_rope' belongs to qkv_linear only}}
  %y = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["w"], epilogue = #h3.epilogue<qk_norm_rope>, nodes = ["l"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @time_embed_weights(%s: !h3.act<T, 8, f32>) {
  // expected-error @+1 {{[te] 'weight' must list 2 tensor names, got 1}}
  %y = h3.time_embed %s {freq_dim = 8 : i64, hidden = 24 : i64, out_dim = 16 : i64, bias = [], weight = ["a"], nodes = ["te"], values = ["y"]} : (!h3.act<T, 8, f32>) -> !h3.act<T, 16, f32>
  return
}

// -----

// time_embed reads the time_proj sinusoid [T, freq_dim], not the raw timesteps.
func.func @time_embed_timesteps(%t: !h3.act<T, 1, f32>) {
  // expected-error @+1 {{[te] sinusoid must have 8 columns, got 1}}
  %y = h3.time_embed %t {freq_dim = 8 : i64, hidden = 24 : i64, out_dim = 16 : i64, bias = [], weight = ["a", "b"], nodes = ["te"], values = ["y"]} : (!h3.act<T, 1, f32>) -> !h3.act<T, 16, f32>
  return
}

// -----

func.func @rms_norm_eps(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[n] eps must be positive}}
  %y = h3.rms_norm %x {eps = 0.0 : f64, weight = [], nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @rms_norm_out(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[n] output must be 'bf16', got 'f32'}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32>
  return
}

// -----

func.func @norm_modulate_chunks(%x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[n] shift and scale must be different chunks}}
  %y = h3.norm_modulate %x, %t, %ts, %tags {eps = 1.0e-05 : f64, weight = [], shift_chunk = 1 : i64, scale_chunk = 1 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @norm_modulate_row_index(%x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[n] row_index 'timestep' needs a table with row domain T, got T3}}
  %y = h3.norm_modulate %x, %t, %ts {eps = 1.0e-05 : f64, weight = [], shift_chunk = 0 : i64, scale_chunk = 1 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<timestep>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, f32>
  return
}

// -----

func.func @norm_modulate_table(%x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T, 40, bf16>, %ts: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[n] table must have 2 x 24 columns, got 40}}
  %y = h3.norm_modulate %x, %t, %ts {eps = 1.0e-05 : f64, weight = [], shift_chunk = 0 : i64, scale_chunk = 1 : i64, num_chunks = 2 : i64, row_index = #h3.row_index<timestep>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>, !h3.act<T, 40, bf16>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, f32>
  return
}

// -----

func.func @qk_norm_weight(%x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{[n] 'weight' must list 1 tensor names, got 0}}
  %y = h3.qk_norm %x {heads = 2 : i64, head_dim = 16 : i64, eps = 1.0e-05 : f64, weight = [], nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @rope_rotary(%x: !h3.act<B, S, 32, bf16>, %c: !h3.act<S, 18, f32>) {
  // expected-error @+1 {{[r] rotary_dim must be even and in (0, head_dim = 16], got 18}}
  %y = h3.rope %x, %c, %c {heads = 2 : i64, head_dim = 16 : i64, rotary_dim = 18 : i64, nodes = ["r"], values = ["y"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 18, f32>, !h3.act<S, 18, f32>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @rope_table_cols(%x: !h3.act<B, S, 32, bf16>, %c: !h3.act<S, 10, f32>) {
  // expected-error @+1 {{[r] cos/sin must have 12 columns, got 10}}
  %y = h3.rope %x, %c, %c {heads = 2 : i64, head_dim = 16 : i64, rotary_dim = 12 : i64, nodes = ["r"], values = ["y"]} : (!h3.act<B, S, 32, bf16>, !h3.act<S, 10, f32>, !h3.act<S, 10, f32>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @qk_norm_rope_tables(%q: !h3.act<B, S, 32, bf16>, %c: !h3.act<S, 12, f32>) {
  // expected-error @+1 {{[n] rope tables are cos and sin, got 1 operands}}
  %a, %b = h3.qk_norm_rope %q, %q, %c {heads = 2 : i64, head_dim = 16 : i64, rotary_dim = 12 : i64, eps = 1.0e-05 : f64, weight = ["a", "b"], nodes = ["n"], values = ["a", "b"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return
}

// -----

func.func @attention_batch(%q: !h3.act<T, 32, bf16>) {
  // expected-error @+1 {{[a] attention runs on token-domain (batched) rows}}
  %o = h3.attention %q, %q, %q {heads = 2 : i64, head_dim = 16 : i64, nodes = ["a"], values = ["o"]} : (!h3.act<T, 32, bf16>, !h3.act<T, 32, bf16>, !h3.act<T, 32, bf16>) -> !h3.act<T, 32, bf16>
  return
}

// -----

func.func @attention_kv(%q: !h3.act<B, S, 32, bf16>, %k: !h3.act<B, Nt, 32, bf16>) {
  // expected-error @+1 {{[a] k: rows B x S vs B x Nt}}
  %o = h3.attention %q, %k, %k {heads = 2 : i64, head_dim = 16 : i64, nodes = ["a"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, Nt, 32, bf16>, !h3.act<B, Nt, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return
}

// -----

func.func @swiglu_odd(%x: !h3.act<B, S, 33, bf16>) {
  // expected-error @+1 {{[s] input must have an even number of columns (value; gate), got 33}}
  %y = h3.swiglu %x {nodes = ["s"], values = ["y"]} : (!h3.act<B, S, 33, bf16>) -> !h3.act<B, S, 16, bf16>
  return
}

// -----

func.func @silu_type(%x: !h3.act<T, 24, f32>) {
  // expected-error @+1 {{[s] output type must equal the input type}}
  %y = h3.silu %x {nodes = ["s"], values = ["y"]} : (!h3.act<T, 24, f32>) -> !h3.act<T, 24, bf16>
  return
}

// -----

func.func @residual_cols(%x: !h3.act<B, Nt, 24, bf16>, %y: !h3.act<B, Nt, 32, bf16>) {
  // expected-error @+1 {{[r] y must have 24 columns, got 32}}
  %z = h3.residual %x, %y {nodes = ["r"], values = ["z"]} : (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 24, bf16>
  return
}

// -----

func.func @gate_residual_meta(%x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, f32>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[g] row metadata must be i64 [S] without a batch axis}}
  %z = h3.gate_residual %x, %x, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, row_index = #h3.row_index<adaln>, nodes = ["g"], values = ["z"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, f32>, !h3.act<S, 1, i64>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @rope_table_positions(%p: !h3.act<S, 2, f32>, %t: !h3.act<Nt, 1, i64>, %v: !h3.act<Nv, 1, i64>, %a: !h3.act<Na, 1, i64>) {
  // expected-error @+1 {{[rope] positions must have 3 columns, got 2}}
  %c, %s = h3.rope_table %p, %t, %v, %a {rotary_dim = 12 : i64, theta = 1.0e+04 : f64, nodes = ["rope"], values = ["c", "s"]} : (!h3.act<S, 2, f32>, !h3.act<Nt, 1, i64>, !h3.act<Nv, 1, i64>, !h3.act<Na, 1, i64>) -> (!h3.act<S, 12, f32>, !h3.act<S, 12, f32>)
  return
}

// -----

// Positions are float32 (diffusers casts position_ids of any dtype to float32 before the rotary product).
func.func @rope_table_positions_f32(%p: !h3.act<S, 3, i64>, %t: !h3.act<Nt, 1, i64>, %v: !h3.act<Nv, 1, i64>, %a: !h3.act<Na, 1, i64>) {
  // expected-error @+1 {{[rope] positions must be 'f32', got 'i64'}}
  %c, %s = h3.rope_table %p, %t, %v, %a {rotary_dim = 12 : i64, theta = 1.0e+04 : f64, nodes = ["rope"], values = ["c", "s"]} : (!h3.act<S, 3, i64>, !h3.act<Nt, 1, i64>, !h3.act<Nv, 1, i64>, !h3.act<Na, 1, i64>) -> (!h3.act<S, 12, f32>, !h3.act<S, 12, f32>)
  return
}

// -----

func.func @timestep_sinusoid_dim(%t: !h3.act<T, 1, f32>) {
  // expected-error @+1 {{[tp] freq_dim must be positive and even, got 7}}
  %y = h3.timestep_sinusoid %t {freq_dim = 7 : i64, nodes = ["tp"], values = ["y"]} : (!h3.act<T, 1, f32>) -> !h3.act<T, 7, f32>
  return
}

// -----

func.func @pack_domain(%t: !h3.act<B, Nt, 24, bf16>, %v: !h3.act<B, Nv, 24, f32>, %a: !h3.act<B, Na, 24, f32>, %i: !h3.act<Nt, 1, i64>, %p: !h3.act<S, 3, f32>, %s: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{[pack] video_indices must have row domain Nv, got Nt}}
  %x, %pos, %tags, %ts = h3.pack %t, %v, %a, %i, %i, %i, %p, %s, %s {nodes = ["pack"], values = ["x", "p", "t", "s"]} : (!h3.act<B, Nt, 24, bf16>, !h3.act<B, Nv, 24, f32>, !h3.act<B, Na, 24, f32>, !h3.act<Nt, 1, i64>, !h3.act<Nt, 1, i64>, !h3.act<Nt, 1, i64>, !h3.act<S, 3, f32>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, bf16>, !h3.act<S, 3, f32>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>)
  return
}

// -----

func.func @unpack_cols(%v: !h3.act<B, S, 16, f32>, %a: !h3.act<B, S, 6, f32>) {
  // expected-error @+1 {{[unpack] sample must have 16 columns, got 6}}
  %s, %as = h3.unpack %v, %a {nodes = ["unpack"], values = ["s", "a"]} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 6, f32>) -> (!h3.act<B, Nv, 6, f32>, !h3.act<B, Na, 6, f32>)
  return
}

// -----

// expected-error @+1 {{unknown row domain 'X' (S, Nt, Nv, Na, T, T3, 1, Sr)}}
func.func @bad_domain(%x: !h3.act<B, X, 24, bf16>) {
  return
}

// -----

// expected-error @+1 {{expected '>'}}
func.func @no_partials_type(%x: !h3.act<B, S, 24, f32, parts = 2>) {
  return
}

// -----

// expected-error @+1 {{only token domains (S, Nt, Nv, Na, Sr) carry a batch axis, not 'T'}}
func.func @bad_batch(%x: !h3.act<B, T, 24, f32>) {
  return
}

// -----

// expected-error @+1 {{element type must be bf16, f32, i64 or i32, got 'f16'}}
func.func @bad_dtype(%x: !h3.act<S, 24, f16>) {
  return
}

// -----

func.func @bad_order_kind(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{unknown order kind 'random' (k_chunks, lane_tree, flash, row_units)}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], order = #h3.order<random, acc = f32>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

// Section 4: every GEMM reduces K in one chain; the unit tree is gone.
func.func @bad_order_units(%x: !h3.act<B, S, 128, bf16>) {
  // expected-error @+1 {{k_chunks has one unit (K in one chain; docs/contract.md section 4), got units = 8}}
  %y = h3.linear %x {K = 128 : i64, N = 8 : i64, bias = [], weight = ["w"], order = #h3.order<k_chunks, k_step = 16, units = 8, acc = f32>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 128, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}

// -----

func.func @bad_shard(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{unknown shard kind 'diagonal' (column, replicated)}}
  %y = h3.swiglu %x {shard = #h3.shard<diagonal, tp = 2>, nodes = ["s"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 12, bf16>
  return
}

// -----

func.func @negative(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{[lin] K must not be negative, got -24}}
  %y = h3.linear %x {K = -24 : i64, N = 8 : i64, bias = [], weight = ["w"], nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return
}
