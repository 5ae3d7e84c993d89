// RUN: h3c-opt %s --h3-assign-reduction-order --h3-lora="rank=64" --h3-backward | FileCheck %s
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-lora="rank=64" --h3-backward | h3c-opt | FileCheck %s
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-lora="rank=64" --h3-backward="trainable=lora" | FileCheck %s --check-prefix=LORA
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-lora="rank=64" --h3-backward="trainable=*.to_q.lora_up,b?" | FileCheck %s --check-prefix=GLOB
// RUN: not h3c-opt %s --h3-assign-reduction-order --h3-lora="rank=64" --h3-backward="trainable=*.to_qq.*" 2>&1 | FileCheck %s --check-prefix=TYPO
// h3-backward of unmerged LoRA paths (docs/contract.md sections 13 and 14) on two unfused linears reading one x:
// each path is two GEMMs differentiated as linears (the up slot's gradient against lora_t, lora_t's gradient
// bf(g) up; the down slot's against x, x's part bf(dt) down), named after the base linear's node; x's gradient is
// the parts in the backward's visiting order (to_k's base, to_k's path, to_q's base, to_q's path). `trainable`
// keeps the selected tensors' gradients only (a linear_grad_w of frozen tensors is not emitted) and records the
// patterns on the function; a pattern that selects nothing is an error.

// CHECK-LABEL: func.func @backward
// CHECK-SAME: attributes {h3.trainable = ["*"]}
// to_k (visited first): its base weight and bias, then its up slot, lora_t's gradient, x's base part.
// CHECK: h3.linear_grad_w %[[GK:[^,]*]], %[[X:[^ ]*]] {K = 24 : i64, N = 32 : i64, bias = ["bk"], grads = ["grad:wk", "grad:bk"]{{.*}}weight = ["wk"]}
// CHECK-NEXT: h3.linear_grad_w %[[GK]], %[[TK:[^ ]*]] {K = 64 : i64, N = 32 : i64, bias = [], grads = ["grad:b.attn.to_k.lora_up"], nodes = ["b.attn.to_k"]{{.*}}weight = ["b.attn.to_k.lora_up"]}
// CHECK-SAME: (!h3.act<B, S, 32, f32>, !h3.act<B, S, 64, bf16>) -> ()
// CHECK-NEXT: %[[DTK:.*]] = h3.linear_grad_x %[[GK]] {K = 64 : i64, N = 32 : i64, nodes = ["b.attn.to_k"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, order = #h3.order<k_chunks{{.*}}values = ["grad:b.attn.to_k:lora_t"], weight = ["b.attn.to_k.lora_up"]}
// CHECK-NEXT: %[[XK:.*]] = h3.linear_grad_x %[[GK]] {K = 24 : i64, N = 32 : i64{{.*}}weight = ["wk"]}
// to_k's lora_down: the down slot's gradient against x, x's LoRA part.
// CHECK-NEXT: h3.linear_grad_w %[[DTK]], %[[X]] {K = 24 : i64, N = 64 : i64, bias = [], grads = ["grad:b.attn.to_k.lora_down"], nodes = ["b.attn.to_k"]{{.*}}weight = ["b.attn.to_k.lora_down"]}
// CHECK-NEXT: %[[LK:.*]] = h3.linear_grad_x %[[DTK]] {K = 24 : i64, N = 64 : i64, nodes = ["b.attn.to_k"]{{.*}}weight = ["b.attn.to_k.lora_down"]}
// CHECK-NEXT: %[[S1:.*]] = h3.grad_add %[[XK]], %[[LK]] {nodes = ["b.attn.to_k"]
// CHECK: %[[XQ:.*]] = h3.linear_grad_x %{{.*}} {K = 24 : i64, N = 32 : i64{{.*}}weight = ["wq"]}
// CHECK-NEXT: %[[S2:.*]] = h3.grad_add %[[S1]], %[[XQ]] {nodes = ["b.attn.to_q"]
// CHECK: %[[LQ:.*]] = h3.linear_grad_x %{{.*}} {K = 24 : i64, N = 64 : i64, nodes = ["b.attn.to_q"]{{.*}}weight = ["b.attn.to_q.lora_down"]}
// CHECK-NEXT: %[[S3:.*]] = h3.grad_add %[[S2]], %[[LQ]] {nodes = ["b.attn.to_q"]
// CHECK-NEXT: return %[[S3]]

// LORA-LABEL: func.func @backward
// LORA-SAME: attributes {h3.trainable = ["lora"]}
// LORA-NOT: grads = ["grad:w
// LORA-NOT: grads = ["grad:b
// LORA: grads = ["grad:b.attn.to_k.lora_up"]
// LORA: grads = ["grad:b.attn.to_k.lora_down"]
// LORA: grads = ["grad:b.attn.to_q.lora_up"]
// LORA: grads = ["grad:b.attn.to_q.lora_down"]

// GLOB-LABEL: func.func @backward
// GLOB-SAME: attributes {h3.trainable = ["*.to_q.lora_up", "b?"]}
// GLOB: h3.linear_grad_w {{.*}}bias = ["bk"], grads = ["grad:bk"]{{.*}}weight = ["wk"]
// GLOB-NOT: lora_down"]{{.*}}-> ()
// GLOB: h3.linear_grad_w {{.*}}bias = ["bq"], grads = ["grad:bq"]{{.*}}weight = ["wq"]
// GLOB-NEXT: h3.linear_grad_w {{.*}}grads = ["grad:b.attn.to_q.lora_up"]
// GLOB-NOT: grads = ["grad:b.attn.to_q.lora_down"]

// TYPO: h3-backward: trainable pattern '*.to_qq.*' selects no weight tensor of the module
func.func @forward(%x: !h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) {
  %q = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = ["bq"], weight = ["wq"], nodes = ["b.attn.to_q"], values = ["q"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  %k = h3.linear %x {K = 24 : i64, N = 32 : i64, bias = ["bk"], weight = ["wk"], nodes = ["b.attn.to_k"], values = ["k"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 32, bf16>
  return %q, %k : !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>
}
