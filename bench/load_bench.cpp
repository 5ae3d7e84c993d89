// The checkpoint load to the GPU alone (runtime/cuda/weight_upload.h), timed: every diffusers tensor of the config
// gets its place in one device allocation (as a plan's weight buffers would), and the folder is streamed into it
// exactly as the GPU executor does (pinned staging, the content check on the way, the summary line). No plan and no
// forward: a config without a compiled plan (a cut of the full one) loads as well.
//   h3c_load_bench --config C --checkpoint DIR [--repeat N] [--verify] [--out F.jsonl]
// --verify: afterwards every tensor's device bytes are hashed on the device (h3c-sum128, the --hash-nodes kernel) and
// compared with the same hash of the checkpoint's bytes on the host (the diffusers layout Checkpoint::read
// assembles), so a wrong placement or a staging buffer overwritten before its copy finished is found at full size.
// Environment: H3C_LOAD_THREADS, H3C_LOAD_CHUNK_MIB (weight_upload.h).
#include "h3c/models/checkpoint.h"
#include "h3c/models/config.h"
#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/value_hash.h"
#include "h3c/runtime/cuda/weight_upload.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace hc = h3c::runtime::cuda;
using namespace h3c;

namespace {

struct Args {
  std::string config, checkpoint, out;
  int repeat = 1;
  bool verify = false;
};

Args parse(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(k, "needs a value");
      return argv[++i];
    };
    if (k == "--config") a.config = value();
    else if (k == "--checkpoint") a.checkpoint = value();
    else if (k == "--out") a.out = value();
    else if (k == "--repeat") a.repeat = std::max(1, std::atoi(value().c_str()));
    else if (k == "--verify") a.verify = true;
    else fail(k, "unknown option (h3c_load_bench --config C --checkpoint DIR [--repeat N] [--verify] [--out F])");
  }
  if (a.config.empty() || a.checkpoint.empty()) fail("h3c_load_bench", "give --config and --checkpoint");
  return a;
}

uint64_t storedBytes(const h3::Checkpoint &ck) {
  uint64_t b = 0;
  for (const auto &n : ck.storage().names()) b += ck.storage().at(n).info->nbytes();
  return b;
}

// Device hash of every target against the host hash of the checkpoint's bytes; returns the tensors that differ.
std::vector<std::string> verify(const h3::Checkpoint &ck, const std::vector<rt::StreamTarget> &targets) {
  hc::KernelRunner runner;
  const hc::LoadedKernel &k = runner.load(hc::valueHashKernel(runner.arch()));
  hc::DeviceBuffer sums(16 * targets.size());
  hc::check(hc::driver().cuMemsetD8(sums.get(), 0, sums.bytes()), "zeroing the sums");
  for (size_t i = 0; i < targets.size(); ++i)
    hc::launchValueHash(k, CUdeviceptr(targets[i].address), size_t(targets[i].bytes), sums.get() + 16 * i, nullptr,
                        targets[i].name);
  std::vector<std::string> host(targets.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < targets.size();) {
      const h3::TensorBytes b = ck.bytes(targets[i].name);
      host[i] = contentHash(b.data, b.size);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) pool.emplace_back(work);
  work();
  for (auto &t : pool) t.join();
  hc::check(hc::driver().cuCtxSynchronize(), "device hashes");
  std::vector<unsigned long long> s(2 * targets.size());
  sums.download(s.data(), s.size() * 8);
  std::vector<std::string> bad;
  for (size_t i = 0; i < targets.size(); ++i)
    if (contentHashHex(s[2 * i], s[2 * i + 1], size_t(targets[i].bytes)) != host[i]) bad.push_back(targets[i].name);
  return bad;
}

int benchMain(int argc, char **argv) {
  const Args a = parse(argc, argv);
  const hc::Device &dev = hc::device();
  const h3::Config c = h3::loadConfig(a.config);
  const auto specs = h3::diffusersTensors(c);
  uint64_t total = 0;
  for (const auto &s : specs) total += (uint64_t(s.numel()) * dtypeSize(s.dtype) + 255) / 256 * 256;
  size_t free0 = 0, all = 0;
  hc::driver().cuMemGetInfo(&free0, &all);
  hc::DeviceBuffer weights(static_cast<size_t>(total));
  std::vector<rt::StreamTarget> targets;
  uint64_t at = 0;
  for (const auto &s : specs) {
    const uint64_t n = uint64_t(s.numel()) * dtypeSize(s.dtype);
    targets.push_back({s.name, uint64_t(weights.get()) + at, n});
    at += (n + 255) / 256 * 256;
  }
  int ring = 0;
  const rt::StreamOptions opt = hc::uploadOptions(&ring);
  std::printf("h3c_load_bench: %s, %s: %zu tensors, %.2f GiB of device memory for the weights; %d workers x %d "
              "pinned buffers x %llu MiB of host staging\n",
              dev.name.c_str(), a.checkpoint.c_str(), targets.size(), double(total) / 1073741824.0, opt.workers, ring,
              (unsigned long long)(opt.chunkBytes >> 20));
  std::fflush(stdout);
  std::ofstream out;
  if (!a.out.empty()) out.open(a.out, std::ios::app);
  for (int r = 0; r < a.repeat; ++r) {
    hc::check(hc::driver().cuMemsetD8(weights.get(), 0, weights.bytes()), "clearing the weights");
    hc::check(hc::driver().cuCtxSynchronize(), "clearing the weights");
    // Opening checks the folder's config and tensor list (headers only), as `h3c run` does before it loads.
    const auto t0 = std::chrono::steady_clock::now();
    rt::CheckpointWeights w(c, a.checkpoint);
    const auto t1 = std::chrono::steady_clock::now();
    hc::uploadCheckpoint(w, targets, /*progress=*/true);
    hc::check(hc::driver().cuCtxSynchronize(), "the load");
    const auto t2 = std::chrono::steady_clock::now();
    size_t freeB = 0;
    hc::driver().cuMemGetInfo(&freeB, &all);
    const double open = std::chrono::duration<double>(t1 - t0).count();
    const double load = std::chrono::duration<double>(t2 - t1).count();
    const uint64_t bytes = storedBytes(w.checkpoint());
    const std::string sha = w.describe().at("content_sha256").get<std::string>();
    std::printf("load %d: open + header check %.2f s, load %.2f s = %.2f GB/s (pinning and freeing the staging "
                "included); device memory in use %.2f GiB (%.2f GiB before the weights)\n",
                r + 1, open, load, double(bytes) / 1e9 / load, double(all - freeB) / 1073741824.0,
                double(all - free0) / 1073741824.0);
    std::fflush(stdout);
    nlohmann::json j = {{"bench", "checkpoint_load"}, {"gpu", dev.name}, {"checkpoint", a.checkpoint},
                        {"format", h3::formatName(w.checkpoint().format())}, {"bytes", bytes},
                        {"open_s", open}, {"load_s", load}, {"gbps", double(bytes) / 1e9 / load},
                        {"workers", opt.workers}, {"chunk_mib", opt.chunkBytes >> 20},
                        {"content_sha256", sha}};
    if (a.verify && r == 0) {
      const auto t3 = std::chrono::steady_clock::now();
      const auto bad = verify(w.checkpoint(), targets);
      const double vs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t3).count();
      std::printf("%s device bytes of all %zu tensors == the checkpoint's (h3c-sum128 on the device and the host, "
                  "%.1f s)%s%s\n", bad.empty() ? "PASS" : "FAIL", targets.size(), vs,
                  bad.empty() ? "" : "; first differing: ", bad.empty() ? "" : bad.front().c_str());
      j["verified"] = bad.empty();
      if (!bad.empty()) return 1;
    }
    if (out.is_open()) out << j.dump() << "\n";
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return benchMain(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "h3c_load_bench: error: %s\n", e.what());
    return 2;
  }
}
