// RUN: h3c fingerprint derive --config tiny -o %t.fp.json
// RUN: h3c-opt --import-h3-fingerprint %t.fp.json | h3c-opt --h3-assign-reduction-order --h3-fuse --h3-shard-seq="sp=2" | FileCheck %s
// RUN: h3c-opt --import-h3-fingerprint %t.fp.json | h3c-opt --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=2" --h3-shard-seq="sp=4" | FileCheck %s --check-prefix=BOTH
// RUN: h3c-opt --import-h3-fingerprint %t.fp.json | h3c-opt --h3-shard-seq="sp=1" | FileCheck %s --check-prefix=SP1
// sp = 2 on the whole tiny model (docs/contract.md section 5.2): the rope tables and pack's stream and row metadata
// are split by rows where they are made; everything computed from them lives on a rank's rows (Sr); attention
// all-gathers its keys and values by rows; unpack reads the all-gathered output heads. The refiner (over the text
// rows Nt, before pack) and the time MLP stay whole.

// CHECK: module attributes {h3.config_name = "tiny", h3.sp = 2 : i64}
// CHECK: %[[COS:.*]], %[[SIN:.*]] = h3.rope_table
// CHECK-NEXT: %[[COSR:.*]] = h3.split %[[COS]] {axis = #h3.axis<rows>, nodes = [], parts = 2 : i64, values = ["rope:cos:split_rows"]} : (!h3.act<S, 12, f32>) -> !h3.act<Sr, 12, f32>
// CHECK-NEXT: %[[SINR:.*]] = h3.split %[[SIN]]
// CHECK: h3.attention {{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.attention"]
// CHECK-SAME: (!h3.act<B, Nt, 32, bf16>, !h3.act<B, Nt, 32, bf16>, !h3.act<B, Nt, 32, bf16>) -> !h3.act<B, Nt, 32, bf16>
// CHECK: %[[X:.*]], %{{.*}}, %[[TAGS:.*]], %[[TS:.*]] = h3.pack
// pack:positions has no reader: it is not split.
// CHECK-NEXT: %[[XR:.*]] = h3.split %[[X]] {{.*}}values = ["pack:split_rows"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, Sr, 24, bf16>
// CHECK-NEXT: %[[TAGSR:.*]] = h3.split %[[TAGS]] {{.*}}values = ["pack:tags:split_rows"]} : (!h3.act<S, 1, i64>) -> !h3.act<Sr, 1, i64>
// CHECK-NEXT: %[[TSR:.*]] = h3.split %[[TS]] {{.*}}values = ["pack:ts_index:split_rows"]}
// CHECK: h3.norm_modulate %[[XR]], %{{.*}}, %[[TSR]], %[[TAGSR]] {{.*}}-> !h3.act<B, Sr, 24, bf16>
// CHECK: %[[Q:[^,]*]], %[[K:.*]] = h3.qk_norm_rope {{.*}}, %[[COSR]], %[[SINR]]
// CHECK-SAME: -> (!h3.act<B, Sr, 32, bf16>, !h3.act<B, Sr, 32, bf16>)
// CHECK-NEXT: %[[KA:.*]] = h3.all_gather %[[K]] {axis = #h3.axis<rows>, nodes = [], parts = 2 : i64, values = ["transformer_blocks.0.attn.rope_k:gather_rows"]} : (!h3.act<B, Sr, 32, bf16>) -> !h3.act<B, S, 32, bf16>
// CHECK-NEXT: %[[VA:.*]] = h3.all_gather %{{.*}} {{.*}}values = ["transformer_blocks.0.attn.to_v:gather_rows"]
// CHECK-NEXT: h3.attention %[[Q]], %[[KA]], %[[VA]]
// CHECK-SAME: (!h3.act<B, Sr, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>) -> !h3.act<B, Sr, 32, bf16>
// CHECK: %[[PO:.*]] = h3.linear {{.*}}nodes = ["proj_out"]{{.*}}-> !h3.act<B, Sr, 16, f32>
// CHECK: %[[PA:.*]] = h3.all_gather %[[PO]] {{.*}}-> !h3.act<B, S, 16, f32>
// CHECK: h3.unpack %[[PA]], %{{.*}} : (!h3.act<B, S, 16, f32>, !h3.act<B, S, 6, f32>)

// sp x tp: the row split composes with the column split (h3-shard-tp ran first: a rank's rows of its columns).
// BOTH: module attributes {h3.config_name = "tiny", h3.sp = 4 : i64, h3.tp = 2 : i64}
// BOTH: h3.split %{{.*}} {axis = #h3.axis<cols>, {{.*}}values = ["pack:split_cols"]} : (!h3.act<B, Sr, 24, bf16>) -> !h3.act<B, Sr, 12, bf16>
// BOTH: h3.all_gather {{.*}}axis = #h3.axis<rows>, nodes = [], parts = 4 : i64, values = ["transformer_blocks.0.attn.rope_k:gather_rows"]} : (!h3.act<B, Sr, 16, bf16>) -> !h3.act<B, S, 16, bf16>

// SP1: module attributes {h3.config_name = "tiny", h3.sp = 1 : i64}
// SP1-NOT: h3.split
// SP1-NOT: Sr
