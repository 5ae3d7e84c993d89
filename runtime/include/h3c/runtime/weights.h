// Where weights come from. The executors never hold the whole model: they ask for one tensor right before the op
// that needs it and drop it after (the synthetic generator is counter-based, checkpoints are memory-mapped), so the
// 33B model runs in bounded memory.
#pragma once

#include "h3c/models/config.h"
#include "h3c/plan/plan.h"
#include "h3c/runtime/tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace h3c::rt {

class WeightSource {
public:
  virtual ~WeightSource() = default;
  // The diffusers tensor table of the config.
  const h3::TensorSpec &spec(const std::string &name) const;
  // One whole tensor in its checkpoint dtype (F32 or BF16), diffusers naming and layout.
  virtual Tensor load(const std::string &name) = 0;
  // Rows [rowBegin, rowEnd) of a 2-D (or 1-D) tensor: what a TP rank holds. Default: load() and slice.
  virtual Tensor loadRows(const std::string &name, int64_t rowBegin, int64_t rowEnd);
  // For the ledger: {"kind": "synthetic", "seed": N} or {"kind": "checkpoint", "path", "format", "content_sha256"}
  // (a checkpoint not yet loaded by a streaming load is hashed by the first call: checkpoint_weights.h).
  virtual nlohmann::json describe() const = 0;
  const h3::Config &config() const { return config_; }
  // Checkpoint tensors are checked for NaN / Inf as they are loaded: with `strict` a non-finite tensor is an error
  // naming it, otherwise it is recorded ("<tensor>: 1 NaN, 0 Inf (first: element 5, NaN)") for the ledger. The record
  // is kept for the source's life (one entry per tensor, in name order): a resident engine that keeps the tensor
  // (cache, GPU upload) never loads it again, yet every later ledger must still name it.
  void setStrictFinite(bool strict) { strictFinite_ = strict; }
  std::vector<std::string> nonFinite() const;

protected:
  void checkFinite(const std::string &name, const Tensor &t);
  bool strictFinite_ = true;
  std::map<std::string, std::string> nonFinite_;  // tensor -> "1 NaN, 0 Inf (first: element 5, NaN)"
  explicit WeightSource(const h3::Config &c);
  h3::Config config_;
  std::map<std::string, h3::TensorSpec> specs_;
};

// `h3c checkpoint synth` values: synth_rng keyed by (seed, name, element); std 0.02 for Init::Normal, 1 for Ones,
// 0 for Zeros; rounded to the tensor dtype. Generation is multithreaded and bitwise independent of thread count.
std::unique_ptr<WeightSource> makeSyntheticWeights(const h3::Config &c, uint64_t seed);
// A diffusers or native checkpoint folder, read through models/h3's checkpoint reader after its check passes
// (a CheckpointWeights, checkpoint_weights.h: its content hash is computed by the GPU load, or by describe()).
std::unique_ptr<WeightSource> makeCheckpointWeights(const h3::Config &c, const std::filesystem::path &dir);

// The weights tensor-parallel rank `tpIndex` of `p` holds (docs/contract.md section 5.2): a tensor the plan splits
// (plan::WeightTensor::split) is that rank's rows, back to back, and spec() gives its local shape; every other
// tensor is `all`'s. Keeps a reference to `all`.
std::unique_ptr<WeightSource> makeRankWeights(WeightSource &all, const plan::Plan &p, int64_t tpIndex);

// `source`'s tensors kept in memory after their first load (the resident engine on the CPU: later forwards read no
// checkpoint and generate no synthetic value again). loadRows slices the kept tensor. Keeps a reference to `source`.
std::unique_ptr<WeightSource> makeCachedWeights(WeightSource &source);

// `base`'s tensors with some replaced: the CPU engine's weights (engine.h), with its hot updates and merged LoRA
// adapters. load / loadRows give a replaced tensor's kept value, every other tensor `base`'s; describe() is `base`'s
// (the ledger's "weights" record says what changed). It also keeps the content hash (support/content_hash.h) of
// every whole tensor it hands out or is given, so the ledger's weights record costs no second read of a tensor the
// forward loaded. Keeps a reference to `base`.
class OverlayWeights final : public WeightSource {
public:
  explicit OverlayWeights(WeightSource &base);
  Tensor load(const std::string &name) override;
  Tensor loadRows(const std::string &name, int64_t rowBegin, int64_t rowEnd) override;
  nlohmann::json describe() const override { return base_.describe(); }
  // Replaces tensor `name` (its spec's dtype and shape, else an error naming it).
  void set(const std::string &name, Tensor t);
  // Back to `base`'s value.
  void erase(const std::string &name);
  // The plan's unmerged LoRA adapter slots (plan::WeightTensor::adapter; docs/contract.md section 13), which no
  // weight source holds: tensors of this overlay from now on, zero until set().
  void holdAdapterSlots(const plan::Plan &p);
  bool replaced(const std::string &name) const { return kept_.count(name) != 0; }
  // `base`'s value of tensor `name`, whether or not it is replaced here.
  Tensor baseLoad(const std::string &name) { return base_.load(name); }
  // The content hash of tensor `name`'s current value (loaded and hashed when no whole load was seen yet).
  std::string contentHashOf(const std::string &name);

private:
  WeightSource &base_;
  std::map<std::string, Tensor> kept_;
  std::map<std::string, std::string> hashes_;
};

// Synthetic value of one element (as float, before dtype rounding): exposed so the GPU path and tests can agree.
float syntheticValue(uint64_t seed, const h3::TensorSpec &spec, int64_t index);

} // namespace h3c::rt
