// The weights of a checkpoint folder (makeCheckpointWeights), as a loader that streams the whole folder sees them.
// Opening checks the folder's config and tensor list (names, dtypes, shapes) against the config, reading headers
// only. Its content hash (the snapshot's content_sha256, for the ledger and for trajectories) is computed once:
// by a streaming load (stream(): the GPU upload hashes the bytes it uploads), or, when something asks for
// describe() before any such load (the CPU executor reads tensors per op), by a hashing pass of its own that says
// so on stderr.
#pragma once

#include "h3c/runtime/checkpoint_stream.h"
#include "h3c/runtime/weights.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace h3c::rt {

class CheckpointWeights final : public WeightSource {
public:
  CheckpointWeights(const h3::Config &c, const std::filesystem::path &dir);
  ~CheckpointWeights() override;

  Tensor load(const std::string &name) override;
  Tensor loadRows(const std::string &name, int64_t rowBegin, int64_t rowEnd) override;
  // {"kind": "checkpoint", "path", "format", "content_sha256"}: hashes the folder first when no load did.
  nlohmann::json describe() const override;

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
  void setContent(const std::string &sha) const;  // checks the expectation, then keeps it
  std::filesystem::path dir_;
  std::unique_ptr<h3::Checkpoint> ckpt_;
  mutable std::mutex mu_;                     // describe() may hash lazily from any thread
  mutable std::optional<std::string> content_;
  std::string expected_, expectedWhat_;
};

} // namespace h3c::rt
