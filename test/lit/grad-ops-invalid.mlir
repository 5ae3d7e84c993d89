// RUN: h3c-opt %s -split-input-file -verify-diagnostics
// The gradient ops' verifiers (dialect/include/h3c/Dialect/H3/H3GradOps.td; docs/contract.md section 14).

func.func @grad_names_order(%g: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{'grads' must name gradients of its weight, then bias tensors ("grad:<tensor>"), in that order, each once; 'grad:w' is not the next of them}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = ["b"], grads = ["grad:b", "grad:w"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

func.func @grad_names_twice(%g: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{'grad:w' is not the next of them}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = [], grads = ["grad:w", "grad:w"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

func.func @grad_prefix(%g: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{'w' is not the next of them}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = [], grads = ["w"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

// Every tensor frozen (h3-backward's trainable): the pass emits no linear_grad_w at all.
func.func @grad_w_frozen(%g: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{computes no gradient: every tensor it differentiates is frozen}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = ["b"], grads = [], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

// A frozen weight with a trained bias: dbias alone.
func.func @grad_w_bias_only(%g: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 32, bf16>) {
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = ["b"], grads = ["grad:b"], weight = ["w"], order = #h3.order<row_units, units = 128, k_step = 16, acc = f32>, nodes = ["l"], values = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

// A gradient is f32; a linear gradient may read bf(g) (bf16: an h3.grad_round's result, h3-fuse-grad), nothing else.
func.func @int_gradient(%g: !h3.act<B, S, 24, i64>) -> !h3.act<B, S, 32, f32> {
  // expected-error @+1 {{g must be f32 (or bf16: an h3.grad_round result)}}
  %dx = h3.linear_grad_x %g {K = 32 : i64, N = 24 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 0>, nodes = ["l"], values = ["dx"]} : (!h3.act<B, S, 24, i64>) -> !h3.act<B, S, 32, f32>
  return %dx : !h3.act<B, S, 32, f32>
}

// -----

// dbias sums the F32 g: a dW with a bias gradient does not read bf(g).
func.func @bf16_gradient_bias(%g: !h3.act<B, S, 24, bf16>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{a bias gradient sums the F32 g: g must be f32}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = ["b"], grads = ["grad:w", "grad:b"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

// The weight frozen, the bias trained: the op's one gradient is dbias, which sums the F32 g.
func.func @bf16_gradient_bias_only(%g: !h3.act<B, S, 24, bf16>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{a bias gradient sums the F32 g: g must be f32}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = ["b"], grads = ["grad:b"], weight = ["w"], nodes = ["l"], values = []} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

// grad_round: F32 in, bf16 of the same shape out.
func.func @grad_round_f32_result(%g: !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32> {
  // expected-error @+1 {{result must be 'bf16', got 'f32'}}
  %gb = h3.grad_round %g {nodes = ["l"], values = ["gb"]} : (!h3.act<B, S, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %gb : !h3.act<B, S, 24, f32>
}

// -----

func.func @grad_round_width(%g: !h3.act<B, S, 24, f32>) -> !h3.act<B, S, 16, bf16> {
  // expected-error @+1 {{result must have 24 columns, got 16}}
  %gb = h3.grad_round %g {nodes = ["l"], values = ["gb"]} : (!h3.act<B, S, 24, f32>) -> !h3.act<B, S, 16, bf16>
  return %gb : !h3.act<B, S, 16, bf16>
}

// -----

func.func @add_types(%a: !h3.act<B, S, 24, f32>, %b: !h3.act<B, Nt, 24, f32>) -> !h3.act<B, S, 24, f32> {
  // expected-error @+1 {{operands and result must have one type}}
  %c = h3.grad_add %a, %b {nodes = ["l"], values = ["c"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, Nt, 24, f32>) -> !h3.act<B, S, 24, f32>
  return %c : !h3.act<B, S, 24, f32>
}

// -----

func.func @swiglu_width(%dy: !h3.act<B, S, 16, f32>, %x: !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, f32> {
  // expected-error @+1 {{dy must have 32 columns, got 16}}
  %dx = h3.swiglu_grad %dy, %x {nodes = ["s"], values = ["dx"]} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, f32>
  return %dx : !h3.act<B, S, 64, f32>
}

// -----

func.func @norm_group(%dy: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32> {
  // expected-error @+1 {{group 16 must divide the 24 columns}}
  %dx = h3.rms_norm_grad %dy, %x {eps = 1.0e-05 : f64, group = 16 : i64, weight = [], grads = [], nodes = ["n"], values = ["dx"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, f32>
  return %dx : !h3.act<B, S, 24, f32>
}

// -----

func.func @table_grad_width(%dz: !h3.act<B, S, 24, f32>, %y: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{dtable must have 144 columns, got 24}}
  %dy, %dt = h3.gate_residual_grad %dz, %y, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 2>, row_index = #h3.row_index<adaln>, nodes = ["g"], values = ["dy", "dt"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 24, f32>)
  return
}

// -----

func.func @table_grad_without_y(%dz: !h3.act<B, S, 24, f32>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{y and dtable come together (the table's gradient) or not at all}}
  %dy, %dt = h3.gate_residual_grad %dz, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 0, 1, 2>, row_index = #h3.row_index<adaln>, nodes = ["g"], values = ["dy", "dt"]} : (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>)
  return
}

// -----

func.func @y_without_table_grad(%dz: !h3.act<B, S, 24, f32>, %y: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{y and dtable come together (the table's gradient) or not at all}}
  %dy = h3.gate_residual_grad %dz, %y, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 2>, row_index = #h3.row_index<adaln>, nodes = ["g"], values = ["dy"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<B, S, 24, f32>)
  return
}

// -----

func.func @dy_rows_without_y(%dz: !h3.act<B, S, 24, f32>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>) {
  // expected-error @+1 {{dy: rows T3 vs B x S}}
  %dy = h3.gate_residual_grad %dz, %t, %ts, %tags {chunk = 2 : i64, num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 0, 1, 2>, row_index = #h3.row_index<adaln>, nodes = ["g"], values = ["dy"]} : (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>) -> (!h3.act<T3, 24, f32>)
  return
}

// -----

func.func @row_units_order(%g: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{carries order 'k_chunks' but needs 'row_units'}}
  h3.linear_grad_w %g, %x {K = 32 : i64, N = 24 : i64, bias = [], grads = ["grad:w"], weight = ["w"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["l"], values = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 32, bf16>) -> ()
  return
}

// -----

// expected-error @+1 {{row_units needs units > 0 (rows a unit) and k_step > 0}}
func.func @row_units_params() attributes {o = #h3.order<row_units, k_step = 16, acc = f32>} {
  return
}

// -----

// h3-fuse-grad's residual is the part of dx's gradient it is added to: dx's type.
func.func @grad_x_residual_type(%g: !h3.act<B, S, 24, f32>, %r: !h3.act<B, S, 16, f32>) {
  // expected-error @+1 {{residual must have dx's type (the part of the gradient dX is added to)}}
  %dx = h3.linear_grad_x %g, %r {K = 32 : i64, N = 24 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 1, 0, 0>, nodes = ["l"], values = ["dx"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 16, f32>) -> !h3.act<B, S, 32, f32>
  return
}

// -----

// h3-fuse-grad's LoRA down path taken in: lora_t comes with lora_k and the down slot as a second weight.
func.func @grad_x_lora_without_width(%g: !h3.act<B, S, 24, bf16>, %t: !h3.act<B, S, 64, bf16>) {
  // expected-error @+1 {{lora_t and lora_k come together}}
  %dx = h3.linear_grad_x %g, %t {K = 32 : i64, N = 24 : i64, weight = ["w", "l.lora_down"], operandSegmentSizes = array<i32: 1, 0, 1, 0>, nodes = ["l"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, f32>
  return
}

// -----

func.func @grad_x_lora_one_weight(%g: !h3.act<B, S, 24, bf16>, %t: !h3.act<B, S, 64, bf16>) {
  // expected-error @+1 {{'weight' must list 2 tensor names, got 1}}
  %dx = h3.linear_grad_x %g, %t {K = 32 : i64, N = 24 : i64, lora_k = 64 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 1, 0>, nodes = ["l"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, f32>
  return
}

// -----

// One k-block: at most 64 wide.
func.func @grad_x_lora_too_wide(%g: !h3.act<B, S, 24, bf16>, %t: !h3.act<B, S, 128, bf16>) {
  // expected-error @+1 {{lora_k must be 16, 32, 48 or 64 (one k-block), got 128}}
  %dx = h3.linear_grad_x %g, %t {K = 32 : i64, N = 24 : i64, lora_k = 128 : i64, weight = ["w", "l.lora_down"], operandSegmentSizes = array<i32: 1, 0, 1, 0>, nodes = ["l"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 128, bf16>) -> !h3.act<B, S, 32, f32>
  return
}

// -----

// lora_t is bf(dt): bf16.
func.func @grad_x_lora_f32(%g: !h3.act<B, S, 24, bf16>, %t: !h3.act<B, S, 64, f32>) {
  // expected-error @+1 {{lora_t must be 'bf16', got 'f32'}}
  %dx = h3.linear_grad_x %g, %t {K = 32 : i64, N = 24 : i64, lora_k = 64 : i64, weight = ["w", "l.lora_down"], operandSegmentSizes = array<i32: 1, 0, 1, 0>, nodes = ["l"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, f32>) -> !h3.act<B, S, 32, f32>
  return
}

// -----

func.func @norm_rope_without_width(%dy: !h3.act<B, S, 32, f32>, %x: !h3.act<B, S, 32, bf16>, %cos: !h3.act<S, 12, f32>, %sin: !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32> {
  // expected-error @+1 {{rope_tables and rotary_dim come together (the rope_grad folded in) or not at all}}
  %dx = h3.rms_norm_grad %dy, %x, %cos, %sin {eps = 1.0e-05 : f64, group = 16 : i64, weight = [], grads = [], nodes = ["n", "r"], values = ["dx"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32>
  return %dx : !h3.act<B, S, 32, f32>
}

// -----

func.func @norm_rope_one_table(%dy: !h3.act<B, S, 32, f32>, %x: !h3.act<B, S, 32, bf16>, %cos: !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32> {
  // expected-error @+1 {{rope_tables are the rope's cos and sin}}
  %dx = h3.rms_norm_grad %dy, %x, %cos {eps = 1.0e-05 : f64, group = 16 : i64, rotary_dim = 12 : i64, weight = [], grads = [], nodes = ["n", "r"], values = ["dx"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>, !h3.act<S, 12, f32>) -> !h3.act<B, S, 32, f32>
  return %dx : !h3.act<B, S, 32, f32>
}

// -----

func.func @norm_rope_wider_than_group(%dy: !h3.act<B, S, 32, f32>, %x: !h3.act<B, S, 32, bf16>, %cos: !h3.act<S, 20, f32>, %sin: !h3.act<S, 20, f32>) -> !h3.act<B, S, 32, f32> {
  // expected-error @+1 {{rotary_dim must be even and in (0, head_dim = 16], got 20}}
  %dx = h3.rms_norm_grad %dy, %x, %cos, %sin {eps = 1.0e-05 : f64, group = 16 : i64, rotary_dim = 20 : i64, weight = [], grads = [], nodes = ["n", "r"], values = ["dx"]} : (!h3.act<B, S, 32, f32>, !h3.act<B, S, 32, bf16>, !h3.act<S, 20, f32>, !h3.act<S, 20, f32>) -> !h3.act<B, S, 32, f32>
  return %dx : !h3.act<B, S, 32, f32>
}

// -----

func.func @norm_residual_width(%dy: !h3.act<B, S, 24, f32>, %x: !h3.act<B, S, 24, bf16>, %t: !h3.act<T3, 144, bf16>, %ts: !h3.act<S, 1, i64>, %tags: !h3.act<S, 1, i64>, %r: !h3.act<B, S, 32, f32>) -> !h3.act<B, S, 24, f32> {
  // expected-error @+1 {{residual}}
  %dx, %dt = h3.norm_modulate_grad %dy, %x, %t, %ts, %tags, %r {eps = 1.0e-05 : f64, grads = [], nodes = ["n"], num_chunks = 6 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 2, 1>, row_index = #h3.row_index<adaln>, scale_chunk = 4 : i64, shift_chunk = 3 : i64, values = ["grad:n", "grad:t"], weight = []} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 24, bf16>, !h3.act<T3, 144, bf16>, !h3.act<S, 1, i64>, !h3.act<S, 1, i64>, !h3.act<B, S, 32, f32>) -> (!h3.act<B, S, 24, f32>, !h3.act<T3, 144, f32>)
  return %dx : !h3.act<B, S, 24, f32>
}

// -----

// h3-fuse-grad's swiglu_grad taken in: swiglu_x = [v | g] is bf16 [rows, 2K], and dx is the swiglu_grad's [rows, 2K].
func.func @grad_x_swiglu_x_width(%g: !h3.act<B, S, 24, bf16>, %x: !h3.act<B, S, 32, bf16>) {
  // expected-error @+1 {{swiglu_x must have 64 columns, got 32}}
  %dx = h3.linear_grad_x %g, %x {K = 32 : i64, N = 24 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 1>, nodes = ["l", "s"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 64, f32>
  return
}

// -----

func.func @grad_x_swiglu_x_f32(%g: !h3.act<B, S, 24, bf16>, %x: !h3.act<B, S, 64, f32>) {
  // expected-error @+1 {{swiglu_x must be 'bf16', got 'f32'}}
  %dx = h3.linear_grad_x %g, %x {K = 32 : i64, N = 24 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 1>, nodes = ["l", "s"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, f32>) -> !h3.act<B, S, 64, f32>
  return
}

// -----

func.func @grad_x_swiglu_dx_width(%g: !h3.act<B, S, 24, bf16>, %x: !h3.act<B, S, 64, bf16>) {
  // expected-error @+1 {{dx must have 64 columns, got 32}}
  %dx = h3.linear_grad_x %g, %x {K = 32 : i64, N = 24 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 0, 0, 1>, nodes = ["l", "s"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, f32>
  return
}

// -----

// swiglu_grad's dy is the dX alone: no residual with it.
func.func @grad_x_swiglu_with_residual(%g: !h3.act<B, S, 24, bf16>, %r: !h3.act<B, S, 64, f32>, %x: !h3.act<B, S, 64, bf16>) {
  // expected-error @+1 {{swiglu_x and residual do not come together (swiglu_grad's dy is the dX alone)}}
  %dx = h3.linear_grad_x %g, %r, %x {K = 32 : i64, N = 24 : i64, weight = ["w"], operandSegmentSizes = array<i32: 1, 1, 0, 1>, nodes = ["l", "s"], values = ["dx"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, f32>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 64, f32>
  return
}
