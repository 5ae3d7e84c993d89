// LoRA adapters for MiniMax-H3: a .safetensors LoRA file read with diffusers' key and alpha rules (every layout
// diffusers' MiniMaxH3LoraLoaderMixin accepts, converted onto the diffusers weight names), and the deterministic
// merge of adapters into a weight tensor (docs/contract.md section 12, "LoRA merge numerics"). The device form of the
// merge, with the same bits, is cuda/lora_merge.h.
#pragma once

#include "h3c/models/config.h"
#include "h3c/runtime/tensor.h"
#include "h3c/support/dtype.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace h3c::rt {

// One adapted weight: W' = W + scale * (alpha / rank) * up @ down (the merge's exact order: mergeLora).
struct LoraModule {
  std::string target;  // diffusers weight tensor, e.g. "transformer_blocks.3.attn.to_q.weight"
  int64_t rank = 0;
  double alpha = 0;    // this module's alpha; the module's factor is alpha / rank
  Tensor down;         // lora_A, [rank, in_features], F32 (converted exactly from the file's F32/BF16/F16)
  Tensor up;           // lora_B, [out_features, rank], F32
};

struct LoraAdapter {
  std::string path;    // as given
  std::string sha256;  // of the file's bytes
  // The layout recognized: "diffusers" (transformer.-prefixed lora_A/lora_B), "peft" (unprefixed, .default. infix),
  // and the original checkpoint's names: "kohya" (lora_down/lora_up), "musubi" (lora_unet_ flattened names),
  // "diffsynth" (.default. infix, per-head interleaved fused qkv), "original" (lora_A/lora_B).
  std::string format;
  std::vector<LoraModule> modules;  // sorted by target, at most one per target
};

// Reads a .safetensors LoRA file (or a folder holding exactly one, e.g. pytorch_lora_weights.safetensors) for the
// config `c`, with diffusers' key and alpha rules for MiniMax-H3. Every target is a linear weight of the model
// (h3::diffusersTensors(c)) with matching shapes (in = weight cols, out = weight rows); anything unknown or
// inconsistent is an h3c::Error naming the key and the file. Nothing partial is returned. Refused where diffusers
// would load something h3c cannot apply exactly: DoRA (dora_scale), `transformer_ref.` keys (h3c runs the one
// `transformer` partition), a non-numeric `__metadata__` alpha (diffusers ignores it with a warning).
LoraAdapter readLora(const std::filesystem::path &file, const h3::Config &c);

// `--lora FILE[:SCALE]` (h3c run / generate): the file and its scale (default 1). The text after the last ':' is
// the scale when it is a finite number, else part of the path.
struct LoraSpec {
  std::string path;
  double scale = 1.0;
};
LoraSpec parseLoraSpec(const std::string &spec);

// (module, scale) pairs, merged in this order.
using LoraTerms = std::vector<std::pair<const LoraModule *, double>>;

// Throws unless every term can merge into a weight of `dtype` (BF16 or F32) and `shape` [out, in]: one target for
// all, F32 factors down [rank, in] and up [out, rank]. mergeLora and the device merge check this first.
void checkLoraTerms(DType dtype, const std::vector<int64_t> &shape, const LoraTerms &terms);

// The float scale of one term (the contract's s_t): float(scale * alpha / rank), computed in double (left to
// right) and rounded once. Shared by the host and the device merge so both multiply by the same float. Throws when
// it is not finite.
float loraTermScale(const LoraModule &m, double scale);

// The merged value of one weight tensor: W (its BF16 or F32 bytes, shape [out, in]) plus every (module, scale) in
// the given order, rounded once to W's dtype. Every term's module targets the same weight, with down [rank, in] and
// up [out, rank] in F32. Multithreaded over rows (threads 0: the hardware's), bitwise independent of `threads`.
// A non-finite merged element is an h3c::Error naming the target, the element and the value.
Tensor mergeLora(const Tensor &w, const LoraTerms &terms, int threads = 0);

} // namespace h3c::rt
