// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse | h3c-opt | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-pipeline="fuse=false" | FileCheck %s --check-prefix=NOFUSE
// The fusions of docs/contract.md section 3 on one refiner block, one transformer block and the time MLP of the
// tiny config; every fused op lists all the node ids it covers, in node order.

// CHECK-LABEL: func.func @refiner_block
// CHECK-SAME: (%[[X:.*]]: !h3.act<B, Nt, 24, bf16>)
// CHECK: %[[N1:.*]] = h3.rms_norm %[[X]]
// CHECK-NEXT: %[[Q:.*]], %[[K:.*]], %[[V:.*]] = h3.qkv_linear %[[N1]] {{{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.to_q", "token_refiner.refiner_blocks.0.attn.to_k", "token_refiner.refiner_blocks.0.attn.to_v"]
// CHECK-SAME: values = ["token_refiner.refiner_blocks.0.attn.to_q", "token_refiner.refiner_blocks.0.attn.to_k", "token_refiner.refiner_blocks.0.attn.to_v"]
// CHECK-NEXT: %[[QN:.*]], %[[KN:.*]] = h3.qk_norm_rope %[[Q]], %[[K]] {{{.*}}nodes = ["token_refiner.refiner_blocks.0.attn.norm_q", "token_refiner.refiner_blocks.0.attn.norm_k"]
// CHECK-SAME: rotary_dim = 0
// CHECK-NEXT: %[[A:.*]] = h3.attention %[[QN]], %[[KN]], %[[V]]
// CHECK-NEXT: %[[R1:.*]] = h3.linear %[[A]], %[[X]] {{{.*}}epilogue = #h3.epilogue<residual>, nodes = ["token_refiner.refiner_blocks.0.attn.to_out.0", "token_refiner.refiner_blocks.0.residual_attn"]
// CHECK-SAME: values = ["token_refiner.refiner_blocks.0.residual_attn"]
// CHECK-NEXT: %[[N2:.*]] = h3.rms_norm %[[R1]]
// CHECK-NEXT: %[[F1:.*]] = h3.linear %[[N2]] {{{.*}}epilogue = #h3.epilogue<swiglu>, nodes = ["token_refiner.refiner_blocks.0.ff.net.0.proj", "token_refiner.refiner_blocks.0.ff.swiglu"]
// CHECK-SAME: -> !h3.act<B, Nt, 32, bf16>
// CHECK-NEXT: %[[R2:.*]] = h3.linear %[[F1]], %[[R1]] {{{.*}}epilogue = #h3.epilogue<residual>, nodes = ["token_refiner.refiner_blocks.0.ff.net.2", "token_refiner.refiner_blocks.0.residual_ff"]
// CHECK-NEXT: return %[[R2]]

// CHECK-LABEL: func.func @transformer_block
// CHECK-SAME: (%[[TEMB:[^:]*]]: !h3.act<T, 16, f32>, %[[X:[^:]*]]: !h3.act<B, S, 24, bf16>, %[[TS:[^:]*]]: !h3.act<S, 1, i64>, %[[TAGS:[^:]*]]: !h3.act<S, 1, i64>, %[[COS:[^:]*]]: !h3.act<S, 12, f32>, %[[SIN:[^:]*]]: !h3.act<S, 12, f32>)
// CHECK: %[[TAB:.*]] = h3.adaln_table %[[TEMB]]
// CHECK-NEXT: %[[N1:.*]] = h3.norm_modulate %[[X]], %[[TAB]], %[[TS]], %[[TAGS]]
// CHECK-NEXT: %[[Q:.*]], %[[K:.*]], %[[V:.*]] = h3.qkv_linear %[[N1]] {{{.*}}nodes = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v"]
// CHECK-NEXT: %[[QR:.*]], %[[KR:.*]] = h3.qk_norm_rope %[[Q]], %[[K]], %[[COS]], %[[SIN]] {{{.*}}nodes = ["transformer_blocks.0.attn.norm_q", "transformer_blocks.0.attn.norm_k", "transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k"]
// CHECK-SAME: rotary_dim = 12
// CHECK-SAME: values = ["transformer_blocks.0.attn.rope_q", "transformer_blocks.0.attn.rope_k"]
// CHECK-NEXT: %[[A:.*]] = h3.attention %[[QR]], %[[KR]], %[[V]]
// CHECK-NEXT: %[[G1:.*]] = h3.linear %[[A]], %[[X]], %[[TAB]], %[[TS]], %[[TAGS]] {{{.*}}chunk = 2 : i64, epilogue = #h3.epilogue<gate_residual>, nodes = ["transformer_blocks.0.attn.to_out.0", "transformer_blocks.0.gate_residual_attn"], num_chunks = 6 : i64, order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, row_index = #h3.row_index<adaln>
// CHECK-NEXT: %[[N2:.*]] = h3.norm_modulate %[[G1]], %[[TAB]]
// CHECK-NEXT: %[[F1:.*]] = h3.linear %[[N2]] {{{.*}}epilogue = #h3.epilogue<swiglu>
// CHECK-NEXT: %[[G2:.*]] = h3.linear %[[F1]], %[[G1]], %[[TAB]], %[[TS]], %[[TAGS]] {{{.*}}chunk = 5 : i64, epilogue = #h3.epilogue<gate_residual>, nodes = ["transformer_blocks.0.ff.net.2", "transformer_blocks.0.gate_residual_ff"]
// CHECK-NEXT: return %[[G2]]

// time_proj stays a (host) op of its own; time_embed covers the MLP and reads the sinusoid.
// CHECK-LABEL: func.func @time_mlp
// CHECK-SAME: (%[[T:.*]]: !h3.act<T, 1, f32>)
// CHECK-NEXT: %[[S:.*]] = h3.timestep_sinusoid %[[T]] {freq_dim = 8 : i64, nodes = ["time_proj"], values = ["time_proj"]}
// CHECK-NEXT: %[[E:.*]] = h3.time_embed %[[S]] {bias = ["time_embedder.linear_1.bias", "time_embedder.linear_2.bias"], freq_dim = 8 : i64, hidden = 24 : i64, nodes = ["time_embedder.linear_1", "time_embedder.act", "time_embedder.linear_2"]
// CHECK-SAME: out_dim = 16 : i64, values = ["time_embedder.linear_2"], weight = ["time_embedder.linear_1.weight", "time_embedder.linear_2.weight"]
// CHECK-SAME: (!h3.act<T, 8, f32>) -> !h3.act<T, 16, f32>
// CHECK-NEXT: return %[[E]]

// --no-fuse (fuse=false): one op per node.
// NOFUSE-LABEL: func.func @refiner_block
// NOFUSE-NOT: qkv_linear
// NOFUSE-NOT: qk_norm_rope
// NOFUSE: h3.residual
// NOFUSE-LABEL: func.func @transformer_block
// NOFUSE: h3.gate_residual
// NOFUSE: h3.swiglu
// NOFUSE-LABEL: func.func @time_mlp
// NOFUSE: h3.timestep_sinusoid
// NOFUSE-NOT: h3.time_embed
