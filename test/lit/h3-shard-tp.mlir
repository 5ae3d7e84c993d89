// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=2" | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=1" | FileCheck %s --check-prefix=TP1
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-shard-tp="tp=2" | FileCheck %s --check-prefix=UNFUSED
// tp = 2 on the tiny config (2 heads, row-parallel K = 32 in U = 2 units): column-parallel qkv / norms / attention /
// fc1 / adaln, row-parallel to_out and fc2 as rank partials + an explicit allreduce_tree that applies the epilogue.
// The refiner and the time MLP stay replicated.

// CHECK: module attributes {h3.tp = 2 : i64}
// CHECK-LABEL: func.func @refiner_block
// CHECK-NOT: shard
// CHECK-NOT: allreduce_tree
// CHECK-LABEL: func.func @transformer_block
// CHECK-SAME: (%[[TEMB:[^:]*]]: !h3.act<T, 16, f32>, %[[X:[^:]*]]: !h3.act<B, S, 24, bf16>, %[[TS:[^:]*]]: !h3.act<S, 1, i64>, %[[TAGS:[^:]*]]: !h3.act<S, 1, i64>
// CHECK: %[[TAB:.*]] = h3.adaln_table {{.*}}shard = #h3.shard<column, tp = 2>
// CHECK: h3.norm_modulate
// CHECK-NOT: shard
// CHECK-SAME: values
// CHECK: h3.qkv_linear {{.*}}shard = #h3.shard<column, tp = 2>
// CHECK: h3.qk_norm_rope {{.*}}shard = #h3.shard<column, tp = 2>
// CHECK: %[[A:.*]] = h3.attention {{.*}}shard = #h3.shard<column, tp = 2>
// CHECK-NEXT: %[[P1:.*]] = h3.linear %[[A]] {K = 32 : i64, N = 24 : i64, bias = [], nodes = ["transformer_blocks.0.attn.to_out.0"], order = #h3.order<k_chunks, k_step = 16, units = 2, acc = f32>, shard = #h3.shard<row, tp = 2>, values = ["transformer_blocks.0.attn.to_out.0:partials"]
// CHECK-SAME: -> !h3.act<B, S, 24, f32, parts = 2>
// CHECK-NEXT: %[[G1:.*]] = h3.allreduce_tree %[[P1]], %[[X]], %[[TAB]], %[[TS]], %[[TAGS]] {N = 24 : i64, bias = [], chunk = 2 : i64, epilogue = #h3.epilogue<gate_residual>, nodes = ["transformer_blocks.0.gate_residual_attn"], num_chunks = 6 : i64, order = #h3.order<k_chunks, k_step = 16, units = 2, acc = f32>, row_index = #h3.row_index<adaln>, tp = 2 : i64, units = 2 : i64, values = ["transformer_blocks.0.gate_residual_attn"]}
// CHECK-SAME: -> !h3.act<B, S, 24, bf16>
// CHECK: h3.linear {{.*}}epilogue = #h3.epilogue<swiglu>{{.*}}shard = #h3.shard<column, tp = 2>
// CHECK-NEXT: %[[P2:.*]] = h3.linear {{.*}}shard = #h3.shard<row, tp = 2>, values = ["transformer_blocks.0.ff.net.2:partials"]
// CHECK-NEXT: %[[G2:.*]] = h3.allreduce_tree %[[P2]], %[[G1]], %[[TAB]], %[[TS]], %[[TAGS]] {{.*}}nodes = ["transformer_blocks.0.gate_residual_ff"]
// CHECK-NEXT: return %[[G2]]
// CHECK-LABEL: func.func @time_mlp
// CHECK-NOT: shard

// tp = 1: the same split kinds, no partials and no collective.
// TP1-LABEL: func.func @transformer_block
// TP1-NOT: allreduce_tree
// TP1: h3.linear {{.*}}epilogue = #h3.epilogue<gate_residual>{{.*}}shard = #h3.shard<row, tp = 1>
// TP1-NOT: parts

// Unfused: q/k/v linears are split by heads (found from their consumers), the row-parallel linear's allreduce
// carries no epilogue node and hands its bf16 result to the separate gate_residual.
// UNFUSED-LABEL: func.func @transformer_block
// UNFUSED: h3.linear {{.*}}nodes = ["transformer_blocks.0.attn.to_q"]{{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED: h3.rope {{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED: %[[P:.*]] = h3.linear {{.*}}shard = #h3.shard<row, tp = 2>, values = ["transformer_blocks.0.attn.to_out.0:partials"]
// UNFUSED-NEXT: %[[Y:.*]] = h3.allreduce_tree %[[P]] {N = 24 : i64, bias = [], nodes = [], order = #h3.order<k_chunks, k_step = 16, units = 2, acc = f32>, tp = 2 : i64, units = 2 : i64, values = ["transformer_blocks.0.attn.to_out.0"]}
// UNFUSED-NEXT: h3.gate_residual %{{.*}}, %[[Y]]
// UNFUSED: h3.swiglu {{.*}}shard = #h3.shard<column, tp = 2>
