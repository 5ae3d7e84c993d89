// The checkpoint stream (checkpoint_stream.h) without a GPU: a host sink stands in for the pinned staging and the
// device, with copies run as late as the ring allows (when the buffer is wanted again), so a stream that wrote a
// staging buffer before its copies were done would place wrong bytes. Expectations are independent of the stream:
// the folder's own bytes, the diffusers folder a native one was mapped from, Python's sha256 of every tensor
// (test/fixtures/safetensors/python_read_of_h3c_output.txt), and the snapshot's content hash.
#include "f32_folder.h"
#include "tool.h"

#include "h3c/models/checkpoint.h"
#include "h3c/runtime/checkpoint_stream.h"
#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/progress_line.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

using namespace h3c;
using namespace h3c::rt;
using h3c::testtool::TempDir;
namespace fs = std::filesystem;

namespace {

// Staging rings in host memory; "device" addresses are host pointers.
class HostSink final : public StreamSink {
public:
  HostSink(int workers, int ring, uint64_t chunkBytes) : workers_(size_t(workers)) {
    for (auto &w : workers_) {
      w.slots.resize(size_t(ring));
      for (auto &s : w.slots) s.bytes.assign(size_t(chunkBytes), 0xEE);
    }
  }
  void beginWorker(int) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++begun;
  }
  uint8_t *buffer(int worker) override {
    Worker &w = workers_.at(size_t(worker));
    Slot &s = w.slots[w.next];
    run(s);  // the copies out of this buffer "complete" only now
    std::memset(s.bytes.data(), 0xEE, s.bytes.size());  // what a stream that did not refill it would send
    w.current = w.next;
    w.next = (w.next + 1) % w.slots.size();
    return s.bytes.data();
  }
  void copy(int worker, const std::vector<StreamCopy> &copies) override {
    Worker &w = workers_.at(size_t(worker));
    Slot &s = w.slots[w.current];
    EXPECT_TRUE(s.pending.empty());
    s.pending = copies;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto &c : copies) copied += c.length;
  }
  void finish() override {
    for (auto &w : workers_)
      for (auto &s : w.slots) run(s);
    ++finished;
  }
  int begun = 0, finished = 0;
  uint64_t copied = 0;

private:
  struct Slot {
    std::vector<uint8_t> bytes;
    std::vector<StreamCopy> pending;
  };
  struct Worker {
    std::vector<Slot> slots;
    size_t current = 0, next = 0;
  };
  static void run(Slot &s) {
    for (const auto &c : s.pending) {
      ASSERT_LE(c.bufferOffset + c.length, s.bytes.size());
      std::memcpy(reinterpret_cast<void *>(c.address), s.bytes.data() + c.bufferOffset, size_t(c.length));
    }
    s.pending.clear();
  }
  std::vector<Worker> workers_;
  std::mutex mu_;
};

// Every diffusers tensor of a config as a target in host memory.
struct HostTargets {
  std::map<std::string, std::vector<uint8_t>> bytes;
  std::vector<StreamTarget> targets;
  explicit HostTargets(const h3::Config &c) {
    for (const auto &s : h3::diffusersTensors(c)) bytes[s.name].assign(size_t(s.numel()) * dtypeSize(s.dtype), 0x55);
    for (auto &[name, b] : bytes) targets.push_back({name, uint64_t(reinterpret_cast<uintptr_t>(b.data())), b.size()});
  }
};

StreamOptions smallChunks(int workers, uint64_t chunk) {
  StreamOptions o;
  o.workers = workers;
  o.chunkBytes = chunk;
  return o;
}

// The stored bytes of every tensor of a folder, read through the safetensors reader.
std::map<std::string, std::string> storedSha(const fs::path &dir) {
  st::Folder f(dir);
  std::map<std::string, std::string> m;
  for (const auto &n : f.names()) {
    const auto &e = f.at(n);
    m[n] = sha256Hex(std::string(reinterpret_cast<const char *>(f.data(e)), e.info->nbytes()));
  }
  return m;
}

// Python's per-tensor sha256 of the folder whose summary line ends the block (`folder`: "tiny_diffusers", ...).
std::map<std::string, std::string> pythonSha(const std::string &folder) {
  const fs::path report = fs::path(H3C_SOURCE_DIR) / "test/fixtures/safetensors/python_read_of_h3c_output.txt";
  std::map<std::string, std::string> m, block;
  if (!fs::exists(report)) return m;
  std::istringstream in(readFile(report));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  ", 0) == 0) {
      size_t sp = line.find(' ', 2), h = line.find("sha256=");
      if (sp != std::string::npos && h != std::string::npos) block[line.substr(2, sp - 2)] = line.substr(h + 7, 64);
    } else if (line.find("content_sha256") != std::string::npos) {
      if (line.find("/" + folder + ":") != std::string::npos) return block;
      block.clear();
    }
  }
  return m;
}

void writeBytesAt(const fs::path &file, uint64_t offset, const void *p, size_t n) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekp(std::streamoff(offset));
  f.write(static_cast<const char *>(p), std::streamsize(n));
  ASSERT_TRUE(f.good()) << file;
}

} // namespace

TEST(CheckpointStream, ChunksAndCopies) {
  StreamPlan plan;
  StoredTensor t;
  t.name = "w";
  t.bytes = 100;
  // Stored bytes [0, 30) -> target 1 at 0, [30, 100) -> target 0 at 10 (a native fused tensor split in two).
  t.pieces = {{0, 30, 1, 0}, {30, 70, 0, 10}};
  plan.tensors.push_back(t);
  plan.targets = {{"a", 1000, 80}, {"b", 5000, 30}};
  const auto chunks = chunksOf(plan.tensors[0], 0, 40);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].offset, 0u);
  EXPECT_EQ(chunks[1].offset, 40u);
  EXPECT_EQ(chunks[2].offset, 80u);
  EXPECT_EQ(chunks[2].length, 20u);
  EXPECT_THROW(chunksOf(plan.tensors[0], 0, 12), Error);  // not a multiple of 8
  EXPECT_THROW(chunksOf(plan.tensors[0], 0, 0), Error);
  // Chunk 0 = bytes [0, 40): [0, 30) to b at 0, [30, 40) to a at 10.
  auto c0 = copiesOf(plan, chunks[0]);
  ASSERT_EQ(c0.size(), 2u);
  EXPECT_EQ(c0[0].bufferOffset, 0u);
  EXPECT_EQ(c0[0].length, 30u);
  EXPECT_EQ(c0[0].address, 5000u);
  EXPECT_EQ(c0[1].bufferOffset, 30u);
  EXPECT_EQ(c0[1].length, 10u);
  EXPECT_EQ(c0[1].address, 1010u);
  // Chunk 1 = [40, 80): a at 10 + (40 - 30) = 20.
  auto c1 = copiesOf(plan, chunks[1]);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].bufferOffset, 0u);
  EXPECT_EQ(c1[0].length, 40u);
  EXPECT_EQ(c1[0].address, 1020u);
  auto c2 = copiesOf(plan, chunks[2]);
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0].length, 20u);
  EXPECT_EQ(c2[0].address, 1060u);
  StoredTensor empty;
  EXPECT_TRUE(chunksOf(empty, 0, 8).empty());
}

// A diffusers folder in several shards: every target gets the folder's bytes, every stored tensor's sha256 is
// Python's and the stored bytes', and the content hash is the snapshot's (and Python's: it does not depend on the
// sharding). Small chunks (tensors span many, across the staging ring) and several workers.
TEST(CheckpointStream, DiffusersShardsIntoTargets) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d", /*shardSize=*/4096);
  ASSERT_TRUE(st::Folder(t.dir / "d").indexPath().has_value());
  auto ck = h3::Checkpoint::open(t.dir / "d");
  HostTargets host(c);
  const StreamPlan plan = planStream(*ck, host.targets);
  EXPECT_GT(plan.files.size(), 2u);
  for (uint64_t chunk : {uint64_t(24), uint64_t(64), uint64_t(1) << 20}) {
    for (auto &[n, b] : host.bytes) std::fill(b.begin(), b.end(), 0x55);
    HostSink sink(3, 2, chunk);
    StreamResult r = streamCheckpoint(*ck, plan, sink, smallChunks(3, chunk));
    EXPECT_EQ(sink.finished, 1);
    for (const auto &[name, b] : host.bytes) {
      std::vector<uint8_t> want(b.size());
      ck->read(name, want.data());
      EXPECT_EQ(b, want) << name << " (chunk " << chunk << ")";
    }
    const auto sha = storedSha(t.dir / "d");
    ASSERT_EQ(r.sha256.size(), sha.size());
    for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(r.sha256[i], sha.at(plan.tensors[i].name));
    EXPECT_EQ(r.contentSha256, h3::snapshotCheckpoint(t.dir / "d")["content_sha256"].get<std::string>());
    EXPECT_EQ(r.bytes, plan.totalBytes);
    EXPECT_EQ(r.copied, plan.totalBytes);
    EXPECT_EQ(sink.copied, plan.totalBytes);
    EXPECT_TRUE(r.nonFinite.empty());
  }
  const auto py = pythonSha("tiny_diffusers");
  if (py.empty()) GTEST_SKIP() << "no Python report";
  HostSink sink(2, 2, 64);
  StreamResult r = streamCheckpoint(*ck, plan, sink, smallChunks(2, 64));
  ASSERT_EQ(py.size(), plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(r.sha256[i], py.at(plan.tensors[i].name));
  EXPECT_EQ(r.contentSha256, "ce15fae7393dcf3d1211ddebd724f6da04ca096f62e5a7c583b5e396ca8dd0c2");  // Python's
}

// Native folders (both q/k/v layouts): the diffusers tensors placed from the native pieces equal the diffusers
// folder they were mapped from; the hashes are those of the stored (native) tensors, rope.inv_freq included.
TEST(CheckpointStream, NativeLayoutsIntoTargets) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  auto d = h3::Checkpoint::open(t.dir / "d");
  for (h3::QkvLayout layout : {h3::QkvLayout::Interleaved, h3::QkvLayout::Concat}) {
    const fs::path n = t.dir / (std::string("n_") + h3::qkvLayoutName(layout));
    h3::mapCheckpoint(t.dir / "d", n, h3::CheckpointFormat::Native, layout, /*shardSize=*/8192);
    auto ck = h3::Checkpoint::open(n);
    ASSERT_EQ(ck->format(), h3::CheckpointFormat::Native);
    HostTargets host(c);
    const StreamPlan plan = planStream(*ck, host.targets);
    HostSink sink(4, 3, 40);
    StreamResult r = streamCheckpoint(*ck, plan, sink, smallChunks(4, 40));
    for (const auto &[name, b] : host.bytes) {
      std::vector<uint8_t> want(b.size());
      d->read(name, want.data());
      EXPECT_EQ(b, want) << name << " (" << h3::qkvLayoutName(layout) << ")";
    }
    const auto sha = storedSha(n);
    EXPECT_TRUE(sha.count(h3::kRopeInvFreq));
    for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(r.sha256[i], sha.at(plan.tensors[i].name));
    EXPECT_EQ(r.contentSha256, h3::snapshotCheckpoint(n)["content_sha256"].get<std::string>());
    EXPECT_EQ(r.bytes, plan.totalBytes);
    EXPECT_LT(r.copied, r.bytes);  // rope.inv_freq is hashed, not placed (it is computed from the config)
    if (layout == h3::QkvLayout::Interleaved) {
      const auto py = pythonSha("tiny_native");
      if (!py.empty()) {
        for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(r.sha256[i], py.at(plan.tensors[i].name));
        EXPECT_EQ(r.contentSha256, "52e0db2d120a5a0401464d603ebc2b232801b59abb7813f56c7351db15b96628");
      }
    }
  }
}

// Only the targets asked for are placed (a plan's weights); a target that is not a tensor, has the wrong size or
// comes twice is refused before anything is read.
TEST(CheckpointStream, TargetsAreChecked) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  auto ck = h3::Checkpoint::open(t.dir / "d");
  std::vector<uint8_t> buf(size_t(ck->nbytes("proj_in.weight")), 0);
  const uint64_t addr = uint64_t(reinterpret_cast<uintptr_t>(buf.data()));
  EXPECT_THROW(planStream(*ck, {{"nope", addr, 8}}), Error);
  EXPECT_THROW(planStream(*ck, {{"proj_in.weight", addr, buf.size() - 4}}), Error);
  EXPECT_THROW(planStream(*ck, {{"proj_in.weight", addr, buf.size()}, {"proj_in.weight", addr, buf.size()}}), Error);
  const StreamPlan plan = planStream(*ck, {{"proj_in.weight", addr, buf.size()}});
  HostSink sink(2, 2, 64);
  StreamResult r = streamCheckpoint(*ck, plan, sink, smallChunks(2, 64));
  std::vector<uint8_t> want(buf.size());
  ck->read("proj_in.weight", want.data());
  EXPECT_EQ(buf, want);
  EXPECT_EQ(r.copied, buf.size());
  EXPECT_EQ(r.bytes, plan.totalBytes);  // every stored tensor is still read and hashed
}

// A float32 diffusers folder (f32_folder.h: most BF16 tensors stored as F32 with rounding-exercising low bits, some
// left BF16): each cast chunk is rounded in its staging buffer and placed from its first half, so every target
// holds the reference's BF16 bytes, the very bytes CheckpointWeights::load gives; the hashes are the stored bytes'
// (the snapshot's), at several chunk sizes (tensors across many chunks and read steps) and worker counts.
TEST(CheckpointStream, F32FolderCastInStaging) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  size_t k = 0;
  const auto w32 = testf32::writeF32Folder(t.dir / "d", t.dir / "f32", c, [&](const std::string &n) {
    return n == "context_embedder.weight" || k++ % 4;
  },
                                           "context_embedder.weight", testf32::firstNonFiniteSpecial(), {}, 4096);
  ASSERT_TRUE(w32.cast.count("context_embedder.weight"));
  CheckpointWeights w(c, t.dir / "f32");
  ASSERT_EQ(w.castToBf16(), w32.cast);
  HostTargets host(c);
  const StreamPlan plan = planStream(w.checkpoint(), host.targets, w.castToBf16());
  uint64_t placed = 0, casts = 0;
  for (const auto &tensor : plan.tensors) {
    EXPECT_EQ(tensor.castToBf16, w32.cast.count(tensor.name) > 0) << tensor.name;
    placed += tensor.placedBytes();
    casts += tensor.castToBf16;
  }
  EXPECT_EQ(casts, w32.cast.size());
  const std::string snap = h3::snapshotCheckpoint(t.dir / "f32")["content_sha256"].get<std::string>();
  const auto sha = storedSha(t.dir / "f32");
  for (uint64_t chunk : {uint64_t(24), uint64_t(72), uint64_t(1) << 20}) {
    for (auto &[n, b] : host.bytes) std::fill(b.begin(), b.end(), 0x55);
    HostSink sink(3, 2, chunk);
    StreamResult r = streamCheckpoint(w.checkpoint(), plan, sink, smallChunks(3, chunk));
    for (const auto &[name, b] : host.bytes) {
      EXPECT_EQ(b, w32.expected.at(name)) << name << " (chunk " << chunk << ")";
      EXPECT_EQ(b, w.load(name).bytes) << name << " (chunk " << chunk << ")";
    }
    for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(r.sha256[i], sha.at(plan.tensors[i].name));
    EXPECT_EQ(r.contentSha256, snap);
    EXPECT_EQ(r.bytes, plan.totalBytes);  // read and hashed as stored
    EXPECT_EQ(r.copied, placed);          // placed as BF16
    EXPECT_LT(r.copied, r.bytes);
    EXPECT_TRUE(r.nonFinite.empty());
  }
  // Through CheckpointWeights::stream: the summary says so, describe() records the cast and the stored bytes' hash.
  for (auto &[n, b] : host.bytes) std::fill(b.begin(), b.end(), 0x55);
  HostSink sink(2, 2, 64);
  const std::string summary = w.stream(host.targets, sink, smallChunks(2, 64), "to the host");
  EXPECT_NE(summary.find("content_sha256 " + snap), std::string::npos) << summary;
  EXPECT_NE(summary.find(std::to_string(w32.cast.size()) + " tensor(s) stored as F32 rounded to BF16 (nearest even)"),
            std::string::npos)
      << summary;
  for (const auto &[name, b] : host.bytes) EXPECT_EQ(b, w32.expected.at(name)) << name;
  EXPECT_EQ(w.describe()["content_sha256"], snap);
  EXPECT_EQ(w.describe()["cast"]["tensors"], w32.cast.size());
  // Without the cast set the plan refuses the F32 targets (their bytes are twice the BF16 target's).
  EXPECT_THROW(planStream(w.checkpoint(), host.targets), Error);
}

// An F32 value beyond BF16's range is finite as stored but Inf once rounded: the stream judges the values it places,
// so a strict stream refuses the tensor and a lax one records it as the CPU load does (and places the Inf).
TEST(CheckpointStream, F32OverflowJudgedAfterTheCast) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  const std::string name = "context_embedder.weight";
  const auto w32 = testf32::writeF32Folder(t.dir / "d", t.dir / "f32", c, [](const std::string &) { return true; },
                                           name, testf32::specials().size());
  HostTargets host(c);
  {
    CheckpointWeights w(c, t.dir / "f32");
    HostSink sink(3, 2, 64);
    try {
      w.stream(host.targets, sink, smallChunks(3, 64), "to the host");
      ADD_FAILURE() << "a strict stream accepted a value that overflows BF16";
    } catch (const Error &e) {
      EXPECT_EQ(e.where(), "weights:" + name);
      EXPECT_NE(e.message().find("0 NaN, 3 Inf (first: element 11, +Inf)"), std::string::npos) << e.what();
    }
    EXPECT_EQ(sink.finished, 1);
  }
  CheckpointWeights w(c, t.dir / "f32");
  w.setStrictFinite(false);
  HostSink sink(3, 2, 64);
  w.stream(host.targets, sink, smallChunks(3, 64), "to the host");
  EXPECT_EQ(w.nonFinite(), std::vector<std::string>{name + ": 0 NaN, 3 Inf (first: element 11, +Inf)"});
  EXPECT_EQ(host.bytes.at(name), w32.expected.at(name));
  CheckpointWeights cpu(c, t.dir / "f32");
  cpu.setStrictFinite(false);
  EXPECT_EQ(cpu.load(name).bytes, host.bytes.at(name));
  EXPECT_EQ(cpu.nonFinite(), w.nonFinite());
}

// NaN / Inf found in the streamed bytes: recorded with the whole tensor's counts and first element (as
// Tensor::nonFinite of the whole tensor says) when not strict, an error naming the tensor when strict.
TEST(CheckpointStream, NonFiniteRecordedOrRefused) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  const std::string name = "context_embedder.weight";  // BF16 [24, 8]
  {
    st::Folder f(t.dir / "d");
    const auto &e = f.at(name);
    ASSERT_EQ(e.info->dtype, DType::BF16);
    const uint64_t at = e.file->header().dataOffset + e.info->begin;
    const uint16_t nan = 0x7FC1, inf = 0xFF80;
    writeBytesAt(e.file->path(), at + 2 * 37, &nan, 2);  // element 37 (in the second 64-byte chunk)
    writeBytesAt(e.file->path(), at + 2 * 100, &inf, 2);
    writeBytesAt(e.file->path(), at + 2 * 101, &nan, 2);
  }
  auto ck = h3::Checkpoint::open(t.dir / "d");
  Tensor whole = Tensor::zeros(DType::BF16, {24, 8});
  ck->read(name, whole.bytes.data());
  const std::string text = whole.nonFinite().text();
  ASSERT_EQ(text, "2 NaN, 1 Inf (first: element 37, NaN)");
  HostTargets host(c);
  {
    CheckpointWeights w(c, t.dir / "d");  // strict by default
    HostSink sink(3, 2, 64);
    try {
      w.stream(host.targets, sink, smallChunks(3, 64), "to the host");
      ADD_FAILURE() << "a strict stream accepted NaN";
    } catch (const Error &e) {
      EXPECT_EQ(e.where(), "weights:" + name);
      EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
    }
    EXPECT_EQ(sink.finished, 1);
    EXPECT_TRUE(w.nonFinite().empty());
  }
  CheckpointWeights w(c, t.dir / "d");
  w.setStrictFinite(false);
  HostSink sink(3, 2, 64);
  const std::string summary = w.stream(host.targets, sink, smallChunks(3, 64), "to the host");
  EXPECT_EQ(w.nonFinite(), std::vector<std::string>{name + ": " + text});
  EXPECT_NE(summary.find("1 tensor(s) holding NaN / Inf (first: " + name), std::string::npos) << summary;
  std::vector<uint8_t> want(host.bytes.at(name).size());
  ck->read(name, want.data());
  EXPECT_EQ(host.bytes.at(name), want);  // uploaded as stored: the run decides (the ledger records it)
}

// The content hash against an expectation (generate --resume: the trajectory's): equal is said in the summary line,
// different is an error, and nothing is recorded then.
TEST(CheckpointStream, ExpectedContentHash) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  const std::string snap = h3::snapshotCheckpoint(t.dir / "d")["content_sha256"].get<std::string>();
  HostTargets host(c);
  {
    CheckpointWeights w(c, t.dir / "d");
    w.expectContent(snap, "the recorded hash");
    HostSink sink(2, 2, 1024);
    const std::string summary = w.stream(host.targets, sink, smallChunks(2, 1024), "to the host");
    EXPECT_NE(summary.find("content_sha256 " + snap + " (equal to the recorded hash)"), std::string::npos)
        << summary;
    EXPECT_NE(summary.find("62 tensors"), std::string::npos) << summary;
    EXPECT_NE(summary.find("every value finite"), std::string::npos) << summary;
    // The hash is known: describe() hashes nothing again (and says nothing).
    testing::internal::CaptureStderr();
    EXPECT_EQ(w.describe()["content_sha256"], snap);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  }
  std::string other = snap;
  other[0] = other[0] == '0' ? '1' : '0';
  CheckpointWeights w(c, t.dir / "d");
  w.expectContent(other, "the recorded hash");
  HostSink sink(2, 2, 1024);
  try {
    w.stream(host.targets, sink, smallChunks(2, 1024), "to the host");
    ADD_FAILURE() << "a different content hash was accepted";
  } catch (const Error &e) {
    EXPECT_NE(e.message().find(snap), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(other), std::string::npos) << e.what();
  }
  // Nothing was recorded: describe() must hash again (and meets the same expectation).
  testing::internal::CaptureStderr();
  EXPECT_THROW(w.describe(), Error);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("hashing its 62 stored tensors"), std::string::npos);
}

// Without a streaming load, describe() hashes the folder in a pass of its own and says so on stderr.
TEST(CheckpointStream, DescribeWithoutLoadHashesAndSaysSo) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  CheckpointWeights w(c, t.dir / "d");
  testing::internal::CaptureStderr();
  const nlohmann::json d = w.describe();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("hashing its 62 stored tensors"), std::string::npos) << err;
  EXPECT_EQ(d["content_sha256"], h3::snapshotCheckpoint(t.dir / "d")["content_sha256"]);
  EXPECT_EQ(d["kind"], "checkpoint");
  EXPECT_EQ(d["format"], "diffusers");
  testing::internal::CaptureStderr();
  EXPECT_EQ(w.describe(), d);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // once
}

// A shard cut short after the folder was opened and validated: the read fails naming the file and a tensor of it,
// the sink is still finished, and nothing is recorded.
TEST(CheckpointStream, TruncatedShardNamesFileAndTensor) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d", /*shardSize=*/4096);
  CheckpointWeights w(c, t.dir / "d");
  const st::Folder &f = w.checkpoint().storage();
  const st::File &victim = *f.files().back();
  std::set<std::string> inVictim;
  for (const auto &ti : victim.tensors()) inVictim.insert(ti.name);
  ASSERT_FALSE(inVictim.empty());
  fs::resize_file(victim.path(), victim.header().dataOffset + 4);  // the map is not touched again
  HostTargets host(c);
  HostSink sink(2, 2, 64);
  try {
    w.stream(host.targets, sink, smallChunks(2, 64), "to the host");
    ADD_FAILURE() << "a truncated shard was read";
  } catch (const Error &e) {
    EXPECT_EQ(e.where(), victim.path().string());
    const std::string m = e.message();
    const size_t q = m.find('\''), q2 = m.find('\'', q + 1);
    ASSERT_NE(q2, std::string::npos) << m;
    EXPECT_TRUE(inVictim.count(m.substr(q + 1, q2 - q - 1))) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  }
  EXPECT_EQ(sink.finished, 1);
}

// A progress callback that throws (a Python callback raising, stderr gone) while workers run: the workers stop,
// the sink is finished and the callback's error is the stream's (it once left the wait with the workers joinable:
// std::terminate). The workers hold their first buffer until the callback has run, so it runs while they do.
TEST(CheckpointStream, ThrowingProgressStopsTheWorkers) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, t.dir / "d");
  auto ck = h3::Checkpoint::open(t.dir / "d");
  HostTargets host(c);
  const StreamPlan plan = planStream(*ck, host.targets);
  struct HeldSink final : StreamSink {
    HostSink inner{2, 2, 64};
    std::atomic<bool> progressed{false};
    uint8_t *buffer(int w) override {
      for (int i = 0; i < 1000 && !progressed; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return inner.buffer(w);
    }
    void copy(int w, const std::vector<StreamCopy> &copies) override { inner.copy(w, copies); }
    void finish() override { inner.finish(); }
  } sink;
  StreamOptions opt = smallChunks(2, 64);
  opt.progress = [&](size_t, size_t, uint64_t) {
    sink.progressed = true;
    throw std::runtime_error("progress callback failed");
  };
  try {
    streamCheckpoint(*ck, plan, sink, opt);
    ADD_FAILURE() << "the progress callback's error was lost";
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()), "progress callback failed");
  }
  EXPECT_TRUE(sink.progressed.load());
  EXPECT_EQ(sink.inner.finished, 1);
}

TEST(CheckpointStream, ProgressAndSummaryText) {
  EXPECT_EQ(progressLineText("load", 3, 10, uint64_t(3) << 29, 2.0), "load: 3/10 tensors, 1.50 GiB, 2.0 s (0.81 GB/s)");
  EXPECT_EQ(progressLineText("load", 0, 10, 0, 0.0), "load: 0/10 tensors, 0.00 GiB, 0.0 s (0.00 GB/s)");
  StreamPlan plan;
  plan.tensors.resize(638);
  StreamResult r;
  r.bytes = uint64_t(64000000000);
  r.seconds = 8.0;
  r.contentSha256 = std::string(64, 'a');
  const std::string s = streamSummary("/m", "diffusers", plan, r, "to the GPU", "");
  EXPECT_EQ(s, "checkpoint /m (diffusers): 638 tensors, 59.60 GiB to the GPU in 8.00 s (8.00 GB/s); checked while "
               "loading: the sha256 of every stored tensor -> content_sha256 " + std::string(64, 'a') +
               ", every value finite; before loading: names, dtypes and shapes as the config implies");
}
