// The checkpoint load to the GPU (runtime/cuda/weight_upload.h): tiny checkpoints as `h3c checkpoint synth` writes
// them (sharded; and mapped to native naming in both q/k/v layouts) streamed through pinned staging into device
// buffers, read back and compared with the diffusers folder's bytes; the content hash equals the snapshot's. Then
// the executor: a failed load (a content hash other than the expected one) keeps nothing, the next load uploads
// again and later ones upload nothing. Skips without a GPU.
#include "f32_folder.h"
#include "test_plans.h"

#include "h3c/models/checkpoint.h"
#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/weight_upload.h"
#include "h3c/runtime/executor.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <vector>

namespace hc = h3c::runtime::cuda;
namespace fs = std::filesystem;
using namespace h3c;
using namespace h3c::rt;

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("h3c_gpu_upload_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

// Every diffusers tensor of the config in a device buffer of its own.
struct DeviceTargets {
  std::map<std::string, hc::DeviceBuffer> buffers;
  std::vector<StreamTarget> targets;
  explicit DeviceTargets(const h3::Config &c) {
    for (const auto &s : h3::diffusersTensors(c)) {
      const size_t bytes = size_t(s.numel()) * dtypeSize(s.dtype);
      hc::DeviceBuffer &b = buffers[s.name] = hc::DeviceBuffer(bytes);
      hc::check(hc::driver().cuMemsetD8(b.get(), 0xA5, bytes), "poison");
      targets.push_back({s.name, uint64_t(b.get()), bytes});
    }
  }
  // Tensors whose device bytes differ from the reference folder's.
  std::vector<std::string> differing(const h3::Checkpoint &want) const {
    std::vector<std::string> bad;
    for (const auto &[name, b] : buffers) {
      std::vector<uint8_t> dev(b.bytes()), ref(b.bytes());
      b.download(dev.data(), dev.size());
      want.read(name, ref.data());
      if (dev != ref) bad.push_back(name);
    }
    return bad;
  }
  // The same against expected bytes per tensor (a float32 folder's BF16 values).
  std::vector<std::string> differing(const std::map<std::string, std::vector<uint8_t>> &want) const {
    std::vector<std::string> bad;
    for (const auto &[name, b] : buffers) {
      std::vector<uint8_t> dev(b.bytes());
      b.download(dev.data(), dev.size());
      if (dev != want.at(name)) bad.push_back(name);
    }
    return bad;
  }
};

void reportUpload(bool ok, const std::string &what) { std::printf("%s GpuWeightUpload %s\n", ok ? "PASS" : "FAIL", what.c_str()); }

} // namespace

TEST(GpuWeightUpload, CheckpointBytesOnTheDevice) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::device();
  Scratch s;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 5, s.dir / "d", /*shardSize=*/4096);
  h3::mapCheckpoint(s.dir / "d", s.dir / "ni", h3::CheckpointFormat::Native, h3::QkvLayout::Interleaved, 8192);
  h3::mapCheckpoint(s.dir / "d", s.dir / "nc", h3::CheckpointFormat::Native, h3::QkvLayout::Concat);
  auto reference = h3::Checkpoint::open(s.dir / "d");
  for (const char *name : {"d", "ni", "nc"}) {
    const fs::path dir = s.dir / name;
    const std::string snap = h3::snapshotCheckpoint(dir)["content_sha256"].get<std::string>();
    // The load as the executor runs it (default workers and chunks, progress line on).
    {
      CheckpointWeights w(c, dir);
      DeviceTargets dev(c);
      hc::uploadCheckpoint(w, dev.targets, /*progress=*/true);
      const auto bad = dev.differing(*reference);
      reportUpload(bad.empty(), std::string(name) + ": device bytes == the diffusers folder's, default options");
      EXPECT_TRUE(bad.empty()) << name << ": first differing tensor " << (bad.empty() ? "" : bad.front());
      EXPECT_EQ(w.describe()["content_sha256"], snap) << name;
      reportUpload(w.describe()["content_sha256"] == snap, std::string(name) + ": content_sha256 == the snapshot's");
    }
    // Small chunks (every tensor spans many, the staging ring wraps) from several workers.
    {
      CheckpointWeights w(c, dir);
      DeviceTargets dev(c);
      StreamOptions opt;
      opt.workers = 3;
      opt.chunkBytes = 64;
      hc::PinnedStaging staging(opt.workers, 2, opt.chunkBytes);
      const std::string summary = w.stream(dev.targets, staging, opt, "to the GPU");
      std::printf("    %s\n", summary.c_str());
      const auto bad = dev.differing(*reference);
      reportUpload(bad.empty(), std::string(name) + ": device bytes == the diffusers folder's, 64-byte chunks, 3 workers");
      EXPECT_TRUE(bad.empty()) << name << ": first differing tensor " << (bad.empty() ? "" : bad.front());
    }
  }
}

TEST(GpuWeightUpload, ExecutorKeepsNothingFromAFailedLoad) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  Scratch s;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 5, s.dir / "d");
  const std::string snap = h3::snapshotCheckpoint(s.dir / "d")["content_sha256"].get<std::string>();
  const plan::Plan p = testplans::loadModelPlan(c);
  CheckpointWeights w(c, s.dir / "d");
  std::string other = snap;
  other[5] = other[5] == 'f' ? 'e' : 'f';
  w.expectContent(other, "the expected hash");
  auto exec = makeGpuExecutor();
  EXPECT_THROW(exec->loadWeights(p, w, false), Error);
  // The next load must upload again (the failed one is not kept), and then say it checked the expected hash.
  w.expectContent(snap, "the expected hash");
  testing::internal::CaptureStderr();
  exec->loadWeights(p, w, false);
  const std::string first = testing::internal::GetCapturedStderr();
  const bool reloaded = first.find("checked while loading") != std::string::npos &&
                        first.find("(equal to the expected hash)") != std::string::npos;
  reportUpload(reloaded, "a failed load is not kept: the next one uploads and checks");
  EXPECT_TRUE(reloaded) << first;
  testing::internal::CaptureStderr();
  exec->loadWeights(p, w, false);
  const std::string second = testing::internal::GetCapturedStderr();
  reportUpload(second.empty(), "a loaded checkpoint is not loaded again");
  EXPECT_EQ(second, "");
}

// A float32 diffusers folder (f32_folder.h; mixed: a quarter of the BF16 tensors left BF16, the rounding's edge values
// in one tensor): the F32-stored tensors are rounded to BF16 in the pinned staging buffers, so the device holds
// exactly the bytes CheckpointWeights::load gives on the CPU (and the reference rounding's); the content hash is the
// snapshot's of the stored F32 bytes. An F32 value beyond BF16's range is Inf once rounded: a strict load fails
// naming the tensor. Then the executor loads such a folder for a plan and says it rounded.
TEST(GpuWeightUpload, Float32FolderCastInStaging) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::device();
  Scratch s;
  const h3::Config c = h3::namedConfig("tiny");
  const std::string special = "context_embedder.weight";
  h3::synthCheckpoint(c, 5, s.dir / "d", /*shardSize=*/4096);
  size_t k = 0;
  const auto w32 = testf32::writeF32Folder(
      s.dir / "d", s.dir / "f32", c, [&](const std::string &n) { return n == special || k++ % 4; }, special,
      testf32::firstNonFiniteSpecial(), {}, 4096);
  const std::string snap = h3::snapshotCheckpoint(s.dir / "f32")["content_sha256"].get<std::string>();
  CheckpointWeights cpu(c, s.dir / "f32");
  std::map<std::string, std::vector<uint8_t>> cpuBytes;
  for (const auto &t : h3::diffusersTensors(c)) cpuBytes[t.name] = cpu.load(t.name).bytes;
  for (int small = 0; small < 2; ++small) {
    CheckpointWeights w(c, s.dir / "f32");
    DeviceTargets dev(c);
    const char *how = small ? "64-byte chunks, 3 workers" : "default options";
    if (small) {
      StreamOptions opt;
      opt.workers = 3;
      opt.chunkBytes = 64;
      hc::PinnedStaging staging(opt.workers, 2, opt.chunkBytes);
      std::printf("    %s\n", w.stream(dev.targets, staging, opt, "to the GPU").c_str());
    } else {
      hc::uploadCheckpoint(w, dev.targets, /*progress=*/true);
    }
    const auto bad = dev.differing(cpuBytes), badRef = dev.differing(w32.expected);
    reportUpload(bad.empty() && badRef.empty(),
                 std::string("float32 folder: device bytes == the CPU load's (rounded to BF16), ") + how);
    EXPECT_TRUE(bad.empty()) << how << ": first differing tensor " << (bad.empty() ? "" : bad.front());
    EXPECT_TRUE(badRef.empty()) << how << ": first differing tensor " << (badRef.empty() ? "" : badRef.front());
    const nlohmann::json d = w.describe();
    reportUpload(d["content_sha256"] == snap && d["cast"]["tensors"] == w32.cast.size(),
                 std::string("float32 folder: content_sha256 == the snapshot's, the cast recorded, ") + how);
    EXPECT_EQ(d["content_sha256"], snap);
    EXPECT_EQ(d["cast"]["tensors"], w32.cast.size());
  }
  // Overflow to Inf: refused by a strict load, after the rounding.
  testf32::writeF32Folder(s.dir / "d", s.dir / "ovf", c, [](const std::string &) { return true; }, special,
                          testf32::specials().size());
  {
    CheckpointWeights w(c, s.dir / "ovf");
    DeviceTargets dev(c);
    std::string where;
    try {
      hc::uploadCheckpoint(w, dev.targets, /*progress=*/false);
    } catch (const Error &e) {
      where = e.where();
    }
    reportUpload(where == "weights:" + special, "float32 folder: a value beyond BF16's range fails a strict load");
    EXPECT_EQ(where, "weights:" + special);
  }
  // The executor: a plan's weights from the float32 folder (the targets are the plan's BF16 tensors).
  const plan::Plan p = testplans::loadModelPlan(c);
  CheckpointWeights w(c, s.dir / "f32");
  auto exec = makeGpuExecutor();
  testing::internal::CaptureStderr();
  exec->loadWeights(p, w, false);
  const std::string line = testing::internal::GetCapturedStderr();
  const bool said = line.find(std::to_string(w32.cast.size()) + " tensor(s) stored as F32 rounded to BF16") !=
                    std::string::npos;
  reportUpload(said, "float32 folder: the executor loads it and says it rounded");
  EXPECT_TRUE(said) << line;
}
