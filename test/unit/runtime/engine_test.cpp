// The resident engine (engine.h) on the CPU: many forwards, each byte-equal (outputs and sealed ledger) to a fresh
// runModel over a fresh weight source, with every weight tensor read from its source exactly once per engine.
#include "run_options.h"
#include "test_plans.h"

#include "h3c/runtime/engine.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

using namespace h3c;
using namespace h3c::rt;

namespace {

// Counts the reads that reach the underlying source (the checkpoint's or the generator's work).
class CountingWeights final : public WeightSource {
public:
  CountingWeights(const h3::Config &c, uint64_t seed) : WeightSource(c), inner_(makeSyntheticWeights(c, seed)) {}
  Tensor load(const std::string &name) override {
    ++reads[name];
    return inner_->load(name);
  }
  Tensor loadRows(const std::string &name, int64_t b, int64_t e) override {
    ++reads[name];
    return inner_->loadRows(name, b, e);
  }
  nlohmann::json describe() const override { return inner_->describe(); }
  std::map<std::string, int> reads;
  int total() const {
    int n = 0;
    for (const auto &kv : reads) n += kv.second;
    return n;
  }

private:
  std::unique_ptr<WeightSource> inner_;
};

using testplans::loadModelPlan;

// RequestShape{text, audio, videoT, videoH, videoW, batch, timesteps}.
Request req(const h3::Config &c, const RequestShape &sh, uint64_t seed) { return makeRequest(c, sh, seed); }

RunOptions options(const plan::Plan &p) { return testtool::planOptions(p); }

void expectSameRun(const RunResult &a, const RunResult &b) {
  EXPECT_EQ(a.outputs.sample.shape, b.outputs.sample.shape);
  EXPECT_TRUE(a.outputs.sample.bytes == b.outputs.sample.bytes);
  EXPECT_EQ(a.outputs.audio_sample.shape, b.outputs.audio_sample.shape);
  EXPECT_TRUE(a.outputs.audio_sample.bytes == b.outputs.audio_sample.bytes);
  EXPECT_EQ(a.ledger.dump(), b.ledger.dump());
}

} // namespace

TEST(RuntimeEngine, ManyForwardsEqualFreshRunsAndReadEveryWeightOnce) {
  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const h3::Config c = h3::namedConfig("tiny");
    const plan::Plan p = loadModelPlan(c, /*fuse=*/true, tp);
    CountingWeights w(c, 7);
    Engine e(p, w, options(p));
    ASSERT_TRUE(e.cachesWeights());
    const std::vector<Request> reqs = {req(c, {5, 3, 2, 2, 2, 1, 2}, 1), req(c, {3, 4, 1, 3, 2, 2, 2}, 2),
                                       req(c, {5, 3, 2, 2, 2, 1, 2}, 1)};
    int afterFirst = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      RunResult got = e.run(reqs[i]);
      CountingWeights fresh(c, 7);
      expectSameRun(got, runModel(p, fresh, reqs[i], options(p)));
      if (i == 0) {
        afterFirst = w.total();
        // The first forward reads every tensor a single run reads, once (a single tp = 2 run reads a split
        // tensor once per rank) ...
        EXPECT_EQ(afterFirst, int(fresh.reads.size()));
        if (tp == 1) {
          EXPECT_EQ(afterFirst, fresh.total());
        }
      }
    }
    EXPECT_EQ(w.total(), afterFirst);  // ... and later forwards read nothing
    for (const auto &[name, n] : w.reads) EXPECT_EQ(n, 1) << name;
    EXPECT_EQ(e.forwards(), 3);
  }
}

TEST(RuntimeEngine, WithoutTheCacheEveryForwardReadsAgain) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, false);
  CountingWeights w(c, 3);
  Engine e(p, w, options(p), /*cpuCacheBytes=*/1);  // smaller than the weights: per op, as a single run
  EXPECT_FALSE(e.cachesWeights());
  const Request r = req(c, {4, 2, 1, 2, 2, 1, 2}, 9);
  RunResult a = e.run(r);
  const int one = w.total();
  RunResult b = e.run(r);
  EXPECT_EQ(w.total(), 2 * one);
  expectSameRun(a, b);
}

TEST(RuntimeEngine, PerCallOptionsAndRejections) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, false);
  CountingWeights w(c, 3);
  Engine e(p, w, options(p));
  const Request r = req(c, {4, 2, 1, 2, 2, 1, 2}, 9);
  // Per-call mode: audit records errors, strict does not; the outputs stay the same bits.
  RunOptions audit = options(p);
  audit.mode = Mode::Audit;
  RunResult a = e.run(r, audit), s = e.run(r);
  EXPECT_TRUE(a.outputs.sample.bytes == s.outputs.sample.bytes);
  EXPECT_NE(a.ledger.dump(), s.ledger.dump());
  RunOptions other = options(p);
  other.device = "gpu";
  EXPECT_THROW(e.run(r, other), Error);
  DeviceIO io;
  EXPECT_THROW(e.run(r, options(p), &io), Error);  // the CPU executor has no device memory to bind
  RunOptions tp2 = options(p);
  tp2.tp = 2;
  EXPECT_THROW(Engine(p, w, tp2), Error);
  // A bad request fails closed and leaves the engine usable.
  Request bad = r;
  bad.tensors.erase("token_tags");
  EXPECT_THROW(e.run(bad), Error);
  expectSameRun(e.run(r), s);
}

namespace {

// Synthetic weights with one NaN poked into one tensor, checked as a checkpoint source checks what it loads.
class NanWeights final : public WeightSource {
public:
  NanWeights(const h3::Config &c, std::string bad) : WeightSource(c), inner_(makeSyntheticWeights(c, 3)), bad_(bad) {}
  Tensor load(const std::string &name) override {
    ++reads;
    Tensor t = inner_->load(name);
    if (name == bad_) {  // element 5 becomes a quiet NaN
      const uint16_t bf16 = 0x7FC0;
      const uint32_t f32 = 0x7FC00000u;
      if (t.dtype == DType::BF16) std::memcpy(t.bytes.data() + 2 * 5, &bf16, 2);
      else std::memcpy(t.bytes.data() + 4 * 5, &f32, 4);
    }
    checkFinite(name, t);
    return t;
  }
  nlohmann::json describe() const override { return inner_->describe(); }
  int reads = 0;

private:
  std::unique_ptr<WeightSource> inner_;
  std::string bad_;
};

} // namespace

// A resident engine keeps its weights, so a NaN found while loading in an audit forward must still be named by
// every later ledger (no reload finds it again) and must fail a later strict forward.
TEST(RuntimeEngine, NonFiniteWeightsStayRecordedAcrossForwards) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, false);
  const std::string bad = "transformer_blocks.0.attn.to_q.weight";
  const Request r = req(c, {4, 2, 1, 2, 2, 1, 2}, 9);
  RunOptions audit = options(p);
  audit.mode = Mode::Audit;
  NanWeights w(c, bad);
  Engine e(p, w, audit);
  ASSERT_TRUE(e.cachesWeights());
  for (int i = 0; i < 2; ++i) {
    RunResult a = e.run(r);
    EXPECT_EQ(a.ledger["accepted"], false);
    const std::string nf = a.ledger["header"]["non_finite"].dump();
    EXPECT_NE(nf.find("weight " + bad + ": 1 NaN"), std::string::npos) << nf;
  }
  const int reads = w.reads;
  try {
    e.run(r, options(p));
    ADD_FAILURE() << "a strict forward ran over a NaN weight";
  } catch (const Error &err) {
    EXPECT_NE(std::string(err.what()).find(bad), std::string::npos) << err.what();
  }
  EXPECT_EQ(w.reads, reads);  // refused from the record, nothing reloaded
  // A fresh strict engine refuses the tensor as it loads.
  NanWeights w2(c, bad);
  Engine strict(p, w2, options(p));
  EXPECT_THROW(strict.run(r), Error);
}

namespace {

// The request hash as docs say it is defined (request.h), spelled out byte by byte: every tensor in name order, its
// name, its dtype's name, its shape as little-endian int64 and its bytes, all in one sha256.
std::string requestShaByDefinition(const Request &r) {
  std::string all;
  for (const auto &[name, t] : r.tensors) {
    all += name;
    all += dtypeName(t.dtype);
    for (int64_t d : t.shape)
      for (int b = 0; b < 8; ++b) all += char(uint64_t(d) >> (8 * b) & 0xff);
    all.append(reinterpret_cast<const char *>(t.bytes.data()), t.bytes.size());
  }
  return sha256Hex(all);
}

// Threads of this process now (Linux: one entry per thread in /proc/self/task) that are not parallelForEach's pool's
// (started on demand and kept until the process ends; support/parallel.h).
size_t threadCount() {
  size_t n = 0;
  for (const auto &e : std::filesystem::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n - poolThreads();
}

// Synthetic weights whose load of one tensor throws, as a checkpoint read that fails mid-forward would.
class FailingWeights final : public WeightSource {
public:
  FailingWeights(const h3::Config &c, std::string failOn)
      : WeightSource(c), inner_(makeSyntheticWeights(c, 7)), failOn_(std::move(failOn)) {}
  Tensor load(const std::string &name) override {
    if (name == failOn_) fail("weights:" + name, "the disk went away");
    return inner_->load(name);
  }
  nlohmann::json describe() const override { return inner_->describe(); }

private:
  std::unique_ptr<WeightSource> inner_;
  std::string failOn_;
};

} // namespace

// The request's sha256 runs on a thread of its own beside the executor: the header holds the hash of its definition,
// the ledger is the one a run with the hash before the executor sealed (runModel's, and the same for two engines),
// and no thread outlives a forward.
TEST(RuntimeEngine, RequestHashBesideTheExecutorIsTheLedgersDefinition) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true, 1);
  auto w = makeSyntheticWeights(c, 7);
  Engine e(p, *w, options(p));
  const size_t before = threadCount();
  for (const Request &r : {req(c, {5, 3, 2, 2, 2, 1, 2}, 1), req(c, {3, 4, 1, 3, 2, 2, 2}, 2)}) {
    const RunResult got = e.run(r);
    EXPECT_EQ(got.ledger["header"]["request"]["sha256"], requestShaByDefinition(r));
    EXPECT_EQ(requestSha256(r), requestShaByDefinition(r));
    EXPECT_TRUE(verifyLedger(got.ledger).ok());
    auto fresh = makeSyntheticWeights(c, 7);
    expectSameRun(got, runModel(p, *fresh, r, options(p)));
  }
  EXPECT_EQ(threadCount(), before);
}

// A forward that throws after the hash started: the executor's error is the one that propagates, the hash thread is
// joined (no thread left), nothing counts as a forward, and the engine then runs a good forward as before.
TEST(RuntimeEngine, AForwardThatThrowsLeavesNoHashThread) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true, 1);
  FailingWeights w(c, "proj_out.weight");
  RunOptions o = options(p);
  Engine e(p, w, o, /*cpuCacheBytes=*/0);
  const Request r = req(c, {5, 3, 2, 2, 2, 1, 2}, 1);
  const size_t before = threadCount();
  for (int i = 0; i < 3; ++i) {
    try {
      e.run(r);
      ADD_FAILURE() << "the forward did not throw";
    } catch (const Error &err) {
      EXPECT_EQ(err.where(), "weights:proj_out.weight");
      EXPECT_EQ(err.message(), "the disk went away");
    }
    EXPECT_EQ(threadCount(), before);
  }
  EXPECT_EQ(e.forwards(), 0);
  FailingWeights fine(c, "no such tensor");
  Engine good(p, fine, o, 0);
  auto fresh = makeSyntheticWeights(c, 7);
  expectSameRun(good.run(r), runModel(p, *fresh, r, o));
  EXPECT_EQ(good.forwards(), 1);
}
