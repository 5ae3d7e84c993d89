// What a backward trains (docs/contract.md section 14, `h3c compile --trainable`): a list of patterns over the plan's
// weight tensors. "lora" selects the unmerged LoRA adapter slots (plan::WeightTensor::adapter, section 13); any other
// pattern is a glob over tensor names (support/glob.h: '*', '?'), adapter slots included. A tensor is trained when a
// pattern selects it; the others are frozen: the backward computes no gradient of them. Default: {"*"}, everything.
// The compiler (h3-backward), the plan reader and the runtime decide it by this one function.
#pragma once

#include <string>
#include <vector>

namespace h3c::plan {

inline const char *const kTrainAdapters = "lora";

bool trains(const std::vector<std::string> &patterns, const std::string &tensor, bool adapter);
// Refuses an empty list or an empty pattern, naming `where`.
void checkTrainable(const std::vector<std::string> &patterns, const std::string &where);

} // namespace h3c::plan
