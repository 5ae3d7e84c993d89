// RUN: h3c-opt %s --h3-fuse-grad="swiglu-dx=true" -split-input-file | FileCheck %s
// RUN: h3c-opt %s --h3-fuse-grad="swiglu-dx=true" -split-input-file | h3c-opt -split-input-file | FileCheck %s
// Without swiglu-dx (the default) a swiglu_grad stays apart from the dX that is its dy.
// RUN: h3c-opt %s --h3-fuse-grad -split-input-file | FileCheck %s --check-prefix=NOSW
// h3-fuse-grad (docs/contract.md section 14): an h3.grad_add one of whose parts is an h3.linear_grad_x result read
// nowhere else, with the other part defined before that op, becomes the op's residual (the op's result is the sum,
// named as the grad_add's was). Of two dX parts the one with the longer reduction takes it (moved after the other
// where needed), on a tie the later; so a chain fuses link by link. A dX read twice, one that already has a residual
// and parts that are no dX stay as they are.
// Then a qk_norm's h3.rms_norm_grad (group = head_dim) whose dy is an h3.rope_grad's dx read nowhere else takes the
// rope_grad in: it reads the rope's output gradient and tables, with rotary_dim, and names both nodes. And a gradient
// that two or more linear gradients round to bf16 is rounded once (h3.grad_round) for them all, by the op that
// computes it where that op can store bf16 and nothing else reads the F32 value.

// A chain of three dX parts of one value (to_v's, to_k's, to_q's): each later dX adds the sum so far.
// CHECK-LABEL: func.func @chain
// CHECK-NEXT: %[[V:.*]] = h3.linear_grad_x %arg0 {{{.*}}values = ["grad:x"], weight = ["wv"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
// CHECK-NEXT: %[[K:.*]] = h3.linear_grad_x %arg1, %[[V]] {{{.*}}values = ["grad:x+k"], weight = ["wk"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
// CHECK-NEXT: %[[Q:.*]] = h3.linear_grad_x %arg2, %[[K]] {{{.*}}values = ["grad:x+q"], weight = ["wq"]}
// CHECK-NOT: h3.grad_add
// CHECK-NEXT: return %[[Q]]
func.func @chain(%gv: !h3.act<B, S, 32, f32>, %gk: !h3.act<B, S, 32, f32>, %gq: !h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32> {
  %xv = h3.linear_grad_x %gv {K = 24 : i64, N = 32 : i64, weight = ["wv"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["v"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %xk = h3.linear_grad_x %gk {K = 24 : i64, N = 32 : i64, weight = ["wk"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["k"], values = ["grad:x~2"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %s1 = h3.grad_add %xv, %xk {nodes = ["k"], values = ["grad:x+k"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  %xq = h3.linear_grad_x %gq {K = 24 : i64, N = 32 : i64, weight = ["wq"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["q"], values = ["grad:x~3"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %s2 = h3.grad_add %s1, %xq {nodes = ["q"], values = ["grad:x+q"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s2 : !h3.act<B, S, 24, f32>
}

// -----

// The later part is a (b computed first): a's op takes b as its residual.
// CHECK-LABEL: func.func @later_a
// CHECK-NEXT: %[[B:.*]] = h3.linear_grad_x %arg0 {
// CHECK-NEXT: %[[A:.*]] = h3.linear_grad_x %arg1, %[[B]] {{{.*}}values = ["grad:x+a"]
// CHECK-NEXT: return %[[A]]
func.func @later_a(%g0: !h3.act<B, S, 32, f32>, %g1: !h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32> {
  %b = h3.linear_grad_x %g0 {K = 24 : i64, N = 32 : i64, weight = ["w0"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["b"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %a = h3.linear_grad_x %g1 {K = 24 : i64, N = 32 : i64, weight = ["w1"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["a"], values = ["grad:x~2"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %a, %b {nodes = ["a"], values = ["grad:x+a"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s : !h3.act<B, S, 24, f32>
}

// -----

// Both parts dXs, the sum goes into the one with the longer reduction (N: its GEMM hides the residual's load; a LoRA
// path's dX of N = 64 is bound by memory), which moves after the other.
// CHECK-LABEL: func.func @longer_reduction
// CHECK-NEXT: %[[L:.*]] = h3.linear_grad_x %arg1 {{{.*}}weight = ["l.lora_down"]}
// CHECK-NEXT: %[[W:.*]] = h3.linear_grad_x %arg0, %[[L]] {{{.*}}values = ["grad:x+l"], weight = ["w"]}
// CHECK-NEXT: return %[[W]]
func.func @longer_reduction(%g: !h3.act<B, S, 256, f32>, %dt: !h3.act<B, S, 64, f32>) -> !h3.act<B, S, 24, f32> {
  %w = h3.linear_grad_x %g {K = 24 : i64, N = 256 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 256, f32>) -> !h3.act<B, S, 24, f32>
  %l = h3.linear_grad_x %dt {K = 24 : i64, N = 64 : i64, weight = ["l.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x~2"]} : (!h3.act<B, S, 64, f32>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %w, %l {nodes = ["l"], values = ["grad:x+l"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s : !h3.act<B, S, 24, f32>
}

// -----

// The dX is read twice (it is returned too), and its sibling is no dX: nothing fuses.
// CHECK-LABEL: func.func @read_twice
// CHECK-NEXT: %[[D:.*]] = h3.linear_grad_x %arg0 {
// CHECK-NEXT: %[[S:.*]] = h3.grad_add %arg1, %[[D]]
// CHECK-NEXT: return %[[S]], %[[D]]
func.func @read_twice(%g: !h3.act<B, S, 32, f32>, %p: !h3.act<B, S, 24, f32>) -> (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) {
  %d = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x~2"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %p, %d {nodes = ["l"], values = ["grad:x+l"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s, %d : !h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>
}

// -----

// The other part is computed after the dX: the dX moves to right before the grad_add's place (nothing else reads
// it) and takes the sum.
// CHECK-LABEL: func.func @other_later
// CHECK-NEXT: %[[E:.*]] = h3.swiglu_grad
// CHECK-NEXT: %[[D:.*]] = h3.linear_grad_x %arg0, %[[E]] {{{.*}}values = ["grad:x+s"]
// CHECK-NEXT: return %[[D]]
func.func @other_later(%g: !h3.act<B, S, 32, f32>, %dy: !h3.act<B, S, 12, f32>, %x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32> {
  %d = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %e = h3.swiglu_grad %dy, %x {nodes = ["s"], values = ["grad:x~2"]} : (!h3.act<B, S, 12, f32>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %d, %e {nodes = ["s"], values = ["grad:x+s"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s : !h3.act<B, S, 24, f32>
}

// -----

// A dX that has a residual already takes no second one; its sibling dX, later, takes it.
// CHECK-LABEL: func.func @has_residual
// CHECK-NEXT: %[[R:.*]] = h3.linear_grad_x %arg0, %arg2 {
// CHECK-NEXT: %[[L:.*]] = h3.linear_grad_x %arg1, %[[R]] {
// CHECK-NEXT: return %[[L]]
func.func @has_residual(%g0: !h3.act<B, S, 32, f32>, %g1: !h3.act<B, S, 32, f32>, %p: !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32> {
  %r = h3.linear_grad_x %g0, %p {K = 24 : i64, N = 32 : i64, weight = ["w0"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["a"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  %l = h3.linear_grad_x %g1 {K = 24 : i64, N = 32 : i64, weight = ["w1"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["b"], values = ["grad:x~2"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %r, %l {nodes = ["b"], values = ["grad:x+b"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s : !h3.act<B, S, 24, f32>
}

// -----

// One g read by three linear gradients that multiply bf(g) (a bf16 weight's dX, its LoRA dt, the up slot's dW
// without a bias gradient): one h3.grad_round before the first of them, which all read. An F32 weight's dX (the fma
// chain of the F32 g) and a dW with a bias gradient (dbias sums the F32 g) keep g.
// CHECK-LABEL: func.func @shared_rounding
// CHECK-NEXT: %[[GB:.*]] = h3.grad_round %arg0 {nodes = ["l"], values = ["@grad:y~bf16"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 32, bf16>
// CHECK-NEXT: h3.linear_grad_w %[[GB]], %arg1 {{{.*}}grads = ["grad:l.lora_up"]
// CHECK-NEXT: h3.linear_grad_w %arg0, %arg2 {{{.*}}grads = ["grad:w", "grad:b"]
// CHECK-NEXT: h3.linear_grad_x %[[GB]] {{{.*}}weight = ["l.lora_up"]} : (!h3.act<B, S, 32, bf16>)
// CHECK-NEXT: h3.linear_grad_x %[[GB]] {{{.*}}weight = ["w"]} : (!h3.act<B, S, 32, bf16>)
// CHECK-NEXT: h3.linear_grad_x %arg0 {{{.*}}weight = ["proj_out.weight"]} : (!h3.act<B, S, 32, f32>)
func.func @shared_rounding(%g: !h3.act<B, S, 32, f32> {h3.name = "@grad:y"}, %t: !h3.act<B, S, 64, bf16>, %x: !h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 64, f32>, !h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) {
  h3.linear_grad_w %g, %t {K = 64 : i64, N = 32 : i64, bias = [], grads = ["grad:l.lora_up"], weight = ["l.lora_up"], nodes = ["l"], values = []} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 64, bf16>) -> ()
  h3.linear_grad_w %g, %x {K = 24 : i64, N = 32 : i64, bias = ["b"], grads = ["grad:w", "grad:b"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 24, bf16>) -> ()
  %dt = h3.linear_grad_x %g {K = 64 : i64, N = 32 : i64, weight = ["l.lora_up"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:t"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 64, f32>
  %dx = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %df = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["proj_out.weight"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["proj_out"], values = ["grad:x2"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  return %dt, %dx, %df : !h3.act<B, S, 64, f32>, !h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>
}

// -----

// One reader that multiplies bf(g) (the other reads the F32 g): nothing to share, no grad_round.
// CHECK-LABEL: func.func @one_reader
// CHECK-NOT: h3.grad_round
// CHECK: return
func.func @one_reader(%g: !h3.act<B, S, 32, f32>) -> (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) {
  %dx = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %df = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["proj_out.weight"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["proj_out"], values = ["grad:x2"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  return %dx, %df : !h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>
}

// -----

// g computed by swiglu_grad and read only by the linear gradients that round it: swiglu_grad stores bf(g) itself
// (its result bf16) and no grad_round remains. Read also by an op that needs the F32 g (a grad_add), it keeps F32
// and a grad_round serves the rounding readers.
// CHECK-LABEL: func.func @fold_into_producer
// CHECK-NEXT: %[[G:.*]] = h3.swiglu_grad %arg0, %arg1 {{{.*}}values = ["grad:h"]} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
// CHECK-NEXT: h3.linear_grad_w %[[G]], %arg2
// CHECK-NEXT: h3.linear_grad_x %[[G]] {
// CHECK-NOT: h3.grad_round
// CHECK: return
func.func @fold_into_producer(%dy: !h3.act<B, S, 16, f32>, %h: !h3.act<B, S, 32, bf16>, %x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32> {
  %g = h3.swiglu_grad %dy, %h {nodes = ["s"], values = ["grad:h"]} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, f32>
  h3.linear_grad_w %g, %x {K = 24 : i64, N = 32 : i64, bias = [], grads = ["grad:w"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 24, bf16>) -> ()
  %dx = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  return %dx : !h3.act<B, S, 24, f32>
}

// -----

// CHECK-LABEL: func.func @producer_read_in_f32
// CHECK-NEXT: %[[G:.*]] = h3.swiglu_grad {{.*}} -> !h3.act<B, S, 32, f32>
// CHECK-NEXT: %[[GB:.*]] = h3.grad_round %[[G]]
// CHECK-NEXT: h3.linear_grad_w %[[GB]], %arg2
// CHECK-NEXT: h3.linear_grad_x %[[GB]] {
// CHECK-NEXT: h3.grad_add %[[G]], %arg3
func.func @producer_read_in_f32(%dy: !h3.act<B, S, 16, f32>, %h: !h3.act<B, S, 32, bf16>, %x: !h3.act<B, S, 24, bf16>, %p: !h3.act<B, S, 32, f32>) -> (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, f32>) {
  %g = h3.swiglu_grad %dy, %h {nodes = ["s"], values = ["grad:h"]} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, f32>
  h3.linear_grad_w %g, %x {K = 24 : i64, N = 32 : i64, bias = [], grads = ["grad:w"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 24, bf16>) -> ()
  %dx = h3.linear_grad_x %g {K = 24 : i64, N = 32 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %g, %p {nodes = ["s"], values = ["grad:h+s"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>) -> !h3.act<B, S, 32, f32>
  return %dx, %s : !h3.act<B, S, 24, f32>, !h3.act<B, S, 32, f32>
}

// -----

// A qk_norm's norm gradient takes in the rope_grad before it: dy the rope's output gradient, the tables after x.
// CHECK-LABEL: func.func @rope_into_norm
// CHECK-NEXT: %[[N:.*]] = h3.rms_norm_grad %arg0, %arg1, %arg2, %arg3 {eps = 1.000000e-05 : f64, grads = [], group = 16 : i64, nodes = ["n", "r"], rotary_dim = 12 : i64, values = ["grad:q"], weight = []} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32>
// CHECK-NOT: h3.rope_grad
// CHECK-NEXT: return %[[N]]
func.func @rope_into_norm(%dr: !h3.act<B, S, 32, f32>, %q: !h3.act<B, S, 32, bf16>, %cos: !h3.act<S, 12, f32>, %sin: !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32> {
  %dn = h3.rope_grad %dr, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, rotary_dim = 12 : i64, nodes = ["r"], values = ["grad:n"]} : (!h3.act<B, S, 32, f32>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32>
  %dq = h3.rms_norm_grad %dn, %q {eps = 1.0e-05 : f64, group = 16 : i64, weight = [], grads = [], nodes = ["n"], values = ["grad:q"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, f32>
  return %dq : !h3.act<B, S, 32, f32>
}

// -----

// The rope_grad's dx is read twice (returned too), or the norm's group is not the rope's head: nothing folds.
// CHECK-LABEL: func.func @rope_read_twice
// CHECK-NEXT: h3.rope_grad
// CHECK-NEXT: h3.rms_norm_grad %{{.*}}, %arg1 {
// CHECK-LABEL: func.func @rope_other_group
// CHECK-NEXT: h3.rope_grad
// CHECK-NEXT: h3.rms_norm_grad %{{.*}}, %arg1 {
func.func @rope_read_twice(%dr: !h3.act<B, S, 32, f32>, %q: !h3.act<B, S, 32, bf16>, %cos: !h3.act<S, 12, f32>, %sin: !h3.act<S, 12, f32>) -> (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>) {
  %dn = h3.rope_grad %dr, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, rotary_dim = 12 : i64, nodes = ["r"], values = ["grad:n"]} : (!h3.act<B, S, 32, f32>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32>
  %dq = h3.rms_norm_grad %dn, %q {eps = 1.0e-05 : f64, group = 16 : i64, weight = [], grads = [], nodes = ["n"], values = ["grad:q"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, f32>
  return %dq, %dn : !h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>
}
func.func @rope_other_group(%dr: !h3.act<B, S, 32, f32>, %q: !h3.act<B, S, 32, bf16>, %cos: !h3.act<S, 12, f32>, %sin: !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32> {
  %dn = h3.rope_grad %dr, %cos, %sin {head_dim = 16 : i64, heads = 2 : i64, rotary_dim = 12 : i64, nodes = ["r"], values = ["grad:n"]} : (!h3.act<B, S, 32, f32>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32>
  %dq = h3.rms_norm_grad %dn, %q {eps = 1.0e-05 : f64, group = 32 : i64, weight = [], grads = [], nodes = ["n"], values = ["grad:q"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, f32>
  return %dq : !h3.act<B, S, 32, f32>
}

// -----

// The residual stream's gradient plus a norm_modulate_grad's dx (read only by the sum, the other part before it):
// the norm gradient adds it as it stores dx (its residual, after the row meta), named as the sum.
// CHECK-LABEL: func.func @sum_into_norm
// (Where that part is a dX read only here, FuseGradAdd puts the sum in the dX instead: @chain.)
// CHECK-NEXT: %[[R:.*]] = h3.rms_norm_grad %arg0, %arg2 {
// CHECK-NEXT: %[[DX:.*]], %{{.*}} = h3.norm_modulate_grad %arg1, %arg2, %arg3, %arg4, %arg5, %[[R]] {{{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 2, 1>{{.*}}values = ["grad:r+n", "grad:t"]
// CHECK-NOT: h3.grad_add
// CHECK: return %[[DX]]
func.func @sum_into_norm(%g: !h3.act<B, S, 24, f32>, %dy: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>) {
  %r = h3.rms_norm_grad %g, %x {eps = 1.0e-05 : f64, group = 24 : i64, weight = [], grads = [], nodes = ["m"], values = ["grad:r"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32>
  %dx, %dt = h3.norm_modulate_grad %dy, %x, %t, %ts, %tags {eps = 1.0e-05 : f64, grads = [], nodes = ["n"], num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 2, 0>, row_index = #h3.row_index<adaln>, scale_chunk = 4 : i64, shift_chunk = 3 : i64, values = ["grad:n", "grad:t"], weight = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>)
  %s = h3.grad_add %r, %dx {nodes = ["n"], values = ["grad:r+n"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s, %dt : !h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>
}

// -----

// The other part comes after the norm gradient: nothing fuses (the op does not move).
// CHECK-LABEL: func.func @sum_after_norm
// CHECK: h3.norm_modulate_grad {{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 2, 0>
// CHECK: h3.grad_add
func.func @sum_after_norm(%g: !h3.act<B, S, 24, f32>, %dy: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>) {
  %dx, %dt = h3.norm_modulate_grad %dy, %x, %t, %ts, %tags {eps = 1.0e-05 : f64, grads = [], nodes = ["n"], num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 2, 0>, row_index = #h3.row_index<adaln>, scale_chunk = 4 : i64, shift_chunk = 3 : i64, values = ["grad:n", "grad:t"], weight = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>)
  %r = h3.rms_norm_grad %g, %x {eps = 1.0e-05 : f64, group = 24 : i64, weight = [], grads = [], nodes = ["m"], values = ["grad:r"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32>
  %s = h3.grad_add %r, %dx {nodes = ["n"], values = ["grad:r+n"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %s, %dt : !h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>
}

// -----

// A bf16 linear's dX whose residual is a LoRA down path's dX (its g bf16, a grad_round's bf(dt)) read nowhere else
// takes the path in: lora_t = the path's g, lora_k = its N, the down slot its second weight, the path's residual its
// residual. The path may be another node's over the same x (k's into q's): the op keeps its own node.
// CHECK-LABEL: func.func @lora_path_taken_in
// CHECK-NEXT: %[[W:.*]] = h3.linear_grad_x %arg0, %arg2, %arg1 {K = 128 : i64, N = 256 : i64, lora_k = 64 : i64, nodes = ["q"], operandSegmentSizes = array<i32: 1, 1, 1, 0>, {{.*}}values = ["grad:x+q"], weight = ["wq", "k.lora_down"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 128, f32>
// CHECK-NEXT: return %[[W]]
func.func @lora_path_taken_in(%gb: !h3.act<B, S, 256, bf16>, %dt: !h3.act<B, S, 64, bf16>, %r: !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32> {
  %l = h3.linear_grad_x %dt, %r {K = 128 : i64, N = 64 : i64, weight = ["k.lora_down"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["k"], values = ["grad:x+k"]} : (!h3.act<B, S, 64, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %w = h3.linear_grad_x %gb, %l {K = 128 : i64, N = 256 : i64, weight = ["wq"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["q"], values = ["grad:x+q"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  return %w : !h3.act<B, S, 128, f32>
}

// -----

// From the sum: grad_add(dX, the path's dX) becomes dX's residual, then the path is taken in (no residual left).
// CHECK-LABEL: func.func @lora_path_from_the_sum
// CHECK-NEXT: %[[W:.*]] = h3.linear_grad_x %arg0, %arg1 {K = 128 : i64, N = 256 : i64, lora_k = 64 : i64, nodes = ["l"], operandSegmentSizes = array<i32: 1, 0, 1, 0>, {{.*}}values = ["grad:x+l"], weight = ["w", "l.lora_down"]}
// CHECK-NEXT: return %[[W]]
func.func @lora_path_from_the_sum(%gb: !h3.act<B, S, 256, bf16>, %dt: !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 128, f32> {
  %w = h3.linear_grad_x %gb {K = 128 : i64, N = 256 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 128, f32>
  %l = h3.linear_grad_x %dt {K = 128 : i64, N = 64 : i64, weight = ["l.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x~2"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 128, f32>
  %s = h3.grad_add %w, %l {nodes = ["l"], values = ["grad:x+l"]} : (!h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  return %s : !h3.act<B, S, 128, f32>
}

// -----

// Not taken in: the path's g is F32 (its op rounds it), the path's dX is read twice, the weight is no down slot, the
// path is wider than one k-block, the dX has 64 columns or fewer (the skinny forms walk k-tiles of 128).
// CHECK-LABEL: func.func @lora_path_kept
// CHECK-COUNT-10: h3.linear_grad_x
// CHECK-NOT: lora_k
func.func @lora_path_kept(%gb: !h3.act<B, S, 256, bf16>, %dtf: !h3.act<B, S, 64, f32>, %dt: !h3.act<B, S, 64, bf16>, %dt2: !h3.act<B, S, 128, bf16>) -> (!h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 24, f32>) {
  %l1 = h3.linear_grad_x %dtf {K = 128 : i64, N = 64 : i64, weight = ["a.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["a"], values = ["p1"]} : (!h3.act<B, S, 64, f32>) -> !h3.act<B, S, 128, f32>
  %w1 = h3.linear_grad_x %gb, %l1 {K = 128 : i64, N = 256 : i64, weight = ["wa"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["a"], values = ["s1"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %l2 = h3.linear_grad_x %dt {K = 128 : i64, N = 64 : i64, weight = ["b.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["b"], values = ["p2"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 128, f32>
  %w2 = h3.linear_grad_x %gb, %l2 {K = 128 : i64, N = 256 : i64, weight = ["wb"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["b"], values = ["s2"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %l3 = h3.linear_grad_x %dt {K = 128 : i64, N = 64 : i64, weight = ["c.weight"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["c"], values = ["p3"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 128, f32>
  %w3 = h3.linear_grad_x %gb, %l3 {K = 128 : i64, N = 256 : i64, weight = ["wc"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["c"], values = ["s3"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %l4 = h3.linear_grad_x %dt2 {K = 128 : i64, N = 128 : i64, weight = ["d.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["d"], values = ["p4"]} : (!h3.act<B, S, 128, bf16>) -> !h3.act<B, S, 128, f32>
  %w4 = h3.linear_grad_x %gb, %l4 {K = 128 : i64, N = 256 : i64, weight = ["wd"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["d"], values = ["s4"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %l5 = h3.linear_grad_x %dt {K = 24 : i64, N = 64 : i64, weight = ["e.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["e"], values = ["p5"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 24, f32>
  %w5 = h3.linear_grad_x %gb, %l5 {K = 24 : i64, N = 256 : i64, weight = ["we"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["e"], values = ["s5"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %w1, %w2, %l2, %w3, %w4, %w5 : !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 24, f32>
}

// -----

// A swiglu_grad whose dy is a bf16 linear's dX read nowhere else goes into that dX: the op reads the swiglu's x as
// swiglu_x, its result is the swiglu_grad's (named as it was), and it names the linear's node then the swiglu's.
// CHECK-LABEL: func.func @swiglu_grad_taken_in
// NOSW-LABEL: func.func @swiglu_grad_taken_in
// NOSW: h3.linear_grad_x
// NOSW-NEXT: h3.swiglu_grad
// CHECK-NEXT: %[[D:.*]] = h3.linear_grad_x %arg0, %arg1 {K = 128 : i64, N = 256 : i64, nodes = ["fc2", "sw"], operandSegmentSizes = array<i32: 1, 0, 0, 1>, {{.*}}values = ["grad:h"], weight = ["w2"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32>
// CHECK-NEXT: return %[[D]]
func.func @swiglu_grad_taken_in(%gb: !h3.act<B, S, 256, bf16>, %x: !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32> {
  %d = h3.linear_grad_x %gb {K = 128 : i64, N = 256 : i64, weight = ["w2"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["fc2"], values = ["grad:y"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 128, f32>
  %s = h3.swiglu_grad %d, %x {nodes = ["sw"], values = ["grad:h"]} : (!h3.act<B, S, 128, f32>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32>
  return %s : !h3.act<B, S, 256, f32>
}

// -----

// With the dX's LoRA down path taken in first (its residual), then the swiglu_grad: lora_t and swiglu_x both read.
// CHECK-LABEL: func.func @swiglu_grad_after_the_lora_path
// CHECK-NEXT: %[[D:.*]] = h3.linear_grad_x %arg0, %arg1, %arg2 {K = 128 : i64, N = 256 : i64, lora_k = 64 : i64, nodes = ["fc2", "sw"], operandSegmentSizes = array<i32: 1, 0, 1, 1>, {{.*}}values = ["grad:h"], weight = ["w2", "fc2.lora_down"]}
// CHECK-NEXT: return %[[D]]
func.func @swiglu_grad_after_the_lora_path(%gb: !h3.act<B, S, 256, bf16>, %dt: !h3.act<B, S, 64, bf16>, %x: !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32> {
  %l = h3.linear_grad_x %dt {K = 128 : i64, N = 64 : i64, weight = ["fc2.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["fc2"], values = ["grad:y~2"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 128, f32>
  %d = h3.linear_grad_x %gb, %l {K = 128 : i64, N = 256 : i64, weight = ["w2"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["fc2"], values = ["grad:y"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %s = h3.swiglu_grad %d, %x {nodes = ["sw"], values = ["grad:h"]} : (!h3.act<B, S, 128, f32>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32>
  return %s : !h3.act<B, S, 256, f32>
}

// -----

// Not taken in: the dX is read twice, the dX has a residual that is no LoRA path (grad_add's sum), the dX has 64
// columns or fewer, x is f32 (the kernels read x = [v | g] as bf16).
// CHECK-LABEL: func.func @swiglu_grad_kept
// CHECK-COUNT-4: h3.swiglu_grad
// CHECK-NOT: operandSegmentSizes = array<i32: 1, {{[01]}}, {{[01]}}, 1>
func.func @swiglu_grad_kept(%gb: !h3.act<B, S, 256, bf16>, %x: !h3.act<B, S, 256, bf16>, %r: !h3.act<B, S, 128, f32>, %x2: !h3.act<B, S, 128, bf16>, %xf: !h3.act<B, S, 256, f32>) -> (!h3.act<B, S, 256, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 256, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 256, f32>) {
  %d1 = h3.linear_grad_x %gb {K = 128 : i64, N = 256 : i64, weight = ["w1"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["a"], values = ["d1"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 128, f32>
  %s1 = h3.swiglu_grad %d1, %x {nodes = ["sa"], values = ["s1"]} : (!h3.act<B, S, 128, f32>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32>
  %d2 = h3.linear_grad_x %gb, %r {K = 128 : i64, N = 256 : i64, weight = ["w2"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["b"], values = ["d2"]} : (!h3.act<B, S, 256, bf16>, !h3.act<B, S, 128, f32>) -> !h3.act<B, S, 128, f32>
  %s2 = h3.swiglu_grad %d2, %x {nodes = ["sb"], values = ["s2"]} : (!h3.act<B, S, 128, f32>, !h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 256, f32>
  %d3 = h3.linear_grad_x %gb {K = 64 : i64, N = 256 : i64, weight = ["w3"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["c"], values = ["d3"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 64, f32>
  %s3 = h3.swiglu_grad %d3, %x2 {nodes = ["sc"], values = ["s3"]} : (!h3.act<B, S, 64, f32>, !h3.act<B, S, 128, bf16>) -> !h3.act<B, S, 128, f32>
  %d4 = h3.linear_grad_x %gb {K = 128 : i64, N = 256 : i64, weight = ["w4"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["d"], values = ["d4"]} : (!h3.act<B, S, 256, bf16>) -> !h3.act<B, S, 128, f32>
  %s4 = h3.swiglu_grad %d4, %xf {nodes = ["sd"], values = ["s4"]} : (!h3.act<B, S, 128, f32>, !h3.act<B, S, 256, f32>) -> !h3.act<B, S, 256, f32>
  return %s1, %d1, %s2, %s3, %s4 : !h3.act<B, S, 256, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 256, f32>, !h3.act<B, S, 128, f32>, !h3.act<B, S, 256, f32>
}

// -----

// g computed by a bf16 linear's dX (N and K multiples of 8: LoRA's dt) and read only by the linear gradients that
// round it: the dX stores bf(g) itself (its result bf16), no grad_round remains. An F32 weight's dX (the fma chain,
// no tensor cores) keeps its F32 result and the grad_round.
// CHECK-LABEL: func.func @dx_stores_its_rounding
// CHECK-NEXT: %[[T:.*]] = h3.linear_grad_x %arg0 {{{.*}}values = ["grad:t"], weight = ["l.lora_up"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 16, bf16>
// CHECK-NEXT: h3.linear_grad_w %[[T]], %arg1
// CHECK-NEXT: h3.linear_grad_x %[[T]] {
// CHECK-NEXT: %[[F:.*]] = h3.linear_grad_x %arg2 {{{.*}}weight = ["proj_in.weight"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 16, f32>
// CHECK-NEXT: h3.grad_round %[[F]]
func.func @dx_stores_its_rounding(%gb: !h3.act<B, S, 32, bf16>, %x: !h3.act<B, S, 24, bf16>, %gf: !h3.act<B, S, 32, f32>) -> (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>) {
  %t = h3.linear_grad_x %gb {K = 16 : i64, N = 32 : i64, weight = ["l.lora_up"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:t"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 16, f32>
  h3.linear_grad_w %t, %x {K = 24 : i64, N = 16 : i64, bias = [], grads = ["grad:l.lora_down"], weight = ["l.lora_down"], nodes = ["l"], values = []} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 24, bf16>) -> ()
  %dx = h3.linear_grad_x %t {K = 24 : i64, N = 16 : i64, weight = ["l.lora_down"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["grad:x"]} : (!h3.act<B, S, 16, f32>) -> !h3.act<B, S, 24, f32>
  %f = h3.linear_grad_x %gf {K = 16 : i64, N = 32 : i64, weight = ["proj_in.weight"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["e"], values = ["grad:f"]} : (!h3.act<B, S, 32, f32>) -> !h3.act<B, S, 16, f32>
  h3.linear_grad_w %f, %x {K = 24 : i64, N = 16 : i64, bias = [], grads = ["grad:m"], weight = ["m"], nodes = ["m"], values = []} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 24, bf16>) -> ()
  %dxf = h3.linear_grad_x %f {K = 24 : i64, N = 16 : i64, weight = ["m"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["m"], values = ["grad:x~2"]} : (!h3.act<B, S, 16, f32>) -> !h3.act<B, S, 24, f32>
  return %dx, %dxf : !h3.act<B, S, 24, f32>, !h3.act<B, S, 24, f32>
}
