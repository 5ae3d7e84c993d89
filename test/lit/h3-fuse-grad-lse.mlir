// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse-grad | FileCheck %s
// RUN: h3c-opt %s --h3-assign-reduction-order --h3-fuse-grad | h3c-opt | FileCheck %s
// h3-fuse-grad saves attention's row statistics (docs/contract.md section 14): the forward attention that an
// attention_grad differentiates gets its second result `lse` (f32 [rows, heads], "<o>:lse"), func @backward an
// argument of that name (a saved value), and the attention_grad reads it as its sixth operand.

// CHECK-LABEL: func.func @forward
// CHECK: %[[O:[^,]*]], %{{.*}} = h3.attention %arg0, %arg1, %arg2 {{{.*}}values = ["b.attn.attention", "b.attn.attention:lse"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 2, f32>)
// CHECK-NEXT: return %[[O]] :
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %[[L:[^:]*]]: !h3.act<B, S, 2, f32> {h3.name = "b.attn.attention:lse"})
// CHECK-NEXT: h3.attention_grad %arg1, %arg2, %arg3, %arg4, %arg0, %[[L]] {
func.func @forward(%q: !h3.act<B, S, 32, bf16> {h3.name = "q"}, %k: !h3.act<B, S, 32, bf16> {h3.name = "k"}, %v: !h3.act<B, S, 32, bf16> {h3.name = "v"}) -> !h3.act<B, S, 32, bf16> {
  %o = h3.attention %q, %k, %v {heads = 2 : i64, head_dim = 16 : i64, nodes = ["b.attn.attention"], values = ["b.attn.attention"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %o : !h3.act<B, S, 32, bf16>
}
func.func @backward(%g: !h3.act<B, S, 32, f32> {h3.name = "@grad:b.attn.attention"}, %q: !h3.act<B, S, 32, bf16> {h3.name = "q"}, %k: !h3.act<B, S, 32, bf16> {h3.name = "k"}, %v: !h3.act<B, S, 32, bf16> {h3.name = "v"}, %o: !h3.act<B, S, 32, bf16> {h3.name = "b.attn.attention"}) -> (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>) {
  %dq, %dk, %dv = h3.attention_grad %q, %k, %v, %o, %g {heads = 2 : i64, head_dim = 16 : i64, nodes = ["b.attn.attention"], values = ["grad:q", "grad:k", "grad:v"]} : (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, f32>) -> (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>)
  return %dq, %dk, %dv : !h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>, !h3.act<B, S, 32, f32>
}
