// The `native` binding's ops on the GPU (GpuNative*; runtime/cuda/native_ops.h): cuBLASLt GEMMs and the runtime's
// epilogue, softmax and output kernels, called as the executor calls them. Skips without a GPU (or without cuBLASLt,
// saying so).
//   - every linear kind and epilogue, bit for bit against the contract's formulas written here (docs/contract.md
//     section 3): the inputs are small dyadic numbers, so every GEMM sum is exact in F32 whatever order the library
//     adds in, and the only rounding left is the op's own (bias add, bf16 nodes, swiglu, residual, gate, the F32
//     output); this also pins the column-major layouts (a transposed or shifted operand gives other numbers);
//   - linears at the full config's shapes and attention (in one chunk; in many chunks of rows and single heads under
//     a small scratch bound; and 20,000 rows that the real bound cuts) within 1e-2 of an fp64 reference (max error /
//     max |reference|);
//   - ops without a native form and operands outside the contract are refused with the node's name.
#include "h3c/runtime/cuda/cublaslt.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/native_ops.h"
#include "h3c/support/detmath.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace hc = h3c::runtime::cuda;
namespace plan = h3c::plan;
using h3c::DType;

namespace {

std::mt19937_64 rng(20260517);

// Host data of one operand: values as floats (BF16 ones exactly representable) or I64 metadata.
struct HostOp {
  DType dtype = DType::BF16;
  int64_t rows = 0, cols = 0;
  std::vector<float> f;
  std::vector<int64_t> i;
};

HostOp dyadic(DType dt, int64_t rows, int64_t cols, int range, int shift) {  // integers in [-range, range] * 2^-shift
  std::uniform_int_distribution<int> d(-range, range);
  HostOp h{dt, rows, cols, std::vector<float>(size_t(rows * cols)), {}};
  for (auto &v : h.f) v = std::ldexp(float(d(rng)), -shift);
  return h;
}
HostOp normal(DType dt, int64_t rows, int64_t cols, double stdv = 1.0) {
  std::normal_distribution<double> d(0.0, stdv);
  HostOp h{dt, rows, cols, std::vector<float>(size_t(rows * cols)), {}};
  for (auto &v : h.f) v = dt == DType::BF16 ? h3c::roundBf16(float(d(rng))) : float(d(rng));
  return h;
}

// Device copies of host operands (and the outputs), alive for one test.
struct Device {
  std::vector<std::unique_ptr<hc::DeviceBuffer>> buffers;
  hc::NativeOperand put(const HostOp &h) {
    std::vector<char> bytes;
    if (h.dtype == DType::I64) {
      bytes.resize(h.i.size() * 8);
      std::memcpy(bytes.data(), h.i.data(), bytes.size());
    } else if (h.dtype == DType::F32) {
      bytes.resize(h.f.size() * 4);
      std::memcpy(bytes.data(), h.f.data(), bytes.size());
    } else {
      std::vector<uint16_t> b(h.f.size());
      for (size_t k = 0; k < b.size(); ++k) b[k] = h3c::floatToBf16(h.f[k]);
      bytes.resize(b.size() * 2);
      std::memcpy(bytes.data(), b.data(), bytes.size());
    }
    auto &buf = buffers.emplace_back(std::make_unique<hc::DeviceBuffer>(std::max<size_t>(bytes.size(), 16)));
    buf->upload(bytes.data(), bytes.size());
    return {buf->get(), h.dtype, h.rows, h.cols};
  }
  hc::NativeOperand output(DType dt, int64_t rows, int64_t cols) {
    const size_t bytes = size_t(rows * cols) * h3c::dtypeSize(dt);
    auto &buf = buffers.emplace_back(std::make_unique<hc::DeviceBuffer>(std::max<size_t>(bytes, 16)));
    hc::check(hc::driver().cuMemsetD8(buf->get(), 0xA5, buf->bytes()), "poison");  // every element must be written
    return {buf->get(), dt, rows, cols};
  }
};

std::vector<float> download(const hc::NativeOperand &o) {
  const size_t n = size_t(o.rows * o.cols);
  std::vector<float> f(n);
  if (o.dtype == DType::F32) {
    hc::check(hc::driver().cuMemcpyDtoH(f.data(), o.ptr, n * 4), "download");
  } else {
    std::vector<uint16_t> b(n);
    hc::check(hc::driver().cuMemcpyDtoH(b.data(), o.ptr, n * 2), "download");
    for (size_t k = 0; k < n; ++k) f[k] = h3c::bf16ToFloat(b[k]);
  }
  return f;
}

// Bitwise equality of float vectors (NaN payloads included), reporting the first difference.
::testing::AssertionResult sameBits(const std::vector<float> &got, const std::vector<float> &want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size() << " values";
  for (size_t k = 0; k < got.size(); ++k)
    if (std::memcmp(&got[k], &want[k], 4) != 0)
      return ::testing::AssertionFailure() << "element " << k << ": got " << got[k] << ", want " << want[k];
  return ::testing::AssertionSuccess();
}

// max |got - ref| / max |ref|.
double relError(const std::vector<float> &got, const std::vector<double> &ref) {
  double err = 0, mx = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    const double e = std::fabs(double(got[k]) - ref[k]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
    mx = std::max(mx, std::fabs(ref[k]));
  }
  return mx > 0 ? err / mx : err;
}

// x W^T in double (exact for the dyadic inputs; the fp64 reference otherwise). w rows are N, cols K.
std::vector<double> dot(const std::vector<float> &x, int64_t M, int64_t K, const HostOp &w) {
  std::vector<double> y(size_t(M * w.rows));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < w.rows; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(x[size_t(m * K + k)]) * double(w.f[size_t(n * K + k)]);
      y[size_t(m * w.rows + n)] = s;
    }
  return y;
}

float rbf(float v) { return h3c::roundBf16(v); }

class GpuNative : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!hc::driverAvailable(&why)) return;
    runner_ = new hc::KernelRunner();
    ops_ = new hc::NativeOps(*runner_);
  }
  static void TearDownTestSuite() {
    delete ops_;
    delete runner_;
    ops_ = nullptr;
    runner_ = nullptr;
  }
  void SetUp() override {
    std::string why;
    if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
    if (!hc::cublasLt(&why)) GTEST_SKIP() << "no cuBLASLt: " << why;
  }
  static void run(hc::NativeCall &c) {
    ops_->run(c);
    hc::check(hc::driver().cuCtxSynchronize(), "native op");
  }
  static hc::KernelRunner *runner_;
  static hc::NativeOps *ops_;
};
hc::KernelRunner *GpuNative::runner_ = nullptr;
hc::NativeOps *GpuNative::ops_ = nullptr;

plan::Op makeOp(plan::OpKind kind, plan::Epilogue epi = plan::Epilogue::None) {
  plan::Op op;
  op.kind = kind;
  op.attrs.epilogue = epi;
  op.nodes = {"test." + std::string(plan::opKindName(kind))};
  op.where = "test op";
  return op;
}

// One linear-family case: the op, its host operands and the expected outputs by the contract's formulas.
struct LinearCase {
  std::string name;
  plan::Op op;
  HostOp x;
  std::vector<HostOp> w, b, extra;  // extra: residual, table, ts_index, tags (the op's inputs 1..)
  std::vector<DType> outDtype;
  int64_t outCols = 0;
};

// The contract (docs/contract.md section 3, as runtime/lib/cpu_ops.cpp computes it) on exact sums.
std::vector<std::vector<float>> expected(const LinearCase &t) {
  const plan::OpKind kind = t.op.kind;
  const plan::Epilogue epi = kind == plan::OpKind::Linear ? t.op.attrs.epilogue : plan::Epilogue::None;
  const DType wdt = t.w[0].dtype;
  const int64_t M = t.x.rows, K = t.x.cols;
  std::vector<float> xa = t.x.f;
  for (auto &v : xa) {
    if (kind == plan::OpKind::AdalnTable) v = h3c::detmath::silu(v);
    if (wdt == DType::BF16) v = rbf(v);
  }
  std::vector<std::vector<float>> outs;
  for (const HostOp &w : t.w) {
    const int64_t N = w.rows;
    std::vector<double> s = dot(xa, M, K, w);
    std::vector<float> lin(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
      float v = float(s[k]);  // exact
      if (!t.b.empty()) v = v + t.b[0].f[k % size_t(N)];
      lin[k] = wdt == DType::BF16 ? rbf(v) : v;
    }
    const int64_t outN = t.outCols;
    std::vector<float> y(size_t(M * outN));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < outN; ++c) {
        const size_t i = size_t(m * outN + c);
        float v = lin[size_t(m * N + c)];
        if (epi == plan::Epilogue::Swiglu) {
          v = rbf(v * rbf(h3c::detmath::silu(lin[size_t(m * N + outN + c)])));
        } else if (epi == plan::Epilogue::Residual) {
          v = rbf(t.extra[0].f[i] + v);
        } else if (epi == plan::Epilogue::GateResidual) {
          const HostOp &table = t.extra[1], &ts = t.extra[2];
          const int64_t r = m % ts.rows;
          const bool perTag = t.op.attrs.rowIndex == plan::RowIndex::Adaln;
          const int64_t trow = perTag ? ts.i[size_t(r)] * 3 + t.extra[3].i[size_t(r)] : ts.i[size_t(r)];
          const float gate = table.f[size_t(trow * table.cols + t.op.attrs.chunk * outN + c)];
          v = rbf(std::fmaf(gate, v, t.extra[0].f[i]));
        } else if (t.outDtype[0] == DType::BF16) {
          v = rbf(v);
        }
        y[i] = v;
      }
    outs.push_back(std::move(y));
  }
  return outs;
}

void runCase(hc::NativeOps &ops, LinearCase &t, bool exact, double bound = 1e-2) {
  Device dev;
  hc::NativeCall c;
  c.op = &t.op;
  c.in.push_back(dev.put(t.x));
  for (const auto &e : t.extra) c.in.push_back(dev.put(e));
  for (const auto &w : t.w) c.weights.push_back(dev.put(w));
  for (const auto &b : t.b) c.biases.push_back(dev.put(b));
  for (DType dt : t.outDtype) c.out.push_back(dev.output(dt, t.x.rows, t.outCols));
  ops.run(c);
  hc::check(hc::driver().cuCtxSynchronize(), t.name);
  const auto want = expected(t);
  for (size_t o = 0; o < c.out.size(); ++o) {
    const std::vector<float> got = download(c.out[o]);
    if (exact) {
      const ::testing::AssertionResult same = sameBits(got, want[o]);
      std::printf("%s GpuNative %s output %zu (%lld x %lld, K %lld): the contract's bits%s%s\n", same ? "PASS" : "FAIL",
                  t.name.c_str(), o, (long long)t.x.rows, (long long)t.outCols, (long long)t.x.cols,
                  same ? "" : ": ", same ? "" : same.message());
      EXPECT_TRUE(same) << t.name << " output " << o;
    } else {
      const std::vector<double> ref(want[o].begin(), want[o].end());
      const double e = relError(got, ref);
      std::printf("%s GpuNative %s output %zu: max error / max |ref| = %.3e (bound %.0e)\n",
                  e <= bound ? "PASS" : "FAIL", t.name.c_str(), o, e, bound);
      EXPECT_LE(e, bound) << t.name;
    }
  }
}

// Table rows: ts in [0, T), tags in {0, 1, 2} (perTag) for `rows` packed rows.
void metadata(LinearCase &t, int64_t rows, int64_t T, bool perTag) {
  std::uniform_int_distribution<int64_t> ts(0, T - 1), tag(0, 2);
  HostOp a{DType::I64, rows, 1, {}, std::vector<int64_t>(size_t(rows))}, b = a;
  for (auto &v : a.i) v = ts(rng);
  for (auto &v : b.i) v = tag(rng);
  t.extra.push_back(a);
  if (perTag) t.extra.push_back(b);
}

// Every linear kind on dyadic inputs: exact sums, so the outputs are the contract's bits.
std::vector<LinearCase> exactCases(int64_t M, int64_t K, int64_t N) {
  std::vector<LinearCase> cs;
  auto base = [&](const std::string &name, plan::OpKind kind, plan::Epilogue epi, DType xdt, DType wdt, int64_t rows,
                  int64_t wRows, bool bias) {
    LinearCase t;
    t.name = name;
    t.op = makeOp(kind, epi);
    t.x = dyadic(xdt, rows, K, 3, 2);
    t.w.push_back(dyadic(wdt, wRows, K, 3, 3));
    if (bias) t.b.push_back(normal(wdt, wRows, 1));
    t.outCols = epi == plan::Epilogue::Swiglu ? wRows / 2 : wRows;
    t.outDtype = {DType::BF16};
    return t;
  };
  cs.push_back(base("linear bf16 + bias", plan::OpKind::Linear, plan::Epilogue::None, DType::BF16, DType::BF16, M, N, true));
  cs.push_back(base("linear, F32 input", plan::OpKind::Linear, plan::Epilogue::None, DType::F32, DType::BF16, M, N, false));
  LinearCase f32 = base("linear F32 weights, F32 out", plan::OpKind::Linear, plan::Epilogue::None, DType::F32,
                        DType::F32, M, N, true);
  f32.outDtype = {DType::F32};
  cs.push_back(f32);
  cs.push_back(base("linear F32 weights, bf16 input and output", plan::OpKind::Linear, plan::Epilogue::None,
                    DType::BF16, DType::F32, M, N, true));
  LinearCase qkv = base("qkv_linear", plan::OpKind::QkvLinear, plan::Epilogue::None, DType::BF16, DType::BF16, M, N, false);
  qkv.w.push_back(dyadic(DType::BF16, N, K, 3, 3));
  qkv.w.push_back(dyadic(DType::BF16, N, K, 3, 3));
  qkv.outDtype = {DType::BF16, DType::BF16, DType::BF16};
  cs.push_back(qkv);
  cs.push_back(base("linear + swiglu", plan::OpKind::Linear, plan::Epilogue::Swiglu, DType::BF16, DType::BF16, M,
                    2 * N, true));
  LinearCase res = base("linear + residual", plan::OpKind::Linear, plan::Epilogue::Residual, DType::BF16, DType::BF16,
                        M, N, true);
  res.extra.push_back(normal(DType::BF16, M, N));
  cs.push_back(res);
  // gate_residual over 2 batch items of S = M / 2 rows, T = 2 timesteps: blocks (row = ts * 3 + tag, 6 chunks) and
  // the norm_out layout (row = ts, 2 chunks).
  for (bool perTag : {true, false}) {
    const int64_t T = 2, chunks = perTag ? 6 : 2;
    LinearCase g = base(perTag ? "linear + gate_residual (adaln rows)" : "linear + gate_residual (timestep rows)",
                        plan::OpKind::Linear, plan::Epilogue::GateResidual, DType::BF16, DType::BF16, 2 * (M / 2), N,
                        true);
    g.op.attrs.rowIndex = perTag ? plan::RowIndex::Adaln : plan::RowIndex::Timestep;
    g.op.attrs.numChunks = chunks;
    g.op.attrs.chunk = perTag ? 5 : 1;
    g.extra.push_back(normal(DType::BF16, g.x.rows, N));
    g.extra.push_back(normal(DType::BF16, T * (perTag ? 3 : 1), chunks * N));
    metadata(g, M / 2, T, perTag);
    cs.push_back(g);
  }
  // adaln_table: temb [T, K] F32, a = bf(silu(temb)) with 1/8 <= |silu| < 3 (multiples of 2^-10) and weights in
  // {-1/8, 0, 1/8}, so every partial sum is a multiple of 2^-13 below 2^9 and stays exact.
  LinearCase ad = base("adaln_table", plan::OpKind::AdalnTable, plan::Epilogue::None, DType::F32, DType::BF16, 3, N, true);
  ad.w[0] = dyadic(DType::BF16, N, K, 1, 3);
  std::uniform_real_distribution<float> mag(0.5f, 3.0f);
  std::bernoulli_distribution neg(0.5);
  for (auto &v : ad.x.f) v = neg(rng) ? -mag(rng) : mag(rng);
  cs.push_back(ad);
  return cs;
}

TEST_F(GpuNative, EveryLinearKindIsTheContractOnExactSums) {
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {{37, 24, 32}, {130, 96, 72}, {300, 1040, 136}};
  for (auto [M, K, N] : shapes)
    for (LinearCase &t : exactCases(M, K, N)) {
      SCOPED_TRACE(t.name + " M " + std::to_string(M) + " K " + std::to_string(K) + " N " + std::to_string(N));
      runCase(*ops_, t, /*exact=*/true);
    }
}

TEST_F(GpuNative, ZeroRowsWriteNothing) {
  LinearCase t = exactCases(0, 24, 32)[0];
  Device dev;
  hc::NativeCall c;
  c.op = &t.op;
  c.in.push_back(dev.put(t.x));
  c.weights.push_back(dev.put(t.w[0]));
  c.biases.push_back(dev.put(t.b[0]));
  c.out.push_back(dev.output(DType::BF16, 0, 32));
  EXPECT_NO_THROW(run(c));
}

// The full config's linears (random normal data): within 1e-2 of the fp64 reference.
TEST_F(GpuNative, FullConfigLinearsNearFp64) {
  const int64_t M = 67;  // the fp64 reference runs on one host thread
  struct Shape { const char *name; plan::Epilogue epi; int64_t K, N; };
  for (const Shape &s : {Shape{"to_out.0 + gate_residual", plan::Epilogue::GateResidual, 7168, 5376},
                         Shape{"ff.net.0.proj + swiglu", plan::Epilogue::Swiglu, 5376, 2 * 14336},
                         Shape{"ff.net.2 + residual", plan::Epilogue::Residual, 14336, 5376}}) {
    LinearCase t;
    t.name = s.name;
    t.op = makeOp(plan::OpKind::Linear, s.epi);
    t.x = normal(DType::BF16, M, s.K);
    t.w.push_back(normal(DType::BF16, s.N, s.K, 0.02));
    t.b.push_back(normal(DType::BF16, s.N, 1, 0.02));
    t.outCols = s.epi == plan::Epilogue::Swiglu ? s.N / 2 : s.N;
    t.outDtype = {DType::BF16};
    if (s.epi != plan::Epilogue::Swiglu) t.extra.push_back(normal(DType::BF16, M, s.N));
    if (s.epi == plan::Epilogue::GateResidual) {
      t.op.attrs.numChunks = 6;
      t.op.attrs.chunk = 2;
      t.extra.push_back(normal(DType::BF16, 6, 6 * s.N));
      metadata(t, M, 2, true);
    }
    runCase(*ops_, t, /*exact=*/false);
  }
}

// fp64 attention of rows `rows` of item b (all heads) of q, k, v [B * n, heads * d].
std::vector<double> attentionRef(const HostOp &q, const HostOp &k, const HostOp &v, int64_t B, int64_t heads,
                                 int64_t d, int64_t b, const std::vector<int64_t> &rows) {
  const int64_t n = q.rows / B, nk = k.rows / B, ld = heads * d;
  std::vector<double> out(rows.size() * static_cast<size_t>(ld)), s(static_cast<size_t>(nk));
  const double scale = 1.0 / std::sqrt(double(d));
  for (size_t ri = 0; ri < rows.size(); ++ri)
    for (int64_t h = 0; h < heads; ++h) {
      const float *qr = &q.f[size_t((b * n + rows[ri]) * ld + h * d)];
      double mx = -INFINITY, l = 0;
      for (int64_t j = 0; j < nk; ++j) {
        const float *kr = &k.f[size_t((b * nk + j) * ld + h * d)];
        double dotv = 0;
        for (int64_t c = 0; c < d; ++c) dotv += double(qr[c]) * double(kr[c]);
        s[size_t(j)] = dotv * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (int64_t j = 0; j < nk; ++j) l += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t j = 0; j < nk; ++j) o += s[size_t(j)] * double(v.f[size_t((b * nk + j) * ld + h * d + c)]);
        out[ri * size_t(ld) + size_t(h * d + c)] = o / l;
      }
    }
  return out;
}

// Native attention of B items of n rows; checked on `sample` rows per item (all rows when n is small).
void attentionCase(hc::NativeOps &ops, int64_t B, int64_t n, int64_t heads, int64_t d, int64_t sample) {
  SCOPED_TRACE("B " + std::to_string(B) + " n " + std::to_string(n) + " heads " + std::to_string(heads));
  plan::Op op = makeOp(plan::OpKind::Attention);
  op.attrs.heads = heads;
  op.attrs.headDim = d;
  const int64_t ld = heads * d;
  const HostOp q = normal(DType::BF16, B * n, ld, 1.5), k = normal(DType::BF16, B * n, ld),
               v = normal(DType::BF16, B * n, ld);
  Device dev;
  hc::NativeCall c;
  c.op = &op;
  c.batch = B;
  c.in = {dev.put(q), dev.put(k), dev.put(v)};
  c.out = {dev.output(DType::BF16, B * n, ld)};
  ops.run(c);
  hc::check(hc::driver().cuCtxSynchronize(), "native attention");
  const std::vector<float> got = download(c.out[0]);
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < std::min(sample, n); ++i) rows.push_back(sample >= n ? i : i * (n - 1) / (sample - 1));
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> ref = attentionRef(q, k, v, B, heads, d, b, rows);
    std::vector<float> mine;
    for (int64_t r : rows)
      mine.insert(mine.end(), got.begin() + (b * n + r) * ld, got.begin() + (b * n + r + 1) * ld);
    const double e = relError(mine, ref);
    std::printf("%s GpuNative attention B %lld n %lld heads %lld d %lld, item %lld (%zu rows): max error / max |ref| "
                "= %.3e\n", e <= 1e-2 ? "PASS" : "FAIL", (long long)B, (long long)n, (long long)heads, (long long)d,
                (long long)b, rows.size(), e);
    EXPECT_LE(e, 1e-2) << "item " << b;
  }
}

TEST_F(GpuNative, AttentionNearFp64) { attentionCase(*ops_, 2, 301, 3, 128, 301); }

// A scratch bound of 64 KiB cuts the same shapes into chunks of 28 rows of one head (every chunk boundary, and the
// last short chunk, inside the checked rows).
TEST_F(GpuNative, AttentionInSmallChunksNearFp64) {
  hc::NativeOps small(*runner_, 64 << 10);
  attentionCase(small, 2, 301, 3, 128, 301);
}

// 20,000 rows of 2 heads of 64: scores of one head take 1.6 GB, more than kAttentionScratchBytes, so the op runs in
// chunks of rows and of single heads (both loops); rows from every chunk are checked.
TEST_F(GpuNative, AttentionInChunksNearFp64) {
  static_assert(hc::kAttentionScratchBytes < size_t(20000) * 20008 * 6, "the case must not fit one chunk");
  attentionCase(*ops_, 2, 20000, 2, 64, 24);
}

TEST_F(GpuNative, RefusesWhatItDoesNotImplementNamingTheNode) {
  plan::Op rope = makeOp(plan::OpKind::Rope);
  hc::NativeCall c;
  c.op = &rope;
  try {
    ops_->run(c);
    ADD_FAILURE() << "a rope op ran native";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find("test.rope"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(hc::NativeOps::implements(plan::OpKind::Rope));
  EXPECT_FALSE(hc::NativeOps::implements(plan::OpKind::TimeEmbed));
  EXPECT_TRUE(hc::NativeOps::implements(plan::OpKind::QkvLinear));
  // An F32 residual is outside the contract (the block stream is bf16).
  LinearCase t = exactCases(8, 24, 32)[6];
  ASSERT_EQ(t.op.attrs.epilogue, plan::Epilogue::Residual);
  t.extra[0].dtype = DType::F32;
  Device dev;
  hc::NativeCall r;
  r.op = &t.op;
  r.in = {dev.put(t.x), dev.put(t.extra[0])};
  r.weights = {dev.put(t.w[0])};
  r.biases = {dev.put(t.b[0])};
  r.out = {dev.output(DType::BF16, 8, 32)};
  try {
    ops_->run(r);
    ADD_FAILURE() << "an F32 residual was accepted";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find("test.linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();
  }
}

} // namespace
