// RUN: h3c-opt %s -split-input-file -verify-diagnostics --h3-backward
// h3-backward's refusals (a node kind without a gradient yet, a fused or sharded graph, a module that already has a
// backward) and the gradient ops' verifiers (docs/contract.md section 14).

func.func @forward(%q: !h3.act<B, S, 32, bf16>, %k: !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16> {
  // expected-error @+1 {{h3-backward: [b.attn.norm_q] h3.qk_norm_rope has no gradient yet}}
  %qn, %kn = h3.qk_norm_rope %q, %k {eps = 1.0e-05 : f64, head_dim = 16 : i64, heads = 2 : i64, rotary_dim = 0 : i64, weight = ["a", "b"], nodes = ["b.attn.norm_q", "b.attn.norm_k"], values = ["qn", "kn"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  return %qn : !h3.act<B, S, 32, bf16>
}

// -----

func.func @forward(%a: !h3.act<B, S, 32, bf16>, %x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{h3-backward: [b.attn.to_out.0] is a fused linear (an epilogue): differentiate the unfused graph (before h3-fuse)}}
  %o = h3.linear %a, %x {K = 32 : i64, N = 24 : i64, bias = [], epilogue = #h3.epilogue<residual>, weight = ["w"], nodes = ["b.attn.to_out.0", "b.residual"], values = ["o"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %o : !h3.act<B, S, 24, bf16>
}

// -----

func.func @forward(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  // expected-error @+1 {{h3-backward: [b.norm] is split over tensor-parallel ranks: differentiate the unsharded graph (before h3-shard-tp)}}
  %y = h3.qk_norm %x {eps = 1.0e-05 : f64, head_dim = 12 : i64, heads = 2 : i64, weight = ["w"], shard = #h3.shard<column, tp = 2>, nodes = ["b.norm"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %y : !h3.act<B, S, 24, bf16>
}

// -----

// A value no gradient reaches (the integer row metadata, a table a host op computes) needs no gradient op: only the
// ops on a path to an output are differentiated, so a graph with an unsupported op off that path is fine.
func.func @forward(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
  return %x : !h3.act<B, S, 24, bf16>
}
// expected-error @+1 {{h3-backward: the module already has a backward function}}
func.func @backward(%g: !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32> {
  return %g : !h3.act<B, S, 24, f32>
}

// -----

// expected-error @+1 {{h3-backward: the module must hold one forward function, it holds more}}
module {
  func.func @a(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
    return %x : !h3.act<B, S, 24, bf16>
  }
  func.func @b(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16> {
    return %x : !h3.act<B, S, 24, bf16>
  }
}

// -----

func.func @forward(%x: !h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>) {
  // The backward visits b first, so a's gradient op is the second to name grad:w.
  // expected-error @below {{h3-backward: [a] grad:w: the tensor is read by two ops (tied weights have no gradient sum yet)}}
  %a = h3.linear %x {K = 24 : i64, N = 24 : i64, bias = [], weight = ["w"], nodes = ["a"], values = ["a"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  %b = h3.linear %x {K = 24 : i64, N = 24 : i64, bias = [], weight = ["w"], nodes = ["b"], values = ["b"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return %a, %b : !h3.act<B, S, 24, bf16>, !h3.act<B, S, 24, bf16>
}
