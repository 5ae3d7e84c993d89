// GPU kernel checks (run by scripts/gpu-test.sh on a machine with an NVIDIA GPU; prints a SKIP line and exits 0
// without one). Every kernel kind is emitted, JIT-compiled and run at the H3 shapes of the full and tiny configs on
// random inputs, and compared with references written here from docs/contract.md section 3:
//   - non-MMA kernels (norms, qk_norm/rope, elementwise, pack/unpack, the F32 linears, time_embed): bit for bit
//     against a host implementation of the contract formula (lane_tree, fma where the contract says fma);
//   - tensor-core kernels (bf16 linears with every epilogue, qkv, adaln_table, attention): against an fp64
//     reference, relative Frobenius error and max error reported, bound 1e-2 (bf16 operands and outputs);
//   - every kernel: two runs byte-equal, and the rows of an M-row run equal (bytes) to a 1-row run of the first row
//     and to a run with the rows reversed (nothing depends on the row count or order).
// Ends with "N passed, M failed"; exit status 1 on any failure.
#include "h3c/kernels/detmath.h"
#include "h3c/kernels/emit.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/dtype.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using nlohmann::json;
namespace hk = h3c::kernels;
namespace hc = h3c::runtime::cuda;
using h3c::bf16ToFloat;
using h3c::floatToBf16;
using h3c::roundBf16;

namespace {

int gPassed = 0, gFailed = 0;
void report(bool ok, const std::string &what) {
  (ok ? gPassed : gFailed)++;
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
}

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

template <typename T> std::shared_ptr<hc::DeviceBuffer> up(const std::vector<T> &v) {
  auto b = std::make_shared<hc::DeviceBuffer>(std::max<size_t>(v.size() * sizeof(T), 1));
  b->upload(v.data(), v.size() * sizeof(T));
  return b;
}
std::shared_ptr<hc::DeviceBuffer> outBuf(size_t bytes) {
  auto b = std::make_shared<hc::DeviceBuffer>(std::max<size_t>(bytes, 1));
  hc::check(hc::driver().cuMemsetD8(b->get(), 0xA5, b->bytes()), "poison");  // every element must be written
  return b;
}
template <typename T> std::vector<T> down(const hc::DeviceBuffer &b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

hk::KernelSource emit(const json &op) {
  auto k = hk::emitKernel(op, hc::device().arch());
  if (!k) throw std::runtime_error("no kernel for " + op.dump());
  return *k;
}

json kchunks(int u) { return {{"kind", "k_chunks"}, {"k_step", 16}, {"units", u}, {"acc", "f32"}}; }
json laneTree() { return {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}}; }

hc::KernelRunner *gRunner = nullptr;

// One launch with the given buffers; meta rows = M (and item rows = itemRows, meta rows = metaRows).
struct Launch {
  std::vector<std::shared_ptr<hc::DeviceBuffer>> in, out, w;
  long long M = 0, B = 1, itemRows = 0, metaRows = 0, nt = 0, nv = 0, na = 0, T = 0;
};
void run(const hk::KernelSource &k, const Launch &l) {
  const auto &lk = gRunner->load(k);
  hk::KernelArgs a;
  for (size_t i = 0; i < l.in.size(); ++i) a.in[i] = l.in[i] ? (const void *)l.in[i]->get() : nullptr;
  for (size_t i = 0; i < l.out.size(); ++i) a.out[i] = (void *)l.out[i]->get();
  for (size_t i = 0; i < l.w.size(); ++i) a.w[i] = (const void *)l.w[i]->get();
  a.meta[hk::kMetaRows] = l.M;
  a.meta[hk::kMetaBatch] = l.B;
  a.meta[hk::kMetaItemRows] = l.itemRows ? l.itemRows : l.M;
  a.meta[hk::kMetaMetaRows] = l.metaRows ? l.metaRows : l.M;
  a.meta[hk::kMetaNt] = l.nt;
  a.meta[hk::kMetaNv] = l.nv;
  a.meta[hk::kMetaNa] = l.na;
  a.meta[hk::kMetaT] = l.T;
  gRunner->launch(lk, a);
  hc::check(hc::driver().cuCtxSynchronize(), "kernel " + k.id);
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

// ---- tensor-core linears ----

// epi: none | residual | gate_residual | swiglu; kind: linear | qkv_linear | adaln_table.
void checkLinear(const std::string &cfg, const std::string &kind, long long K, long long N, const std::string &epi,
                 int units, long long M, int checkRows) {
  std::string name = fmt::format("[{}] {} K={} N={} epilogue={} units={} M={}", cfg, kind, K, N, epi, units, M);
  try {
    json op{{"op", kind}, {"nodes", {kind}}, {"order", kchunks(units)}};
    json attrs{{"K", K}, {"N", N}, {"out_dtype", "BF16"}};
    bool adaln = kind == "adaln_table", qkv = kind == "qkv_linear";
    bool bias = adaln || epi == "none";
    if (!qkv) attrs["epilogue"] = epi;
    if (epi == "gate_residual") {
      attrs["chunk"] = 2;
      attrs["num_chunks"] = 6;
      attrs["row_index"] = "adaln";
    }
    op["attrs"] = attrs;
    op["weights"] = {{"weight", qkv ? json{"q", "k", "v"} : json{"w"}}, {"bias", bias && !qkv ? json{"b"} : json::array()}};
    hk::KernelSource k = emit(op);
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
    auto runOnce = [&](std::shared_ptr<hc::DeviceBuffer> x, std::shared_ptr<hc::DeviceBuffer> r, long long m,
                       std::shared_ptr<hc::DeviceBuffer> tsb, std::shared_ptr<hc::DeviceBuffer> tgb) {
      Launch l;
      l.in = {x};
      if (epi == "residual") l.in.push_back(r);
      if (epi == "gate_residual") l.in.insert(l.in.end(), {r, dTab, tsb, tgb});
      for (int o = 0; o < nout; ++o) l.out.push_back(outBuf(size_t(m * outCols * 2)));
      l.w = {dW};
      if (bias && !qkv) l.w.push_back(dB);
      l.M = m;
      run(k, l);
      std::vector<uint16_t> all;
      for (int o = 0; o < nout; ++o) {
        auto v = down<uint16_t>(*l.out[o], size_t(m * outCols));
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    auto y1 = runOnce(dX, dRes, M, dTs, dTags);
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
void checkAttention(const std::string &cfg, int heads, int d, long long L, int B) {
  std::string name = fmt::format("[{}] attention heads={} d={} L={} B={}", cfg, heads, d, L, B);
  try {
    json op{{"op", "attention"}, {"nodes", {"attention"}}, {"attrs", {{"heads", heads}, {"head_dim", d}}},
            {"order", {{"kind", "flash"}, {"kv_block", 64}, {"k_step", 16}, {"acc", "f32"}, {"p", "bf16"}}}};
    auto k = emit(op);
    long long ld = (long long)heads * d;
    size_t n = size_t(B * L * ld);
    auto q = randBf(n), kk = randBf(n), v = randBf(n);
    auto dq = up(q), dk = up(kk), dv = up(v);
    auto go = [&](long long l, int b) {
      Launch la;
      la.in = {dq, dk, dv};
      la.out = {outBuf(size_t(b * l * ld * 2))};
      la.M = b * l;
      la.B = b;
      la.itemRows = l;
      run(k, la);
      return down<uint16_t>(*la.out[0], size_t(b * l * ld));
    };
    auto o1 = go(L, B), o2 = go(L, B);
    report(bytesEqual(o1, o2), name + ": two runs byte-equal");
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

// ---- bitwise kernels ----
void checkNorms(const std::string &cfg, int H, long long M) {
  std::string name = fmt::format("[{}] rms_norm/norm_modulate H={} M={}", cfg, H, M);
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
    // rms_norm
    {
      json op{{"op", "rms_norm"}, {"nodes", {"norm"}}, {"attrs", {{"H", H}, {"eps", 1e-5}}}, {"order", laneTree()},
              {"weights", {{"weight", {"w"}}}}};
      Launch l;
      l.in = {dx};
      l.out = {outBuf(size_t(M * H * 2))};
      l.w = {dw};
      l.M = M;
      run(emit(op), l);
      auto y = down<uint16_t>(*l.out[0], size_t(M * H));
      std::vector<uint16_t> ref(size_t(M * H));
      auto xf = toF(x);
      for (long long r = 0; r < M; ++r) {
        float inv = invRms(laneTreeSS(&xf[size_t(r * H)], H), H, eps);
        for (int j = 0; j < H; ++j)
          ref[size_t(r * H + j)] = floatToBf16(roundBf16(xf[size_t(r * H + j)] * inv) * bf16ToFloat(w[size_t(j)]));
      }
      size_t fd = firstDiff(y, ref);
      report(fd == SIZE_MAX, name + ": rms_norm bitwise vs contract formula" +
                                 (fd == SIZE_MAX ? "" : fmt::format(" (first diff at {})", fd)));
    }
    // norm_modulate, BF16 out (blocks) and F32 out (norm_out, row = timestep)
    for (int f32out = 0; f32out < 2; ++f32out) {
      int nc = f32out ? 2 : 6, sh = f32out ? 0 : 3, sc = f32out ? 1 : 4, rpt = f32out ? 1 : 3;
      json op{{"op", "norm_modulate"},
              {"nodes", {"norm_modulate"}},
              {"attrs",
               {{"H", H}, {"eps", 1e-5}, {"shift_chunk", sh}, {"scale_chunk", sc}, {"num_chunks", nc},
                {"row_index", f32out ? "timestep" : "adaln"}, {"out_dtype", f32out ? "F32" : "BF16"}}},
              {"order", laneTree()},
              {"weights", {{"weight", {"w"}}}}};
      Launch l;
      l.in = {dx, dt, dts, dtg};
      l.out = {outBuf(size_t(M * H * 4))};
      l.w = {dw};
      l.M = M;
      run(emit(op), l);
      auto xf = toF(x);
      std::vector<float> ref(size_t(M * H));
      for (long long r = 0; r < M; ++r) {
        float inv = invRms(laneTreeSS(&xf[size_t(r * H)], H), H, eps);
        long long trow = rpt == 3 ? ts[size_t(r)] * 3 + tags[size_t(r)] : ts[size_t(r)];
        for (int j = 0; j < H; ++j) {
          float n = roundBf16(roundBf16(xf[size_t(r * H + j)] * inv) * bf16ToFloat(w[size_t(j)]));
          float shift = bf16ToFloat(table[size_t(trow * nc * H + sh * H + j)]);
          float s1 = roundBf16(1.0f + bf16ToFloat(table[size_t(trow * nc * H + sc * H + j)]));
          ref[size_t(r * H + j)] = roundBf16(std::fmaf(n, s1, shift));
        }
      }
      bool ok;
      if (f32out) {
        auto y = down<float>(*l.out[0], size_t(M * H));
        ok = bytesEqual(y, ref);
      } else {
        auto y = down<uint16_t>(*l.out[0], size_t(M * H));
        std::vector<uint16_t> rb(ref.size());
        for (size_t i = 0; i < ref.size(); ++i) rb[i] = floatToBf16(ref[i]);
        ok = bytesEqual(y, rb);
      }
      report(ok, name + fmt::format(": norm_modulate ({}) bitwise", f32out ? "F32 out, timestep rows" : "BF16, adaln rows"));
    }
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

void checkQkNormRope(const std::string &cfg, int heads, int d, int R, long long S, int B) {
  std::string name = fmt::format("[{}] qk_norm_rope heads={} d={} R={} S={} B={}", cfg, heads, d, R, S, B);
  try {
    long long M = S * B, ld = (long long)heads * d;
    auto q = randBf(size_t(M * ld), 2.0), k = randBf(size_t(M * ld), 2.0);
    auto wq = randBf(size_t(d)), wk = randBf(size_t(d));
    auto cs = randF(size_t(S * std::max(R, 1))), sn = randF(size_t(S * std::max(R, 1)));
    json op{{"op", "qk_norm_rope"},
            {"nodes", {"qk"}},
            {"in", R ? json{"q", "k", "cos", "sin"} : json{"q", "k"}},
            {"out", {"q2", "k2"}},
            {"attrs", {{"heads", heads}, {"head_dim", d}, {"eps", 1e-5}, {"rotary_dim", R}}},
            {"order", laneTree()},
            {"weights", {{"weight", {"wq", "wk"}}}}};
    Launch l;
    l.in = {up(q), up(k)};
    if (R) l.in.insert(l.in.end(), {up(cs), up(sn)});
    l.out = {outBuf(size_t(M * ld * 2)), outBuf(size_t(M * ld * 2))};
    l.w = {up(wq), up(wk)};
    l.M = M;
    l.metaRows = S;  // cos/sin have no batch axis
    run(emit(op), l);
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
    }
    report(ok, name + ": bitwise vs contract formula");
  } catch (const std::exception &ex) {
    report(false, name + ": " + ex.what());
  }
}

void checkElementwise(const std::string &cfg, int H, int F, long long M) {
  std::string name = fmt::format("[{}] elementwise H={} F={} M={}", cfg, H, F, M);
  try {
    // swiglu
    {
      auto x = randBf(size_t(M * 2 * F), 3.0);
      Launch l;
      l.in = {up(x)};
      l.out = {outBuf(size_t(M * F * 2))};
      l.M = M;
      run(emit({{"op", "swiglu"}, {"nodes", {"swiglu"}}, {"attrs", {{"F", F}}}}), l);
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
      l.M = M;
      run(emit({{"op", "silu"}, {"nodes", {"silu"}}, {"attrs", {{"cols", H}, {"dtype", "F32"}}}}), l);
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
      l.M = M;
      run(emit({{"op", "residual"}, {"nodes", {"residual"}}, {"attrs", {{"cols", H}}}}), l);
      auto z = down<uint16_t>(*l.out[0], size_t(M * H));
      std::vector<uint16_t> ref(z.size());
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = floatToBf16(bf16ToFloat(x[i]) + bf16ToFloat(yv[i]));
      report(bytesEqual(z, ref), name + ": residual bitwise");
      Launch g;
      g.in = {l.in[0], l.in[1], up(table), up(ts), up(tags)};
      g.out = {outBuf(size_t(M * H * 2))};
      g.M = M;
      run(emit({{"op", "gate_residual"}, {"nodes", {"gr"}},
                {"attrs", {{"H", H}, {"chunk", 5}, {"num_chunks", 6}, {"row_index", "adaln"}}}}),
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
      l.M = B * S;
      l.B = B;
      l.nt = nt; l.nv = nv; l.na = na;
      run(emit({{"op", "pack"}, {"nodes", {"pack"}}, {"attrs", {{"H", H}}}}), l);
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
      u.M = B * (nv + na);
      u.B = B;
      u.nt = nt; u.nv = nv; u.na = na;
      run(emit({{"op", "unpack"}, {"nodes", {"unpack"}}, {"attrs", {{"video_cols", vc}, {"audio_cols", ac}}}}), u);
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
void checkF32(const std::string &cfg, long long K, long long N, long long M, long long freq, long long hid, long long E) {
  std::string name = fmt::format("[{}] f32 linear K={} N={} M={}; time_embed {}->{}->{}", cfg, K, N, M, freq, hid, E);
  try {
    auto x = randF(size_t(M * K)), w = randF(size_t(N * K), 0.05), b = randF(size_t(N), 0.1);
    Launch l;
    l.in = {up(x)};
    l.out = {outBuf(size_t(M * N * 4))};
    l.w = {up(w), up(b)};
    l.M = M;
    run(emit({{"op", "linear"}, {"nodes", {"proj_out"}}, {"order", kchunks(1)},
              {"attrs", {{"K", K}, {"N", N}, {"w_dtype", "F32"}, {"x_dtype", "F32"}, {"out_dtype", "F32"}}},
              {"weights", {{"weight", {"w"}}, {"bias", {"b"}}}}}),
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

    const long long T = 3;
    auto s = randF(size_t(T * freq)), w1 = randF(size_t(hid * freq), 0.05), b1 = randF(size_t(hid), 0.1);
    auto w2 = randF(size_t(E * hid), 0.02), b2 = randF(size_t(E), 0.1);
    Launch t;
    t.in = {up(s)};
    t.out = {outBuf(size_t(T * E * 4))};
    t.w = {up(w1), up(w2), up(b1), up(b2)};
    t.M = T;
    t.T = T;
    run(emit({{"op", "time_embed"}, {"nodes", {"time_proj"}}, {"order", kchunks(1)},
              {"attrs", {{"K", freq}, {"hidden", hid}, {"N", E}}}}),
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

} // namespace

int main(int argc, char **argv) {
  std::string why;
  if (!hc::driverAvailable(&why)) {
    std::printf("SKIP: no GPU: %s\n", why.c_str());
    return 0;
  }
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  try {
    const auto &d = hc::device();
    std::printf("device: %s (cc %d.%d, %d SMs), driver %d, NVRTC %s, arch %s\n", d.name.c_str(), d.ccMajor, d.ccMinor,
                d.smCount, d.driverVersion, hc::NvrtcJit::nvrtcVersion().c_str(), d.arch().c_str());
    hc::KernelRunner runner;
    gRunner = &runner;
    auto t0 = std::chrono::steady_clock::now();
    // tiny config: hidden 24, heads 2 x 16, ffn 32, rotary 12, time 8 -> 24 -> 16.
    checkLinear("tiny", "qkv_linear", 24, 32, "none", 1, 37, 8);
    checkLinear("tiny", "linear", 32, 24, "residual", 1, 37, 8);
    checkLinear("tiny", "linear", 32, 24, "gate_residual", 2, 37, 8);
    checkLinear("tiny", "linear", 24, 64, "swiglu", 1, 37, 8);
    checkLinear("tiny", "adaln_table", 16, 18 * 24, "none", 1, 3, 3);
    checkLinear("tiny", "linear", 8, 24, "none", 1, 11, 4);
    checkAttention("tiny", 2, 16, 37, 2);
    checkAttention("tiny", 2, 16, 130, 1);
    checkNorms("tiny", 24, 37);
    checkQkNormRope("tiny", 2, 16, 12, 37, 2);
    checkQkNormRope("tiny", 2, 16, 0, 37, 1);
    checkElementwise("tiny", 24, 32, 37);
    checkF32("tiny", 6, 24, 37, 8, 24, 16);
    // full config shapes (H 5376, inner 7168, ffn 14336, heads 56 x 128, rotary 96, time 256 -> 5376 -> 2688).
    long long M = quick ? 130 : 333;
    checkLinear("full", "qkv_linear", 5376, 7168, "none", 1, M, 3);
    checkLinear("full", "linear", 7168, 5376, "gate_residual", 8, M, 3);
    checkLinear("full", "linear", 5376, 28672, "swiglu", 1, M, 2);
    checkLinear("full", "linear", 14336, 5376, "gate_residual", 8, M, 3);
    checkLinear("full", "linear", 7168, 5376, "residual", 1, M, 2);
    checkLinear("full", "adaln_table", 2688, 18 * 5376, "none", 1, 2, 2);
    checkLinear("full", "linear", 5120, 5376, "none", 1, M, 2);
    checkAttention("full", 56, 128, quick ? 200 : 777, 2);
    checkNorms("full", 5376, M);
    checkQkNormRope("full", 56, 128, 96, M, 2);
    checkElementwise("full", 5376, 14336, 64);
    checkF32("full", 5376, 96, 70, 256, 5376, 2688);
    auto t1 = std::chrono::steady_clock::now();
    std::printf("kernel checks took %.1f s (JIT: %d compiled, %d from cache)\n",
                std::chrono::duration<double>(t1 - t0).count(), runner.jit().stats().compiled,
                runner.jit().stats().cacheHits);
  } catch (const std::exception &e) {
    std::printf("FAIL fatal: %s\n", e.what());
    gFailed++;
  }
  std::printf("%d passed, %d failed\n", gPassed, gFailed);
  return gFailed ? 1 : 0;
}
