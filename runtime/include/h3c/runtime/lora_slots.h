// Unmerged LoRA (docs/contract.md section 13): which adapter slots of a plan serve which base weight, and the values
// the loaded adapters give them. The plan says it all structurally: a linear / qkv_linear with attrs.lora_k reads its
// up slot as its last weight and the output of a lora_down op (whose one weight is the down slot) as its last input;
// its base matrices (qkv: the first three weights) are the groups, in order.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/lora.h"
#include "h3c/runtime/tensor.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace h3c::rt {

// Where base weight `W` (a diffusers tensor name) takes an unmerged adapter: group `group` of its op's slots.
struct LoraSlotTarget {
  std::string down, up;     // the op's down slot [groups * rank, K] and up slot [rows, groups * rank]
  int64_t group = 0, groups = 1;
  int64_t rank = 0;         // the slot rank per group (lora_k / groups)
  int64_t rowOffset = 0;    // W's first row in the up slot (qkv: 0, N, 2N)
  int64_t rows = 0, cols = 0;  // W's shape [out, in]
};

// Every base weight with an unmerged path, by name; empty for a plan compiled without --lora-rank.
std::map<std::string, LoraSlotTarget> loraSlotTargets(const plan::Plan &p);

// The adapters, in load order, each with its scale.
using LoadedAdapters = std::vector<std::pair<const LoraAdapter *, double>>;

// The values of the slots that `adapters` touch (every other slot of the plan is zero): per module, in load order,
// its rank's rows of the down slot (bf16(A)) and columns of the up slot (bf16(float(s) * B), s = loraTermScale) after
// the ranks the earlier adapters took on the same weight. Modules whose weight no slot serves are skipped (the engine
// merges them). Throws an h3c::Error naming the adapter and module when the ranks on one weight exceed the slot rank,
// a value is not finite in BF16, or a shape differs; nothing is returned partially.
// `targets` is loraSlotTargets(p) (an engine derives it once per plan).
std::map<std::string, Tensor> loraSlotValues(const plan::Plan &p, const std::map<std::string, LoraSlotTarget> &targets,
                                             const LoadedAdapters &adapters);

} // namespace h3c::rt
