// A checkpoint folder as a weight source (checkpoint_weights.h): per-tensor reads for the CPU executor, a streaming
// load for the GPU, and the content hash computed once, by whichever comes first.
#include "h3c/runtime/checkpoint_weights.h"

#include "h3c/models/checkpoint.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace fs = std::filesystem;

namespace h3c::rt {

CheckpointWeights::CheckpointWeights(const h3::Config &c, const fs::path &dir) : WeightSource(c), dir_(dir) {
  // The folder's own config.json (required) must describe the model the plan was compiled for, and its record of
  // the native q/k/v layout decides how the tensors are read (Checkpoint::open).
  h3::checkFolderConfig(dir, c, "checkpoint");
  // Fail closed: the folder must hold exactly the tensors this config implies before anything runs.
  h3::ExpectedTensors expected{c, h3::diffusersTensors(c)};
  h3::CheckReport rep = h3::checkCheckpoint(dir, &expected);
  if (!rep.ok()) {
    std::string msg;
    auto add = [&](const char *what, const std::vector<std::string> &v) {
      for (size_t i = 0; i < v.size() && i < 5; ++i)
        msg += fmt::format("\n  {} {}", what, v[i]);
      if (v.size() > 5)
        msg += fmt::format("\n  ... {} more {}", v.size() - 5, what);
    };
    add("missing", rep.missing);
    add("unexpected", rep.unexpected);
    add("mismatched", rep.mismatched);
    fail(dir.string(), "checkpoint check failed for this config:{}", msg);
  }
  // F32 stored where the config implies BF16 (a float32 diffusers folder): read as F32, rounded to BF16.
  cast_.insert(rep.cast.begin(), rep.cast.end());
  ckpt_ = h3::Checkpoint::open(dir);
  // The content hash is not computed here: a GPU load computes it from the bytes it uploads (stream()), anything
  // else when describe() first needs it.
}

CheckpointWeights::~CheckpointWeights() = default;

void CheckpointWeights::readElements(const std::string &name, uint64_t first, uint64_t count, uint8_t *dst) const {
  if (!cast_.count(name)) {
    const uint64_t es = dtypeSize(spec(name).dtype);
    ckpt_->read(name, first * es, count * es, dst);
    return;
  }
  // Stored F32: read in steps through a bounded buffer (a tensor of the full model is up to 300 MB as F32), each
  // step rounded to the BF16 the spec asks for.
  constexpr uint64_t kStep = uint64_t(1) << 16;
  std::vector<uint8_t> f32(size_t(std::min(count, kStep)) * 4);
  for (uint64_t at = 0; at < count; at += kStep) {
    const uint64_t n = std::min(kStep, count - at);
    ckpt_->read(name, (first + at) * 4, n * 4, f32.data());
    roundF32ToBf16(f32.data(), dst + at * 2, size_t(n));
  }
}

Tensor CheckpointWeights::load(const std::string &name) {
  const auto &s = spec(name);
  Tensor t = Tensor::zeros(s.dtype, s.shape);
  readElements(name, 0, uint64_t(s.numel()), t.bytes.data());
  checkFinite(name, t);  // after the rounding: an F32 value beyond BF16's range is Inf now
  return t;
}

Tensor CheckpointWeights::loadRows(const std::string &name, int64_t b, int64_t e) {
  const auto &s = spec(name);
  if (b < 0 || e > s.shape[0] || b > e)
    fail("weights:" + name, "rows [{}, {}) out of range", b, e);
  std::vector<int64_t> shape = s.shape;
  shape[0] = e - b;
  Tensor t = Tensor::zeros(s.dtype, shape);
  const uint64_t rowElements = uint64_t(s.numel() / s.shape[0]);
  readElements(name, uint64_t(b) * rowElements, uint64_t(e - b) * rowElements, t.bytes.data());
  checkFinite(name, t);
  return t;
}

void CheckpointWeights::expectContent(const std::string &contentSha256, const std::string &what) {
  std::lock_guard<std::mutex> lock(mu_);
  expected_ = contentSha256;
  expectedWhat_ = what;
  if (content_ && *content_ != expected_)
    fail(dir_.string(), "its content_sha256 is {} but {} is {}: the checkpoint's content changed", *content_,
         expectedWhat_, expected_);
}

void CheckpointWeights::setContent(const std::string &sha) const {
  if (!expected_.empty() && sha != expected_)
    fail(dir_.string(), "its content_sha256 is {} but {} is {}: the checkpoint's content changed", sha, expectedWhat_,
         expected_);
  content_ = sha;
}

nlohmann::json CheckpointWeights::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!content_) {
    uint64_t bytes = 0;
    for (const auto &name : ckpt_->storage().names())
      bytes += ckpt_->storage().at(name).info->nbytes();
    std::fprintf(stderr,
                 "checkpoint %s: hashing its %zu stored tensors (%.2f GiB) for the content_sha256 the ledger records "
                 "(a pass of its own: only a GPU load hashes while it loads)\n",
                 dir_.c_str(), ckpt_->storage().names().size(), double(bytes) / 1073741824.0);
    std::fflush(stderr);
    setContent(h3::snapshotCheckpoint(dir_).at("content_sha256").get<std::string>());
  }
  nlohmann::json d = {{"kind", "checkpoint"},
                      {"path", fs::absolute(dir_).string()},
                      {"format", h3::formatName(ckpt_->format())},
                      {"content_sha256", *content_}};
  if (!cast_.empty())
    d["cast"] = {{"from", "F32"}, {"to", "BF16"}, {"rounding", "nearest-even"}, {"tensors", cast_.size()}};
  return d;
}

std::string CheckpointWeights::stream(const std::vector<StreamTarget> &targets, StreamSink &sink, StreamOptions opt,
                                      const std::string &destination) {
  opt.strictFinite = strictFinite_;
  const StreamPlan plan = planStream(*ckpt_, targets, cast_);
  const StreamResult r = streamCheckpoint(*ckpt_, plan, sink, opt);
  std::string against;
  {
    std::lock_guard<std::mutex> lock(mu_);
    setContent(r.contentSha256);
    against = expectedWhat_;
  }
  for (const auto &[name, text] : r.nonFinite)
    nonFinite_[name] = text;
  std::string format = h3::formatName(ckpt_->format());
  if (ckpt_->format() == h3::CheckpointFormat::Native)
    format += std::string(", ") + h3::qkvLayoutName(ckpt_->qkvLayout()) + " q/k/v";
  return streamSummary(dir_.string(), format, plan, r, destination, against);
}

std::unique_ptr<WeightSource> makeCheckpointWeights(const h3::Config &c, const fs::path &dir) {
  if (!fs::is_directory(dir))
    fail(dir.string(), "--checkpoint must be a model folder");
  return std::make_unique<CheckpointWeights>(c, dir);
}

} // namespace h3c::rt
