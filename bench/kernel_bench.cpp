// Per-kernel GPU timings of h3c's generated kernels at the H3 shapes (M = 8349 packed rows by default), with CUDA
// events: 3 warm-up launches, then the median of 20 timed launches each. Inputs are random (never zeros).
// Prints a table (ms, TFLOP/s or GB/s) and writes JSON lines to argv[1] when given.
//   h3c_kernel_bench [out.jsonl] [--rows M]
#include "h3c/kernels/emit.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/dtype.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

using nlohmann::json;
namespace hk = h3c::kernels;
namespace hc = h3c::runtime::cuda;

namespace {

std::mt19937_64 rng(99);

std::unique_ptr<hc::DeviceBuffer> randBuf(size_t elems, bool bf16, double stdv) {
  std::normal_distribution<double> d(0, stdv);
  auto b = std::make_unique<hc::DeviceBuffer>(elems * (bf16 ? 2 : 4));
  // Fill in chunks to bound host memory.
  const size_t chunk = 1 << 24;
  std::vector<uint16_t> hb;
  std::vector<float> hf;
  for (size_t off = 0; off < elems; off += chunk) {
    size_t n = std::min(chunk, elems - off);
    if (bf16) {
      hb.resize(n);
      for (auto &e : hb) e = h3c::floatToBf16((float)d(rng));
      b->upload(hb.data(), n * 2, off * 2);
    } else {
      hf.resize(n);
      for (auto &e : hf) e = (float)d(rng);
      b->upload(hf.data(), n * 4, off * 4);
    }
  }
  return b;
}

json kchunks(int u) { return {{"kind", "k_chunks"}, {"k_step", 16}, {"units", u}, {"acc", "f32"}}; }
json laneTree() { return {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}}; }

struct Result {
  std::string name;
  double ms = 0, flops = 0, bytes = 0;
};

double timeMedian(hc::KernelRunner &r, const hc::LoadedKernel &k, const hk::KernelArgs &a) {
  const auto &d = hc::driver();
  for (int i = 0; i < 3; ++i) r.launch(k, a);
  hc::check(d.cuCtxSynchronize(), "warm-up " + k.id);
  std::vector<float> t;
  CUevent e0, e1;
  hc::check(d.cuEventCreate(&e0, 0), "event");
  hc::check(d.cuEventCreate(&e1, 0), "event");
  for (int i = 0; i < 20; ++i) {
    hc::check(d.cuEventRecord(e0, nullptr), "record");
    r.launch(k, a);
    hc::check(d.cuEventRecord(e1, nullptr), "record");
    hc::check(d.cuEventSynchronize(e1), "sync " + k.id);
    float ms = 0;
    hc::check(d.cuEventElapsedTime(&ms, e0, e1), "elapsed");
    t.push_back(ms);
  }
  d.cuEventDestroy(e0);
  d.cuEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A tiling variant of an emitted GEMM (bench-only experiment): the same code with other tile defines. The reduction
// order does not depend on the tiling (K ascending in 16-wide chunks per unit, the same unit tree), so a variant must
// produce the same bits as the emitted kernel; the bench checks that.
hk::KernelSource gemmVariant(const hk::KernelSource &base, const std::map<std::string, int> &defs) {
  hk::KernelSource v = base;
  std::map<std::string, int> cur;
  for (const char *k : {"GM_BM", "GM_BN", "GM_BK", "GM_WM", "GM_WN", "GM_STAGES", "GM_EPI"}) {
    std::string key = std::string("#define ") + k + " ";
    auto p = v.source.find(key);
    if (p == std::string::npos) throw std::runtime_error(std::string("no ") + k);
    auto e = v.source.find('\n', p);
    int val = std::stoi(v.source.substr(p + key.size(), e - p - key.size()));
    auto it = defs.find(k);
    if (it != defs.end()) {
      val = it->second;
      v.source.replace(p, e - p, key + std::to_string(val));
    }
    cur[k] = val;
  }
  std::string tag;
  for (const auto &[k, val] : defs) tag += "_" + k.substr(3) + std::to_string(val);
  v.id = base.id + tag;
  v.launch.threads = cur["GM_WM"] * cur["GM_WN"] * 32;
  v.launch.smemBytes = cur["GM_STAGES"] * (cur["GM_BM"] + cur["GM_BN"]) * (cur["GM_BK"] + 8) * 2;
  v.launch.unitsPerBlock = cur["GM_BM"];  // grid.y is set by the caller (it knows the output width)
  return v;
}

} // namespace

int main(int argc, char **argv) {
  std::string why;
  if (!hc::driverAvailable(&why)) {
    std::printf("SKIP: no GPU: %s\n", why.c_str());
    return 0;
  }
  std::string outPath;
  long long M = 8349;
  bool variants = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) M = std::atoll(argv[++i]);
    else if (a == "--variants") variants = true;
    else outPath = a;
  }
  try {
    const auto &dev = hc::device();
    hc::KernelRunner runner;
    const long long H = 5376, I = 7168, F = 14336, E = 2688, heads = 56, d = 128, T = 2;
    size_t free0 = 0, total = 0;
    hc::check(hc::driver().cuMemGetInfo(&free0, &total), "meminfo");
    auto x = randBuf(size_t(M * F * 2), true, 1.0);  // large enough for every activation input
    auto x2 = randBuf(size_t(M * I), true, 1.0);
    auto y = randBuf(size_t(M * 3 * I), true, 1.0);   // outputs (overwritten)
    auto y2 = randBuf(size_t(M * I), true, 1.0);
    auto y3 = randBuf(size_t(M * I), true, 1.0);
    auto w = randBuf(size_t(std::max(2 * F * H, 18 * H * E)), true, 0.01);  // every weight matrix fits
    auto table = randBuf(size_t(T * 3 * 6 * H), true, 0.3);
    auto tempF = randBuf(size_t(T * E), false, 1.0);
    auto cosb = randBuf(size_t(M * 96), false, 1.0), sinb = randBuf(size_t(M * 96), false, 1.0);
    std::vector<long long> meta(static_cast<size_t>(M));
    auto ts = std::make_unique<hc::DeviceBuffer>(size_t(M) * 8), tags = std::make_unique<hc::DeviceBuffer>(size_t(M) * 8);
    for (long long r = 0; r < M; ++r) meta[size_t(r)] = r % T;
    ts->upload(meta.data(), meta.size() * 8);
    for (long long r = 0; r < M; ++r) meta[size_t(r)] = r % 3;
    tags->upload(meta.data(), meta.size() * 8);

    auto P = [](const hc::DeviceBuffer &b) { return (void *)b.get(); };
    std::vector<Result> results;
    auto bench = [&](const std::string &name, const json &op, hk::KernelArgs a, double flops, double bytes) {
      auto k = hk::emitKernel(op, dev.arch());
      const auto &lk = runner.load(*k);
      a.meta[hk::kMetaBatch] = 1;
      if (!a.meta[hk::kMetaItemRows]) a.meta[hk::kMetaItemRows] = a.meta[hk::kMetaRows];
      if (!a.meta[hk::kMetaMetaRows]) a.meta[hk::kMetaMetaRows] = a.meta[hk::kMetaItemRows];
      double ms = timeMedian(runner, lk, a);
      results.push_back({name, ms, flops, bytes});
      std::printf("%-34s %9.3f ms  %8.1f TFLOP/s  %8.1f GB/s\n", name.c_str(), ms, flops / ms / 1e9, bytes / ms / 1e6);
      std::fflush(stdout);
    };
    auto gemm = [&](const std::string &name, const std::string &kind, long long K, long long N, const std::string &epi,
                    int units) {
      json attrs{{"K", K}, {"N", N}, {"out_dtype", "BF16"}};
      if (kind != "qkv_linear") attrs["epilogue"] = epi;
      if (epi == "gate_residual") {
        attrs["chunk"] = 2;
        attrs["num_chunks"] = 6;
        attrs["row_index"] = "adaln";
      }
      json op{{"op", kind}, {"nodes", {name}}, {"attrs", attrs}, {"order", kchunks(units)},
              {"weights", {{"weight", kind == "qkv_linear" ? json{"q", "k", "v"} : json{"w"}}, {"bias", json::array()}}}};
      hk::KernelArgs a;
      a.in[0] = P(*x);
      a.in[1] = P(*x2);
      a.in[2] = P(*table);
      a.in[3] = P(*ts);
      a.in[4] = P(*tags);
      a.out[0] = P(*y);
      a.out[1] = P(*y2);
      a.out[2] = P(*y3);
      a.w[0] = P(*w);
      a.meta[hk::kMetaRows] = M;
      long long n = kind == "qkv_linear" ? 3 * N : N;
      bench(name, op, a, 2.0 * M * K * n, 2.0 * (M * K + K * n + M * n));
      if (!variants) return;
      auto base = *hk::emitKernel(op, dev.arch());
      a.meta[hk::kMetaBatch] = 1;
      a.meta[hk::kMetaItemRows] = M;
      a.meta[hk::kMetaMetaRows] = M;
      long long outCols = epi == "swiglu" ? N / 2 : N;
      long long gemmCols = epi == "swiglu" ? N / 2 : n;  // grid.y spans every GEMM column (qkv: all three outputs)
      size_t outBytes = size_t(M * outCols * 2);
      std::vector<char> ref(outBytes), got(outBytes);
      runner.launch(runner.load(base), a);
      hc::check(hc::driver().cuCtxSynchronize(), "base");
      y->download(ref.data(), outBytes);
      std::vector<std::map<std::string, int>> vs = {{{"GM_BK", 64}}, {{"GM_STAGES", 4}}, {{"GM_BK", 64}, {"GM_STAGES", 4}}};
      if (units > 1) vs.push_back({{"GM_BM", 64}, {"GM_BN", 128}, {"GM_WM", 2}, {"GM_WN", 4}});
      for (const auto &vd : vs) {
        try {
          auto v = gemmVariant(base, vd);
          int bn = vd.count("GM_BN") ? vd.at("GM_BN") : (units > 1 ? 64 : 128);
          int bno = epi == "swiglu" ? bn / 2 : bn;
          v.launch.gridY = (int)((gemmCols + bno - 1) / bno);
          const auto &lk = runner.load(v);
          hc::check(hc::driver().cuMemsetD8(y->get(), 0x5a, outBytes), "poison");
          double ms = timeMedian(runner, lk, a);
          y->download(got.data(), outBytes);
          bool same = got == ref;
          std::printf("  variant %-40s %9.3f ms  %8.1f TFLOP/s  bits %s\n", v.id.substr(base.id.size()).c_str(), ms,
                      2.0 * M * K * n / ms / 1e9, same ? "identical to the emitted kernel" : "DIFFERENT");
        } catch (const std::exception &e) {
          std::printf("  variant failed: %s\n", e.what());
        }
      }
    };
    gemm("qkv (fused to_q/k/v)", "qkv_linear", H, I, "none", 1);
    gemm("to_out + gate_residual (u8)", "linear", I, H, "gate_residual", 8);
    gemm("fc1 + swiglu", "linear", H, 2 * F, "swiglu", 1);
    gemm("fc2 + gate_residual (u8)", "linear", F, H, "gate_residual", 8);
    gemm("fc2 plain (u1)", "linear", F, H, "none", 1);
    {
      json op{{"op", "attention"}, {"nodes", {"attention"}}, {"attrs", {{"heads", heads}, {"head_dim", d}}},
              {"order", {{"kind", "flash"}, {"kv_block", 64}, {"k_step", 16}, {"acc", "f32"}, {"p", "bf16"}}}};
      hk::KernelArgs a;
      a.in[0] = P(*x);
      a.in[1] = P(*x2);
      a.in[2] = P(*y2);
      a.out[0] = P(*y);
      a.meta[hk::kMetaRows] = M;
      bench("attention 56x128 (flash)", op, a, 4.0 * M * M * d * heads, 4.0 * M * heads * d * 2);
    }
    {
      json op{{"op", "norm_modulate"}, {"nodes", {"norm1"}}, {"order", laneTree()}, {"weights", {{"weight", {"w"}}}},
              {"attrs", {{"H", H}, {"eps", 1e-5}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6},
                         {"row_index", "adaln"}, {"out_dtype", "BF16"}}}};
      hk::KernelArgs a;
      a.in[0] = P(*x);
      a.in[1] = P(*table);
      a.in[2] = P(*ts);
      a.in[3] = P(*tags);
      a.out[0] = P(*y);
      a.w[0] = P(*w);
      a.meta[hk::kMetaRows] = M;
      bench("norm_modulate H=5376", op, a, 0, 4.0 * M * H);
    }
    {
      json op{{"op", "qk_norm_rope"}, {"nodes", {"qk"}}, {"in", {"q", "k", "cos", "sin"}}, {"out", {"q2", "k2"}},
              {"order", laneTree()}, {"weights", {{"weight", {"wq", "wk"}}}},
              {"attrs", {{"heads", heads}, {"head_dim", d}, {"eps", 1e-5}, {"rotary_dim", 96}}}};
      hk::KernelArgs a;
      a.in[0] = P(*x);
      a.in[1] = P(*x2);
      a.in[2] = P(*cosb);
      a.in[3] = P(*sinb);
      a.out[0] = P(*y);
      a.out[1] = P(*y2);
      a.w[0] = P(*w);
      a.w[1] = P(*w);
      a.meta[hk::kMetaRows] = M;
      bench("qk_norm_rope 56x128 r96 (q and k)", op, a, 0, 2 * 4.0 * M * I);
    }
    {
      json op{{"op", "adaln_table"}, {"nodes", {"adaln"}}, {"order", kchunks(1)},
              {"weights", {{"weight", {"w"}}, {"bias", json::array()}}}, {"attrs", {{"K", E}, {"N", 18 * H}}}};
      hk::KernelArgs a;
      a.in[0] = P(*tempF);
      a.out[0] = P(*y);
      a.w[0] = P(*w);
      a.meta[hk::kMetaRows] = T;
      bench("adaln_table T=2 (18H x 2688)", op, a, 2.0 * T * E * 18 * H, 2.0 * E * 18 * H);
    }
    size_t free1 = 0;
    hc::check(hc::driver().cuMemGetInfo(&free1, &total), "meminfo");
    std::printf("device %s; bench buffers %.2f GiB (device free %.1f of %.1f GiB)\n", dev.name.c_str(),
                (free0 - free1) / 1073741824.0, free1 / 1073741824.0, total / 1073741824.0);
    if (!outPath.empty()) {
      std::ofstream o(outPath);
      for (const auto &r : results)
        o << json{{"impl", "h3c"}, {"kernel", r.name}, {"rows", M}, {"ms", r.ms}, {"tflops", r.flops / r.ms / 1e9},
                  {"gbps", r.bytes / r.ms / 1e6}}.dump()
          << "\n";
    }
  } catch (const std::exception &e) {
    std::printf("bench failed: %s\n", e.what());
    return 2;
  }
  return 0;
}
