// Executors run a plan over a canonical request. The CPU reference executor (cpu_executor.cpp) and the GPU executor
// (runtime/lib/cuda, helper "gpu") implement this interface and share everything around it: the plan, request
// canonicalization (request.h), host tables (host_ops.h), weights (weights.h) and the ledger (ledger.h).
// runModel() is the one entry point `h3c run` (and the sampler) uses.
#pragma once

#include "h3c/runtime/ledger.h"
#include "h3c/plan/plan.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/tensor.h"
#include "h3c/runtime/weights.h"

#include <memory>
#include <string>
#include <vector>

namespace h3c::rt {

struct RunOptions {
  std::string device = "cpu";  // "cpu" | "gpu"
  Mode mode = Mode::Strict;
  int64_t sp = 0;              // must equal the plan's options.sp (0: the plan's)
  int64_t tp = 1;              // must equal the plan's options.tp
  std::vector<BindRule> binds;
  int threads = 0;             // CPU worker threads; 0 = hardware concurrency. Never changes a result bit.
  bool progress = false;       // one line per op on stderr (op index, first node, elapsed seconds)
};

struct Outputs {
  Tensor sample;        // [B, Nv, videoPatchDim] F32
  Tensor audio_sample;  // [B, Na, audio_in_channels] F32
};

class Executor {
public:
  virtual ~Executor() = default;
  virtual std::string device() const = 0;
  // Device facts for the ledger header (driver_version, nvrtc_version, gpu name); empty object on the CPU.
  virtual nlohmann::json deviceInfo() const { return nlohmann::json::object(); }
  // Runs every op of `plan` in order and records each into `ledger` (requested binding from requestedBinding(),
  // actual binding what really ran; in audit mode also the reference error).
  virtual Outputs run(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
                      LedgerBuilder &ledger) = 0;
};

std::unique_ptr<Executor> makeCpuExecutor();
#ifdef H3C_HAVE_CUDA
// Defined by the GPU executor (runtime/lib/cuda).
std::unique_ptr<Executor> makeGpuExecutor();
#endif
// "cpu", or "gpu" when built with CUDA; throws naming --device otherwise.
std::unique_ptr<Executor> makeExecutor(const std::string &device);

struct RunResult {
  Outputs outputs;
  nlohmann::json ledger;  // sealed
};
// Validates the options against the plan (sp, tp, config), canonicalizes the request, runs, seals the ledger.
RunResult runModel(const plan::Plan &p, WeightSource &weights, const Request &request, const RunOptions &opt);

} // namespace h3c::rt
