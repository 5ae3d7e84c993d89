// The resident engine: one plan, one weight source and one executor kept together across forwards, so that many
// requests of the plan's shape class (every step of a trajectory, every call of the Python package) run without
// reloading anything. On the GPU the executor keeps the JIT-compiled kernels, the weights it uploaded (once per plan
// and weight content) and the arena (grown when a larger request comes); on the CPU the weights are read once into
// memory when they fit the cache budget (else per op, as a single run does: the 33B model in bounded memory).
// runModel() (executor.h) is an engine that runs once.
#pragma once

#include "h3c/runtime/executor.h"

#include <cstdint>
#include <map>
#include <memory>

namespace h3c::rt {

class Engine {
public:
  // `plan` and `weights` must outlive the engine. `opt` fixes device, sp and tp for the engine's life (checked
  // against the plan here, with runModel's messages); its mode, binds, threads and progress are run()'s defaults.
  // `cpuCacheBytes`: on the CPU, the weights are kept in memory after their first read when the plan's weights
  // total at most this many bytes (0: never; a single forward gains nothing from it).
  Engine(const plan::Plan &plan, WeightSource &weights, const RunOptions &opt,
         uint64_t cpuCacheBytes = kDefaultCpuCacheBytes);
  ~Engine();
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  static constexpr uint64_t kDefaultCpuCacheBytes = uint64_t(16) << 30;

  // One forward with the engine's options.
  RunResult run(const Request &request) { return run(request, opt_, nullptr); }
  // One forward with per-call options: device, sp and tp must be the engine's; mode, binds, threads and progress
  // may differ (generate's --bind-from-step). `io` (GPU only): caller-owned device memory for activations and
  // outputs, and the stream to run on (executor.h).
  RunResult run(const Request &request, const RunOptions &opt, const DeviceIO *io = nullptr);
  // Loads the weights before the first forward (on the GPU: the upload, which computes a checkpoint's content hash
  // and checks it against an expected one, CheckpointWeights::expectContent; the CPU reads weights per op). run()
  // does it when needed. `progress`: a progress line on stderr while it loads.
  void loadWeights(bool progress = false);

  const plan::Plan &plan() const { return plan_; }
  WeightSource &weights() { return *weights_; }
  const RunOptions &options() const { return opt_; }
  int64_t forwards() const { return forwards_; }  // completed forwards
  // The host phases of the last completed forward in ms (canonicalize, ledger_header, executor, request_sha_wait,
  // outputs_ledger): what H3C_PROFILE prints, for callers that account for a forward of their own (the package).
  const std::map<std::string, double> &lastPhases() const { return lastPhases_; }
  bool cachesWeights() const { return cache_ != nullptr; }

private:
  const plan::Plan &plan_;
  WeightSource *source_;                // the caller's (it checks loaded tensors for NaN / Inf)
  WeightSource *weights_;               // the caller's, or cache_ wrapping it
  std::unique_ptr<WeightSource> cache_;
  RunOptions opt_;
  std::unique_ptr<Executor> exec_;      // created at the first forward (after the request is validated)
  int64_t forwards_ = 0;
  std::map<std::string, double> lastPhases_;
};

} // namespace h3c::rt
