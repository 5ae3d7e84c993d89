// trainable.h: which weight tensors a backward trains.
#include "h3c/plan/trainable.h"

#include "h3c/support/error.h"
#include "h3c/support/glob.h"

namespace h3c::plan {

bool trains(const std::vector<std::string> &patterns, const std::string &tensor, bool adapter) {
  for (const std::string &p : patterns)
    if (p == kTrainAdapters ? adapter : globMatch(p, tensor)) return true;
  return false;
}

void checkTrainable(const std::vector<std::string> &patterns, const std::string &where) {
  if (patterns.empty()) fail(where, "names no tensor to train (give a pattern, \"*\" for all, \"lora\" for the adapters)");
  for (size_t i = 0; i < patterns.size(); ++i)
    if (patterns[i].empty()) fail(where + "/" + std::to_string(i), "is an empty pattern");
}

} // namespace h3c::plan
