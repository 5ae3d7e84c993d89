// The weights of a checkpoint folder (makeCheckpointWeights), as a loader that streams the whole folder sees them.
// Opening checks the folder's config and tensor list (names, dtypes, shapes) against the config, reading headers
// only. Its content hash (the snapshot's content_sha256, for the ledger and for trajectories) is computed once:
// by a streaming load (stream(): the GPU upload hashes the bytes it uploads), or, when something asks for
// describe() before any such load (the CPU executor reads tensors per op), by a hashing pass of its own that says
// so on stderr.
// A diffusers folder saved in float32 may store F32 where the config implies BF16 (h3::castsToBf16): such a tensor is
// read as F32 and rounded to BF16 (nearest even) by every path (load, loadRows, stream), NaN / Inf judged after the
// rounding; the content hash stays the stored bytes' (the snapshot's) and describe() records the cast.
#pragma once

#include "h3c/runtime/checkpoint_stream.h"
#include "h3c/runtime/weights.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace h3c::rt {

class CheckpointWeights final : public WeightSource {
public:
  CheckpointWeights(const h3::Config &c, const std::filesystem::path &dir);
  ~CheckpointWeights() override;

  Tensor load(const std::string &name) override;
  Tensor loadRows(const std::string &name, int64_t rowBegin, int64_t rowEnd) override;
  // {"kind": "checkpoint", "path", "format", "content_sha256"}: hashes the folder first when no load did. A folder
  // with F32-stored BF16 tensors adds "cast": {"from": "F32", "to": "BF16", "rounding": "nearest-even", "tensors": N}
  // (N: all such tensors of the folder, whichever were loaded: the identity must not depend on the plan).
  nlohmann::json describe() const override;
  // Diffusers names of the tensors stored as F32 that are read as BF16 (empty for most folders).
  const std::set<std::string> &castToBf16() const { return cast_; }

  const h3::Checkpoint &checkpoint() const { return *ckpt_; }
  const std::filesystem::path &dir() const { return dir_; }
  // The content hash this folder must have (generate --resume: the trajectory's), `what` naming where it comes
  // from; checked as soon as the hash is computed, and a load that finds another fails.
  void expectContent(const std::string &contentSha256, const std::string &what);
  // Streams every stored tensor through `sink` into `targets` (checkpoint_stream.h) with this source's strictness,
  // records the content hash (after checking it against expectContent's) and the non-finite tensors, and returns
  // the line that says what was loaded and checked (`destination`: "to the GPU"). Nothing is recorded when it
  // throws.
  std::string stream(const std::vector<StreamTarget> &targets, StreamSink &sink, StreamOptions opt,
                     const std::string &destination);

private:
  // Elements [first, first + count) of `name` in its spec dtype into dst (rounded from F32 when it is cast).
  void readElements(const std::string &name, uint64_t first, uint64_t count, uint8_t *dst) const;
  void setContent(const std::string &sha) const;  // checks the expectation, then keeps it
  std::filesystem::path dir_;
  std::unique_ptr<h3::Checkpoint> ckpt_;
  std::set<std::string> cast_;  // stored F32, read as BF16
  mutable std::mutex mu_;                     // describe() may hash lazily from any thread
  mutable std::optional<std::string> content_;
  std::string expected_, expectedWhat_;
};

} // namespace h3c::rt
