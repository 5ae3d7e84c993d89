// RUN: h3c-opt %s -split-input-file -verify-diagnostics
// The unmerged LoRA ops' verifiers (docs/contract.md section 13).

func.func @down_with_nodes(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16> {
  // expected-error @+1 {{implements no fingerprint node ('nodes' must be empty)}}
  %t = h3.lora_down %x {K = 24 : i64, N = 64 : i64, weight = ["d"], nodes = ["transformer_blocks.0.attn.to_out.0"], values = ["t"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  return %t : !h3.act<B, S, 64, bf16>
}

// -----

func.func @down_width(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 48, bf16> {
  // expected-error @+1 {{K must be positive and N a positive multiple of 64}}
  %t = h3.lora_down %x {K = 24 : i64, N = 48 : i64, weight = ["d"], nodes = [], values = ["t"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 48, bf16>
  return %t : !h3.act<B, S, 48, bf16>
}

// -----

func.func @lora_input_not_down(%x: !h3.act<B, S, 24, bf16>, %t: !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 8, bf16> {
  // expected-error @+1 {{the LoRA input must be h3.lora_down of the same x}}
  %y = h3.linear %x, %t {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w", "u"], lora_k = 64 : i64, nodes = ["transformer_blocks.0.ff.net.2"], values = ["y"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 8, bf16>
  return %y : !h3.act<B, S, 8, bf16>
}

// -----

func.func @lora_k_width(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16> {
  %t = h3.lora_down %x {K = 24 : i64, N = 64 : i64, weight = ["d"], nodes = [], values = ["t"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  // expected-error @+1 {{LoRA input}}
  %y = h3.linear %x, %t {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w", "u"], lora_k = 128 : i64, nodes = ["transformer_blocks.0.ff.net.2"], values = ["y"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 8, bf16>
  return %y : !h3.act<B, S, 8, bf16>
}

// -----

func.func @lora_without_up_slot(%x: !h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 8, bf16> {
  %t = h3.lora_down %x {K = 24 : i64, N = 64 : i64, weight = ["d"], nodes = [], values = ["t"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  // expected-error @+1 {{weight}}
  %y = h3.linear %x, %t {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w"], lora_k = 64 : i64, nodes = ["transformer_blocks.0.ff.net.2"], values = ["y"]} : (!h3.act<B, S, 24, bf16>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 8, bf16>
  return %y : !h3.act<B, S, 8, bf16>
}

// -----

func.func @lora_f32_input(%x: !h3.act<B, S, 24, f32>, %u: !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 8, bf16> {
  // expected-error @+1 {{an unmerged LoRA path needs a bf16 input}}
  %y = h3.linear %x, %u {K = 24 : i64, N = 8 : i64, bias = [], weight = ["w", "u"], lora_k = 64 : i64, nodes = ["transformer_blocks.0.ff.net.2"], values = ["y"]} : (!h3.act<B, S, 24, f32>, !h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 8, bf16>
  return %y : !h3.act<B, S, 8, bf16>
}
