// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline="arch=sm_100a tp=2 fuse=true tokens=16" | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline | FileCheck %s --check-prefix=DEFAULT
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline="fuse=false" | FileCheck %s --check-prefix=NOFUSE
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline="sp=4 tp=2 tokens=16" | FileCheck %s --check-prefix=SPTP
// RUN: not h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline="tp=4" 2>&1 | FileCheck %s --check-prefix=TP4
// The registered pipeline = assign-reduction-order, fuse (unless fuse=false), shard-tp, shard-seq, verify-strict,
// plan-buffers, with the options passed through.

// h3-verify-strict records nothing: the module carries the buffer plan and the sp / tp degrees only.
// CHECK: module attributes {h3.buffers = {{{.*}}tokens = 16 : i64}, h3.sp = 1 : i64, h3.tp = 2 : i64}
// CHECK-LABEL: func.func @transformer_block
// CHECK: h3.qkv_linear {{.*}}h3.slots = [{{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}]{{.*}}order = #h3.order<k_chunks{{.*}}shard = #h3.shard<column, tp = 2, segments = 3>
// CHECK: h3.all_gather {{.*}}axis = #h3.axis<cols>

// DEFAULT: module attributes {h3.buffers = {{{.*}}tokens = 8192 : i64}, h3.sp = 1 : i64, h3.tp = 1 : i64}
// DEFAULT-NOT: all_gather
// DEFAULT-NOT: split
// DEFAULT: h3.qkv_linear

// NOFUSE-NOT: qkv_linear
// NOFUSE: h3.gate_residual

// The test blocks hold no pack, so sp only records its degree (h3-shard-seq.test runs it on a whole model); the
// buffer report sizes a rank's rows (Sr) by ceil(tokens / sp).
// SPTP: module attributes {h3.buffers = {{{.*}}}, h3.sp = 4 : i64, h3.tp = 2 : i64}

// TP4: error: 'h3.qkv_linear' op [transformer_blocks.0.attn.to_q] cannot split 2 heads over tp = 4
