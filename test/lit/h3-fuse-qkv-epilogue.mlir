// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse="arch=sm_90a" -split-input-file | FileCheck %s
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse="arch=sm_90a" -split-input-file | h3c-opt -split-input-file | FileCheck %s
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse="arch=sm_100a" -split-input-file | FileCheck %s --check-prefix=APART
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse="arch=sm_90a wgmma=false" -split-input-file | FileCheck %s --check-prefix=APART
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse="arch=sm_90a tp=2" -split-input-file | FileCheck %s --check-prefix=APART
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse -split-input-file | FileCheck %s --check-prefix=APART
// The Hopper-only fusion of h3-fuse: qkv_linear + the qk_norm_rope of its q and k -> qkv_linear with the
// qk_norm_rope epilogue, on sm_90a with wgmma and tp = 1 only, for head_dim 128 and a rotary width % 16 == 0;
// everywhere else (sm_100a, --no-wgmma, tp > 1, no arch, other shapes, other readers of q or k) the two ops stay.

// The full config's block shape (head_dim 128, rotary 96): one op, listing all seven nodes; outputs rope_q, rope_k, to_v.
// CHECK-LABEL: func.func @block_d128_r96
// CHECK-NOT: h3.qk_norm_rope
// CHECK: %[[Q:.*]], %[[K:.*]], %[[V:.*]] = h3.qkv_linear %{{.*}}, %{{.*}}, %{{.*}} {K = 64 : i64, bias = [], epilogue = #h3.epilogue<qk_norm_rope>, eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64
// CHECK-SAME: nodes = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v", "transformer_blocks.0.attn.norm_q", "transformer_blocks.0.attn.norm_k", "transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k"]
// CHECK-SAME: order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// CHECK-SAME: rotary_dim = 96 : i64
// CHECK-SAME: values = ["transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k", "transformer_blocks.0.attn.to_v"]
// CHECK-SAME: weight = ["transformer_blocks.0.attn.to_q.weight", "transformer_blocks.0.attn.to_k.weight", "transformer_blocks.0.attn.to_v.weight", "transformer_blocks.0.attn.norm_q.weight", "transformer_blocks.0.attn.norm_k.weight"]
// CHECK-NOT: h3.qk_norm_rope
// CHECK: h3.attention %[[Q]], %[[K]], %[[V]]
// APART-LABEL: func.func @block_d128_r96
// APART-NOT: epilogue = #h3.epilogue<qk_norm_rope>
// APART: h3.qkv_linear
// APART-NEXT: h3.qk_norm_rope
// APART-NEXT: h3.attention
func.func @block_d128_r96(%x: !h3.act<B, S, 64, bf16>, %cos: !h3.act<S, 96, f32>, %sin: !h3.act<S, 96, f32>) -> (!h3.act<B, S, 256, bf16>) {
  %q = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_q"], values = ["transformer_blocks.0.attn.to_q"], weight = ["transformer_blocks.0.attn.to_q.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %k = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_k"], values = ["transformer_blocks.0.attn.to_k"], weight = ["transformer_blocks.0.attn.to_k.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %v = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_v"], values = ["transformer_blocks.0.attn.to_v"], weight = ["transformer_blocks.0.attn.to_v.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %nq = h3.qk_norm %q {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_q"], values = ["transformer_blocks.0.attn.norm_q"], weight = ["transformer_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %nk = h3.qk_norm %k {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_k"], values = ["transformer_blocks.0.attn.norm_k"], weight = ["transformer_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %rq = h3.rope %nq, %cos, %sin {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], rotary_dim = 96 : i64, values = ["transformer_blocks.0.attn.rope_q"]} : (!h3.act<B, S, 256, bf16>, !h3.act<S, 96, f32>, !h3.act<S, 96, f32>) -> !h3.act<B, S, 256, bf16>
  %rk = h3.rope %nk, %cos, %sin {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], rotary_dim = 96 : i64, values = ["transformer_blocks.0.attn.rope_k"]} : (!h3.act<B, S, 256, bf16>, !h3.act<S, 96, f32>, !h3.act<S, 96, f32>) -> !h3.act<B, S, 256, bf16>
  %o = h3.attention %rq, %rk, %v {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["transformer_blocks.0.attn.attention"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  return %o : !h3.act<B, S, 256, bf16>
}

// -----

// A refiner block (no rope): the norms alone become the epilogue, rotary_dim 0, no tables.
// CHECK-LABEL: func.func @refiner_no_rope
// CHECK: h3.qkv_linear %{{[a-z0-9]*}} {{{.*}}epilogue = #h3.epilogue<qk_norm_rope>{{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.to_q", "token_refiner.refiner_blocks.0.attn.to_k", "token_refiner.refiner_blocks.0.attn.to_v", "token_refiner.refiner_blocks.0.attn.norm_q", "token_refiner.refiner_blocks.0.attn.norm_k"]
// CHECK-SAME: rotary_dim = 0 : i64
// CHECK-NOT: h3.qk_norm_rope
// APART-LABEL: func.func @refiner_no_rope
// APART-NOT: epilogue = #h3.epilogue<qk_norm_rope>
// APART: h3.qk_norm_rope
func.func @refiner_no_rope(%x: !h3.act<B, Nt, 64, bf16>) -> (!h3.act<B, Nt, 256, bf16>) {
  %q = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_q"], values = ["token_refiner.refiner_blocks.0.attn.to_q"], weight = ["token_refiner.refiner_blocks.0.attn.to_q.weight"]} : (!h3.act<B, Nt, 64, bf16>) -> !h3.act<B, Nt, 256, bf16>
  %k = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_k"], values = ["token_refiner.refiner_blocks.0.attn.to_k"], weight = ["token_refiner.refiner_blocks.0.attn.to_k.weight"]} : (!h3.act<B, Nt, 64, bf16>) -> !h3.act<B, Nt, 256, bf16>
  %v = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["token_refiner.refiner_blocks.0.attn.to_v"], values = ["token_refiner.refiner_blocks.0.attn.to_v"], weight = ["token_refiner.refiner_blocks.0.attn.to_v.weight"]} : (!h3.act<B, Nt, 64, bf16>) -> !h3.act<B, Nt, 256, bf16>
  %nq = h3.qk_norm %q {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["token_refiner.refiner_blocks.0.attn.norm_q"], values = ["token_refiner.refiner_blocks.0.attn.norm_q"], weight = ["token_refiner.refiner_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, Nt, 256, bf16>) -> !h3.act<B, Nt, 256, bf16>
  %nk = h3.qk_norm %k {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["token_refiner.refiner_blocks.0.attn.norm_k"], values = ["token_refiner.refiner_blocks.0.attn.norm_k"], weight = ["token_refiner.refiner_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, Nt, 256, bf16>) -> !h3.act<B, Nt, 256, bf16>
  %o = h3.attention %nq, %nk, %v {head_dim = 128 : i64, heads = 2 : i64, nodes = ["token_refiner.refiner_blocks.0.attn.attention"], values = ["token_refiner.refiner_blocks.0.attn.attention"]} : (!h3.act<B, Nt, 256, bf16>, !h3.act<B, Nt, 256, bf16>, !h3.act<B, Nt, 256, bf16>) -> !h3.act<B, Nt, 256, bf16>
  return %o : !h3.act<B, Nt, 256, bf16>
}

// -----

// head_dim 16 (the tiny config): a head is not one quad's registers: apart.
// CHECK-LABEL: func.func @head_dim_16
// CHECK-NOT: epilogue = #h3.epilogue<qk_norm_rope>
// CHECK: h3.qkv_linear
// CHECK-NEXT: h3.qk_norm_rope
func.func @head_dim_16(%x: !h3.act<B, S, 64, bf16>, %cos: !h3.act<S, 12, f32>, %sin: !h3.act<S, 12, f32>) -> (!h3.act<B, S, 64, bf16>) {
  %q = h3.linear %x {K = 64 : i64, N = 64 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_q"], values = ["transformer_blocks.0.attn.to_q"], weight = ["transformer_blocks.0.attn.to_q.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, bf16>
  %k = h3.linear %x {K = 64 : i64, N = 64 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_k"], values = ["transformer_blocks.0.attn.to_k"], weight = ["transformer_blocks.0.attn.to_k.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, bf16>
  %v = h3.linear %x {K = 64 : i64, N = 64 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_v"], values = ["transformer_blocks.0.attn.to_v"], weight = ["transformer_blocks.0.attn.to_v.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, bf16>
  %nq = h3.qk_norm %q {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 4 : i64, nodes = ["transformer_blocks.0.attn.norm_q"], values = ["transformer_blocks.0.attn.norm_q"], weight = ["transformer_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, bf16>
  %nk = h3.qk_norm %k {eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 4 : i64, nodes = ["transformer_blocks.0.attn.norm_k"], values = ["transformer_blocks.0.attn.norm_k"], weight = ["transformer_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, bf16>
  %rq = h3.rope %nq, %cos, %sin {head_dim = 16 : i64, heads = 4 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], rotary_dim = 12 : i64, values = ["transformer_blocks.0.attn.rope_q"]} : (!h3.act<B, S, 64, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 64, bf16>
  %rk = h3.rope %nk, %cos, %sin {head_dim = 16 : i64, heads = 4 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], rotary_dim = 12 : i64, values = ["transformer_blocks.0.attn.rope_k"]} : (!h3.act<B, S, 64, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 64, bf16>
  %o = h3.attention %rq, %rk, %v {head_dim = 16 : i64, heads = 4 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["transformer_blocks.0.attn.attention"]} : (!h3.act<B, S, 64, bf16>, !h3.act<B, S, 64, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, bf16>
  return %o : !h3.act<B, S, 64, bf16>
}

// -----

// A rotary width that is not a multiple of 16: a rotation partner would live in another thread: apart.
// CHECK-LABEL: func.func @rotary_24
// CHECK-NOT: epilogue = #h3.epilogue<qk_norm_rope>
// CHECK: h3.qkv_linear
// CHECK-NEXT: h3.qk_norm_rope
func.func @rotary_24(%x: !h3.act<B, S, 64, bf16>, %cos: !h3.act<S, 24, f32>, %sin: !h3.act<S, 24, f32>) -> (!h3.act<B, S, 256, bf16>) {
  %q = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_q"], values = ["transformer_blocks.0.attn.to_q"], weight = ["transformer_blocks.0.attn.to_q.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %k = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_k"], values = ["transformer_blocks.0.attn.to_k"], weight = ["transformer_blocks.0.attn.to_k.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %v = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_v"], values = ["transformer_blocks.0.attn.to_v"], weight = ["transformer_blocks.0.attn.to_v.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %nq = h3.qk_norm %q {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_q"], values = ["transformer_blocks.0.attn.norm_q"], weight = ["transformer_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %nk = h3.qk_norm %k {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_k"], values = ["transformer_blocks.0.attn.norm_k"], weight = ["transformer_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %rq = h3.rope %nq, %cos, %sin {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], rotary_dim = 24 : i64, values = ["transformer_blocks.0.attn.rope_q"]} : (!h3.act<B, S, 256, bf16>, !h3.act<S, 24, f32>, !h3.act<S, 24, f32>) -> !h3.act<B, S, 256, bf16>
  %rk = h3.rope %nk, %cos, %sin {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], rotary_dim = 24 : i64, values = ["transformer_blocks.0.attn.rope_k"]} : (!h3.act<B, S, 256, bf16>, !h3.act<S, 24, f32>, !h3.act<S, 24, f32>) -> !h3.act<B, S, 256, bf16>
  %o = h3.attention %rq, %rk, %v {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["transformer_blocks.0.attn.attention"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  return %o : !h3.act<B, S, 256, bf16>
}

// -----

// The GEMM's k is read by another op too: its bf16 value must still exist: apart.
// CHECK-LABEL: func.func @k_read_twice
// CHECK-NOT: epilogue = #h3.epilogue<qk_norm_rope>
// CHECK: h3.qkv_linear
// CHECK-NEXT: h3.qk_norm_rope
func.func @k_read_twice(%x: !h3.act<B, S, 64, bf16>, %cos: !h3.act<S, 96, f32>, %sin: !h3.act<S, 96, f32>) -> (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>) {
  %q = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_q"], values = ["transformer_blocks.0.attn.to_q"], weight = ["transformer_blocks.0.attn.to_q.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %k = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_k"], values = ["transformer_blocks.0.attn.to_k"], weight = ["transformer_blocks.0.attn.to_k.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %v = h3.linear %x {K = 64 : i64, N = 256 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_v"], values = ["transformer_blocks.0.attn.to_v"], weight = ["transformer_blocks.0.attn.to_v.weight"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 256, bf16>
  %nq = h3.qk_norm %q {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_q"], values = ["transformer_blocks.0.attn.norm_q"], weight = ["transformer_blocks.0.attn.norm_q.weight"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %nk = h3.qk_norm %k {eps = 1.000000e-05 : f64, head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.norm_k"], values = ["transformer_blocks.0.attn.norm_k"], weight = ["transformer_blocks.0.attn.norm_k.weight"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %rq = h3.rope %nq, %cos, %sin {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_q"], rotary_dim = 96 : i64, values = ["transformer_blocks.0.attn.rope_q"]} : (!h3.act<B, S, 256, bf16>, !h3.act<S, 96, f32>, !h3.act<S, 96, f32>) -> !h3.act<B, S, 256, bf16>
  %rk = h3.rope %nk, %cos, %sin {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.rope_k"], rotary_dim = 96 : i64, values = ["transformer_blocks.0.attn.rope_k"]} : (!h3.act<B, S, 256, bf16>, !h3.act<S, 96, f32>, !h3.act<S, 96, f32>) -> !h3.act<B, S, 256, bf16>
  %o = h3.attention %rq, %rk, %v {head_dim = 128 : i64, heads = 2 : i64, nodes = ["transformer_blocks.0.attn.attention"], values = ["transformer_blocks.0.attn.attention"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  %u = h3.silu %k {nodes = ["u"], values = ["u"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, bf16>
  return %o, %u : !h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>
}
