// Executors run a plan over a canonical request. The CPU reference executor (cpu_executor.cpp) and the GPU executor
// (runtime/lib/cuda, helper "gpu") implement this interface and share everything around it: the plan, request
// canonicalization (request.h), host tables (host_ops.h), weights (weights.h) and the ledger (ledger.h).
// runModel() runs one forward; the resident engine (engine.h) runs many with the same executor.
#pragma once

#include "h3c/runtime/ledger.h"
#include "h3c/runtime/lora.h"
#include "h3c/plan/plan.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/tensor.h"
#include "h3c/runtime/weight_update.h"
#include "h3c/runtime/weights.h"

#include <map>
#include <memory>
#include <optional>
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
  // false: RunResult::ledger stays null and RunResult::ledgerBuilder builds the document when asked (the Python
  // package: most forwards of a sampling loop never read theirs; the strict rule is judged either way).
  bool sealLedger = true;
  // --hash-nodes: every op output's content hash (support/content_hash.h) in the ledger; the GPU hashes on the
  // device. In a multi-rank CPU simulation, rank 0's values (as the shapes). Never changes a result bit.
  bool hashNodes = false;
};

// Caller-owned device memory of a GPU forward (the Python package's CUDA tensors), all on the executor's device:
// the kernels read these activations and write these outputs in place (no staging copy), and every launch and copy
// goes to `stream`. A bound activation holds the plan's value dtype (e.g. BF16 text: the caller converts, rounding
// to nearest even as the executor's upload does), contiguous; the Request still carries the caller's values (read
// back to the host) for validation and the ledger's request hash, exactly as `h3c run` sees them.
struct DeviceIO {
  std::map<std::string, uint64_t> inputs;  // "hidden_states" | "audio_hidden_states" | "encoder_hidden_states"
  uint64_t sample = 0, audioSample = 0;    // F32, contiguous [B, Nv, videoPatchDim] / [B, Na, audio_in_channels]
  uint64_t stream = 0;                     // a CUstream of the primary context; 0: the legacy default stream
};

// Where a GPU backward leaves weight gradients instead of host tensors: caller device memory (the package's CUDA
// parameters' gradients), by plan weight name (a tensor the plan trains), each F32 of the weight's shape, contiguous.
// The gradient kernels write them there themselves (a weight gradient's slot is its own and no part of the arena),
// after the work queued on `stream` (a CUstream of the primary context; 0: the legacy default stream) before the
// call, and are done when it returns. A training step then moves no gradient through the host and holds no second
// copy of them on the device (1.38 GB at LoRA rank 64).
// `inputGrads` / `outputs` false: the GPU backward leaves the activations' gradients / the forward's outputs out of
// its result (no download: a trainer whose activations need no gradient, and which has the outputs of its kept
// forward already, waits for neither); the CPU reference returns them anyway.
struct DeviceGrads {
  std::map<std::string, uint64_t> weights;
  uint64_t stream = 0;
  bool inputGrads = true, outputs = true;
};

struct Outputs {
  Tensor sample;        // [B, Nv, videoPatchDim] F32
  Tensor audio_sample;  // [B, Na, audio_in_channels] F32
  // With a DeviceIO the bytes above stay empty (the outputs are in the caller's memory): the GPU executor scans them
  // where they are (one reduction kernel, runtime/cuda/non_finite.h) and the engine records these as it records a
  // host scan of the bytes. Unset: the engine scans the bytes.
  std::optional<Tensor::NonFinite> sampleNonFinite, audioSampleNonFinite;
};

struct BackwardResult;  // backward.h
struct OutputGrads;

class Executor {
public:
  virtual ~Executor() = default;
  virtual std::string device() const = 0;
  // Device facts for the ledger header (driver_version, nvrtc_version, gpu name); empty object on the CPU.
  virtual nlohmann::json deviceInfo() const { return nlohmann::json::object(); }
  // Runs every op of `plan` in order and records each into `ledger` (requested binding from requestedBinding(),
  // actual binding what really ran; in audit mode also the reference error). An executor may keep state between
  // runs (the GPU executor keeps kernels, uploaded weights and the arena). `io`: GPU only (DeviceIO above); with
  // it, the outputs are in the caller's memory and the returned Outputs carry shapes only.
  virtual Outputs run(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
                      LedgerBuilder &ledger, const DeviceIO *io = nullptr) = 0;
  // Loads the weights now rather than in the first run() (the GPU executor uploads them, once per plan and weight
  // content, and a checkpoint's content hash is computed on the way; `progress`: a progress line on stderr). The
  // CPU executor reads weights per op: nothing to do.
  virtual void loadWeights(const plan::Plan & /*p*/, WeightSource & /*weights*/, bool /*progress*/) {}
  // The content hash (support/content_hash.h) of each named plan weight tensor as this executor holds it, for the
  // ledger's weights record (weight_identity.h): the GPU executor hashes its device copy where it lives. The CPU
  // executor holds no weights (the CPU engine's OverlayWeights hashes what it hands out): the default refuses.
  virtual std::map<std::string, std::string> weightHashes(const plan::Plan &p, WeightSource &weights,
                                                          const std::vector<std::string> &names);
  // A hot update's writes (weight_update.h) into the weights this executor holds: the GPU executor copies them into
  // its device weight buffers (loading the weights first when needed) on `stream` and returns when they are done.
  // The CPU executor holds no weights (the CPU engine keeps updates in its OverlayWeights): the default refuses.
  virtual void writeWeights(const plan::Plan &p, WeightSource &weights, const std::vector<WeightWrite> &writes,
                            uint64_t stream);
  // One whole plan weight tensor as this executor holds it (the GPU executor copies it back): what a LoRA merge
  // starts from. The default loads it from `weights`.
  virtual Tensor readWeight(const plan::Plan &p, WeightSource &weights, const std::string &name);
  // Merges LoRA terms into plan weight tensor `tensor` where this executor holds it (docs/contract.md section 12):
  // the GPU executor on the device (cuda/lora_merge.h; the tensor is unchanged when the merge is refused). The CPU
  // engine merges on the host into its OverlayWeights instead: the default refuses.
  virtual void mergeLora(const plan::Plan &p, WeightSource &weights, const std::string &tensor, const LoraTerms &terms);
  // The named plan weight tensors set back to `weights`' values where this executor holds them (the GPU executor:
  // generated on the device for synthetic weights, read and copied for a checkpoint), e.g. a LoRA adapter's unload.
  // The default refuses (the CPU engine's overlay forgets its replacements instead).
  virtual void restoreWeights(const plan::Plan &p, WeightSource &weights, const std::vector<std::string> &names);
  // The plan's forward, then its backward (docs/contract.md section 14) on the gradients of the forward's outputs
  // (backward.h, which validates the plan and the gradients first): the GPU executor runs both on the device, every
  // value of both functions in the arena. The default refuses (the CPU reference is runCpuBackward).
  // `resume`: a ticket of forwardKept; when it is the last thing that ran on this executor (same plan, same request
  // extents), the backward starts after the forward, on the kept values (BackwardResult::forwardKept); otherwise it
  // runs the forward itself. The same bits either way.
  // `into`: weight gradients to leave in caller device memory (DeviceGrads; the GPU executor only), absent from the
  // result's weightGrads.
  virtual BackwardResult backward(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req,
                                  const OutputGrads &dy, const RunOptions &opt, uint64_t resume = 0,
                                  const DeviceGrads *into = nullptr);
  // The forward half of backward(): the forward's ops of the backward's schedule, their values kept for the backward
  // (a training forward and its backward then run the forward once). Returns the forward's outputs and sets `ticket`
  // (non-zero) for backward()'s `resume`; any other run, backward or weight change on this executor drops what it
  // kept. The default refuses (the CPU reference keeps nothing).
  virtual Outputs forwardKept(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req,
                              const RunOptions &opt, uint64_t &ticket);
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
  nlohmann::json ledger;  // sealed (null when RunOptions::sealLedger is false)
  // What the ledger is built from: verdict() is the strict rule, finish() the sealed document. It refers to the
  // engine's plan: use it while the engine lives.
  std::shared_ptr<const LedgerBuilder> ledgerBuilder;
};
// Validates the options against the plan (sp, tp, config), canonicalizes the request, runs, seals the ledger: one
// forward of a fresh Engine (engine.h) that caches nothing.
RunResult runModel(const plan::Plan &p, WeightSource &weights, const Request &request, const RunOptions &opt);

} // namespace h3c::rt
