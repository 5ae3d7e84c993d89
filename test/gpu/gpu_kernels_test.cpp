// GPU kernel checks (GoogleTest; scripts/gpu-test.sh runs them on a machine with an NVIDIA GPU, and every test
// skips cleanly without one). Every kernel kind is emitted, JIT-compiled exactly as a plan carries it (its text, its
// NVRTC options, its launch ABI) and run at the H3 shapes of the full and tiny configs on random inputs, and compared
// with references written here from docs/contract.md section 3:
//   - non-MMA kernels (norms, qk_norm/rope, elementwise, pack/unpack, the F32 linears, time_embed): bit for bit
//     against a host implementation of the contract formula (lane_tree, fma where the contract says fma);
//   - tensor-core kernels (bf16 linears with every epilogue, qkv, adaln_table, attention): against an fp64
//     reference, relative Frobenius error and max error reported, bound 1e-2 (bf16 operands and outputs);
//   - every kernel: two runs byte-equal, and the rows of an M-row run equal (bytes) to a 1-row run of the first row
//     and to a run with the rows reversed (nothing depends on the row count or order);
//   - the shapes one rank of a multi-rank plan runs (docs/contract.md section 5.2): GEMMs with the full K and a
//     tensor-parallel rank's N, and attention of a sequence-parallel rank's query rows over all keys, byte-equal to
//     the same rows of the one-rank run.
// H3C_GPU_QUICK=1 shrinks the full-config row counts.
#include "emit_ops.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/detmath.h"
#include "h3c/support/dtype.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace hc = h3c::runtime::cuda;
namespace plan = h3c::plan;
using namespace h3c::testops;
using h3c::bf16ToFloat;
using h3c::DType;
using h3c::floatToBf16;
using h3c::roundBf16;

namespace {

std::mt19937_64 gRng(12345);
std::vector<uint16_t> randBf(size_t n, double stdv = 1.0) {
  std::normal_distribution<double> d(0.0, stdv);
  std::vector<uint16_t> v(n);
  for (auto &e : v) e = floatToBf16((float)d(gRng));
  return v;
}
std::vector<float> randF(size_t n, double stdv = 1.0) {
  std::normal_distribution<double> d(0.0, stdv);
  std::vector<float> v(n);
  for (auto &e : v) e = (float)d(gRng);
  return v;
}
std::vector<float> toF(const std::vector<uint16_t> &b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16ToFloat(b[i]);
  return f;
}

// Random values with exponents spread over 2^+-6 (uniform mantissas in [-1, 1) times 2^e), fast enough for the 240 M
// values of fc1's gradient (splitmix64, not the normal distribution); next(): the raw 64-bit draws.
struct SpreadRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float value() {
    const uint64_t r = next();
    const float u = float(int64_t(r >> 40) - (1LL << 23)) / float(1 << 23);
    return std::ldexp(u, int((r >> 8) % 13) - 6);
  }
};

using Buf = std::shared_ptr<hc::DeviceBuffer>;
template <typename T> Buf up(const std::vector<T> &v) {
  auto b = std::make_shared<hc::DeviceBuffer>(std::max<size_t>(v.size() * sizeof(T), 1));
  b->upload(v.data(), v.size() * sizeof(T));
  return b;
}
Buf outBuf(size_t bytes) {
  auto b = std::make_shared<hc::DeviceBuffer>(std::max<size_t>(bytes, 1));
  hc::check(hc::driver().cuMemsetD8(b->get(), 0xA5, b->bytes()), "poison");  // every element must be written
  return b;
}
template <typename T> std::vector<T> down(const hc::DeviceBuffer &b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

bool quick() { return std::getenv("H3C_GPU_QUICK") != nullptr; }

// The device, the runner and the kernels it loaded (the runner keeps pointers to them).
class Gpu : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!hc::driverAvailable(&why)) return;
    const auto &d = hc::device();
    std::printf("device: %s (cc %d.%d, %d SMs), driver %d, NVRTC %s, arch %s\n", d.name.c_str(), d.ccMajor,
                d.ccMinor, d.smCount, d.driverVersion, hc::NvrtcJit::nvrtcVersion().c_str(), d.arch().c_str());
    runner_ = new hc::KernelRunner();
  }
  void SetUp() override {
    std::string why;
    if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  }

  // The kernel of an op for this device's arch (kept alive for the runner).
  const plan::Kernel &kernel(const EmitOp &o, const hk::EmitOptions &options = {}) {
    auto k = emit(o, hc::device().arch(), options);
    if (!k) throw std::runtime_error("no kernel for " + o.op.where);
    auto it = kernels_.emplace(k->id, *k).first;
    return it->second;
  }

  // One launch: buffers at the op's operand positions, the request extents the launch expressions read.
  struct Launch {
    std::vector<Buf> in, out, w, b;
    plan::Extents e;
  };
  void run(const plan::Kernel &k, const Launch &l) {
    const auto &lk = runner_->load(k);
    runner_->launch(lk, l.e, [&](plan::OperandRole role, int64_t i) -> CUdeviceptr {
      const std::vector<Buf> &v = role == plan::OperandRole::In    ? l.in
                                  : role == plan::OperandRole::Out ? l.out
                                  : role == plan::OperandRole::Weight ? l.w
                                                                      : l.b;
      if (size_t(i) >= v.size() || !v[size_t(i)]) throw std::runtime_error("operand not given");
      return v[size_t(i)]->get();
    });
    hc::check(hc::driver().cuCtxSynchronize(), "kernel " + k.id);
  }

  static hc::KernelRunner *runner_;
  static std::map<std::string, plan::Kernel> kernels_;
};
hc::KernelRunner *Gpu::runner_ = nullptr;
std::map<std::string, plan::Kernel> Gpu::kernels_;

plan::Extents rowsS(int64_t m, int64_t B = 1) { return {B, m, 0, 0, 0, 1}; }

// The AdaLN table's streaming kernel (adaln_sm90.cuh) at the tunings the bench sweeps: the bulk form (adaln_tiles=0)
// with fewer ring stages, narrower and wider stages, two CTAs per SM; the tiles form (the default) at other shapes.
std::vector<std::pair<std::string, hk::EmitOptions>> adalnStreamVariants() {
  std::vector<std::pair<std::string, hk::EmitOptions>> v;
  const std::tuple<int, int, int> tunings[] = {{2, 256, 1}, {3, 128, 1}, {0, 64, 1},
                                               {2, 512, 1}, {0, 192, 1}, {0, 256, 2}};
  for (auto [stages, k, ctas] : tunings) {
    hk::EmitOptions o;
    o.sm90AdalnTiles = 0;  // the bulk form
    o.sm90AdalnStages = stages;
    o.sm90AdalnStageK = k;
    o.sm90AdalnCtas = ctas;
    const std::string st = stages ? std::to_string(stages) : "max";
    v.emplace_back(fmt::format("stages {} stage_k {} ctas/SM {}", st, k, ctas), o);
  }
  // The tiles form (adaln_tiles=1: one TMA box of the swizzled weight a stage): warps x 8-row blocks a warp, CTAs per
  // SM; 8 x 4 is a 256-row box, and the last tile of a CTA's range loads as 8-row boxes in every shape.
  const std::tuple<int, int, int> tiles[] = {{8, 2, 1}, {4, 4, 2}, {8, 4, 1}, {4, 2, 2}};
  for (auto [warps, blocks, ctas] : tiles) {
    hk::EmitOptions o;
    o.sm90AdalnTiles = 1;
    o.sm90AdalnWarps = warps;
    o.sm90AdalnBlocks = blocks;
    o.sm90AdalnCtas = ctas;
    v.emplace_back(fmt::format("tiles {} warps x {} blocks ctas/SM {}", warps, blocks, ctas), o);
  }
  return v;
}

// ---- host references (contract section 3) ----

float laneTreeSS(const float *x, int n) {
  float p[32];
  for (int l = 0; l < 32; ++l) {
    float acc = 0.0f;
    for (int j = l; j < n; j += 32) acc = std::fmaf(x[j], x[j], acc);
    p[l] = acc;
  }
  for (int off = 16; off >= 1; off >>= 1)
    for (int l = 0; l < off; ++l) p[l] = p[l] + p[l + off];
  return p[0];
}
float invRms(float ss, int n, float eps) { return 1.0f / std::sqrt(ss / (float)n + eps); }

template <typename T> bool bytesEqual(const std::vector<T> &a, const std::vector<T> &b, size_t n = SIZE_MAX) {
  n = std::min({n, a.size(), b.size()});
  return std::memcmp(a.data(), b.data(), n * sizeof(T)) == 0;
}
template <typename T> size_t firstDiff(const std::vector<T> &a, const std::vector<T> &b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  return SIZE_MAX;
}

struct ErrStat {
  double frob = 0, maxAbs = 0, refRms = 0;
};
ErrStat compare(const std::vector<float> &got, const std::vector<double> &ref) {
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = (double)got[i] - ref[i];
    if (std::isnan(got[i])) d = 1e30;
    num += d * d;
    den += ref[i] * ref[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {std::sqrt(num / std::max(den, 1e-300)), mx, std::sqrt(den / std::max<size_t>(ref.size(), 1))};
}

// The checks, one per kernel family; each prints a PASS/FAIL line per property (the figures the notes quote).
void report(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  EXPECT_TRUE(ok) << what;
}

class Kernels : public Gpu {
protected:
  void checkLinear(const std::string &cfg, const std::string &kind, long long K, long long N, const std::string &epi,
                   long long M, int checkRows);
  void checkAttention(const std::string &cfg, int heads, int d, long long L, int B);
  void checkRankAttention(const std::string &cfg, int heads, int d, long long L, int B, long long q0, long long Lq);
  void checkNorms(const std::string &cfg, int H, long long M, int rowsPerCta = 0);
  void checkQkNormRope(const std::string &cfg, int heads, int d, int R, long long S, int B, int units = 4,
                       int pairUnits = 16);
  void checkQkvNormRope(const std::string &cfg, long long K, int heads, int R, long long S, int B);
  void checkLoraLinear(const std::string &cfg, const std::string &kind, long long K, long long N, const std::string &epi,
                       bool bias, long long M, long long L);
  void checkLoraDown(const std::string &cfg, long long K, long long L, long long M);
  void checkSwigluKeepsX(const std::string &cfg, long long K, long long N, long long M, long long L);
  void checkElementwise(const std::string &cfg, int H, int F, long long M);
  void checkF32(const std::string &cfg, long long K, long long N, long long M, long long freq, long long hid,
                long long E, long long T = 3);
};

// ---- tensor-core linears ----

// epi: none | residual | gate_residual | swiglu; kind: linear | qkv_linear | adaln_table. The order is k_chunks with
// one unit (section 4): one chain over K.
void Kernels::checkLinear(const std::string &cfg, const std::string &kind, long long K, long long N,
                          const std::string &epi, long long M, int checkRows) {
  std::string name = fmt::format("[{}] {} K={} N={} epilogue={} M={}", cfg, kind, K, N, epi, M);
  try {
    bool adaln = kind == "adaln_table", qkv = kind == "qkv_linear";
    bool bias = adaln || epi == "none";
    plan::Epilogue ek = epi == "residual" ? plan::Epilogue::Residual
                       : epi == "gate_residual" ? plan::Epilogue::GateResidual
                       : epi == "swiglu" ? plan::Epilogue::Swiglu
                                         : plan::Epilogue::None;
    plan::OpAttrs a = with(attrs({{"K", K}, {"N", N}}), DType::BF16, adaln ? DType::F32 : DType::BF16, DType::BF16, ek);
    if (ek == plan::Epilogue::GateResidual) {
      a.chunk = 2;
      a.numChunks = 6;
    }
    if (adaln) {
      a.numChunks = 6;
      a.rowsPerTimestep = 3;
    }
    OpKind k = adaln ? OpKind::AdalnTable : qkv ? OpKind::QkvLinear : OpKind::Linear;
    const plan::Kernel &kern = kernel(op(k, kind, a, kchunks(1), qkv ? 3 : 1, bias && !qkv ? 1 : 0));
    long long Wrows = qkv ? 3 * N : N;
    long long outCols = epi == "swiglu" ? N / 2 : N;
    double wstd = 1.0 / std::sqrt((double)K);
    auto W = randBf(size_t(Wrows * K), wstd);
    auto bvec = randBf(size_t(Wrows), 0.1);
    std::vector<uint16_t> xb;
    std::vector<float> xf;
    if (adaln) xf = randF(size_t(M * K), 2.0);
    else xb = randBf(size_t(M * K));
    auto res = randBf(size_t(M * outCols));
    const long long T = 3, S = M;
    auto table = randBf(size_t(T * 3 * 6 * outCols), 0.5);
    std::vector<long long> ts(S), tags(S);
    for (long long r = 0; r < S; ++r) {
      ts[r] = (r * 7) % T;
      tags[r] = (r * 5) % 3;
    }
    auto dW = up(W), dB = up(bvec), dRes = up(res), dTab = up(table), dTs = up(ts), dTags = up(tags);
    auto dX = adaln ? up(xf) : up(xb);
    int nout = qkv ? 3 : 1;
    auto runWith = [&](const plan::Kernel &kk, Buf x, Buf r, long long m, Buf tsb, Buf tgb) {
      Launch l;
      l.in = {x};
      if (epi == "residual") l.in.push_back(r);
      if (epi == "gate_residual") l.in.insert(l.in.end(), {r, dTab, tsb, tgb});
      for (int o = 0; o < nout; ++o) l.out.push_back(outBuf(size_t(m * outCols * 2)));
      l.w = {dW};
      if (bias && !qkv) l.b = {dB};
      // The AdaLN table's input is the time embedding (T rows); every other linear reads batch-1 S rows.
      l.e = adaln ? plan::Extents{1, 0, 0, 0, 0, m} : rowsS(m);
      run(kk, l);
      std::vector<uint16_t> all;
      for (int o = 0; o < nout; ++o) {
        auto v = down<uint16_t>(*l.out[o], size_t(m * outCols));
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    auto runOnce = [&](Buf x, Buf r, long long m, Buf tsb, Buf tgb) { return runWith(kern, x, r, m, tsb, tgb); };
    auto y1 = runOnce(dX, dRes, M, dTs, dTags);
    // The AdaLN table on sm_90a: the streaming kernel (bulk copies + mma.sync in the mma.sync kernel's operand roles)
    // and its tuning variants against the mma.sync kernel of the same op: the same bits.
    const bool adalnStream = adaln && kern.id.rfind("adaln_table_sm90_", 0) == 0;
    if (adaln && hc::device().arch() == "sm_90a" && K % 16 == 0)
      report(adalnStream, name + ": the sm_90a AdaLN table runs the streaming kernel (" + kern.id + ")");
    if (adalnStream) {
      hk::EmitOptions mma;
      mma.wgmma = false;
      const plan::Kernel &ref = kernel(op(k, kind, a, kchunks(1), 1, 1), mma);
      auto ym = runWith(ref, dX, dRes, M, dTs, dTags);
      size_t at = firstDiff(y1, ym);
      report(at == SIZE_MAX, name + fmt::format(": AdaLN streaming kernel == mma.sync kernel byte for byte{}",
                                                at == SIZE_MAX ? "" : fmt::format(" (first difference at {})", at)));
      for (const auto &[label, opts] : adalnStreamVariants()) {
        const plan::Kernel &vk = kernel(op(k, kind, a, kchunks(1), 1, 1), opts);
        if (vk.id.rfind("adaln_table_sm90_", 0) != 0) {
          report(false, name + ": " + label + " did not emit the streaming kernel (" + vk.id + ")");
          continue;
        }
        size_t vat = firstDiff(runWith(vk, dX, dRes, M, dTs, dTags), ym);
        std::string where = vat == SIZE_MAX ? "" : fmt::format(" (first difference at {})", vat);
        report(vat == SIZE_MAX,
               name + fmt::format(": AdaLN streaming kernel ({}) == mma.sync kernel byte for byte{}", label, where));
      }
    }
    // The Hopper kernel (TMA + wgmma) against the mma.sync kernel of the same op and order: the same bits
    // (../shared/HOPPER-KERNELS.md section 1), at this M and at a 1-row run.
    if (!adalnStream && kern.source.find("wgmma.mma_async") != std::string::npos) {
      hk::EmitOptions mma;
      mma.wgmma = false;
      const plan::Kernel &ref = kernel(op(k, kind, a, kchunks(1), qkv ? 3 : 1, bias && !qkv ? 1 : 0), mma);
      auto ym = runWith(ref, dX, dRes, M, dTs, dTags);
      size_t at = firstDiff(y1, ym);
      report(at == SIZE_MAX, name + fmt::format(": Hopper (wgmma) kernel == mma.sync kernel byte for byte{}",
                                                at == SIZE_MAX ? "" : fmt::format(" (first difference at {})", at)));
      // The schedule variants against the same mma.sync output (the options' per-op defaults cleared, so each
      // variant applies to every linear kind).
      for (const auto &[label, opts] : hopperGemmVariants(ek != plan::Epilogue::Swiglu)) {
        const plan::Kernel &vk = kernel(op(k, kind, a, kchunks(1), qkv ? 3 : 1, bias && !qkv ? 1 : 0), opts);
        size_t vat = firstDiff(runWith(vk, dX, dRes, M, dTs, dTags), ym);
        report(vat == SIZE_MAX, name + fmt::format(": Hopper {} kernel == mma.sync kernel byte for byte{}", label,
                                                   vat == SIZE_MAX ? "" : fmt::format(" (first difference at {})", vat)));
      }
    }
    auto y2 = runOnce(dX, dRes, M, dTs, dTags);
    report(bytesEqual(y1, y2), name + ": two runs byte-equal");
    // Row 0 alone.
    auto y0 = runOnce(dX, dRes, 1, dTs, dTags);
    bool rowOk = true;
    for (int o = 0; o < nout; ++o)
      rowOk &= std::memcmp(&y0[size_t(o) * outCols], &y1[size_t(o) * M * outCols], size_t(outCols) * 2) == 0;
    report(rowOk, name + ": row 0 of an M-row run == a 1-row run");
    // Rows reversed (x, residual, metadata move with their rows).
    {
      std::vector<uint16_t> xbr(xb.size()), rr(res.size());
      std::vector<float> xfr(xf.size());
      std::vector<long long> tsr(S), tgr(S);
      for (long long r = 0; r < M; ++r) {
        long long s = M - 1 - r;
        if (adaln) std::copy_n(&xf[size_t(s * K)], K, &xfr[size_t(r * K)]);
        else std::copy_n(&xb[size_t(s * K)], K, &xbr[size_t(r * K)]);
        std::copy_n(&res[size_t(s * outCols)], outCols, &rr[size_t(r * outCols)]);
        tsr[r] = ts[s];
        tgr[r] = tags[s];
      }
      auto yr = runOnce(adaln ? up(xfr) : up(xbr), up(rr), M, up(tsr), up(tgr));
      bool ok = true;
      for (int o = 0; o < nout && ok; ++o)
        for (long long r = 0; r < M && ok; ++r)
          ok = std::memcmp(&yr[size_t(o * M * outCols + r * outCols)], &y1[size_t(o * M * outCols + (M - 1 - r) * outCols)],
                           size_t(outCols) * 2) == 0;
      report(ok, name + ": rows reversed -> outputs reversed, byte-equal");
    }
    // fp64 reference on sampled rows.
    std::vector<float> got;
    std::vector<double> ref;
    for (int ci = 0; ci < checkRows; ++ci) {
      long long r = ci == 0 ? 0 : ci == 1 ? M - 1 : (ci * 7919LL) % M;
      std::vector<double> xr(static_cast<size_t>(K));
      for (long long kk = 0; kk < K; ++kk) {
        if (adaln) xr[size_t(kk)] = roundBf16(h3c::detmath::silu(xf[size_t(r * K + kk)]));
        else xr[size_t(kk)] = bf16ToFloat(xb[size_t(r * K + kk)]);
      }
      auto dot = [&](long long n) {
        double s = 0;
        for (long long kk = 0; kk < K; ++kk) s += xr[size_t(kk)] * bf16ToFloat(W[size_t(n * K + kk)]);
        if (bias && !qkv) s += bf16ToFloat(bvec[size_t(n)]);
        return s;
      };
      for (int o = 0; o < nout; ++o)
        for (long long c = 0; c < outCols; ++c) {
          double y;
          if (epi == "swiglu") {
            double v = dot(c), g = dot(N / 2 + c);
            y = v * (g / (1.0 + std::exp(-g)));
          } else {
            y = dot(o * N + c);
            if (epi == "residual") y += bf16ToFloat(res[size_t(r * outCols + c)]);
            if (epi == "gate_residual") {
              long long trow = ts[size_t(r)] * 3 + tags[size_t(r)];
              y = bf16ToFloat(res[size_t(r * outCols + c)]) +
                  (double)bf16ToFloat(table[size_t(trow * 6 * outCols + 2 * outCols + c)]) * y;
            }
          }
          ref.push_back(y);
          got.push_back(bf16ToFloat(y1[size_t(o * M * outCols + r * outCols + c)]));
        }
    }
    ErrStat e = compare(got, ref);
    report(e.frob < 1e-2, fmt::format("{}: vs fp64 rel_frob={:.3e} max_abs={:.3e} ref_rms={:.3e} (bound 1e-2)", name,
                                      e.frob, e.maxAbs, e.refRms));
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// ---- attention ----
void Kernels::checkAttention(const std::string &cfg, int heads, int d, long long L, int B) {
  std::string name = fmt::format("[{}] attention heads={} d={} L={} B={}", cfg, heads, d, L, B);
  try {
    const plan::Kernel &k =
        kernel(op(OpKind::Attention, "attention",
                  with(attrs({{"heads", heads}, {"head_dim", d}}), DType::BF16, DType::BF16, DType::BF16), flash()));
    long long ld = (long long)heads * d;
    size_t n = size_t(B * L * ld);
    auto q = randBf(n), kk = randBf(n), v = randBf(n);
    auto dq = up(q), dk = up(kk), dv = up(v);
    auto goWith = [&](const plan::Kernel &kern, long long l, int b) {
      Launch la;
      la.in = {dq, dk, dv};
      la.out = {outBuf(size_t(b * l * ld * 2))};
      la.e = rowsS(l, b);
      run(kern, la);
      return down<uint16_t>(*la.out[0], size_t(b * l * ld));
    };
    auto go = [&](long long l, int b) { return goWith(k, l, b); };
    auto o1 = go(L, B), o2 = go(L, B);
    report(bytesEqual(o1, o2), name + ": two runs byte-equal");
    if (k.source.find("wgmma.mma_async") != std::string::npos) {
      // The Hopper kernel (TMA + wgmma) and its tuning variants against the mma.sync kernel: the same bits, for
      // today's kv_block (128) and the one plans compiled before 2026-12-04 carry (64).
      for (int64_t kv : {128, 64}) {
        EmitOp aop = op(OpKind::Attention, "attention",
                        with(attrs({{"heads", heads}, {"head_dim", d}}), DType::BF16, DType::BF16, DType::BF16),
                        flash());
        aop.op.order.kvBlock = kv;
        hk::EmitOptions mma;
        mma.wgmma = false;
        auto om = goWith(kernel(aop, mma), L, B);
        auto oh = kv == 128 ? o1 : goWith(kernel(aop), L, B);
        size_t at = firstDiff(oh, om);
        report(at == SIZE_MAX,
               name + fmt::format(": kv_block {}: Hopper (wgmma) attention == mma.sync attention byte for byte{}", kv,
                                  at == SIZE_MAX ? "" : fmt::format(" (first difference at {})", at)));
        // Each schedule one tile per CTA and persistent (a grid of at most one CTA per SM walking the tiles, the
        // ring and the ping-pong turns running on across tiles).
        for (int persistent = 0; persistent < 2; ++persistent)
          for (int variant = 0; variant < 3; ++variant) {
            hk::EmitOptions o;
            o.sm90AttnOverlap = variant > 0;
            o.sm90AttnPingpong = variant == 2;
            o.sm90AttnStages = kv == 128 ? 2 + variant % 2 : 2 + variant;  // 128: at most 3 stages of 64 KiB fit
            o.sm90AttnPersistent = persistent;
            auto ov = goWith(kernel(aop, o), L, B);
            size_t vat = firstDiff(ov, om);
            report(vat == SIZE_MAX,
                   name + fmt::format(": kv_block {}: Hopper attention stages {} overlap {} ping-pong {} persistent {} "
                                      "== mma.sync{}", kv, o.sm90AttnStages, o.sm90AttnOverlap, o.sm90AttnPingpong,
                                      persistent, vat == SIZE_MAX ? "" : fmt::format(" (first difference at {})", vat)));
          }
      }
    }
    if (B > 1) {
      // Batch item 0 of a B-item run == the same item alone (batch items never interact).
      auto ob = go(L, 1);
      report(bytesEqual(ob, o1, size_t(L * ld)), name + ": item 0 of batch == batch-1 run");
    }
    std::vector<float> got;
    std::vector<double> ref;
    double scale = 1.0 / std::sqrt((double)d);
    for (int h : {0, heads / 2, heads - 1}) {
      for (long long qi : {0LL, L / 3, L - 1}) {
        std::vector<double> s(static_cast<size_t>(L));
        double mx = -1e300;
        for (long long j = 0; j < L; ++j) {
          double acc = 0;
          for (int c = 0; c < d; ++c)
            acc += (double)bf16ToFloat(q[size_t(qi * ld + h * d + c)]) * bf16ToFloat(kk[size_t(j * ld + h * d + c)]);
          s[size_t(j)] = acc * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (auto &e : s) sum += (e = std::exp(e - mx));
        for (int c = 0; c < d; ++c) {
          double o = 0;
          for (long long j = 0; j < L; ++j) o += s[size_t(j)] * bf16ToFloat(v[size_t(j * ld + h * d + c)]);
          ref.push_back(o / sum);
          got.push_back(bf16ToFloat(o1[size_t(qi * ld + h * d + c)]));
        }
      }
    }
    ErrStat e = compare(got, ref);
    report(e.frob < 1e-2, fmt::format("{}: vs fp64 rel_frob={:.3e} max_abs={:.3e} ref_rms={:.3e} (bound 1e-2)", name,
                                      e.frob, e.maxAbs, e.refRms));
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// A sequence-parallel rank's query rows [q0, q0 + Lq) of each item (domain Sr) over all L keys (S): the kernel the
// rank runs gives exactly the bytes of those rows in the one-rank run (attention is independent per query row and
// the keys are summed in canonical order).
void Kernels::checkRankAttention(const std::string &cfg, int heads, int d, long long L, int B, long long q0,
                                 long long Lq) {
  std::string name = fmt::format("[{}] attention of a rank's rows [{}, {}) of L={} B={}", cfg, q0, q0 + Lq, L, B);
  try {
    plan::OpAttrs a = with(attrs({{"heads", heads}, {"head_dim", d}}), DType::BF16, DType::BF16, DType::BF16);
    const plan::Kernel &whole = kernel(op(OpKind::Attention, "attention", a, flash()));
    EmitOp rankOp = op(OpKind::Attention, "attention", a, flash());
    rankOp.vals.in[0].rows = plan::Domain::Sr;
    rankOp.vals.out[0].rows = plan::Domain::Sr;
    const plan::Kernel &rank = kernel(rankOp);
    long long ld = (long long)heads * d;
    auto q = randBf(size_t(B * L * ld)), kk = randBf(size_t(B * L * ld)), v = randBf(size_t(B * L * ld));
    std::vector<uint16_t> qr(size_t(B * Lq * ld));
    for (int b = 0; b < B; ++b)
      std::copy_n(&q[size_t((b * L + q0) * ld)], Lq * ld, &qr[size_t(b * Lq * ld)]);
    auto dk = up(kk), dv = up(v);
    Launch lf;
    lf.in = {up(q), dk, dv};
    lf.out = {outBuf(size_t(B * L * ld * 2))};
    lf.e = rowsS(L, B);
    run(whole, lf);
    auto of = down<uint16_t>(*lf.out[0], size_t(B * L * ld));
    Launch lr;
    lr.in = {up(qr), dk, dv};
    lr.out = {outBuf(size_t(B * Lq * ld * 2))};
    lr.e = rowsS(L, B);
    lr.e.Sr = Lq;
    run(rank, lr);
    auto orr = down<uint16_t>(*lr.out[0], size_t(B * Lq * ld));
    auto sameRows = [&](const std::vector<uint16_t> &o) {
      bool ok = true;
      for (int b = 0; b < B && ok; ++b)
        ok = std::memcmp(&o[size_t(b * Lq * ld)], &of[size_t((b * L + q0) * ld)], size_t(Lq * ld) * 2) == 0;
      return ok;
    };
    report(sameRows(orr), name + ": byte-equal to those rows of the one-rank run");
    if (rank.source.find("wgmma.mma_async") != std::string::npos) {
      // The persistent Hopper kernel on the rank's rows (fewer query tiles than key blocks per item), each schedule.
      for (int variant = 0; variant < 3; ++variant) {
        hk::EmitOptions o;
        o.sm90AttnOverlap = variant > 0;
        o.sm90AttnPingpong = variant == 2;
        o.sm90AttnPersistent = 1;
        Launch lp = lr;
        lp.out = {outBuf(size_t(B * Lq * ld * 2))};
        run(kernel(rankOp, o), lp);
        report(sameRows(down<uint16_t>(*lp.out[0], size_t(B * Lq * ld))),
               name + fmt::format(": persistent Hopper attention overlap {} ping-pong {}: byte-equal to those rows",
                                  o.sm90AttnOverlap, o.sm90AttnPingpong));
      }
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// ---- bitwise kernels ----
// rms_norm (with and without a weight) and norm_modulate (BF16 out over adaln rows ts * 3 + tag and over timestep
// rows, without a weight, and F32 out for norm_out) against the contract's formula, bit for bit. rowsPerCta > 0 sets
// the emitter's norm_rows (rows per CTA); M need not be a multiple of it.
void Kernels::checkNorms(const std::string &cfg, int H, long long M, int rowsPerCta) {
  hk::EmitOptions opt;
  if (rowsPerCta > 0) opt.normRows = rowsPerCta;
  std::string name = fmt::format("[{}] rms_norm/norm_modulate H={} M={} rows/CTA={}", cfg, H, M, opt.normRows);
  try {
    const float eps = 1e-5f;
    auto x = randBf(size_t(M * H), 3.0);
    auto w = randBf(size_t(H), 1.0);
    const long long T = 2;
    auto table = randBf(size_t(T * 3 * 6 * H), 0.5);
    std::vector<long long> ts(M), tags(M);
    for (long long r = 0; r < M; ++r) {
      ts[r] = r % T;
      tags[r] = (r / 3) % 3;
    }
    auto dx = up(x), dw = up(w), dt = up(table), dts = up(ts), dtg = up(tags);
    const auto xf = toF(x);
    struct Variant {
      const char *what;
      bool modulate, weight, f32out, adaln;
    };
    const Variant variants[] = {{"rms_norm", false, true, false, false},
                                {"rms_norm without weight", false, false, false, false},
                                {"norm_modulate (BF16, adaln rows)", true, true, false, true},
                                {"norm_modulate (BF16, timestep rows)", true, true, false, false},
                                {"norm_modulate without weight (BF16, adaln rows)", true, false, false, true},
                                {"norm_modulate (F32 out, timestep rows)", true, true, true, false}};
    for (const Variant &v : variants) {
      const int nc = v.adaln ? 6 : 2, sh = v.adaln ? 3 : 0, sc = v.adaln ? 4 : 1;
      const DType out = v.f32out ? DType::F32 : DType::BF16;
      const plan::OpAttrs a =
          v.modulate
              ? with(attrs({{"H", H}, {"eps", 1e-5}, {"shift_chunk", sh}, {"scale_chunk", sc}, {"num_chunks", nc}}),
                     DType::BF16, DType::BF16, out, plan::Epilogue::None,
                     v.adaln ? plan::RowIndex::Adaln : plan::RowIndex::Timestep)
              : with(attrs({{"H", H}, {"eps", 1e-5}}), DType::BF16, DType::BF16, out);
      const EmitOp o = op(v.modulate ? OpKind::NormModulate : OpKind::RmsNorm, v.modulate ? "norm_modulate" : "norm", a,
                          laneTree(), v.weight ? 1 : 0);
      const plan::Kernel &k = kernel(o, opt);
      Launch l;
      l.in = {dx};
      if (v.modulate) l.in.insert(l.in.end(), {dt, dts});
      if (v.modulate && v.adaln) l.in.push_back(dtg);
      l.out = {outBuf(size_t(M * H * (v.f32out ? 4 : 2)))};
      if (v.weight) l.w = {dw};
      l.e = rowsS(M);
      run(k, l);
      // The contract (section 3): n = bf(bf(x * inv) * w), y = bf(fma(n, bf(1 + scale), shift)).
      std::vector<float> ref(size_t(M * H));
      for (long long r = 0; r < M; ++r) {
        const float inv = invRms(laneTreeSS(&xf[size_t(r * H)], H), H, eps);
        const long long trow = v.adaln ? ts[size_t(r)] * 3 + tags[size_t(r)] : ts[size_t(r)];
        for (int j = 0; j < H; ++j) {
          float n = roundBf16(xf[size_t(r * H + j)] * inv);
          if (v.weight) n = roundBf16(n * bf16ToFloat(w[size_t(j)]));
          if (v.modulate) {
            const float shift = bf16ToFloat(table[size_t(trow * nc * H + sh * H + j)]);
            const float s1 = roundBf16(1.0f + bf16ToFloat(table[size_t(trow * nc * H + sc * H + j)]));
            n = roundBf16(std::fmaf(n, s1, shift));
          }
          ref[size_t(r * H + j)] = n;
        }
      }
      size_t fd;
      if (v.f32out) {
        fd = firstDiff(down<float>(*l.out[0], size_t(M * H)), ref);
      } else {
        std::vector<uint16_t> rb(ref.size());
        for (size_t i = 0; i < ref.size(); ++i) rb[i] = floatToBf16(ref[i]);
        fd = firstDiff(down<uint16_t>(*l.out[0], size_t(M * H)), rb);
      }
      report(fd == SIZE_MAX, name + ": " + v.what + " bitwise vs contract formula" +
                                 (fd == SIZE_MAX ? "" : fmt::format(" (first diff: row {}, column {})", fd / H, fd % H)));
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// units: the (row, head) units a warp takes (head_units; the default 4), the last warp's group partial where the
// unit count is no multiple of it; pairUnits: the same for the pairs form of head_dim 128 (head_pair_units, default
// 16; 0: head_pairs=0, the strided form).
void Kernels::checkQkNormRope(const std::string &cfg, int heads, int d, int R, long long S, int B, int units,
                              int pairUnits) {
  std::string name = fmt::format("[{}] qk_norm_rope heads={} d={} R={} S={} B={} head_units={} head_pair_units={}", cfg,
                                 heads, d, R, S, B, units, pairUnits);
  hk::EmitOptions opt;
  opt.headUnits = units;
  opt.headPairs = pairUnits > 0 ? 1 : 0;
  if (pairUnits > 0) opt.headPairUnits = pairUnits;
  try {
    long long M = S * B, ld = (long long)heads * d;
    auto q = randBf(size_t(M * ld), 2.0), k = randBf(size_t(M * ld), 2.0);
    auto wq = randBf(size_t(d)), wk = randBf(size_t(d));
    auto cs = randF(size_t(S * std::max(R, 1))), sn = randF(size_t(S * std::max(R, 1)));
    const plan::Kernel &kern = kernel(
        op(OpKind::QkNormRope, "qk",
           with(attrs({{"heads", heads}, {"head_dim", d}, {"eps", 1e-5}, {"rotary_dim", R}}), DType::BF16, DType::BF16,
                DType::BF16),
           laneTree(), 2),
        opt);
    Launch l;
    l.in = {up(q), up(k)};
    if (R) l.in.insert(l.in.end(), {up(cs), up(sn)});
    l.out = {outBuf(size_t(M * ld * 2)), outBuf(size_t(M * ld * 2))};
    l.w = {up(wq), up(wk)};
    l.e = rowsS(S, B);  // cos/sin have no batch axis: S rows shared by the B items
    run(kern, l);
    bool ok = true;
    for (int t = 0; t < 2; ++t) {
      auto y = down<uint16_t>(*l.out[t], size_t(M * ld));
      auto xf = toF(t ? k : q);
      const auto &w = t ? wk : wq;
      std::vector<uint16_t> ref(size_t(M * ld));
      std::vector<float> b(static_cast<size_t>(d));
      for (long long r = 0; r < M; ++r)
        for (int h = 0; h < heads; ++h) {
          const float *x = &xf[size_t(r * ld + h * d)];
          float inv = invRms(laneTreeSS(x, d), d, 1e-5f);
          for (int j = 0; j < d; ++j) b[size_t(j)] = roundBf16(roundBf16(x[j] * inv) * bf16ToFloat(w[size_t(j)]));
          long long m = r % S;
          for (int j = 0; j < d; ++j) {
            float v = b[size_t(j)];
            if (j < R) {
              float rot = j < R / 2 ? -b[size_t(j + R / 2)] : b[size_t(j - R / 2)];
              v = roundBf16(v * roundBf16(cs[size_t(m * R + j)]) + rot * roundBf16(sn[size_t(m * R + j)]));
            }
            ref[size_t(r * ld + h * d + j)] = floatToBf16(v);
          }
        }
      ok &= bytesEqual(y, ref);
      // The training plan's unfused pair (h3c compile --backward): qk_norm of one tensor, then rope (or nothing
      // when R = 0), each its own kernel: the formula's bytes too.
      const auto a3 = [](plan::OpAttrs a) { return with(a, DType::BF16, DType::BF16, DType::BF16); };
      Launch ln;
      ln.in = {l.in[size_t(t)]};
      ln.out = {outBuf(size_t(M * ld * 2))};
      ln.w = {l.w[size_t(t)]};
      ln.e = rowsS(S, B);
      run(kernel(op(OpKind::QkNorm, "qkn", a3(attrs({{"heads", heads}, {"head_dim", d}, {"eps", 1e-5}})), laneTree(), 1),
                 opt),
          ln);
      auto ys = ln.out[0];
      if (R) {
        Launch lr;
        lr.in = {ln.out[0], l.in[2], l.in[3]};
        lr.out = {outBuf(size_t(M * ld * 2))};
        lr.e = rowsS(S, B);
        run(kernel(op(OpKind::Rope, "rope", a3(attrs({{"heads", heads}, {"head_dim", d}, {"rotary_dim", R}}))), opt),
            lr);
        ys = lr.out[0];
      }
      const bool split = bytesEqual(down<uint16_t>(*ys, size_t(M * ld)), ref);
      report(split, name + (t ? ": k" : ": q") + " by qk_norm then rope (two kernels) bitwise vs contract formula");
      ok &= split;
    }
    report(ok, name + ": bitwise vs contract formula");
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// qkv_linear with the qk_norm_rope epilogue (sm_90a only: the Hopper GEMM's fused form) against what it replaces, the
// plain qkv_linear kernel followed by the qk_norm_rope kernel: q, k and v byte for byte, for every schedule variant
// (cooperative, 2-CTA cluster, ping-pong); byte-equal across runs, for a 1-row run and with the rows reversed. S rows
// per item, B items (the rope tables have S rows, shared by the items).
void Kernels::checkQkvNormRope(const std::string &cfg, long long K, int heads, int R, long long S, int B) {
  std::string name = fmt::format("[{}] qkv_linear+qk_norm_rope K={} heads={} R={} S={} B={}", cfg, K, heads, R, S, B);
  if (hc::device().arch() != "sm_90a") {
    std::printf("note: %s: not an sm_90a device, the fused form does not exist here (skipped)\n", name.c_str());
    return;
  }
  try {
    const int d = 128;
    const long long M = S * B, N = (long long)heads * d;
    auto W = randBf(size_t(3 * N * K), 1.0 / std::sqrt((double)K));
    auto x = randBf(size_t(M * K));
    auto wq = randBf(size_t(d)), wk = randBf(size_t(d));
    auto cs = randF(size_t(S * std::max(R, 1))), sn = randF(size_t(S * std::max(R, 1)));
    auto dW = up(W), dX = up(x), dWq = up(wq), dWk = up(wk), dCs = up(cs), dSn = up(sn);
    const double eps = 1e-5;
    const EmitOp fused = qkvNormRope("qkv+qk_norm_rope", K, heads, d, eps, R);
    // The two kernels it replaces.
    const plan::Kernel &gemm = kernel(op(OpKind::QkvLinear, "qkv",
                                         with(attrs({{"K", K}, {"N", N}}), DType::BF16, DType::BF16, DType::BF16),
                                         kchunks(1), 3));
    const plan::Kernel &norm = kernel(
        op(OpKind::QkNormRope, "qk",
           with(attrs({{"heads", heads}, {"head_dim", d}, {"eps", eps}, {"rotary_dim", R}}), DType::BF16, DType::BF16,
                DType::BF16),
           laneTree(), 2));
    auto downAll = [&](const std::vector<Buf> &outs, long long m) {
      std::vector<uint16_t> all;
      for (const Buf &o : outs) {
        auto v = down<uint16_t>(*o, size_t(m * N));
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;  // q, k, v, each [m, N]
    };
    auto runFused = [&](const plan::Kernel &kk, Buf xb, Buf cb, Buf sb, long long s, int b) {
      Launch l;
      l.in = {xb};
      if (R) l.in.insert(l.in.end(), {cb, sb});
      for (int o = 0; o < 3; ++o) l.out.push_back(outBuf(size_t(s * b * N * 2)));
      l.w = {dW, Buf{}, Buf{}, dWq, dWk};  // [Wq; Wk; Wv] as one matrix (span 3), then the norm weights
      l.e = rowsS(s, b);
      run(kk, l);
      return downAll(l.out, s * b);
    };
    auto runTwo = [&](Buf xb, Buf cb, Buf sb, long long s, int b) {
      Launch g;
      g.in = {xb};
      for (int o = 0; o < 3; ++o) g.out.push_back(outBuf(size_t(s * b * N * 2)));
      g.w = {dW};
      g.e = rowsS(s, b);
      run(gemm, g);
      Launch n;
      n.in = {g.out[0], g.out[1]};
      if (R) n.in.insert(n.in.end(), {cb, sb});
      n.out = {outBuf(size_t(s * b * N * 2)), outBuf(size_t(s * b * N * 2))};
      n.w = {dWq, dWk};
      n.e = rowsS(s, b);
      run(norm, n);
      return downAll({n.out[0], n.out[1], g.out[2]}, s * b);
    };
    auto diffText = [](size_t at) { return at == SIZE_MAX ? std::string() : fmt::format(" (first difference at {})", at); };
    const auto want = runTwo(dX, dCs, dSn, S, B);
    for (const auto &[label, opts] : hopperGemmVariants()) {
      const plan::Kernel &vk = kernel(fused, opts);
      // The staged variants must run the staged epilogue (st.shared.b32 into the staging area, 16-byte stores out).
      const bool staged = vk.source.find("#define G9_EPI_SMEM 1\n") != std::string::npos;
      if (opts.sm90Pingpong == 0 && staged != (opts.sm90EpiSmem >= 1))
        report(false, name + fmt::format(": fused ({}) {} the staged epilogue ({})", label,
                                         staged ? "runs" : "does not run", vk.id));
      size_t at = firstDiff(runFused(vk, dX, dCs, dSn, S, B), want);
      report(at == SIZE_MAX, name + fmt::format(": fused ({}) == qkv_linear then qk_norm_rope, q k v byte for byte{}",
                                                label, diffText(at)));
    }
    const plan::Kernel &fk = kernel(fused);
    const auto y1 = runFused(fk, dX, dCs, dSn, S, B);
    report(bytesEqual(y1, runFused(fk, dX, dCs, dSn, S, B)), name + ": two runs byte-equal");
    // Row 0 alone (one item of one row: the tables' row 0).
    {
      auto y0 = runFused(fk, dX, dCs, dSn, 1, 1);
      bool ok = true;
      for (int o = 0; o < 3; ++o) ok &= std::memcmp(&y0[size_t(o * N)], &y1[size_t(o * M * N)], size_t(N) * 2) == 0;
      report(ok, name + ": row 0 of an M-row run == a 1-row run");
    }
    // One item with its rows reversed (x and the rope tables move with their rows).
    {
      std::vector<uint16_t> xr(size_t(S * K));
      const long long Rw = std::max(R, 1);
      std::vector<float> cr(size_t(S * Rw)), sr(size_t(S * Rw));
      for (long long r = 0; r < S; ++r) {
        std::copy_n(&x[size_t((S - 1 - r) * K)], K, &xr[size_t(r * K)]);
        std::copy_n(&cs[size_t((S - 1 - r) * Rw)], Rw, &cr[size_t(r * Rw)]);
        std::copy_n(&sn[size_t((S - 1 - r) * Rw)], Rw, &sr[size_t(r * Rw)]);
      }
      auto yr = runFused(fk, up(xr), up(cr), up(sr), S, 1);
      bool ok = true;
      for (int o = 0; o < 3 && ok; ++o)
        for (long long r = 0; r < S && ok; ++r)
          ok = std::memcmp(&yr[size_t(o * S * N + r * N)], &y1[size_t(o * M * N + (S - 1 - r) * N)], size_t(N) * 2) == 0;
      report(ok, name + ": rows reversed -> outputs reversed, byte-equal");
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

void Kernels::checkElementwise(const std::string &cfg, int H, int F, long long M) {
  std::string name = fmt::format("[{}] elementwise H={} F={} M={}", cfg, H, F, M);
  try {
    // swiglu
    {
      auto x = randBf(size_t(M * 2 * F), 3.0);
      Launch l;
      l.in = {up(x)};
      l.out = {outBuf(size_t(M * F * 2))};
      l.e = rowsS(M);
      run(kernel(op(OpKind::Swiglu, "swiglu", with(attrs({{"F", F}, {"cols", F}}), DType::BF16, DType::BF16, DType::BF16))),
          l);
      auto y = down<uint16_t>(*l.out[0], size_t(M * F));
      std::vector<uint16_t> ref(size_t(M * F));
      for (long long r = 0; r < M; ++r)
        for (int c = 0; c < F; ++c) {
          float v = bf16ToFloat(x[size_t(r * 2 * F + c)]), g = bf16ToFloat(x[size_t(r * 2 * F + F + c)]);
          ref[size_t(r * F + c)] = floatToBf16(v * roundBf16(h3c::detmath::silu(g)));
        }
      report(bytesEqual(y, ref), name + ": swiglu bitwise");
    }
    // silu F32
    {
      auto x = randF(size_t(M * H), 4.0);
      Launch l;
      l.in = {up(x)};
      l.out = {outBuf(size_t(M * H * 4))};
      l.e = rowsS(M);
      plan::OpAttrs a = with(attrs({{"cols", H}}), DType::F32, DType::F32, DType::F32);
      a.dtype = DType::F32;
      run(kernel(op(OpKind::Silu, "silu", a)), l);
      auto y = down<float>(*l.out[0], size_t(M * H));
      std::vector<float> ref(x.size());
      for (size_t i = 0; i < x.size(); ++i) ref[i] = h3c::detmath::silu(x[i]);
      report(bytesEqual(y, ref), name + ": silu (F32) bitwise");
    }
    // residual, gate_residual
    {
      auto x = randBf(size_t(M * H)), yv = randBf(size_t(M * H));
      auto table = randBf(size_t(2 * 3 * 6 * H));
      std::vector<long long> ts(M), tags(M);
      for (long long r = 0; r < M; ++r) {
        ts[r] = r & 1;
        tags[r] = r % 3;
      }
      Launch l;
      l.in = {up(x), up(yv)};
      l.out = {outBuf(size_t(M * H * 2))};
      l.e = rowsS(M);
      run(kernel(op(OpKind::Residual, "residual", with(attrs({{"cols", H}}), DType::BF16, DType::BF16, DType::BF16))), l);
      auto z = down<uint16_t>(*l.out[0], size_t(M * H));
      std::vector<uint16_t> ref(z.size());
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = floatToBf16(bf16ToFloat(x[i]) + bf16ToFloat(yv[i]));
      report(bytesEqual(z, ref), name + ": residual bitwise");
      Launch g;
      g.in = {l.in[0], l.in[1], up(table), up(ts), up(tags)};
      g.out = {outBuf(size_t(M * H * 2))};
      g.e = rowsS(M);
      run(kernel(op(OpKind::GateResidual, "gr",
                    with(attrs({{"H", H}, {"chunk", 5}, {"num_chunks", 6}}), DType::BF16, DType::BF16, DType::BF16))),
          g);
      auto zg = down<uint16_t>(*g.out[0], size_t(M * H));
      for (long long r = 0; r < M; ++r)
        for (int c = 0; c < H; ++c) {
          long long trow = ts[size_t(r)] * 3 + tags[size_t(r)];
          float gate = bf16ToFloat(table[size_t(trow * 6 * H + 5 * H + c)]);
          ref[size_t(r * H + c)] =
              floatToBf16(std::fmaf(gate, bf16ToFloat(yv[size_t(r * H + c)]), bf16ToFloat(x[size_t(r * H + c)])));
        }
      report(bytesEqual(zg, ref), name + ": gate_residual bitwise");
    }
    // pack / unpack (B = 2)
    {
      const long long nt = 5, nv = 7, na = 3, S = nt + nv + na, B = 2;
      auto text = randBf(size_t(B * nt * H));
      auto video = randF(size_t(B * nv * H)), audio = randF(size_t(B * na * H));
      Launch l;
      l.in = {up(text), up(video), up(audio)};
      l.out = {outBuf(size_t(B * S * H * 2))};
      l.e = {B, S, nt, nv, na, 1};
      run(kernel(op(OpKind::Pack, "pack", with(attrs({{"H", H}}), DType::BF16, DType::BF16, DType::BF16))), l);
      auto x = down<uint16_t>(*l.out[0], size_t(B * S * H));
      std::vector<uint16_t> ref(x.size());
      for (long long b = 0; b < B; ++b)
        for (long long s = 0; s < S; ++s)
          for (int c = 0; c < H; ++c)
            ref[size_t((b * S + s) * H + c)] =
                s < nt ? text[size_t((b * nt + s) * H + c)]
                       : s < nt + nv ? floatToBf16(video[size_t((b * nv + s - nt) * H + c)])
                                     : floatToBf16(audio[size_t((b * na + s - nt - nv) * H + c)]);
      report(bytesEqual(x, ref), name + ": pack bitwise");
      const int vc = 96, ac = 32;
      auto yv = randF(size_t(B * S * vc)), ya = randF(size_t(B * S * ac));
      Launch u;
      u.in = {up(yv), up(ya)};
      u.out = {outBuf(size_t(B * nv * vc * 4)), outBuf(size_t(B * na * ac * 4))};
      u.e = {B, S, nt, nv, na, 1};
      run(kernel(op(OpKind::Unpack, "unpack",
                    with(attrs({{"video_cols", vc}, {"audio_cols", ac}}), DType::F32, DType::F32, DType::F32))),
          u);
      auto sv = down<float>(*u.out[0], size_t(B * nv * vc)), sa = down<float>(*u.out[1], size_t(B * na * ac));
      bool ok = true;
      for (long long b = 0; b < B; ++b) {
        ok &= std::memcmp(&sv[size_t(b * nv * vc)], &yv[size_t((b * S + nt) * vc)], size_t(nv * vc * 4)) == 0;
        ok &= std::memcmp(&sa[size_t(b * na * ac)], &ya[size_t((b * S + nt + nv) * ac)], size_t(na * ac * 4)) == 0;
      }
      report(ok, name + ": unpack bitwise");
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// F32 linear (sequential fma order) and the fused time embedding: bitwise.
void Kernels::checkF32(const std::string &cfg, long long K, long long N, long long M, long long freq, long long hid,
                       long long E, long long T) {
  std::string name =
      fmt::format("[{}] f32 linear K={} N={} M={}; time_embed {}->{}->{} T={}", cfg, K, N, M, freq, hid, E, T);
  try {
    auto x = randF(size_t(M * K)), w = randF(size_t(N * K), 0.05), b = randF(size_t(N), 0.1);
    Launch l;
    l.in = {up(x)};
    l.out = {outBuf(size_t(M * N * 4))};
    l.w = {up(w)};
    l.b = {up(b)};
    l.e = rowsS(M);
    run(kernel(op(OpKind::Linear, "proj_out", with(attrs({{"K", K}, {"N", N}}), DType::F32, DType::F32, DType::F32),
                  kchunks(1), 1, 1)),
        l);
    auto y = down<float>(*l.out[0], size_t(M * N));
    std::vector<float> ref(y.size());
    for (long long r = 0; r < M; ++r)
      for (long long n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (long long k = 0; k < K; ++k) acc = std::fmaf(x[size_t(r * K + k)], w[size_t(n * K + k)], acc);
        ref[size_t(r * N + n)] = acc + b[size_t(n)];
      }
    report(bytesEqual(y, ref), name + ": f32 linear bitwise (fma order)");
    // f32_vec=1 (k-major, swizzled k-tiles read 16 bytes at a time): the same chains, the same bytes.
    hk::EmitOptions vec;
    vec.f32Vec = 1;
    Launch lv = l;
    lv.out = {outBuf(size_t(M * N * 4))};
    run(kernel(op(OpKind::Linear, "proj_out", with(attrs({{"K", K}, {"N", N}}), DType::F32, DType::F32, DType::F32),
                  kchunks(1), 1, 1),
               vec),
        lv);
    report(bytesEqual(down<float>(*lv.out[0], size_t(M * N)), ref), name + ": f32 linear f32_vec=1 bitwise (fma order)");

    auto s = randF(size_t(T * freq)), w1 = randF(size_t(hid * freq), 0.05), b1 = randF(size_t(hid), 0.1);
    auto w2 = randF(size_t(E * hid), 0.02), b2 = randF(size_t(E), 0.1);
    Launch t;
    t.in = {up(s)};
    t.out = {outBuf(size_t(T * E * 4))};
    t.w = {up(w1), up(w2)};
    t.b = {up(b1), up(b2)};
    t.e = {1, 0, 0, 0, 0, T};
    run(kernel(op(OpKind::TimeEmbed, "time_embed",
                  with(attrs({{"K", freq}, {"N", E}, {"freq_dim", freq}, {"hidden", hid}, {"out_dim", E}}), DType::F32,
                       DType::F32, DType::F32),
                  kchunks(1), 2, 2)),
        t);
    auto te = down<float>(*t.out[0], size_t(T * E));
    std::vector<float> tr(te.size()), h(static_cast<size_t>(hid));
    for (long long r = 0; r < T; ++r) {
      for (long long j = 0; j < hid; ++j) {
        float acc = 0.0f;
        for (long long k = 0; k < freq; ++k) acc = std::fmaf(s[size_t(r * freq + k)], w1[size_t(j * freq + k)], acc);
        h[size_t(j)] = h3c::detmath::silu(acc + b1[size_t(j)]);
      }
      for (long long n = 0; n < E; ++n) {
        float acc = 0.0f;
        for (long long k = 0; k < hid; ++k) acc = std::fmaf(h[size_t(k)], w2[size_t(n * hid + k)], acc);
        tr[size_t(r * E + n)] = acc + b2[size_t(n)];
      }
    }
    report(bytesEqual(te, tr), name + ": time_embed bitwise");
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// ---- unmerged LoRA (docs/contract.md section 13) ----

// Each row of `a` ([rows, colsA]) zero-padded to `padA` columns, then the same row of `b` ([rows, colsB]): the host's
// concatenation [a | 0 | b] of an operand and its LoRA part, the operand of the contract's one chain.
std::vector<uint16_t> concatRows(const std::vector<uint16_t> &a, long long colsA, long long padA,
                                 const std::vector<uint16_t> &b, long long colsB, long long rows) {
  const long long w = padA + colsB;
  std::vector<uint16_t> c(size_t(rows * w), 0);  // bf16 +0
  for (long long r = 0; r < rows; ++r) {
    std::copy_n(&a[size_t(r * colsA)], colsA, &c[size_t(r * w)]);
    std::copy_n(&b[size_t(r * colsB)], colsB, &c[size_t(r * w + padA)]);
  }
  return c;
}

// A linear / qkv_linear with an unmerged LoRA path (lora_k = L) on random x [M, K], t [M, L], W and up: the kernel of
// this device (sm_90a: the Hopper kernel, each schedule of hopperGemmVariants, ping-pong falling back to the
// cooperative kernel, and the mma.sync kernel) equals byte for byte the same op WITHOUT LoRA run on the host's
// concatenations [x | 0 | t] and [W | 0 | up] with K' = ceil64(K) + L (the contract's chain computed by the plain
// kernel, an expectation independent of the LoRA code); with a zero up slot it equals the base op over x and W; and
// the LoRA term changes the output (so the first check can fail). epi: none | residual | gate_residual | swiglu
// (linear), none | qk_norm_rope (qkv_linear, N = heads * 128, rope over 32 columns; sm_90a only).
// fc1 + swiglu keeping its x (`swiglu_x`, h3-fuse training=true: the linear's own [v | g] as the second output y1),
// with a LoRA path of L columns (0: none): in every kernel family that serves it (the plan's defaults for linear +
// swiglu: epilogue warps in 2-CTA clusters; the register and consumer-staged epilogues; the ping-pong kernel;
// mma.sync), y is byte-equal to the same kernel family's fused swiglu without x, and x to the plain linear's output
// (the epilogue none, the same family) over the same operands.
void Kernels::checkSwigluKeepsX(const std::string &cfg, long long K, long long N, long long M, long long L) {
  const std::string name = fmt::format("[{}] linear + swiglu keeping its x K={} N={} M={} lora_k={}", cfg, K, N, M, L);
  try {
    auto opOf = [&](plan::Epilogue e, bool keepX) {
      plan::OpAttrs a = with(attrs({{"K", K}, {"N", N}}), DType::BF16, DType::BF16, DType::BF16, e);
      a.loraK = L;
      a.swigluX = keepX ? 1 : 0;
      EmitOp o = op(OpKind::Linear, "transformer_blocks.0.ff.net.0.proj", a, kchunks(1), L > 0 ? 2 : 1);
      if (keepX) {
        o.vals.out.at(1).cols = N;
        o.vals.out.at(1).dtype = DType::BF16;
      }
      return o;
    };
    const double wstd = 1.0 / std::sqrt(double(K + L));
    auto dX = up(randBf(size_t(M * K))), dT = up(randBf(size_t(M * std::max(L, 1LL))));
    auto dW = up(randBf(size_t(N * K), wstd)), dU = up(randBf(size_t(N * std::max(L, 1LL)), wstd));
    // One launch; outputs [y (cols0 columns)(, x (N columns))].
    auto runWith = [&](const plan::Kernel &kk, long long cols0, bool keepX) {
      Launch l;
      l.in = {dX};
      if (L > 0) l.in.push_back(dT);
      l.out.push_back(outBuf(size_t(M * cols0 * 2)));
      if (keepX) l.out.push_back(outBuf(size_t(M * N * 2)));
      l.w = {dW};
      if (L > 0) l.w.push_back(dU);
      l.e = rowsS(M);
      run(kk, l);
      std::vector<std::vector<uint16_t>> r = {down<uint16_t>(*l.out[0], size_t(M * cols0))};
      if (keepX) r.push_back(down<uint16_t>(*l.out[1], size_t(M * N)));
      return r;
    };
    hk::EmitOptions mma = hk::EmitOptions::planDefaults();
    mma.wgmma = false;
    std::vector<std::pair<std::string, hk::EmitOptions>> families = {{"mma.sync", mma}};
    if (hc::device().arch() == "sm_90a") {
      const auto sm90 = h3c::testops::sm90LinearFamilies();
      families.insert(families.end(), sm90.begin(), sm90.end());
    } else {
      families.push_back({"plan defaults", hk::EmitOptions::planDefaults()});
    }
    for (const auto &[family, opts] : families) {
      const hk::EmitOptions o = opts.forOp(std::string("linear+swiglu"));
      const plan::Kernel &kx = kernel(opOf(plan::Epilogue::Swiglu, true), o);
      const auto got = runWith(kx, N / 2, true);
      const auto y = runWith(kernel(opOf(plan::Epilogue::Swiglu, false), o), N / 2, false)[0];
      const auto x = runWith(kernel(opOf(plan::Epilogue::None, false), opts.forOp(std::string("linear"))), N, false)[0];
      const size_t dy = firstDiff(got[0], y), dx = firstDiff(got[1], x);
      report(dy == SIZE_MAX && dx == SIZE_MAX,
             fmt::format("{} [{}: {}]: y == the fused swiglu's{}, x == the plain linear's{}", name, family, kx.id,
                         dy == SIZE_MAX ? "" : fmt::format(" (first difference at {})", dy),
                         dx == SIZE_MAX ? "" : fmt::format(" (first difference at {})", dx)));
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

void Kernels::checkLoraLinear(const std::string &cfg, const std::string &kind, long long K, long long N,
                              const std::string &epi, bool bias, long long M, long long L) {
  const std::string name = fmt::format("[{}] LoRA {} K={} N={} epilogue={}{} M={} lora_k={}", cfg, kind, K, N, epi,
                                       bias ? " +bias" : "", M, L);
  const bool qkv = kind == "qkv_linear", qknr = epi == "qk_norm_rope";
  if (qknr && hc::device().arch() != "sm_90a") {
    std::printf("note: %s: not an sm_90a device, the fused form does not exist here (skipped)\n", name.c_str());
    return;
  }
  try {
    const plan::Epilogue ek = epi == "residual"        ? plan::Epilogue::Residual
                              : epi == "gate_residual" ? plan::Epilogue::GateResidual
                              : epi == "swiglu"        ? plan::Epilogue::Swiglu
                              : qknr                   ? plan::Epilogue::QkNormRope
                                                       : plan::Epilogue::None;
    const long long d = 128, heads = qknr ? N / d : 0, R = qknr ? 32 : 0;
    // The op over k columns of x, with (loraK = L) or without (0) the LoRA path.
    auto opOf = [&](long long k, long long loraK) {
      plan::OpAttrs a = qknr ? qkvNormRope(kind, k, heads, d, 1e-5, R).op.attrs
                             : with(attrs({{"K", k}, {"N", N}}), DType::BF16, DType::BF16, DType::BF16, ek);
      if (ek == plan::Epilogue::GateResidual) {
        a.chunk = 2;
        a.numChunks = 6;
      }
      a.loraK = loraK;
      const int nw = (qknr ? 5 : qkv ? 3 : 1) + (loraK > 0 ? 1 : 0);
      return op(qkv ? OpKind::QkvLinear : OpKind::Linear, kind, a, kchunks(1), nw, bias ? 1 : 0);
    };
    const long long Wrows = qkv ? 3 * N : N, outCols = ek == plan::Epilogue::Swiglu ? N / 2 : N, nout = qkv ? 3 : 1;
    const long long Kp = (K + 63) / 64 * 64, Kc = Kp + L, T = 3;
    const double wstd = 1.0 / std::sqrt(double(K + L));
    const auto x = randBf(size_t(M * K)), t = randBf(size_t(M * L));
    const auto W = randBf(size_t(Wrows * K), wstd), U = randBf(size_t(Wrows * L), wstd);
    const auto bvec = randBf(size_t(Wrows), 0.1), res = randBf(size_t(M * outCols));
    const auto table = randBf(size_t(T * 3 * 6 * outCols), 0.5);
    std::vector<long long> ts(static_cast<size_t>(M)), tags(static_cast<size_t>(M));
    for (long long r = 0; r < M; ++r) {
      ts[size_t(r)] = (r * 7) % T;
      tags[size_t(r)] = (r * 5) % 3;
    }
    const auto wq = randBf(size_t(d)), wk = randBf(size_t(d));
    const auto cs = randF(size_t(M * std::max(R, 1LL))), sn = randF(size_t(M * std::max(R, 1LL)));
    auto dX = up(x), dT = up(t), dW = up(W), dU = up(U), dU0 = up(std::vector<uint16_t>(U.size(), 0));
    auto dXc = up(concatRows(x, K, Kp, t, L, M)), dWc = up(concatRows(W, K, Kp, U, L, Wrows));
    auto dB = up(bvec), dRes = up(res), dTab = up(table), dTs = up(ts), dTags = up(tags);
    auto dWq = up(wq), dWk = up(wk), dCs = up(cs), dSn = up(sn);
    // One launch: x (and its LoRA input tb, when given) against wb (and the up slot ub, when given); q, k, v follow
    // each other in the result.
    auto runWith = [&](const plan::Kernel &kk, Buf xb, Buf tb, Buf wb, Buf ub) {
      Launch l;
      l.in = {xb};
      if (ek == plan::Epilogue::Residual) l.in.push_back(dRes);
      if (ek == plan::Epilogue::GateResidual) l.in.insert(l.in.end(), {dRes, dTab, dTs, dTags});
      if (qknr && R > 0) l.in.insert(l.in.end(), {dCs, dSn});
      if (tb) l.in.push_back(tb);  // lora_t: the last input
      for (long long o = 0; o < nout; ++o) l.out.push_back(outBuf(size_t(M * outCols * 2)));
      l.w = {wb};
      if (qkv) l.w.resize(3);  // [Wq; Wk; Wv] as one matrix (span 3)
      if (qknr) l.w.insert(l.w.end(), {dWq, dWk});
      if (ub) l.w.push_back(ub);  // the up slot: the last weight
      if (bias) l.b = {dB};
      l.e = rowsS(M);
      run(kk, l);
      std::vector<uint16_t> all;
      for (long long o = 0; o < nout; ++o) {
        auto v = down<uint16_t>(*l.out[size_t(o)], size_t(M * outCols));
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    auto diffText = [](size_t at) { return at == SIZE_MAX ? std::string() : fmt::format(" (first difference at {})", at); };
    const auto want = runWith(kernel(opOf(Kc, 0)), dXc, nullptr, dWc, nullptr);
    const auto base = runWith(kernel(opOf(K, 0)), dX, nullptr, dW, nullptr);
    report(firstDiff(want, base) != SIZE_MAX, name + ": the LoRA term changes the output");
    const EmitOp lop = opOf(K, L);
    const plan::Kernel &lk = kernel(lop);
    report(lk.id.find(fmt::format("_lora{}", L)) != std::string::npos, name + ": " + lk.id + " has the LoRA path");
    const auto got = runWith(lk, dX, dT, dW, dU);
    size_t at = firstDiff(got, want);
    report(at == SIZE_MAX, name + fmt::format(": {} == the plain kernel over [x | t] and [W | up] (K' = {}) byte for "
                                              "byte{}", lk.id, Kc, diffText(at)));
    report(bytesEqual(got, runWith(lk, dX, dT, dW, dU)), name + ": two runs byte-equal");
    at = firstDiff(runWith(lk, dX, dT, dW, dU0), base);
    report(at == SIZE_MAX, name + ": a zero up slot == the op without LoRA byte for byte" + diffText(at));
    if (lk.source.find("wgmma.mma_async") == std::string::npos) return;
    // sm_90a: the mma.sync kernel (qk_norm_rope has none) and the Hopper schedule variants.
    if (!qknr) {
      hk::EmitOptions mma;
      mma.wgmma = false;
      const plan::Kernel &mk = kernel(lop, mma);
      const auto ym = runWith(mk, dX, dT, dW, dU);
      at = firstDiff(got, ym);
      report(at == SIZE_MAX, name + fmt::format(": Hopper {} == mma.sync {} byte for byte{}", lk.id, mk.id, diffText(at)));
      at = firstDiff(ym, want);
      report(at == SIZE_MAX, name + ": mma.sync LoRA kernel == the plain kernel over [x | t] and [W | up]" + diffText(at));
    }
    for (const auto &[label, opts] : hopperGemmVariants(ek != plan::Epilogue::Swiglu && !qknr)) {
      const plan::Kernel &vk = kernel(lop, opts);
      if (vk.id.find("_sm90pp_") != std::string::npos || vk.source.find("#define G9_HALF_TAIL 1") != std::string::npos)
        report(false, name + fmt::format(": {}: {} is the ping-pong kernel or runs half tiles (neither has a LoRA "
                                         "path)", label, vk.id));
      at = firstDiff(runWith(vk, dX, dT, dW, dU), want);
      report(at == SIZE_MAX, name + fmt::format(": Hopper {} ({}) == the plain kernel over [x | t] and [W | up] byte "
                                                "for byte{}", label, vk.id, diffText(at)));
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

// lora_down (t = bf16(x down^T), an ordinary bf16 GEMM without bias or epilogue) on random x [M, K] and down [L, K]:
// against an fp64 GEMM of all outputs (bound 1e-2, as checkLinear), byte-equal to a linear op of the same shape, and
// on sm_90a the Hopper kernel byte-equal to the mma.sync kernel.
void Kernels::checkLoraDown(const std::string &cfg, long long K, long long L, long long M) {
  const std::string name = fmt::format("[{}] lora_down K={} lora_k={} M={}", cfg, K, L, M);
  try {
    const plan::OpAttrs a = with(attrs({{"K", K}, {"N", L}}), DType::BF16, DType::BF16, DType::BF16);
    const auto x = randBf(size_t(M * K)), A = randBf(size_t(L * K), 1.0 / std::sqrt(double(K)));
    auto dX = up(x), dA = up(A);
    auto runWith = [&](const plan::Kernel &kk) {
      Launch l;
      l.in = {dX};
      l.out = {outBuf(size_t(M * L * 2))};
      l.w = {dA};
      l.e = rowsS(M);
      run(kk, l);
      return down<uint16_t>(*l.out[0], size_t(M * L));
    };
    auto diffText = [](size_t at) { return at == SIZE_MAX ? std::string() : fmt::format(" (first difference at {})", at); };
    const EmitOp dop = op(OpKind::LoraDown, "lora_down", a, kchunks(1), 1);
    const plan::Kernel &k = kernel(dop);
    const auto y = runWith(k);
    report(bytesEqual(y, runWith(k)), name + ": two runs byte-equal");
    size_t at = firstDiff(y, runWith(kernel(op(OpKind::Linear, "linear", a, kchunks(1), 1))));
    report(at == SIZE_MAX, name + ": " + k.id + " == the linear op of its shape byte for byte" + diffText(at));
    if (k.source.find("wgmma.mma_async") != std::string::npos) {
      hk::EmitOptions mma;
      mma.wgmma = false;
      at = firstDiff(y, runWith(kernel(dop, mma)));
      report(at == SIZE_MAX, name + ": Hopper kernel == mma.sync kernel byte for byte" + diffText(at));
      if (L <= 64) {
        // The Hopper kernel's 64-wide tile (lora_down:gemm_bn=64, 6 stages) == the plan's kernel byte for byte.
        hk::EmitOptions n = hk::EmitOptions::planDefaults();
        n.set("lora_down:gemm_bn", 64, "test");
        n.set("lora_down:gemm_stages", 6, "test");
        const plan::Kernel &kn = kernel(dop, n);
        at = firstDiff(y, runWith(kn));
        report(at == SIZE_MAX, name + ": " + kn.id + " (gemm_bn=64) == " + k.id + " byte for byte" + diffText(at));
      }
    }
    std::vector<float> got(y.size());
    std::vector<double> ref(y.size());
    for (long long r = 0; r < M; ++r)
      for (long long c = 0; c < L; ++c) {
        double s = 0;
        for (long long kk = 0; kk < K; ++kk)
          s += double(bf16ToFloat(x[size_t(r * K + kk)])) * bf16ToFloat(A[size_t(c * K + kk)]);
        ref[size_t(r * L + c)] = s;
        got[size_t(r * L + c)] = bf16ToFloat(y[size_t(r * L + c)]);
      }
    ErrStat e = compare(got, ref);
    report(e.frob < 1e-2, fmt::format("{}: vs fp64 rel_frob={:.3e} max_abs={:.3e} ref_rms={:.3e} (bound 1e-2)", name,
                                      e.frob, e.maxAbs, e.refRms));
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

} // namespace

// tiny config: hidden 24, heads 2 x 16, ffn 32, rotary 12, time 8 -> 24 -> 16.
TEST_F(Kernels, TinyLinears) {
  checkLinear("tiny", "qkv_linear", 24, 32, "none", 37, 8);
  checkLinear("tiny", "linear", 32, 24, "residual", 37, 8);
  checkLinear("tiny", "linear", 32, 24, "gate_residual", 37, 8);
  checkLinear("tiny", "linear", 24, 64, "swiglu", 37, 8);
  checkLinear("tiny", "linear", 8, 24, "none", 11, 4);
  // A tensor-parallel rank's to_out (tp = 2): the full K, 12 of the 24 output columns.
  checkLinear("tiny tp2", "linear", 32, 12, "gate_residual", 37, 8);
}
TEST_F(Kernels, TinyAttention) {
  checkAttention("tiny", 2, 16, 37, 2);
  checkAttention("tiny", 2, 16, 130, 1);
  checkRankAttention("tiny sp4", 2, 16, 130, 2, 97, 33);
  checkRankAttention("tiny sp8", 2, 16, 21, 1, 0, 2);
}
TEST_F(Kernels, TinyBitwiseKernels) {
  checkNorms("tiny", 24, 37);
  checkQkNormRope("tiny", 2, 16, 12, 37, 2);
  checkQkNormRope("tiny", 2, 16, 0, 37, 1);
  checkElementwise("tiny", 24, 32, 37);
  checkF32("tiny", 6, 24, 37, 8, 24, 16);
}
// full config shapes (H 5376, inner 7168, ffn 14336, heads 56 x 128, rotary 96, time 256 -> 5376 -> 2688).
TEST_F(Kernels, FullLinears) {
  long long M = quick() ? 130 : 333;
  checkLinear("full", "qkv_linear", 5376, 7168, "none", M, 3);
  checkLinear("full", "linear", 7168, 5376, "gate_residual", M, 3);
  checkLinear("full", "linear", 5376, 28672, "swiglu", M, 2);
  checkLinear("full", "linear", 14336, 5376, "gate_residual", M, 3);
  checkLinear("full", "linear", 14336, 5376, "gate_residual", quick() ? M : 2077, 3);  // 17 row tiles
  // 7 row tiles x 21 column tiles: whole tiles, then a last partial wave of half tiles (147 tiles on 132 CTAs, or 84
  // pairs on 66 clusters), where M = 130 and 333 run as half tiles only.
  checkLinear("full", "linear", 7168, 5376, "gate_residual", 893, 3);
  checkLinear("full", "linear", 7168, 5376, "residual", M, 2);
  checkLinear("full", "linear", 5120, 5376, "none", M, 2);
  checkLinear("full", "linear", 14336, 5376, "gate_residual", quick() ? M : 2077, 3);  // 17 row tiles
  // One tensor-parallel rank of 8 (section 5.2): 7 heads of q/k/v, fc1's value and gate halves of 1792 columns,
  // to_out / fc2 with the full K and 672 output columns (the AdaLN table's rank shape: TEST_F AdalnTable).
  checkLinear("full tp8", "qkv_linear", 5376, 896, "none", M, 3);
  checkLinear("full tp8", "linear", 5376, 3584, "swiglu", M, 2);
  checkLinear("full tp8", "linear", 7168, 672, "gate_residual", M, 3);
  checkLinear("full tp8", "linear", 14336, 672, "gate_residual", M, 3);
}
// The AdaLN tables (transformer blocks: 18 chunks of H; norm_out: 2) at the timestep counts of a request: T = 1-3,
// and T = 11 (two 8-row passes of the sm_90a streaming kernel, the second partial), for the full, small and tiny
// configs and a tensor-parallel rank of 8 (18 chunks of 672). On sm_90a each is also compared byte for byte with the
// mma.sync kernel, and so is every tuning variant of the streaming kernel.
TEST_F(Kernels, AdalnTable) {
  for (long long T : {1, 2, 3}) checkLinear("full", "adaln_table", 2688, 18 * 5376, "none", T, int(T));
  checkLinear("full", "adaln_table", 2688, 18 * 5376, "none", 11, 3);
  checkLinear("full norm_out", "adaln_table", 2688, 2 * 5376, "none", 2, 2);
  checkLinear("full tp8", "adaln_table", 2688, 18 * 672, "none", 2, 2);
  for (long long T : {1, 3, 11}) {
    checkLinear("small", "adaln_table", 96, 18 * 192, "none", T, int(std::min(T, 3LL)));
    checkLinear("small norm_out", "adaln_table", 96, 2 * 192, "none", T, int(std::min(T, 3LL)));
    checkLinear("tiny", "adaln_table", 16, 18 * 24, "none", T, int(std::min(T, 3LL)));
    checkLinear("tiny norm_out", "adaln_table", 16, 2 * 24, "none", T, int(std::min(T, 3LL)));
  }
}
TEST_F(Kernels, FullAttention) {
  long long L = quick() ? 200 : 777;
  checkAttention("full", 56, 128, L, 2);
  // A rank of sp = 8 (the last one, uneven) and a tp = 8 rank's 7 heads.
  checkRankAttention("full sp8", 56, 128, L, 2, 7 * L / 8, L - 7 * L / 8);
  checkRankAttention("full sp2 tp8", 7, 128, L, 1, 0, L / 2);
  // head_dim 128 (the Hopper kernel on sm_90a) at the awkward lengths: fewer keys than one block (the refiner's
  // text rows), a tail of 8 keys after whole blocks, a partial last query tile, and a rank's rows over all keys.
  checkAttention("small", 2, 128, 5, 3);
  checkAttention("small", 2, 128, 200, 2);
  checkAttention("small", 2, 128, 8349, 1);
  checkRankAttention("small sp4", 2, 128, 200, 2, 150, 50);
  checkRankAttention("small sp8", 2, 128, 8349, 1, 7305, 1044);
  // Several tiles per CTA of the persistent kernel at S = 8,349 (4 heads x 2 items x 66 q tiles = 528 tiles on at most
  // 132 CTAs: each CTA's walk crosses (head, item) boundaries), and a rank's rows of two items.
  checkAttention("persistent walk", 4, 128, 8349, 2);
  checkRankAttention("persistent walk sp4", 4, 128, 8349, 2, 6262, 2087);
}
// attention_grad at head_dim 128 (docs/contract.md section 14): on sm_90a the Hopper form (grad_attention_sm90.cuh,
// wgmma) against the mma.sync form (grad_attention_mma.cuh, which the backward checks compare with the CPU) byte for
// byte: dq, dk, dv, at both kv_block values, lengths shorter than a tile, ending inside a 64-row sub-tile's first 32
// rows (200, 8,349: the Hopper form chains two all-zero chunks more there) and after them (70, 1,000), batches (item 0
// == its own run), o in F32 once; two runs byte-equal; and at L = 200 every gradient against an fp64 evaluation of the
// formulas (bf(dO), bf(P) and bf(dS) make the bf16 error, bound 2e-2).
TEST_F(Kernels, AttentionGrad) {
  const auto &dev = hc::device();
  if (dev.arch() != "sm_90a") GTEST_SKIP() << "the Hopper form exists on sm_90a only";
  struct Case {
    int heads;
    long long L;
    int B;
    int64_t kv;
    bool oBf;
  };
  std::vector<Case> cases = {{2, 5, 3, 128, true},   {2, 70, 2, 128, true},  {2, 200, 2, 128, true},
                             {3, 1000, 2, 64, true}, {2, 200, 1, 64, false}, {2, 8349, 1, 128, true}};
  if (quick()) cases.pop_back();
  for (const Case &c : cases) {
    const int d = 128;
    const long long ld = (long long)c.heads * d, n = c.B * c.L * ld;
    const std::string name = fmt::format("attention_grad h{} L{} B{} kv{}{}", c.heads, c.L, c.B, c.kv,
                                         c.oBf ? "" : " o F32");
    const auto q = randBf(size_t(n)), k = randBf(size_t(n)), v = randBf(size_t(n)), ob = randBf(size_t(n));
    const auto of = randF(size_t(n)), dout = randF(size_t(n));
    auto dq = up(q), dk = up(k), dv = up(v), dobuf = c.oBf ? up(ob) : up(of), ddo = up(dout);
    const EmitOp op = attentionGrad(c.heads, d, c.kv, c.oBf);
    auto go = [&](const plan::Kernel &kern, int b) {
      Launch la;
      la.in = {dq, dk, dv, dobuf, ddo};
      for (int i = 0; i < 3; ++i) la.out.push_back(outBuf(size_t(b * c.L * ld * 4)));
      la.e = rowsS(c.L, b);
      run(kern, la);
      std::vector<std::vector<float>> r;
      for (int i = 0; i < 3; ++i) r.push_back(down<float>(*la.out[size_t(i)], size_t(b * c.L * ld)));
      return r;
    };
    hk::EmitOptions mmaOpt;
    mmaOpt.wgmma = false;
    const plan::Kernel &hk9 = kernel(op), &km = kernel(op, mmaOpt);
    report(hk9.id.find("attention_grad_mma_sm90_") == 0 && km.id.find("attention_grad_mma_h") == 0,
           name + ": the Hopper form (" + hk9.id + ") beside the mma.sync form (" + km.id + ")");
    const auto h1 = go(hk9, c.B), h2 = go(hk9, c.B), m = go(km, c.B);
    const char *outs[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
      const size_t at = firstDiff(h1[size_t(i)], m[size_t(i)]);
      report(at == SIZE_MAX, name + ": " + outs[i] + " Hopper == mma.sync byte for byte" +
                                 (at == SIZE_MAX ? "" : fmt::format(" (first difference at {}: {} vs {})", at,
                                                                    h1[size_t(i)][at], m[size_t(i)][at])));
      report(bytesEqual(h1[size_t(i)], h2[size_t(i)]), name + ": " + outs[i] + " two runs byte-equal");
    }
    // The load ring at 3 stages (attn_grad_stages=3) and dq's counts by the compute warpgroups (attn_grad_sync=0):
    // the same chains and adds in the same order, the same bytes.
    hk::EmitOptions st3, counts, rows, rows1;
    st3.sm90AttnGradStages = 3;
    counts.sm90AttnGradSync = 0;
    rows.sm90AttnGradRows = 0;
    rows1.sm90AttnGradRows = 1;
    for (const auto &[what, opt] : {std::pair<const char *, hk::EmitOptions>{"the 3-stage Hopper form", st3},
                                    {"the Hopper form with the compute warpgroups' counts", counts},
                                    {"the Hopper form with dq's adds in the accumulator layout", rows},
                                    {"the Hopper form with dq's adds a row a v2 reduction", rows1}}) {
      const auto h = go(kernel(op, opt), c.B);
      bool same = true;
      for (int i = 0; i < 3; ++i) same = same && bytesEqual(h[size_t(i)], m[size_t(i)]);
      report(same, name + ": dq, dk, dv of " + what + " == mma.sync byte for byte");
    }
    if (c.B > 1) {
      const auto one = go(hk9, 1);
      for (int i = 0; i < 3; ++i)
        report(bytesEqual(one[size_t(i)], h1[size_t(i)], size_t(c.L * ld)),
               name + ": " + outs[i] + " item 0 of the batch == its own run");
    }
    // h3-fuse-grad's rounding of dv folded in (the grad_round that alone read it): dv stored as bf16 == the host's
    // round-to-nearest-even of the F32 dv, dq and dk unchanged, in the Hopper and mma.sync forms.
    {
      EmitOp opb = op;
      opb.vals.out[2].dtype = h3c::DType::BF16;
      std::vector<uint16_t> want(h1[2].size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = floatToBf16(h1[2][i]);
      for (const auto &[label, opt] : {std::pair<const char *, hk::EmitOptions>{"Hopper", hk::EmitOptions{}},
                                       {"mma.sync", mmaOpt}}) {
        const plan::Kernel &kb = kernel(opb, opt);
        Launch la;
        la.in = {dq, dk, dv, dobuf, ddo};
        la.out = {outBuf(size_t(n * 4)), outBuf(size_t(n * 4)), outBuf(size_t(n * 2))};
        la.e = rowsS(c.L, c.B);
        run(kb, la);
        const bool same = bytesEqual(down<float>(*la.out[0], size_t(n)), h1[0]) &&
                          bytesEqual(down<float>(*la.out[1], size_t(n)), h1[1]) &&
                          bytesEqual(down<uint16_t>(*la.out[2], size_t(n)), want);
        report(kb.id.find("_dvbf") != std::string::npos && same,
               name + ": " + label + " (" + kb.id + ") with dv stored bf16 == bf(dv), dq and dk the same bytes");
      }
    }
    // h3-fuse-grad's saved row statistics: the forward attention (Hopper and mma.sync forms) writes lse = mc +
    // lg2(l) of its walk, both forms the same bytes; the backward reading it instead of rerunning the walk gives
    // the walk's dq, dk, dv byte for byte (the forward's L is the backward's).
    {
      const EmitOp fwd = attentionForward(c.heads, d, c.kv, true), bwdL = attentionGrad(c.heads, d, c.kv, c.oBf, true);
      auto lseOf = [&](const plan::Kernel &kern) {
        Launch la;
        la.in = {dq, dk, dv};
        la.out = {outBuf(size_t(n * 2)), outBuf(size_t(c.B * c.L * c.heads * 4))};
        la.e = rowsS(c.L, c.B);
        run(kern, la);
        return std::make_pair(down<float>(*la.out[1], size_t(c.B * c.L * c.heads)), la.out[1]);
      };
      const plan::Kernel &f9 = kernel(fwd), &fm = kernel(fwd, mmaOpt);
      const auto [l9, lseBuf] = lseOf(f9);
      const auto lm = lseOf(fm).first;
      auto goL = [&](const plan::Kernel &kern) {
        Launch la;
        la.in = {dq, dk, dv, dobuf, ddo, lseBuf};
        for (int i = 0; i < 3; ++i) la.out.push_back(outBuf(size_t(c.B * c.L * ld * 4)));
        la.e = rowsS(c.L, c.B);
        run(kern, la);
        std::vector<std::vector<float>> r;
        for (int i = 0; i < 3; ++i) r.push_back(down<float>(*la.out[size_t(i)], size_t(c.B * c.L * ld)));
        return r;
      };
      const auto hl = goL(kernel(bwdL)), ml = goL(kernel(bwdL, mmaOpt)), hl4 = goL(kernel(bwdL, st3));
      bool same = bytesEqual(l9, lm);
      for (int i = 0; i < 3; ++i)
        same = same && bytesEqual(hl[size_t(i)], h1[size_t(i)]) && bytesEqual(ml[size_t(i)], h1[size_t(i)]) &&
               bytesEqual(hl4[size_t(i)], h1[size_t(i)]);
      report(same, name + ": the forward's lse (" + f9.id + " == " + fm.id + ") read by both backward forms (and the 3-stage Hopper form) == the walk's dq, dk, dv byte for byte");
    }
    if (c.L != 200 || c.B != 2) continue;
    // fp64: L_i by the softmax of s = q k^T / sqrt(d), P, D_i = dO_i . o_i, dP = dO v^T, dS = P (dP - D), dv = P^T dO,
    // dk = dS^T q / sqrt(d), dq = dS k / sqrt(d); item 0.
    const double sc = 1.0 / std::sqrt(double(d));
    std::vector<double> ref[3];
    for (auto &r : ref) r.assign(size_t(c.L * ld), 0.0);
    auto at = [&](long long row, int h, int ch) { return size_t(row * ld + h * d + ch); };
    for (int h = 0; h < c.heads; ++h) {
      std::vector<double> P(size_t(c.L * c.L)), dS(size_t(c.L * c.L));
      for (long long i = 0; i < c.L; ++i) {
        double mx = -1e300, sum = 0, D = 0;
        std::vector<double> s(size_t(c.L));
        for (long long j = 0; j < c.L; ++j) {
          double a = 0;
          for (int ch = 0; ch < d; ++ch) a += double(bf16ToFloat(q[at(i, h, ch)])) * bf16ToFloat(k[at(j, h, ch)]);
          s[size_t(j)] = a * sc;
          mx = std::max(mx, s[size_t(j)]);
        }
        for (auto &e : s) sum += (e = std::exp(e - mx));
        for (int ch = 0; ch < d; ++ch)
          D += double(dout[at(i, h, ch)]) * (c.oBf ? bf16ToFloat(ob[at(i, h, ch)]) : of[at(i, h, ch)]);
        for (long long j = 0; j < c.L; ++j) {
          double dp = 0;
          for (int ch = 0; ch < d; ++ch) dp += double(dout[at(i, h, ch)]) * bf16ToFloat(v[at(j, h, ch)]);
          P[size_t(i * c.L + j)] = s[size_t(j)] / sum;
          dS[size_t(i * c.L + j)] = P[size_t(i * c.L + j)] * (dp - D);
        }
      }
      for (long long i = 0; i < c.L; ++i)
        for (long long j = 0; j < c.L; ++j)
          for (int ch = 0; ch < d; ++ch) {
            const double p = P[size_t(i * c.L + j)], ds = dS[size_t(i * c.L + j)];
            ref[0][at(i, h, ch)] += sc * ds * bf16ToFloat(k[at(j, h, ch)]);
            ref[1][at(j, h, ch)] += sc * ds * bf16ToFloat(q[at(i, h, ch)]);
            ref[2][at(j, h, ch)] += p * dout[at(i, h, ch)];
          }
    }
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> got(h1[size_t(i)].begin(), h1[size_t(i)].begin() + c.L * ld);
      const ErrStat e = compare(got, ref[i]);
      report(e.frob < 2e-2, name + fmt::format(": {} against fp64: rel_frob {:.3e} (bound 2e-2)", outs[i], e.frob));
    }
  }
}

// dq's fold adds flush subnormals (docs/contract.md section 14): the Hopper form's middle tiles add by
// red.global.add.v2.f32 (PTX ISA: it flushes subnormal inputs and results on global memory), the mma.sync form by
// add.rn.ftz.f32 in registers. Keys 0-127 and 384-399 are zero, keys 128-383 2^-128 in every channel, so the parts
// of tiles 1 and 2 (middle tiles: reductions) are tiny, many subnormal, and two subnormal parts can add up to a
// normal number: a reduction that kept subnormals would leave such sums where the mma.sync form has 0, so both
// Hopper forms must equal the mma.sync form byte for byte here too.
TEST_F(Kernels, AttentionGradDqFoldFlushesSubnormals) {
  const auto &dev = hc::device();
  if (dev.arch() != "sm_90a") GTEST_SKIP() << "the Hopper form exists on sm_90a only";
  const int heads = 2, d = 128;
  const long long L = 400, ld = (long long)heads * d, n = L * ld;
  const auto q = randBf(size_t(n)), v = randBf(size_t(n)), ob = randBf(size_t(n));
  const auto dout = randF(size_t(n));
  std::vector<uint16_t> k(size_t(n), 0);
  for (long long r = 128; r < 384; ++r)
    for (long long c = 0; c < ld; ++c) k[size_t(r * ld + c)] = 0x0020;  // bf16 2^-128 (subnormal)
  auto bq = up(q), bk = up(k), bv = up(v), bo = up(ob), bd = up(dout);
  const EmitOp op = attentionGrad(heads, d, 128, true);
  auto go = [&](const plan::Kernel &kern) {
    Launch la;
    la.in = {bq, bk, bv, bo, bd};
    for (int i = 0; i < 3; ++i) la.out.push_back(outBuf(size_t(n * 4)));
    la.e = rowsS(L, 1);
    run(kern, la);
    std::vector<std::vector<float>> r;
    for (int i = 0; i < 3; ++i) r.push_back(down<float>(*la.out[size_t(i)], size_t(n)));
    return r;
  };
  hk::EmitOptions mmaOpt, counts, rows, rows1;
  mmaOpt.wgmma = false;
  counts.sm90AttnGradSync = 0;
  rows.sm90AttnGradRows = 0;
  rows1.sm90AttnGradRows = 1;
  const auto m = go(kernel(op, mmaOpt));
  size_t nonzeroDq = 0, nonzeroDv = 0;
  for (float x : m[0]) nonzeroDq += x != 0.0f;
  for (float x : m[2]) nonzeroDv += x != 0.0f;
  report(nonzeroDv > 0, fmt::format("attention_grad dq fold, subnormal parts: mma.sync's dv not all zero ({} nonzero; "
                                    "dq {} nonzero of {})", nonzeroDv, nonzeroDq, m[0].size()));
  for (const auto &[what, opt] : {std::pair<const char *, hk::EmitOptions>{"sync warpgroup", {}},
                                  {"compute counts", counts}, {"accumulator-layout adds", rows},
                                  {"v2 row adds", rows1}}) {
    const auto h = go(kernel(op, opt));
    const size_t at = firstDiff(h[0], m[0]);
    report(at == SIZE_MAX && bytesEqual(h[1], m[1]) && bytesEqual(h[2], m[2]),
           fmt::format("attention_grad dq fold, subnormal parts: Hopper ({}) == mma.sync byte for byte{}", what,
                       at == SIZE_MAX ? "" : fmt::format(" (dq differs first at {}: {} vs {})", at, h[0][at], m[0][at])));
  }
}

// linear_grad_x of the bf16 linears (docs/contract.md section 14): on sm_90a the Hopper form (grad_linear_sm90.cuh,
// TMA + wgmma) against the mma.sync form (grad_linear_mma.cuh) byte for byte, at every dX shape of the full config
// ({N, K}: context_embedder, to_q / to_k / to_v, to_out, fc1, fc2, and x's LoRA part at rank 64, one k-block of N) at
// the bench's M = 8,349 (H3C_GPU_QUICK: 333), and at awkward row counts (5, 70, 130, 925) on the three tile widths
// (192: K = 5,376; 256; 128) and an N that is no multiple of 64 (the last k-block's 2 chunks), each also in 2-CTA
// clusters (grad_x_cluster=2: odd row-tile counts leave a pair's second tile empty); two runs byte-equal;
// the rows of g permuted give the same rows of dx permuted (a row's dx depends on its own row only); and one shape
// against fp64: the exact dX of the unrounded g, within 2^-8 of sum |g W| per element (bf(g) rounds each g by at most
// 2^-9 of it; the F32 chain adds far less), and relative Frobenius error reported. g has exponents spread over 2^+-6
// (SpreadRng).
TEST_F(Kernels, LinearGradX) {
  if (hc::device().arch() != "sm_90a") GTEST_SKIP() << "the Hopper form exists on sm_90a only";
  struct Case {
    const char *what;
    int64_t N, K;
    long long M;
  };
  const long long big = quick() ? 333 : 8349;
  std::vector<Case> cases = {{"context_embedder", 5376, 5120, big}, {"to_q/k/v", 7168, 5376, big},
                             {"to_out", 5376, 7168, big},           {"fc1", 28672, 5376, big},
                             {"fc2", 5376, 14336, big},             {"lora down (x's part)", 64, 5376, big},
                             {"lora down (x's part)", 64, 7168, big}, {"lora down (x's part)", 64, 14336, big},
                             {"lora up (dt)", 28672, 64, big},        {"lora up (dt)", 7168, 64, big},
                             {"lora up (dt)", 5376, 64, big}};
  for (long long M : {5LL, 70LL, 130LL, 925LL}) {
    cases.push_back({"lora up (dt)", 7168, 64, M});
    cases.push_back({"to_q/k/v", 7168, 5376, M});
    cases.push_back({"to_out", 5376, 7168, M});
    cases.push_back({"N 200 K 128", 200, 128, M});
    cases.push_back({"small context_embedder", 192, 160, M});
  }
  SpreadRng rng{0x9E3779B97F4A7C15ull};
  auto next = [&] { return rng.next(); };
  auto value = [&] { return rng.value(); };
  hk::EmitOptions mmaOpt, pairOpt;
  mmaOpt.sm90GradX = 0;
  pairOpt.sm90GradXCluster = 2;  // `--tune grad_x_cluster=2`: pairs of row tiles sharing W through TMA multicast
  // LoRA's dt (K = 64) on the Hopper dX's 64-wide tile (`--tune grad_x_narrow=1`; without it the mma.sync form)
  pairOpt.sm90GradXNarrow = 1;
  bool fp64Done = false;
  for (const Case &c : cases) {
    const std::string name = fmt::format("linear_grad_x {} N {} K {} M {}", c.what, c.N, c.K, c.M);
    std::vector<float> g(size_t(c.M * c.N));
    for (float &e : g) e = value();
    std::vector<uint16_t> w(size_t(c.N * c.K));
    for (uint16_t &e : w) e = floatToBf16(value() / 64.0f);
    const EmitOp op = linearGradX(c.N, c.K);
    hk::EmitOptions hopperOpt;
    hopperOpt.sm90GradXNarrow = 1;
    const plan::Kernel &k9 = kernel(op, hopperOpt), &km = kernel(op, mmaOpt);
    report(k9.id.find("linear_grad_x_mma_sm90_") == 0 && km.id.find("linear_grad_x_mma_n") == 0,
           name + ": the Hopper form (" + k9.id + ") beside the mma.sync form (" + km.id + ")");
    Buf wb = up(w);
    auto go = [&](const plan::Kernel &kern, const std::vector<float> &gv) {
      Launch la;
      la.in = {up(gv)};
      la.w = {wb};
      la.out = {outBuf(size_t(c.M * c.K * 4))};
      la.e = rowsS(c.M);
      run(kern, la);
      return down<float>(*la.out[0], size_t(c.M * c.K));
    };
    const auto h1 = go(k9, g), h2 = go(k9, g), m = go(km, g);
    const size_t at = firstDiff(h1, m);
    report(at == SIZE_MAX, name + ": Hopper == mma.sync byte for byte" +
                               (at == SIZE_MAX ? "" : fmt::format(" (first difference at row {} column {}: {} vs {})",
                                                                  at / size_t(c.K), at % size_t(c.K), h1[at], m[at])));
    report(bytesEqual(h1, h2), name + ": two runs byte-equal");
    // h3-fuse-grad's residual epilogue: dx = residual + dX, grad_add's F32 sum of the residual and this dX (the host's
    // float addition), byte for byte, in both forms.
    std::vector<float> res(size_t(c.M * c.K)), sum(res.size());
    for (float &e : res) e = value();
    for (size_t i = 0; i < res.size(); ++i) sum[i] = res[i] + h1[i];
    const EmitOp opr = linearGradX(c.N, c.K, true);
    auto goRes = [&](const plan::Kernel &kern) {
      Launch la;
      la.in = {up(g), up(res)};
      la.w = {wb};
      la.out = {outBuf(size_t(c.M * c.K * 4))};
      la.e = rowsS(c.M);
      run(kern, la);
      return down<float>(*la.out[0], size_t(c.M * c.K));
    };
    const plan::Kernel &kr9 = kernel(opr, hopperOpt), &krm = kernel(opr, mmaOpt);
    report(bytesEqual(goRes(kr9), sum) && bytesEqual(goRes(krm), sum),
           name + ": residual epilogue (" + kr9.id + ", " + krm.id + ") == residual + dX byte for byte");
    // g as a grad_round's bf16 bf(g) (rounded here on the host), read by the GEMM alone, with and without the
    // residual: byte-equal to the rounding forms' dX (and residual + dX).
    std::vector<uint16_t> gb(g.size());
    for (size_t i = 0; i < g.size(); ++i) gb[i] = floatToBf16(g[i]);
    auto goBf = [&](const plan::Kernel &kern, bool withRes) {
      Launch la;
      la.in = {up(gb)};
      if (withRes) la.in.push_back(up(res));
      la.w = {wb};
      la.out = {outBuf(size_t(c.M * c.K * 4))};
      la.e = rowsS(c.M);
      run(kern, la);
      return down<float>(*la.out[0], size_t(c.M * c.K));
    };
    const EmitOp opg = linearGradX(c.N, c.K, false, true), opgr = linearGradX(c.N, c.K, true, true);
    const plan::Kernel &kg9 = kernel(opg, hopperOpt), &kgm = kernel(opg, mmaOpt), &kgr9 = kernel(opgr, hopperOpt);
    report(kg9.phases.empty() && bytesEqual(goBf(kg9, false), h1) && bytesEqual(goBf(kgm, false), h1) &&
               bytesEqual(goBf(kgr9, true), sum),
           name + ": bf16 g (" + kg9.id + ", " + kgm.id + ", " + kgr9.id + ") == the F32 g's dX byte for byte");
    const plan::Kernel &kp = kernel(op, pairOpt);
    report(kp.phases.at(0).launch.cluster[0] == 2 && bytesEqual(go(kp, g), m),
           name + ": the 2-CTA cluster form (" + kp.id + ") == mma.sync byte for byte");
    // h3-fuse-grad's rounding folded into the dX (LoRA's dt and the like: the grad_round that alone read it): dx stored
    // as bf16 == the host's round-to-nearest-even of the F32 dX, in the Hopper, 2-CTA and mma.sync forms.
    {
      EmitOp ob = opg;
      ob.vals.out[0].dtype = h3c::DType::BF16;
      std::vector<uint16_t> want(h1.size());
      for (size_t i = 0; i < h1.size(); ++i) want[i] = floatToBf16(h1[i]);
      Buf gbb = up(gb);
      for (const auto &[label, opts] : {std::pair<const char *, hk::EmitOptions>{"Hopper", hopperOpt},
                                        {"2-CTA", pairOpt}, {"mma.sync", mmaOpt}}) {
        const plan::Kernel &kb = kernel(ob, opts);
        Launch la;
        la.in = {gbb};
        la.w = {wb};
        la.out = {outBuf(size_t(c.M * c.K * 2))};
        la.e = rowsS(c.M);
        run(kb, la);
        report(kb.id.find("_bfout") != std::string::npos &&
                   bytesEqual(down<uint16_t>(*la.out[0], size_t(c.M * c.K)), want),
               name + ": " + label + " (" + kb.id + ") with dx stored bf16 == bf(dX) byte for byte");
      }
    }
    // h3-fuse-grad's LoRA down path taken in (lora_k 64, a dX of more than 64 columns over N > 64): the fused op over
    // bf(g), bf(dt) [M, 64] and the down slot [64, K], with and without a residual, in the Hopper form, the 2-CTA
    // form and the mma.sync form, == the two ops it replaces run one after the other (the path's dX with the
    // residual, then this dX with the path's result as its residual) byte for byte; and the path changes dx.
    if (c.N > 64 && c.K > 64) {
      std::vector<uint16_t> t(size_t(c.M * 64)), dn(size_t(64 * c.K));
      for (uint16_t &e : t) e = floatToBf16(value());
      for (uint16_t &e : dn) e = floatToBf16(value() / 8.0f);
      Buf tb = up(t), db = up(dn), gbb = up(gb), resb = up(res);
      auto launch = [&](const plan::Kernel &kern, std::vector<Buf> in, std::vector<Buf> wts) {
        Launch la;
        la.in = std::move(in);
        la.w = std::move(wts);
        la.out = {outBuf(size_t(c.M * c.K * 4))};
        la.e = rowsS(c.M);
        run(kern, la);
        return down<float>(*la.out[0], size_t(c.M * c.K));
      };
      for (bool withRes : {false, true}) {
        const std::string what = name + (withRes ? ": LoRA down path with a residual" : ": LoRA down path");
        const EmitOp path = linearGradX(64, c.K, withRes, true);
        std::vector<Buf> pathIn = {tb};
        if (withRes) pathIn.push_back(resb);
        const auto part = launch(kernel(path, hopperOpt), pathIn, {db});
        const auto want = launch(kgr9, {gbb, up(part)}, {wb});
        report(!bytesEqual(want, withRes ? sum : h1), what + ": the path changes dx");
        const EmitOp fused = linearGradX(c.N, c.K, withRes, true, 64);
        std::vector<Buf> in = {gbb};
        if (withRes) in.push_back(resb);
        in.push_back(tb);
        for (const auto &[label, opts] : {std::pair<const char *, hk::EmitOptions>{"Hopper", hopperOpt},
                                          {"2-CTA", pairOpt}, {"mma.sync", mmaOpt}}) {
          const plan::Kernel &kf = kernel(fused, opts);
          const auto got = launch(kf, in, {wb, db});
          const size_t fat = firstDiff(got, want);
          report(kf.id.find("_lora64_") != std::string::npos && fat == SIZE_MAX,
                 what + fmt::format(": {} ({}) == the path's op then this op byte for byte{}", label, kf.id,
                                    fat == SIZE_MAX ? std::string()
                                                    : fmt::format(" (first difference at row {} column {}: {} vs {})",
                                                                  fat / size_t(c.K), fat % size_t(c.K), got[fat],
                                                                  want[fat])));
        }
      }
    }
    // h3-fuse-grad's swiglu_grad taken in (epilogue swiglu, a dX of more than 64 columns): the fused op over bf(g) and
    // x = [v | g] bf16 [M, 2K], dx F32 and bf16, with and without a LoRA down path taken in too, in the Hopper, 2-CTA
    // and mma.sync forms, == this dX (the path's dX its residual) then swiglu_grad's own kernel, byte for byte.
    if (c.N > 64 && c.K > 64 && c.K % 8 == 0) {
      std::vector<uint16_t> x(size_t(c.M * 2 * c.K)), t(size_t(c.M * 64)), dn(size_t(64 * c.K));
      for (uint16_t &e : x) e = floatToBf16(2.0f * value());
      for (uint16_t &e : t) e = floatToBf16(value());
      for (uint16_t &e : dn) e = floatToBf16(value() / 8.0f);
      Buf xb = up(x), tb = up(t), db = up(dn), gbb = up(gb);
      auto launchBytes = [&](const plan::Kernel &kern, std::vector<Buf> in, std::vector<Buf> wts, size_t bytes) {
        Launch la;
        la.in = std::move(in);
        la.w = std::move(wts);
        la.out = {outBuf(bytes)};
        la.e = rowsS(c.M);
        run(kern, la);
        return down<uint8_t>(*la.out[0], bytes);
      };
      const size_t dxBytes = size_t(c.M * c.K * 4);
      for (int64_t lora : {int64_t(0), int64_t(64)}) {
        // The dX swiglu_grad reads: this op's over bf(g), with the path's dX as its residual where the path is in.
        std::vector<uint8_t> dxv = launchBytes(kg9, {gbb}, {wb}, dxBytes);
        if (lora) {
          const auto part = launchBytes(kernel(linearGradX(64, c.K, false, true), hopperOpt), {tb}, {db}, dxBytes);
          dxv = launchBytes(kgr9, {gbb, up(part)}, {wb}, dxBytes);
        }
        for (int sw : {1, 2}) {
          const size_t outBytes = size_t(c.M * 2 * c.K) * (sw == 2 ? 2 : 4);
          const auto want = launchBytes(kernel(swigluGrad(c.K, sw == 2), hopperOpt), {up(dxv), xb}, {}, outBytes);
          const std::string what = name + fmt::format(": swiglu_grad taken in{}{}", lora ? " after the LoRA path" : "",
                                                      sw == 2 ? ", bf16 dx" : "");
          const EmitOp fused = linearGradX(c.N, c.K, false, true, lora, sw);
          std::vector<Buf> in = {gbb};
          if (lora) in.push_back(tb);
          in.push_back(xb);
          std::vector<Buf> wts = {wb};
          if (lora) wts.push_back(db);
          for (const auto &[label, opts] : {std::pair<const char *, hk::EmitOptions>{"Hopper", hopperOpt},
                                            {"2-CTA", pairOpt}, {"mma.sync", mmaOpt}}) {
            const plan::Kernel &kf = kernel(fused, opts);
            const auto got = launchBytes(kf, in, wts, outBytes);
            const size_t fat = firstDiff(got, want);
            report(kf.id.find("_swiglu") != std::string::npos && fat == SIZE_MAX,
                   what + fmt::format(": {} ({}) == this dX then swiglu_grad byte for byte{}", label, kf.id,
                                      fat == SIZE_MAX ? std::string() : fmt::format(" (first difference at byte {})", fat)));
          }
        }
      }
    }
    // Rows permuted: row i of the permuted g is row perm[i]; dx's row i must be the first run's row perm[i].
    std::vector<long long> perm(size_t(c.M));
    for (long long i = 0; i < c.M; ++i) perm[size_t(i)] = i;
    for (long long i = c.M - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(next() % uint64_t(i + 1))]);
    std::vector<float> gp(g.size());
    for (long long i = 0; i < c.M; ++i)
      std::memcpy(&gp[size_t(i * c.N)], &g[size_t(perm[size_t(i)] * c.N)], size_t(c.N) * 4);
    const auto hp = go(k9, gp);
    bool same = true;
    for (long long i = 0; i < c.M && same; ++i)
      same = std::memcmp(&hp[size_t(i * c.K)], &h1[size_t(perm[size_t(i)] * c.K)], size_t(c.K) * 4) == 0;
    report(same, name + ": rows of g permuted -> the same rows of dx permuted, byte-equal");
    if (fp64Done || c.N != 5376 || c.K != 7168 || c.M != 130) continue;
    fp64Done = true;
    // fp64 of the unrounded g on every 8th row.
    std::vector<double> ref, got;
    double worst = 0;
    for (long long r = 0; r < c.M; r += 8) {
      std::vector<double> acc(size_t(c.K), 0.0), mag(size_t(c.K), 0.0);
      for (int64_t n = 0; n < c.N; ++n) {
        const double gv = g[size_t(r * c.N + n)];
        const uint16_t *wr = &w[size_t(n * c.K)];
        for (int64_t kk = 0; kk < c.K; ++kk) {
          const double p = gv * double(bf16ToFloat(wr[kk]));
          acc[size_t(kk)] += p;
          mag[size_t(kk)] += std::fabs(p);
        }
      }
      for (int64_t kk = 0; kk < c.K; ++kk) {
        const double e = std::fabs(double(h1[size_t(r * c.K + kk)]) - acc[size_t(kk)]) / std::ldexp(mag[size_t(kk)], -8);
        worst = std::isnan(e) ? 1e30 : std::max(worst, e);
        ref.push_back(acc[size_t(kk)]);
        got.push_back(double(h1[size_t(r * c.K + kk)]));
      }
    }
    const ErrStat e = compare(std::vector<float>(got.begin(), got.end()), ref);
    report(worst <= 1.0, name + fmt::format(": against fp64 of the unrounded g: max error {:.3f} of the bound "
                                            "2^-8 sum |g W|, rel_frob {:.3e}", worst, e.frob));
  }
  report(fp64Done, "linear_grad_x: the fp64 comparison ran");
}

// linear_grad_w of the bf16 linears (docs/contract.md section 14: per item, per unit of 128 rows a partial chained
// over 16-row chunks, the item's sum the left fold of its partials, the batch's the left fold of the items' sums): on
// sm_90a the Hopper form (grad_linear_w_sm90.cuh) against the mma.sync form byte for byte (dw, and dbias where the
// bias trains), at every dW shape of the full config ({N, K}: context_embedder, to_q / to_k / to_v, to_out, fc1, fc2,
// LoRA's up and down slots at rank 64) at M = 8,349 (H3C_GPU_QUICK: 333) rows of one item, and at two items of awkward
// lengths whose last unit ends in each of the four 32-row quarters (5, 70, 100, 130, 173, 925 rows; the shapes with N
// or K at most 64, grad_w_narrow's tiles, with two and three items); two runs
// byte-equal; a batch's dw the F32 left fold of its items' own runs, byte for byte; and one shape
// against fp64 of the unrounded g (within 2^-8 of sum |g x| per element, as LinearGradX).
TEST_F(Kernels, LinearGradW) {
  if (hc::device().arch() != "sm_90a") GTEST_SKIP() << "the Hopper form exists on sm_90a only";
  struct Case {
    const char *what;
    int64_t N, K;
    long long itemRows;
    int B;
    bool bias;
  };
  const long long big = quick() ? 333 : 8349;
  std::vector<Case> cases = {{"context_embedder", 5376, 5120, big, 1, true}, {"to_q/k/v", 7168, 5376, big, 1, false},
                             {"to_out", 5376, 7168, big, 1, true},           {"fc1", 28672, 5376, big, 1, false},
                             {"fc2", 5376, 14336, big, 1, true},             {"lora up", 7168, 64, big, 1, false},
                             {"lora up", 28672, 64, big, 1, false},          {"lora down", 64, 5376, big, 1, false},
                             {"lora down", 64, 14336, big, 1, false}};
  for (long long L : {5LL, 70LL, 100LL, 130LL, 173LL, 925LL}) {
    cases.push_back({"to_out", 5376, 7168, L, 2, true});
    cases.push_back({"N 200 K 136", 200, 136, L, 2, false});
    // N or K at most 64 (grad_w_narrow's 64 x 64 tiles, the consumers taking the units in turn): an item's units
    // odd and even in number, and items that start on either consumer.
    cases.push_back({"lora down", 64, 5376, L, 3, false});
    cases.push_back({"lora up", 5376, 64, L, 2, false});
    cases.push_back({"N 40 K 136", 40, 136, L, 3, false});
  }
  SpreadRng rng{0x5851F42D4C957F2Dull};
  auto value = [&] { return rng.value(); };
  hk::EmitOptions mmaOpt;
  mmaOpt.sm90GradW = 0;
  bool fp64Done = false;
  for (const Case &c : cases) {
    const long long M = c.itemRows * c.B;
    const std::string name = fmt::format("linear_grad_w {} N {} K {} rows {} x {}{}", c.what, c.N, c.K, c.B, c.itemRows,
                                         c.bias ? " + dbias" : "");
    std::vector<float> g(size_t(M * c.N));
    for (float &e : g) e = value();
    std::vector<uint16_t> x(size_t(M * c.K));
    for (uint16_t &e : x) e = floatToBf16(value());
    const EmitOp op = linearGradW(c.N, c.K, c.bias);
    // N or K at most 64: the 64 x 64 tiles (grad_w_narrow=1) here, the 128 x 128 tile compared below.
    hk::EmitOptions narrowOpt;
    narrowOpt.sm90GradWNarrow = 1;
    const bool narrow = c.N <= 64 || c.K <= 64;
    const plan::Kernel &k9 = kernel(op, narrowOpt), &km = kernel(op, mmaOpt);
    report(k9.id.find("linear_grad_w_mma_sm90_") == 0 && km.id.find("linear_grad_w_mma_n") == 0,
           name + ": the Hopper form (" + k9.id + ") beside the mma.sync form (" + km.id + ")");
    const size_t nw = size_t(c.N * c.K);
    // dw (and dbias) of items [b0, b0 + items) of g and x.
    auto go = [&](const plan::Kernel &kern, int b0, int items) {
      const size_t r0 = size_t(b0) * size_t(c.itemRows), rn = size_t(items) * size_t(c.itemRows);
      Launch la;
      la.in = {up(std::vector<float>(g.begin() + long(r0 * size_t(c.N)), g.begin() + long((r0 + rn) * size_t(c.N)))),
               up(std::vector<uint16_t>(x.begin() + long(r0 * size_t(c.K)), x.begin() + long((r0 + rn) * size_t(c.K))))};
      la.out = {outBuf(nw * 4)};
      if (c.bias) la.out.push_back(outBuf(size_t(c.N) * 4));
      la.e = rowsS(c.itemRows, items);
      run(kern, la);
      std::vector<float> r = down<float>(*la.out[0], nw);
      if (c.bias) {
        const auto db = down<float>(*la.out[1], size_t(c.N));
        r.insert(r.end(), db.begin(), db.end());
      }
      return r;
    };
    const auto h1 = go(k9, 0, c.B), h2 = go(k9, 0, c.B), m = go(km, 0, c.B);
    const size_t at = firstDiff(h1, m);
    report(at == SIZE_MAX, name + ": Hopper == mma.sync byte for byte" +
                               (at == SIZE_MAX ? "" : fmt::format(" (first difference at {}{}: {} vs {})", at,
                                                                  at >= nw ? " (dbias)" : "", h1[at], m[at])));
    report(bytesEqual(h1, h2), name + ": two runs byte-equal");
    if (narrow) {
      hk::EmitOptions wideOpt;
      wideOpt.sm90GradWNarrow = 0;
      const plan::Kernel &kw = kernel(op, wideOpt);
      report(kw.id != k9.id && bytesEqual(go(kw, 0, c.B), m),
             name + ": the 128 x 128 tile (" + kw.id + ") == mma.sync byte for byte");
    }
    if (!c.bias) {
      // h3-fuse-grad: g as a grad_round's bf16 bf(g) (rounded here on the host), read by the GEMM alone: dw
      // byte-equal to the rounding forms', Hopper and mma.sync.
      const EmitOp opg = linearGradW(c.N, c.K, false, true);
      const plan::Kernel &kg9 = kernel(opg, narrowOpt), &kgm = kernel(opg, mmaOpt);
      std::vector<uint16_t> gb(g.size());
      for (size_t i = 0; i < g.size(); ++i) gb[i] = floatToBf16(g[i]);
      auto goBf = [&](const plan::Kernel &kern) {
        Launch la;
        la.in = {up(gb), up(x)};
        la.out = {outBuf(nw * 4)};
        la.e = rowsS(c.itemRows, c.B);
        run(kern, la);
        return down<float>(*la.out[0], nw);
      };
      report(kg9.phases.empty() && bytesEqual(goBf(kg9), h1) && bytesEqual(goBf(kgm), h1),
             name + ": bf16 g (" + kg9.id + ", " + kgm.id + ") == the F32 g's dw byte for byte");
    }
    if (c.B > 1) {  // the batch's fold: ((item 0's own sum + item 1's) + item 2's) ..., element by element (F32)
      std::vector<float> fold = go(k9, 0, 1);
      for (int b = 1; b < c.B; ++b) {
        const auto ib = go(k9, b, 1);
        for (size_t i = 0; i < nw; ++i) fold[i] = fold[i] + ib[i];
      }
      bool same = true;
      for (size_t i = 0; i < nw && same; ++i) same = std::memcmp(&fold[i], &h1[i], 4) == 0;
      report(same, name + ": dw of the batch == the left fold of the items' own dw, byte for byte");
    }
    if (fp64Done || c.N != 5376 || c.K != 7168 || c.itemRows != 173) continue;
    fp64Done = true;
    // fp64 of the unrounded g over both items' rows, every 64th weight row n.
    double worst = 0;
    std::vector<double> ref;
    std::vector<float> got;
    for (int64_t n = 0; n < c.N; n += 64)
      for (int64_t k = 0; k < c.K; ++k) {
        double acc = 0, mag = 0;
        for (long long r = 0; r < M; ++r) {
          const double p = double(g[size_t(r * c.N + n)]) * double(bf16ToFloat(x[size_t(r * c.K + k)]));
          acc += p;
          mag += std::fabs(p);
        }
        const float v = h1[size_t(n * c.K + k)];
        const double e = std::fabs(double(v) - acc) / std::ldexp(mag, -8);
        worst = std::isnan(e) ? 1e30 : std::max(worst, e);
        ref.push_back(acc);
        got.push_back(v);
      }
    const ErrStat e = compare(got, ref);
    report(worst <= 1.0, name + fmt::format(": against fp64 of the unrounded g: max error {:.3f} of the bound "
                                            "2^-8 sum |g x|, rel_frob {:.3e}", worst, e.frob));
  }
  report(fp64Done, "linear_grad_w: the fp64 comparison ran");
}

// The Hopper fusion qkv_linear + qk_norm_rope (sm_90a), every variant of hopperGemmVariants (register and staged
// epilogues, 2-CTA clusters, ping-pong): full shape (56 heads, rotary 96) at the forward's S = 8,349 and at 70 rows,
// the refiner's norm-only form, the small config (2 heads: N = 256, one tile per tensor), and 3 heads (N = 384: the
// 256-wide tiles 1 and 3 straddle q and k, k and v), with rope and without; row counts that are not multiples of 128
// (8,349, 333, 140, 70, 74, 37, 5) and one that is (256).
TEST_F(Kernels, QkvNormRopeEpilogue) {
  checkQkvNormRope("full", 5376, 56, 96, quick() ? 333 : 8349, 1);
  checkQkvNormRope("full", 5376, 56, 96, 70, 2);
  checkQkvNormRope("full refiner", 5376, 56, 0, 70, 1);
  checkQkvNormRope("small", 192, 2, 96, 37, 2);
  checkQkvNormRope("small refiner", 192, 2, 0, 5, 1);
  checkQkvNormRope("3 heads", 192, 3, 96, 37, 2);
  checkQkvNormRope("3 heads", 192, 3, 32, 128, 2);
  checkQkvNormRope("3 heads refiner", 192, 3, 0, 333, 1);
}
// Unmerged LoRA (docs/contract.md section 13): every epilogue kind of linear and qkv_linear with the LoRA path, at
// M = 1, 37 and 300 (partial row tiles; 300: three of them), x widths that are whole k-blocks and one that is not
// (200: the zero-padded last block before t's), LoRA widths of one to three k-blocks, N of one and of several column
// tiles; then the full config's shapes (rank 64: qkv's three groups). checkLoraLinear says what each compares.
TEST_F(Kernels, LoraLinear) {
  for (long long M : {1LL, 37LL, 300LL}) {
    checkLoraLinear("small", "qkv_linear", 192, 256, "none", false, M, 192);
    checkLoraLinear("small", "qkv_linear", 192, 256, "qk_norm_rope", false, M, 192);
    checkLoraLinear("small", "linear", 256, 192, "gate_residual", false, M, 64);
    checkLoraLinear("small", "linear", 192, 1024, "swiglu", false, M, 64);
    checkLoraLinear("small refiner", "linear", 256, 192, "residual", true, M, 128);
    checkLoraLinear("odd K", "linear", 200, 320, "none", true, M, 64);
    checkLoraLinear("odd K", "linear", 200, 640, "gate_residual", true, M, 128);
    checkLoraLinear("tiny", "linear", 24, 64, "swiglu", false, M, 64);
    checkLoraDown("small", 192, 192, M);
    checkLoraDown("odd K", 200, 64, M);
  }
  if (quick()) return;
  checkLoraLinear("full", "qkv_linear", 5376, 7168, "qk_norm_rope", false, 333, 192);
  checkLoraLinear("full", "linear", 7168, 5376, "gate_residual", false, 333, 64);
  checkLoraLinear("full", "linear", 5376, 28672, "swiglu", false, 333, 64);
  checkLoraDown("full", 5376, 192, 333);
}
// The training forward's fc1 keeping the swiglu's x (h3-fuse training=true): every kernel family, with and without
// the LoRA path, at rows that leave a partial tile and at the full config's fc1.
TEST_F(Kernels, SwigluKeepsItsX) {
  for (long long M : {1LL, 37LL, 300LL}) {
    checkSwigluKeepsX("small", 192, 1024, M, 0);
    checkSwigluKeepsX("small", 192, 1024, M, 64);
  }
  checkSwigluKeepsX("full", 5376, 28672, quick() ? 130 : 333, 64);
  if (!quick()) checkSwigluKeepsX("full", 5376, 28672, 1000, 0);
}
// lora_down alone at the full config's rank-64 widths (the Hopper kernel against mma.sync and the fp64 GEMM).
TEST_F(Kernels, LoraDownRank64) {
  checkLoraDown("odd K", 200, 64, 37);
  checkLoraDown("full", 5376, 64, 333);
  checkLoraDown("full", 14336, 64, quick() ? 70 : 1000);
}

// The norms' shapes and launch forms (norm.cuh): the forward's row count, one row, rows per CTA 1, 3 and 16 (333 rows:
// a partial last CTA), rows of one 256-element piece, and rows too long to stay in registers (x read twice).
TEST_F(Kernels, NormShapes) {
  checkNorms("full", 5376, quick() ? 333 : 8349);
  checkNorms("full", 5376, 1);
  for (int rowsPerCta : {1, 3, 16}) checkNorms("full", 5376, 333, rowsPerCta);
  checkNorms("H 256", 256, 37);
  checkNorms("H 6144", 6144, 37);
  checkNorms("tiny", 24, 1);
}
TEST_F(Kernels, FullBitwiseKernels) {
  long long M = quick() ? 130 : 333;
  checkNorms("full", 5376, M);
  checkQkNormRope("full", 56, 128, 96, M, 2);       // the pairs form, 16 units a warp
  checkQkNormRope("full", 56, 128, 96, M, 2, 4, 0);  // the strided form
  checkQkNormRope("full", 56, 128, 96, 37, 1, 1, 0);  // one unit a warp (the form before head_units)
  checkQkNormRope("full", 56, 128, 96, 37, 1, 3, 0);  // 2,072 units: the last warp's group of 3 partial
  // The pairs form: 2,072 units in warps of 32 (the last warp's 24: a partial pass group), of 2, of 6 (groups that
  // straddle rows of 56 heads); the refiner's qk_norm_rope without rope; 57 heads (an odd count: the two units of a
  // pass in different rows) and a rotary width of 32 (the partners in the same lanes' other pairs).
  checkQkNormRope("full", 56, 128, 96, 37, 1, 4, 32);
  checkQkNormRope("full", 56, 128, 96, 37, 2, 4, 2);
  checkQkNormRope("full", 56, 128, 96, 37, 1, 4, 6);
  checkQkNormRope("full", 56, 128, 0, 37, 2);
  checkQkNormRope("full", 57, 128, 96, 13, 1, 4, 16);
  checkQkNormRope("full", 3, 128, 32, 11, 2, 4, 4);
  checkElementwise("full", 5376, 14336, 64);
  checkF32("full", 5376, 96, 70, 256, 5376, 2688);
  checkF32("full", 96, 5376, 37, 256, 5376, 2688, 11);  // 11 timestep rows: two groups of 8 in time_embed's grid
  checkF32("full", 5376, 32, 157, 256, 5376, 2688);      // audio_proj_out: N short of one 64-column tile
}
