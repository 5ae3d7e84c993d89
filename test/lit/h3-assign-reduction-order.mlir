// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-assign-reduction-order | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-fuse --h3-assign-reduction-order | FileCheck %s --check-prefix=FUSED
// Every reducing op gets the order of docs/contract.md section 4: every linear one chain over K (units = 1), the
// transformer blocks' to_out and fc2 included.

// CHECK-LABEL: func.func @refiner_block
// CHECK: h3.rms_norm {{.*}}order = #h3.order<lane_tree, lanes = 32, acc = f32>
// CHECK: h3.linear {{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.to_q"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// CHECK: h3.qk_norm {{.*}}order = #h3.order<lane_tree, lanes = 32, acc = f32>
// CHECK: h3.attention {{.*}}order = #h3.order<flash, kv_block = 128, k_step = 16, acc = f32, p = bf16>
// CHECK: h3.linear {{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.to_out.0"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// CHECK: h3.residual
// CHECK-NOT: order
// CHECK-SAME: values
// CHECK: h3.swiglu
// CHECK-NOT: order
// CHECK-SAME: values
// CHECK: h3.linear {{.*}}nodes = ["token_refiner.refiner_blocks.0.ff.net.2"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>

// CHECK-LABEL: func.func @transformer_block
// CHECK: h3.adaln_table {{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// CHECK: h3.norm_modulate {{.*}}order = #h3.order<lane_tree, lanes = 32, acc = f32>
// CHECK: h3.rope
// CHECK-NOT: order
// CHECK-SAME: values
// CHECK: h3.linear {{.*}}nodes = ["transformer_blocks.0.attn.to_out.0"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// CHECK: h3.linear {{.*}}nodes = ["transformer_blocks.0.ff.net.2"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>

// CHECK-LABEL: func.func @time_mlp
// CHECK: h3.timestep_sinusoid
// CHECK-NOT: order
// CHECK-SAME: values
// CHECK: h3.linear {{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>

// The fused ops reduce too (OrderedReduction): fused before any order exists, each still gets its op type's kind,
// one unit for the fused to_out / fc2 + gate_residual too.
// FUSED-LABEL: func.func @refiner_block
// FUSED: h3.qkv_linear {{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// FUSED: h3.qk_norm_rope {{.*}}order = #h3.order<lane_tree, lanes = 32, acc = f32>
// FUSED: h3.linear {{.*}}epilogue = #h3.epilogue<residual>{{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// FUSED-LABEL: func.func @transformer_block
// FUSED: h3.qk_norm_rope {{.*}}nodes = ["transformer_blocks.0.attn.norm_q", "transformer_blocks.0.attn.norm_k", "transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k"], order = #h3.order<lane_tree, lanes = 32, acc = f32>
// FUSED: h3.linear {{.*}}epilogue = #h3.epilogue<gate_residual>, nodes = ["transformer_blocks.0.attn.to_out.0", "transformer_blocks.0.gate_residual_attn"], num_chunks = 6 : i64, order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// FUSED: h3.linear {{.*}}epilogue = #h3.epilogue<swiglu>{{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// FUSED: h3.linear {{.*}}epilogue = #h3.epilogue<gate_residual>, nodes = ["transformer_blocks.0.ff.net.2", "transformer_blocks.0.gate_residual_ff"], num_chunks = 6 : i64, order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
// FUSED-LABEL: func.func @time_mlp
// FUSED: h3.timestep_sinusoid
// FUSED-NOT: order
// FUSED-SAME: values
// FUSED-NEXT: h3.time_embed {{.*}}order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>
