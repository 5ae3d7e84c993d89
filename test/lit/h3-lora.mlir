// RUN: h3c-opt %s --h3-lora="rank=64" -split-input-file | FileCheck %s
// RUN: h3c-opt %s --h3-lora="rank=128 targets=to_out.0" -split-input-file | FileCheck %s --check-prefix=ONLY
// RUN: h3c-opt %s --h3-lora="rank=0" -split-input-file | FileCheck %s --check-prefix=NONE
// RUN: not h3c-opt %s --h3-lora="rank=48" -split-input-file 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: h3c-opt %s --h3-lora="rank=64" -split-input-file | not h3c-opt --h3-shard-tp="tp=2" 2>&1 | FileCheck %s --check-prefix=TP
// h3-lora (docs/contract.md section 13): a lora_down over the down slot [G x rank, K] before every targeted linear,
// its result the linear's last operand, the up slot [rows, G x rank] its last weight, lora_k = G x rank; the slots in
// the module's h3.adapter_slots. Untargeted linears (proj_in) stay as they are.
// RANK: error: h3-lora: rank must be a positive multiple of 64 (the GEMMs' k-block), got 48
// TP: error: h3-shard-tp: unmerged LoRA (h3-lora) is not split over tensor-parallel ranks yet

// CHECK: module attributes {h3.adapter_slots = {transformer_blocks.0.attn.to_out.0.lora_down = [64, 128], transformer_blocks.0.attn.to_out.0.lora_up = [24, 64], transformer_blocks.0.attn.to_qkv.lora_down = [192, 24], transformer_blocks.0.attn.to_qkv.lora_up = [96, 192]}}
// ONLY: h3.adapter_slots = {transformer_blocks.0.attn.to_out.0.lora_down = [128, 128], transformer_blocks.0.attn.to_out.0.lora_up = [24, 128]}
// NONE-NOT: lora
func.func @block(%x: !h3.act<B, S, 24, bf16>, %a: !h3.act<B, S, 128, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<B, S, 8, bf16>) {
  // CHECK: %[[T:.*]] = h3.lora_down %arg0 {K = 24 : i64, N = 192 : i64, nodes = [], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, values = ["transformer_blocks.0.attn.to_qkv:lora_t"], weight = ["transformer_blocks.0.attn.to_qkv.lora_down"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 192, bf16>
  // CHECK: h3.qkv_linear %arg0, %[[T]] {{.*}}lora_k = 192 : i64{{.*}}weight = ["a", "b", "c", "transformer_blocks.0.attn.to_qkv.lora_up"]
  // ONLY-NOT: to_qkv
  %q, %k, %v = h3.qkv_linear %x {K = 24 : i64, heads = 2 : i64, head_dim = 16 : i64, bias = [], weight = ["a", "b", "c"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v"], values = ["q", "k", "v"]} : (!h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>, !h3.act<B, S, 32, bf16>)
  // CHECK: %[[U:.*]] = h3.lora_down %arg1 {K = 128 : i64, N = 64 : i64{{.*}}weight = ["transformer_blocks.0.attn.to_out.0.lora_down"]}
  // CHECK: h3.linear %arg1, %arg0, %[[U]] {{.*}}lora_k = 64 : i64{{.*}}weight = ["w", "transformer_blocks.0.attn.to_out.0.lora_up"]
  %o = h3.linear %a, %x {K = 128 : i64, N = 24 : i64, bias = [], epilogue = #h3.epilogue<residual>, weight = ["w"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["transformer_blocks.0.attn.to_out.0", "transformer_blocks.0.residual"], values = ["o"]} : (!h3.act<B, S, 128, bf16>, !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  // CHECK: h3.linear %arg0 {K = 24 : i64, N = 8 : i64, bias = [], nodes = ["proj_in"]
  %p = h3.linear %x {K = 24 : i64, N = 8 : i64, bias = [], weight = ["p"], order = #h3.order<k_chunks, k_step = 16, units = 1, acc = f32>, nodes = ["proj_in"], values = ["p"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16>
  return %q, %o, %p : !h3.act<B, S, 32, bf16>, !h3.act<B, S, 24, bf16>, !h3.act<B, S, 8, bf16>
}
