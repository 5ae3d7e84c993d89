// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=2" | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=1" | FileCheck %s --check-prefix=TP1
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-shard-tp="tp=2" | FileCheck %s --check-prefix=UNFUSED
// tp = 2 on the tiny config (2 heads, hidden 24, ffn 32): every GEMM of a transformer block is column-parallel with
// the full K and the rank's columns (docs/contract.md section 5.2); every collective is a bf16 all-gather of
// columns; the stream entering the block is split by columns for the residual; nothing is reduced across ranks.
// The refiner and the time MLP stay replicated.

// CHECK: module attributes {h3.tp = 2 : i64}
// CHECK-LABEL: func.func @refiner_block
// CHECK-NOT: shard
// CHECK-NOT: all_gather
// CHECK-LABEL: func.func @transformer_block
// CHECK-SAME: (%[[TEMB:[^:]*]]: !h3.act<T, 16, f32>, %[[X:[^:]*]]: !h3.act<B, S, 24, bf16>, %[[TS:[^:]*]]: !h3.act<S, 1, i64>, %[[TAGS:[^:]*]]: !h3.act<S, 1, i64>
// The stream by the rank's columns (the first residual), a local copy.
// CHECK-NEXT: %[[XL:.*]] = h3.split %[[X]] {axis = #h3.axis<cols>, nodes = [], parts = 2 : i64, values = ["arg1:split_cols"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 12, bf16>
// The AdaLN table: each of its 18 chunks split alike; the whole table (6 chunks of a row) all-gathered for the norms.
// CHECK-NEXT: %[[TAB:.*]] = h3.adaln_table %[[TEMB]] {K = 16 : i64, N = 216 : i64, {{.*}}shard = #h3.shard<column, tp = 2, segments = 18>
// CHECK-SAME: -> !h3.act<T3, 72, bf16>
// CHECK-NEXT: %[[TABW:.*]] = h3.all_gather %[[TAB]] {axis = #h3.axis<cols>, nodes = [], parts = 2 : i64, segments = 6 : i64, values = ["transformer_blocks.0.adaln_proj:gather_cols"]} : (!h3.act<T3, 72, bf16>) -> !h3.act<T3, 144, bf16>
// CHECK-NEXT: %[[N1:.*]] = h3.norm_modulate %[[X]], %[[TABW]], %[[TS]], %[[TAGS]]
// CHECK-NOT: shard
// CHECK-SAME: -> !h3.act<B, S, 24, bf16>
// One head per rank.
// CHECK-NEXT: h3.qkv_linear %[[N1]] {K = 24 : i64, {{.*}}heads = 1 : i64, {{.*}}shard = #h3.shard<column, tp = 2, segments = 3>
// CHECK-SAME: -> (!h3.act<B, S, 16, bf16>, !h3.act<B, S, 16, bf16>, !h3.act<B, S, 16, bf16>)
// CHECK-NEXT: h3.qk_norm_rope {{.*}}heads = 1 : i64, {{.*}}shard = #h3.shard<column, tp = 2>
// CHECK-NEXT: %[[A:.*]] = h3.attention {{.*}}heads = 1 : i64, {{.*}}shard = #h3.shard<column, tp = 2>
// to_out: the whole attention output (all-gathered), the rank's 12 of 24 output columns, its epilogue on the
// rank's columns of the stream and of the table.
// CHECK-NEXT: %[[AW:.*]] = h3.all_gather %[[A]] {axis = #h3.axis<cols>, nodes = [], parts = 2 : i64, values = ["transformer_blocks.0.attn.attention:gather_cols"]} : (!h3.act<B, S, 16, bf16>) -> !h3.act<B, S, 32, bf16>
// CHECK-NEXT: %[[G1:.*]] = h3.linear %[[AW]], %[[XL]], %[[TAB]], %[[TS]], %[[TAGS]] {K = 32 : i64, N = 12 : i64, {{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, {{.*}}shard = #h3.shard<column, tp = 2>
// CHECK-SAME: -> !h3.act<B, S, 12, bf16>
// CHECK-NEXT: %[[G1W:.*]] = h3.all_gather %[[G1]] {{.*}}values = ["transformer_blocks.0.gate_residual_attn:gather_cols"]
// CHECK-NEXT: h3.norm_modulate %[[G1W]], %[[TABW]]
// fc1: the value and gate halves split alike; fc2 like to_out.
// CHECK-NEXT: %[[SW:.*]] = h3.linear {{.*}}N = 32 : i64, {{.*}}epilogue = #h3.epilogue<swiglu>{{.*}}shard = #h3.shard<column, tp = 2, segments = 2>
// CHECK-SAME: -> !h3.act<B, S, 16, bf16>
// CHECK-NEXT: %[[SWW:.*]] = h3.all_gather %[[SW]]
// CHECK-NEXT: %[[G2:.*]] = h3.linear %[[SWW]], %[[G1]], %[[TAB]], %[[TS]], %[[TAGS]] {K = 32 : i64, N = 12 : i64
// CHECK-NEXT: %[[OUT:.*]] = h3.all_gather %[[G2]]
// CHECK-NEXT: return %[[OUT]] : !h3.act<B, S, 24, bf16>
// CHECK-LABEL: func.func @time_mlp
// CHECK-NOT: shard

// tp = 1: nothing changes but the module's degree.
// TP1: module attributes {h3.tp = 1 : i64}
// TP1-NOT: shard
// TP1-NOT: all_gather
// TP1-NOT: h3.split

// Unfused: q/k/v linears are split by heads (found from their consumers), fc1 keeps its two halves for the
// separate swiglu, to_out's rank columns go to the separate gate_residual on the rank's columns.
// UNFUSED-LABEL: func.func @transformer_block
// UNFUSED: h3.linear {{.*}}N = 16 : i64, {{.*}}nodes = ["transformer_blocks.0.attn.to_q"]{{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED: h3.rope {{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED: %[[Y:.*]] = h3.linear {{.*}}N = 12 : i64, {{.*}}nodes = ["transformer_blocks.0.attn.to_out.0"]{{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED-NEXT: h3.gate_residual %{{.*}}, %[[Y]], {{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED-SAME: -> !h3.act<B, S, 12, bf16>
// UNFUSED: h3.linear {{.*}}N = 32 : i64, {{.*}}nodes = ["transformer_blocks.0.ff.net.0.proj"]{{.*}}shard = #h3.shard<column, tp = 2, segments = 2>
// UNFUSED-NEXT: h3.swiglu {{.*}}shard = #h3.shard<column, tp = 2>
// UNFUSED-SAME: (!h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 16, bf16>
