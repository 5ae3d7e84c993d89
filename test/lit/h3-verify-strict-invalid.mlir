// RUN: h3c-opt %s --h3-verify-strict -split-input-file -verify-diagnostics -allow-unregistered-dialect
// RUN: not h3c-opt %s --h3-verify-strict="arch=sm_80" -split-input-file -allow-unregistered-dialect 2>&1 | FileCheck %s --check-prefix=ARCH
// Every error path of h3-verify-strict, each naming the node.
// ARCH: error: h3-verify-strict: unsupported arch 'sm_80' (sm_90a, sm_100a)

func.func @no_order(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[blk.norm] reduction without an order (lane_tree required)}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], nodes = ["blk.norm"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

func.func @linear_no_order(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[context_embedder] reduction without an order (k_chunks required)}}
  %y = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["w"], nodes = ["context_embedder"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  return %y : !h3.act<B, S, 32, bf16>
}

// -----

// Layout ops move rows over the module's sp ranks and columns over its tp ranks.
module attributes {h3.sp = 2 : i64, h3.tp = 1 : i64} {
  func.func @rows_parts(%k: !h3.act<B, Sr, 32, bf16>) -> !h3.act<B, S, 32, bf16> {
    // expected-error @+1 {{moves 4 parts of rows but the module is sp = 2}}
    %g = h3.all_gather %k {axis = #h3.axis<rows>, parts = 4 : i64, nodes = [], values = ["g"]} : (!h3.act<B, Sr, 32, bf16>) -> !h3.act<B, S, 32, bf16>
    return %g : !h3.act<B, S, 32, bf16>
  }
}

// -----

func.func @cols_parts(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 12, bf16> {
  // expected-error @+1 {{moves 2 parts of cols but the module is tp = 1}}
  %p = h3.split %x {axis = #h3.axis<cols>, parts = 2 : i64, nodes = [], values = ["p"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 12, bf16>
  return %p : !h3.act<B, S, 12, bf16>
}

// -----

func.func @k_step(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[proj] k_step must be 16 (the MMA K width), got 8}}
  %y = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = [], weight = ["w"], order = #h3.order<k_chunks, k_step = 8, units = 1, acc = f32>, nodes = ["proj"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  return %y : !h3.act<B, S, 32, bf16>
}

// -----

func.func @acc(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[n] accumulator must be f32}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], order = #h3.order<lane_tree, lanes = 32, acc = bf16>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

func.func @lanes(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[n] lane_tree needs 32 lanes, got 64}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], order = #h3.order<lane_tree, lanes = 64, acc = f32>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

func.func @flash(%q: !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[attn] flash needs kv_block = 128 and k_step = 16}}
  %o = h3.attention %q, %q, %q {heads = 2 : i64, head_dim = 16 : i64, order = #h3.order<flash, kv_block = 64, k_step = 16, acc = f32, p = bf16>, nodes = ["attn"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %o : !h3.act<B, S, 32, bf16>
}

// -----

func.func @flash_p(%q: !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[attn] flash stores P as bf16}}
  %o = h3.attention %q, %q, %q {heads = 2 : i64, head_dim = 16 : i64, order = #h3.order<flash, kv_block = 128, k_step = 16, acc = f32, p = f32>, nodes = ["attn"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %o : !h3.act<B, S, 32, bf16>
}

// -----

func.func @head_dim(%q: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{[attn] no fixed-order attention kernel for head_dim 12 (needs a multiple of 16, at most 192)}}
  %o = h3.attention %q, %q, %q {heads = 2 : i64, head_dim = 12 : i64, order = #h3.order<flash, kv_block = 128, k_step = 16, acc = f32, p = bf16>, nodes = ["attn"], values = ["o"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %o : !h3.act<B, S, 24, bf16>
}

// -----

func.func @order_on_elementwise(%x: !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{[sw] reduces nothing but carries an order}}
  %y = "h3.swiglu"(%x) {nodes = ["sw"], values = ["y"], order = #h3.order<lane_tree, lanes = 32, acc = f32>} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, bf16>
  return %y : !h3.act<B, S, 32, bf16>
}

// -----

func.func @foreign(%x: i32) -> i32 {
  // expected-error @+1 {{'foo.add' op is not an h3 op: no fixed-order kernel implements it}}
  %y = "foo.add"(%x, %x) : (i32, i32) -> i32
  return %y : i32
}

// -----

module attributes {h3.tp = 2 : i64} {
  func.func @shard_mismatch(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 12, bf16> {
    // expected-error @+1 {{[n] is sharded over tp = 4 but the module is tp = 2}}
    %y = h3.swiglu %x {shard = #h3.shard<column, tp = 4>, nodes = ["n"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 12, bf16>
    return %y : !h3.act<B, S, 12, bf16>
  }
}

// -----

module attributes {h3.tp = 4 : i64} {
  func.func @gather_parts(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 48, bf16> {
    // expected-error @+1 {{moves 2 parts of cols but the module is tp = 4}}
    %g = h3.all_gather %x {axis = #h3.axis<cols>, parts = 2 : i64, nodes = [], values = ["g"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 48, bf16>
    return %g : !h3.act<B, S, 48, bf16>
  }
}

// -----

// Orders and shapes pass the static checks, but the kernel emitter has no qualified kernel: bf16 GEMMs need 16-byte
// rows (K % 8 == 0).
func.func @emitter(%x: !h3.act<B, S, 12, bf16> {h3.name = "@x"}) -> !h3.act<B, S, 8, bf16> {
  // expected-error @+1 {{[lin] no qualified fixed-order kernel: op 'linear' (node lin): bf16 linear needs K % 8 == 0 (16-byte rows), got K = 12}}
  %y = h3.linear %x {K = 12 : i64, N = 8 : i64, bias = [], weight = ["lin.weight"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["lin"], values = ["y"]} : (!h3.act<B, S, 12, bf16>) -> !h3.act<B, S, 8, bf16>
  return %y : !h3.act<B, S, 8, bf16>
}
