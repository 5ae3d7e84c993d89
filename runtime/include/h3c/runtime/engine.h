// The resident engine: one plan, one weight source and one executor kept together across forwards, so that many
// requests of the plan's shape class (every step of a trajectory, every call of the Python package) run without
// reloading anything. On the GPU the executor keeps the JIT-compiled kernels, the weights it uploaded (once per plan
// and weight content) and the arena (grown when a larger request comes); on the CPU the weights are read once into
// memory when they fit the cache budget (else per op, as a single run does: the 33B model in bounded memory).
// runModel() (executor.h) is an engine that runs once.
#pragma once

#include "h3c/runtime/backward.h"
#include "h3c/runtime/executor.h"
#include "h3c/runtime/lora_slots.h"
#include "h3c/runtime/weight_update.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>

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
  // The plan's backward (backward.h) on the weights this engine holds (hot updates included): the CPU reference, or
  // the GPU executor's gradient kernels with its device weights and kernels.
  // `resume`: the ticket of forwardKept's forward of this request (0: none): the GPU backward then runs only its own
  // steps when nothing ran on the engine in between (BackwardResult::forwardKept says which); the same bits either way.
  // `into`: weight gradients left in device memory (executor.h's DeviceGrads; GPU engines only).
  BackwardResult backward(const Request &request, const OutputGrads &dy, uint64_t resume = 0,
                          const DeviceGrads *into = nullptr);
  // The forward of a training step: on the GPU the backward's forward (Executor::forwardKept), its values kept for the
  // backward of the ticket returned; on the CPU a forward (ticket 0: the backward runs its own). A strict engine
  // refuses non-finite outputs (naming them). The outputs are the forward's bits either way.
  std::pair<Outputs, uint64_t> forwardKept(const Request &request);
  // Loads the weights before the first forward (on the GPU: the upload, which computes a checkpoint's content hash
  // and checks it against an expected one, CheckpointWeights::expectContent; the CPU reads weights per op). run()
  // does it when needed. `progress`: a progress line on stderr while it loads.
  void loadWeights(bool progress = false);

  // A hot update (weight_update.h): checked against the plan before anything changes (a refused update changes
  // nothing), then written where the engine's weights live: the device weight buffers on the GPU (loaded first when
  // needed; device inputs are copied on `stream`, the caller's), a host overlay on the CPU. The next forward is
  // byte-equal to one of an engine cold-loaded with the same values, and its ledger's "weights" record (below) has
  // the new identity. `deviceChecked`: the caller scanned device inputs for NaN / Inf (the Python package).
  void updateWeights(const std::vector<WeightInput> &inputs, h3::QkvLayout layout = h3::QkvLayout::Interleaved,
                     uint64_t stream = 0, bool deviceChecked = false);
  // The weights' identity (weight_identity.h) as every ledger's header records it under "weights": {"identity":
  // "h3c-weights-v1", "hash": "h3c-sum128-v1", "sha256", "tensors": {name: hash}, "updates": N, "updated":
  // [names written by updates since the load]}. Hashes what it has not hashed yet (on the GPU: the device copies).
  const nlohmann::json &weightsRecord();
  // One whole plan weight tensor as the engine holds it now (on the GPU: copied back from the device).
  Tensor readWeight(const std::string &name);
  // A LoRA adapter merged into the weights it targets (lora.h; docs/contract.md section 12): every tensor an adapter
  // touches becomes its value before the first adapter merged with the terms of every loaded adapter, in load
  // order, rounded once (mergeLora on the CPU; the device merge, the same bits, on the GPU). Nothing changes when it
  // is refused (a target that is no weight of the plan, a non-finite merged value). The weights record lists the
  // adapters under "lora". A hot update of a tensor a loaded adapter touches is refused until unloadLoras().
  // On a plan with unmerged LoRA slots (h3c compile --lora-rank; docs/contract.md section 13) the modules the slots
  // serve go into them instead (lora_slots.h): their W stays as it is, so hot updates of it go on; the modules no slot
  // serves (AdaLN tables, norm_out, ...) are merged as above. The record's "mode" and "merged_modules" say which.
  void loadLora(LoraAdapter adapter, double scale);
  // Every tensor the loaded adapters touched back to its value before the first, byte for byte (unmerged: the slots
  // back to zero).
  void unloadLoras();
  bool loraUnmerged() const { return !loraSlots_.empty(); }
  size_t lorasLoaded() const { return loras_.size(); }

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
  WeightSource *weights_;               // the caller's, or cache_ wrapping it, or overlay_ above those (CPU)
  std::unique_ptr<WeightSource> cache_;
  std::unique_ptr<OverlayWeights> overlay_;  // CPU: the tensors updates replaced
  // Refuses to run on weights a failed device write left half old, half new (weightsBroken_).
  void requireWeightsIntact() const;
  void ensureExecutor();
  std::vector<std::string> currentNonFinite() const;  // the source's non-finite tensors that no update replaced
  // The ledger's weights record: per-tensor hashes of what the executor holds (filled lazily, replaced by updates).
  std::map<std::string, std::string> weightHashes_;
  std::set<std::string> updated_;       // tensors updates wrote
  int64_t updates_ = 0;
  nlohmann::json weightsRecord_;        // null when it must be rebuilt
  bool weightsBroken_ = false;          // a device write failed midway: the weights are neither old nor new
  struct LoadedLora {
    std::shared_ptr<const LoraAdapter> adapter;
    double scale;
  };
  std::vector<LoadedLora> loras_;          // in load order
  // The plan's unmerged LoRA slots by the base weight they serve (lora_slots.h); empty: every adapter is merged.
  const std::map<std::string, LoraSlotTarget> loraSlots_;
  void writeLoraSlots(const std::map<std::string, Tensor> &values);  // slots set where the engine holds them
  std::set<std::string> loraTouched_;       // every tensor a loaded adapter touches
  // Host copies of the bases that hot updates made (touched tensors an update wrote before the first adapter); the
  // other touched tensors' bases are the source's values, read again for the unload (no 60 GB host copy).
  std::map<std::string, Tensor> loraBase_;
  LoraTerms loraTerms(const std::string &tensor) const;  // the loaded adapters' terms for `tensor`, in load order
  Tensor loraBaseValue(const std::string &tensor);        // CPU: a touched tensor's base value
  void restoreLoraBase(const std::string &tensor);        // a touched tensor back to its base where it is held
  // `tensor` set to its base merged with `terms` where the engine holds it (CPU overlay, or the device; on the
  // device `holdsBase` says the tensor holds its base already: merged in place).
  void applyMerged(const std::string &tensor, const LoraTerms &terms, bool holdsBase);
  void rehash(const std::vector<std::string> &tensors);
  RunOptions opt_;
  std::unique_ptr<Executor> exec_;      // created at the first forward (after the request is validated)
  int64_t forwards_ = 0;
  std::map<std::string, double> lastPhases_;
};

} // namespace h3c::rt
