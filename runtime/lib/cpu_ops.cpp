// The CPU reference implementation of every plan op (docs/contract.md sections 3 and 4). An op is read exactly as
// the GPU executor reads it: operands at the fixed positions of plan/ops.h, typed attrs and the weights the op lists.
// In a multi-rank plan an op runs once per rank on that rank's values and weights (the executor passes a rank's
// WeightSource and row count); nothing here knows about other ranks. A fused op computes exactly the composition of
// its nodes, with the same rounding points.
#include "h3c/runtime/cpu_ops.h"

#include "cpu_kernels.h"
#include "h3c/runtime/host_ops.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"

#include <algorithm>
#include <optional>
#include <cmath>

namespace h3c::rt {

std::vector<int64_t> HostValue::shape() const { return {batch, rows, cols}; }

void parallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  // Part i of t is [n i / t, n (i + 1) / t): the parts (and so the bits) depend on `threads` only, never on how many
  // threads could start (support/parallel.h).
  const int64_t t = std::min<int64_t>(std::max(1, threads), n);
  parallelForEach(size_t(t), unsigned(t), [&](size_t i) { fn(n * int64_t(i) / t, n * int64_t(i + 1) / t); });
}

ValueMap graphInputValues(const CanonicalRequest &q, bool withActivations) {
  ValueMap m;
  auto floats = [&](const char *name, std::vector<float> v, int64_t rows, int64_t cols, DType dt) {
    HostValue h;
    h.dtype = dt;
    h.batch = q.B;
    h.rows = rows;
    h.cols = cols;
    h.f = std::move(v);
    m[name] = std::move(h);
  };
  if (withActivations) {
    floats("@hidden_states", activationFloats(q, "video"), q.Nv, q.videoCols, q.videoDtype);
    floats("@audio_hidden_states", activationFloats(q, "audio"), q.Na, q.audioCols, q.audioDtype);
    floats("@encoder_hidden_states", activationFloats(q, "text"), q.Nt, q.textCols, q.textDtype);
  }
  HostValue t;
  t.dtype = DType::F32;
  t.rows = q.T;
  t.cols = 1;
  t.f = q.timestep;
  m["@timestep"] = t;
  auto ints = [&](const char *name, std::vector<int64_t> v, int64_t rows, int64_t cols) {
    HostValue h;
    h.dtype = DType::I64;
    h.rows = rows;
    h.cols = cols;
    h.i = std::move(v);
    m[name] = std::move(h);
  };
  ints("@timestep_indices", q.tsIndex, q.S, 1);
  ints("@token_tags", q.tags, q.S, 1);
  HostValue pos;  // F32 [S, 3], shared by the batch items (no batch axis)
  pos.dtype = DType::F32;
  pos.rows = q.S;
  pos.cols = 3;
  pos.f = q.positions;
  m["@position_ids"] = std::move(pos);
  std::vector<int64_t> ti(size_t(q.Nt)), vi(size_t(q.Nv)), ai(size_t(q.Na));
  for (int64_t k = 0; k < q.Nt; ++k) ti[size_t(k)] = k;
  for (int64_t k = 0; k < q.Nv; ++k) vi[size_t(k)] = q.Nt + k;
  for (int64_t k = 0; k < q.Na; ++k) ai[size_t(k)] = q.Nt + q.Nv + k;
  ints("@text_indices", ti, q.Nt, 1);
  ints("@video_indices", vi, q.Nv, 1);
  ints("@audio_indices", ai, q.Na, 1);
  return m;
}

namespace {

using plan::Epilogue;
using plan::OpKind;
using plan::RowIndex;

float bfIf(bool round, float v) { return round ? roundBf16(v) : v; }

struct Ctx {
  const plan::Op &op;
  OpEnv &env;
  ValueMap &vals;
  const h3::Config &c;
  bool exact;  // Precision::Fp64

  [[noreturn]] void error(const std::string &msg) const {
    fail(op.where, "{} ({}): {}", plan::opKindName(op.kind), op.firstNode(), msg);
  }
  // The input at operand position i (plan::inputRoles): positions are fixed per op kind, checked by the reader.
  const HostValue &in(size_t i) const {
    if (i >= op.in.size())
      error(fmt::format("expected at least {} inputs, got {}", i + 1, op.in.size()));
    auto it = vals.find(op.in[i]);
    if (it == vals.end())
      error(fmt::format("input '{}' has not been computed (or was freed)", op.in[i]));
    // Bounds: the value must be what the plan declares (the reader checked the declaration against the op's attrs),
    // so no op loop sized by the attrs reads past it.
    const HostValue &h = it->second;
    const plan::Value &pv = env.plan.value(op.in[i]);
    const int64_t rows = pv.rows == plan::Domain::Sr ? env.rankRows : env.req.rows(plan::domainName(pv.rows));
    const size_t have = h.dtype == DType::I64 ? h.i.size() : h.f.size();
    if (h.cols != pv.cols || h.rows != rows || (h.dtype == DType::I64) != (pv.dtype == DType::I64) ||
        have != size_t(h.numel()))
      error(fmt::format("input '{}' is [{} x {}] {}, the plan declares [{} x {}] {}", op.in[i], h.rows, h.cols,
                        dtypeName(h.dtype), rows, pv.cols, dtypeName(pv.dtype)));
    return h;
  }
  HostValue &out(size_t i) {
    if (i >= op.out.size())
      error(fmt::format("expected at least {} outputs, got {}", i + 1, op.out.size()));
    const plan::Value &pv = env.plan.value(op.out[i]);
    HostValue h;
    h.dtype = pv.dtype;
    h.batch = pv.batch ? env.req.B : 1;
    if (pv.rows == plan::Domain::Sr) {
      if (env.rankRows < 0)
        error(fmt::format("output '{}' lives on a rank's rows (Sr), but no rank range was given", op.out[i]));
      h.rows = env.rankRows;
    } else {
      h.rows = env.req.rows(plan::domainName(pv.rows));
    }
    h.cols = pv.cols;
    if (pv.dtype == DType::I64)
      h.i.assign(size_t(h.numel()), 0);
    else
      h.f.assign(size_t(h.numel()), 0.f);
    HostValue &slot = vals[op.out[i]];
    slot = std::move(h);
    return slot;
  }
  const std::string &weight(size_t i) const {
    if (i >= op.weights.size()) error(fmt::format("expected at least {} weight tensors", i + 1));
    return op.weights[i];
  }
  std::string bias(size_t i) const { return i < op.biases.size() ? op.biases[i] : std::string(); }
  std::vector<float> load(const std::string &tensor) const { return env.weights.load(tensor).toFloats(); }
  DType wdtype(const std::string &tensor) const { return env.weights.spec(tensor).dtype; }
  const h3::TensorSpec &spec(const std::string &tensor) const { return env.weights.spec(tensor); }
};

// ---- linear family ---------------------------------------------------------------------------------------------

// y[M][N] = x W^T (no bias) in the op's order: k_chunks with one unit for BF16 weights, the sequential fma order for
// F32 weights (section 6), plain double dot products for the reference. W is the rank's: a tensor a column shard
// splits arrives as this rank's rows (the executor's rank WeightSource).
// An unmerged LoRA path of the op (docs/contract.md section 13): the input t [M, L] and the up slot [rows, L], whose
// rows from `row0` on continue the chain of a weight's outputs (qkv: 0, N, 2N for its three matrices).
struct LoraPath {
  const std::vector<float> *t = nullptr;
  int64_t L = 0, rows = 0;
  std::vector<float> up;  // the whole slot, loaded once per op
};

// The op's LoRA path (null without one).
std::optional<LoraPath> loraPath(Ctx &cx, int64_t M) {
  const int64_t L = cx.op.attrs.loraK;
  if (!plan::takesLora(cx.op.kind) || L == 0) return std::nullopt;
  const HostValue &t = cx.in(cx.op.in.size() - 1);
  if (t.cols != L || t.batch * t.rows != M)
    cx.error(fmt::format("lora_t '{}' is [{} x {}], the op needs [{} x {}]", cx.op.in.back(), t.batch * t.rows, t.cols, M, L));
  const std::string &up = cx.op.weights.back();
  const h3::TensorSpec &s = cx.spec(up);
  if (s.shape.size() != 2 || s.shape[1] != L)
    cx.error(fmt::format("up slot {} is {}, the op needs [rows, {}]", up, shapeText(s.shape), L));
  return LoraPath{&t.f, L, s.shape[0], cx.load(up)};
}

std::vector<float> gemm(Ctx &cx, const std::vector<float> &x, int64_t M, int64_t K, const std::string &tensor,
                        const LoraPath *lora = nullptr, int64_t row0 = 0) {
  const h3::TensorSpec &spec = cx.spec(tensor);
  const int64_t N = spec.shape[0];
  if (spec.shape.size() != 2 || spec.shape[1] != K)
    cx.error(fmt::format("{} is not a [N, {}] matrix", tensor, K));
  if (cx.op.order.kind != plan::OrderKind::KChunks || cx.op.order.units != 1)
    cx.error("a GEMM runs the k_chunks order with one unit");
  std::vector<float> w = cx.load(tensor), y(size_t(M * N));
  if (lora) {
    // One chain over [x | t] against [W | up]: x's chunks (the last zero-padded to 16), then t's (section 13).
    if (spec.dtype != DType::BF16) cx.error("an unmerged LoRA path needs a BF16 weight");
    if (row0 + N > lora->rows)
      cx.error(fmt::format("the up slot's {} rows end before the weight's rows [{}, {})", lora->rows, row0, row0 + N));
    const int64_t K16 = (K + 15) / 16 * 16, KE = K16 + lora->L;
    std::vector<float> xe(size_t(M * KE), 0.f), we(size_t(N * KE), 0.f);
    for (int64_t m = 0; m < M; ++m) {
      std::copy(x.begin() + m * K, x.begin() + (m + 1) * K, xe.begin() + m * KE);
      std::copy(lora->t->begin() + m * lora->L, lora->t->begin() + (m + 1) * lora->L, xe.begin() + m * KE + K16);
    }
    for (int64_t n = 0; n < N; ++n) {
      std::copy(w.begin() + n * K, w.begin() + (n + 1) * K, we.begin() + n * KE);
      const auto u = lora->up.begin() + (row0 + n) * lora->L;
      std::copy(u, u + lora->L, we.begin() + n * KE + K16);
    }
    if (cx.exact) cpu::gemmFp64(xe.data(), M, KE, we.data(), N, nullptr, y.data(), cx.env.threads);
    else cpu::gemmKChunks(xe.data(), M, KE, we.data(), N, y.data(), cx.env.threads);
    return y;
  }
  if (cx.exact)
    cpu::gemmFp64(x.data(), M, K, w.data(), N, nullptr, y.data(), cx.env.threads);
  else if (spec.dtype == DType::F32)
    cpu::gemmSeqFma(x.data(), M, K, w.data(), N, y.data(), cx.env.threads);
  else
    cpu::gemmKChunks(x.data(), M, K, w.data(), N, y.data(), cx.env.threads);
  return y;
}

// An AdaLN table operand: rows of [num_chunks * H] values; the table row of a packed row is ts_index * 3 + tag
// (row_index adaln) or ts_index (row_index timestep), read from the op's ts_index / tags operands.
struct Table {
  const Ctx *cx = nullptr;
  const float *data = nullptr;
  int64_t rows = 0, width = 0, H = 0, chunks = 0;
  const int64_t *ts = nullptr, *tags = nullptr;
  int64_t metaRows = 1;
  bool perTag = true;
  // The chunk index comes from the op's attrs: outside the table it would read the next row, or past the table.
  const float *chunk(int64_t row, int64_t k) const {
    if (k < 0 || k >= chunks)
      cx->error(fmt::format("chunk {} is outside the AdaLN table's {} chunks", k, chunks));
    return data + row * width + k * H;
  }
  // Table row of flattened packed row m (batch items share the metadata).
  int64_t rowOf(int64_t m) const {
    int64_t r = m % metaRows;
    return perTag ? ts[r] * 3 + tags[r] : ts[r];
  }
};

Table readTable(Ctx &cx, size_t tableIn, size_t tsIn, int64_t H) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &t = cx.in(tableIn);
  Table tb;
  tb.cx = &cx;
  tb.chunks = a.numChunks;
  tb.perTag = a.rowIndex == RowIndex::Adaln;
  tb.H = H;
  tb.width = t.cols;
  tb.rows = t.rows;
  if (t.cols != a.numChunks * H)
    cx.error(fmt::format("AdaLN table has {} columns, expected num_chunks {} x {}", t.cols, a.numChunks, H));
  if (tb.rows != cx.env.req.T * plan::rowsPerTimestep(a.rowIndex))
    cx.error(fmt::format("AdaLN table has {} rows, expected {}", tb.rows,
                         cx.env.req.T * plan::rowsPerTimestep(a.rowIndex)));
  tb.data = t.f.data();
  const HostValue &ts = cx.in(tsIn);
  tb.ts = ts.i.data();
  tb.metaRows = ts.rows;
  if (tb.perTag) {
    const HostValue &tags = cx.in(tsIn + 1);
    tb.tags = tags.i.data();
  }
  for (int64_t r = 0; r < tb.metaRows; ++r) {
    int64_t row = tb.perTag ? tb.ts[r] * 3 + tb.tags[r] : tb.ts[r];
    if (row < 0 || row >= tb.rows)
      cx.error(fmt::format("row {} addresses table row {} of {}", r, row, tb.rows));
  }
  return tb;
}

// M rows of x (flattened batch x rows) converted to the weight dtype.
std::vector<float> asWeightDtype(const HostValue &x, DType wdt) {
  std::vector<float> v = x.f;
  if (wdt == DType::BF16)
    for (auto &e : v)
      e = roundBf16(e);
  return v;
}

void checkAttr(Ctx &cx, const char *key, int64_t got, int64_t want) {
  if (got != want)
    cx.error(fmt::format("attrs.{} = {} but the operands give {}", key, got, want));
}

// acc + bias in F32 (or double for the reference), rounded for BF16 weights: the linear node's own output.
void addBias(Ctx &cx, std::vector<float> &acc, int64_t M, int64_t N, const std::string &bname, bool round) {
  if (!bname.empty()) {
    std::vector<float> bias = cx.load(bname);
    if (bias.size() != size_t(N))  // another node's bias (a hostile plan): the loop would read past it
      cx.error(fmt::format("bias '{}' has {} values, the linear's N is {}", bname, bias.size(), N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float &a = acc[size_t(m * N + n)];
        a = cx.exact ? float(double(a) + double(bias[size_t(n)])) : a + bias[size_t(n)];
      }
  }
  for (auto &e : acc)
    e = bfIf(round, e);
}

// The residual / gate_residual epilogue on the rounded linear output `acc` (operands at positions 1..4).
void residualEpilogue(Ctx &cx, const std::vector<float> &acc, int64_t M, int64_t N, HostValue &o) {
  const HostValue &res = cx.in(1);
  if (res.numel() != M * N || o.numel() != M * N)
    cx.error("residual / output shapes disagree with the linear");
  if (cx.op.attrs.epilogue == Epilogue::Residual) {
    for (int64_t i = 0; i < M * N; ++i)
      o.f[size_t(i)] = roundBf16(res.f[size_t(i)] + acc[size_t(i)]);
    return;
  }
  Table tb = readTable(cx, 2, 3, N);
  const int64_t k = cx.op.attrs.chunk;
  for (int64_t m = 0; m < M; ++m) {
    const float *gate = tb.chunk(tb.rowOf(m), k);
    for (int64_t n = 0; n < N; ++n)
      o.f[size_t(m * N + n)] = roundBf16(std::fmaf(gate[n], acc[size_t(m * N + n)], res.f[size_t(m * N + n)]));
  }
}

void runLinear(Ctx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const std::string &wname = cx.weight(0);
  const std::string bname = cx.bias(0);
  const DType wdt = cx.wdtype(wname);
  const auto &wspec = cx.spec(wname);
  const int64_t N = wspec.shape[0], K = wspec.shape[1];
  const Epilogue epi = cx.op.kind == OpKind::Linear ? a.epilogue : Epilogue::None;

  const HostValue &x = cx.in(0);
  if (x.cols != K)
    cx.error(fmt::format("input '{}' has {} columns, weight {} has K = {}", cx.op.in[0], x.cols, wname, K));
  checkAttr(cx, "K", a.K, K);
  checkAttr(cx, "N", a.N, N);
  const int64_t M = x.batch * x.rows;
  std::vector<float> xa;
  if (cx.op.kind == OpKind::AdalnTable) {
    xa = x.f;  // a = bf(silu(temb)) at temb's F32 precision, rounded to the projection's dtype
    for (auto &e : xa)
      e = bfIf(wdt == DType::BF16, cpu::siluF(e));
  } else {
    xa = asWeightDtype(x, wdt);
  }

  const std::optional<LoraPath> lora = loraPath(cx, M);
  std::vector<float> acc = gemm(cx, xa, M, K, wname, lora ? &*lora : nullptr);
  // The linear node's own output (diffusers: the weight's dtype): acc + bias in F32, rounded for BF16 weights.
  addBias(cx, acc, M, N, bname, wdt == DType::BF16);

  HostValue &o = cx.out(0);
  if (epi == Epilogue::None) {
    if (o.numel() != int64_t(acc.size()))
      cx.error(fmt::format("output '{}' has {} elements, the linear produces {} x {}", cx.op.out[0], o.numel(), M, N));
    const bool roundOut = o.dtype == DType::BF16;
    for (size_t i = 0; i < acc.size(); ++i)
      o.f[i] = bfIf(roundOut, acc[i]);
    return;
  }
  if (epi == Epilogue::Swiglu) {
    const int64_t F = N / 2;
    if (o.cols != F || o.batch * o.rows != M)
      cx.error(fmt::format("swiglu output must be [{}, {}]", M, F));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t f = 0; f < F; ++f) {
        float val = acc[size_t(m * N + f)], gate = acc[size_t(m * N + F + f)];
        o.f[size_t(m * F + f)] = roundBf16(val * roundBf16(cpu::siluF(gate)));
      }
    if (a.swigluX) {  // the linear's own output [v | g] (h3-fuse training=true: the swiglu's x for the backward)
      HostValue &sx = cx.out(1);
      if (sx.numel() != int64_t(acc.size()) || sx.dtype != DType::BF16)
        cx.error(fmt::format("swiglu_x output must be bf16 [{}, {}]", M, N));
      for (size_t i = 0; i < acc.size(); ++i) sx.f[i] = roundBf16(acc[i]);
    }
    return;
  }
  residualEpilogue(cx, acc, M, N, o);
}

void normRopePair(Ctx &cx, const HostValue *x[2], size_t firstWeight, size_t cosAt);

void runQkvLinear(Ctx &cx) {
  const bool normRope = cx.op.attrs.epilogue == Epilogue::QkNormRope;
  const size_t upSlot = cx.op.attrs.loraK > 0 ? 1 : 0;
  if (cx.op.weights.size() != (normRope ? 5u : 3u) + upSlot || cx.op.out.size() != 3)
    cx.error("qkv_linear reads [Wq, Wk, Wv(, norm_q, norm_k)(, LoRA up slot)] and has three outputs");
  const HostValue &x = cx.in(0);
  const int64_t M = x.batch * x.rows;
  const std::optional<LoraPath> lora = loraPath(cx, M);
  int64_t row0 = 0;  // the matrix's first row in the stacked [Wq; Wk; Wv] (and in the up slot)
  for (int i = 0; i < 3; ++i) {
    const std::string &w = cx.weight(size_t(i));
    const auto &spec = cx.spec(w);
    if (spec.shape[1] != x.cols)
      cx.error(fmt::format("{} has K = {}, input has {} columns", w, spec.shape[1], x.cols));
    const int64_t N = spec.shape[0];
    checkAttr(cx, "N", cx.op.attrs.N, N);
    std::vector<float> acc = gemm(cx, asWeightDtype(x, spec.dtype), M, x.cols, w, lora ? &*lora : nullptr, row0);
    row0 += N;
    HostValue &o = cx.out(static_cast<size_t>(i));
    if (o.numel() != M * N)
      cx.error(fmt::format("output '{}' shape disagrees with {}", cx.op.out[size_t(i)], w));
    for (int64_t j = 0; j < M * N; ++j)
      o.f[size_t(j)] = roundBf16(acc[size_t(j)]);
  }
  if (!normRope) return;
  // The qk_norm_rope epilogue: exactly the qk_norm_rope op on the GEMM's bf16 q and k (weights 3, 4; cos, sin at
  // inputs 1, 2). Copies of the GEMM's outputs: out() makes a fresh output.
  const HostValue q = cx.vals.at(cx.op.out[0]), k = cx.vals.at(cx.op.out[1]);
  const HostValue *qk[2] = {&q, &k};
  normRopePair(cx, qk, 3, 1);
}

// ---- norms ---------------------------------------------------------------------------------------------------

void runRmsNorm(Ctx &cx) {
  std::vector<float> wv = cx.op.weights.empty() ? std::vector<float>() : cx.load(cx.weight(0));
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  if (o.numel() != x.numel() || o.cols != x.cols)
    cx.error("output shape differs from the input");
  checkAttr(cx, "H", cx.op.attrs.H, x.cols);
  if (!wv.empty() && int64_t(wv.size()) != x.cols)
    cx.error(fmt::format("weight has {} values for {} columns", wv.size(), x.cols));
  const double eps = cx.op.attrs.eps;
  parallelFor(x.batch * x.rows, cx.env.threads, [&](int64_t a, int64_t b) {
    for (int64_t m = a; m < b; ++m)
      cpu::rmsRow(&x.f[size_t(m * x.cols)], x.cols, wv.empty() ? nullptr : wv.data(), eps, cx.exact,
             &o.f[size_t(m * x.cols)]);
  });
}

void runNormModulate(Ctx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  auto wv = cx.load(cx.weight(0));
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  const int64_t H = x.cols;
  if (H != a.H || o.numel() != x.numel() || int64_t(wv.size()) != H)
    cx.error("shapes disagree with attrs.H");
  Table tb = readTable(cx, 1, 2, H);
  const double eps = a.eps;
  // bf() always; norm_out then widens to F32 (a no-op on the value).
  parallelFor(x.batch * x.rows, cx.env.threads, [&](int64_t lo, int64_t hi) {
    std::vector<float> n(static_cast<size_t>(H));
    for (int64_t m = lo; m < hi; ++m) {
      cpu::rmsRow(&x.f[size_t(m * H)], H, wv.data(), eps, cx.exact, n.data());
      int64_t row = tb.rowOf(m);
      const float *shift = tb.chunk(row, a.shiftChunk), *scale = tb.chunk(row, a.scaleChunk);
      for (int64_t i = 0; i < H; ++i)
        o.f[size_t(m * H + i)] = roundBf16(std::fmaf(n[size_t(i)], roundBf16(1.0f + scale[i]), shift[i]));
    }
  });
}

// Per-head rms norm over head_dim channels (weight [head_dim]) of one [M, heads*d] value, into `y`.
void qkNorm(Ctx &cx, const HostValue &x, const std::string &weight, HostValue &y) {
  auto wv = cx.load(weight);
  const int64_t d = cx.op.attrs.headDim;
  if (int64_t(wv.size()) != d || x.cols != cx.op.attrs.heads * d || y.numel() != x.numel())
    cx.error(fmt::format("{}: shapes disagree with heads {} x head_dim {}", weight, cx.op.attrs.heads, d));
  const double eps = cx.op.attrs.eps;
  const int64_t units = x.batch * x.rows * (x.cols / d);
  parallelFor(units, cx.env.threads, [&](int64_t a, int64_t b) {
    for (int64_t u = a; u < b; ++u)
      cpu::rmsRow(&x.f[size_t(u * d)], d, wv.data(), eps, cx.exact, &y.f[size_t(u * d)]);
  });
}

// rope in place on y (values already normed), cos/sin [S, R] F32 tables.
void ropeApply(Ctx &cx, HostValue &y, const HostValue &cosv, const HostValue &sinv) {
  const int64_t d = cx.op.attrs.headDim, R = cx.op.attrs.rotaryDim, half = R / 2;
  if (cosv.cols != R || sinv.cols != R || cosv.rows != y.rows)
    cx.error(fmt::format("rope tables must be [{}, {}]", y.rows, R));
  const int64_t heads = y.cols / d;
  std::vector<float> tmp(static_cast<size_t>(R));
  for (int64_t m = 0; m < y.batch * y.rows; ++m) {
    const float *cr = &cosv.f[size_t((m % y.rows) * R)], *sr = &sinv.f[size_t((m % y.rows) * R)];
    for (int64_t h = 0; h < heads; ++h) {
      float *v = &y.f[size_t(m * y.cols + h * d)];
      for (int64_t i = 0; i < R; ++i) {
        float rot = i < half ? -v[i + half] : v[i - half];
        float c = roundBf16(cr[i]), s = roundBf16(sr[i]);
        tmp[size_t(i)] = roundBf16(v[i] * c + rot * s);  // two roundings-to-F32 then one add: no contraction
      }
      std::copy(tmp.begin(), tmp.end(), v);
    }
  }
}

void runQkNorm(Ctx &cx) {
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  qkNorm(cx, x, cx.weight(0), o);
}

void runRope(Ctx &cx) {
  HostValue xcopy = cx.in(0);
  ropeApply(cx, xcopy, cx.in(1), cx.in(2));
  HostValue &o = cx.out(0);
  o.f = std::move(xcopy.f);
}

// qk_norm_rope's numerics on q = x[0], k = x[1] into outputs 0 and 1: norm weights at weight positions firstWeight
// and firstWeight + 1, the rope tables (rotary_dim > 0) at input positions cosAt and cosAt + 1. The qk_norm_rope op
// and qkv_linear's qk_norm_rope epilogue both run this.
void normRopePair(Ctx &cx, const HostValue *x[2], size_t firstWeight, size_t cosAt) {
  const bool rope = cx.op.attrs.rotaryDim > 0;
  for (size_t i = 0; i < 2; ++i) {
    HostValue &o = cx.out(i);
    qkNorm(cx, *x[i], cx.weight(firstWeight + i), o);
    if (rope)
      ropeApply(cx, o, cx.in(cosAt), cx.in(cosAt + 1));
  }
}

void runQkNormRope(Ctx &cx) {
  const HostValue *qk[2] = {&cx.in(0), &cx.in(1)};
  normRopePair(cx, qk, 0, 2);
}

// ---- attention -----------------------------------------------------------------------------------------------

// Every query row of q (a rank's rows under sequence parallelism) attends all rows of k and v, in canonical order.
void runAttention(Ctx &cx) {
  const HostValue &q = cx.in(0), &k = cx.in(1), &v = cx.in(2);
  HostValue &o = cx.out(0);
  const int64_t d = cx.op.attrs.headDim, heads = cx.op.attrs.heads, n = q.rows, nk = k.rows, ld = q.cols;
  if (q.cols != heads * d || k.cols != ld || k.batch != q.batch || v.numel() != k.numel() || o.numel() != q.numel())
    cx.error("q and the output [B, rows, heads*d], k and v [B, key rows, heads*d] disagree");
  const double scale = 1.0 / std::sqrt(double(d));
  const float c = cpu::flashExp2Scale(d);
  HostValue *lse = cx.op.attrs.lse ? &cx.out(1) : nullptr;  // the row statistics [B, rows, heads]
  if (lse && lse->numel() != q.batch * n * heads) cx.error("lse must hold one L per row and head");
  parallelFor(q.batch * heads * n, cx.env.threads, [&](int64_t a, int64_t b) {
    std::vector<float> out(static_cast<size_t>(d)), flashOut(static_cast<size_t>(d));
    for (int64_t t = a; t < b; ++t) {
      const int64_t bi = t / (heads * n), h = (t / n) % heads, r = t % n;
      const size_t base = size_t(bi * n * ld + h * d), kvBase = size_t(bi * nk * ld + h * d);
      const float *qr = &q.f[base + size_t(r * ld)], *kb = &k.f[kvBase], *vb = &v.f[kvBase];
      float stats[2];
      if (cx.exact)
        cpu::attentionRowFp64(qr, kb, vb, ld, nk, d, scale, out.data());
      if (!cx.exact || lse)  // (the row statistics are the flash order's, also beside the fp64 reference's output)
        cpu::flashRow(qr, kb, vb, ld, nk, d, c, cx.op.order.kvBlock, cx.exact ? flashOut.data() : out.data(),
                      lse ? stats : nullptr);
      for (int64_t c = 0; c < d; ++c)
        o.f[base + size_t(r * ld + c)] = roundBf16(out[size_t(c)]);
      // The backward's L = mc + log2(l) (h3-fuse-grad: attention_grad reads it instead of rerunning the walk).
      if (lse) lse->f[size_t((bi * n + r) * heads + h)] = stats[0] + std::log2(stats[1]);
    }
  });
}

// ---- elementwise -----------------------------------------------------------------------------------------------

void runSwiglu(Ctx &cx) {
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  const int64_t F = x.cols / 2, M = x.batch * x.rows;
  if (x.cols % 2 || o.cols != F || o.batch * o.rows != M)
    cx.error("swiglu maps [M, 2F] to [M, F]");
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = 0; f < F; ++f)
      o.f[size_t(m * F + f)] =
          roundBf16(x.f[size_t(m * x.cols + f)] * roundBf16(cpu::siluF(x.f[size_t(m * x.cols + F + f)])));
}

void runSilu(Ctx &cx) {
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  if (o.numel() != x.numel())
    cx.error("silu keeps the shape");
  for (int64_t i = 0; i < x.numel(); ++i)
    o.f[size_t(i)] = bfIf(o.dtype == DType::BF16, cpu::siluF(x.f[size_t(i)]));
}

void runResidual(Ctx &cx) {
  const HostValue &x = cx.in(0), &y = cx.in(1);
  HostValue &o = cx.out(0);
  if (x.numel() != y.numel() || o.numel() != x.numel())
    cx.error("residual operands differ in shape");
  for (int64_t i = 0; i < x.numel(); ++i)
    o.f[size_t(i)] = roundBf16(x.f[size_t(i)] + y.f[size_t(i)]);
}

void runGateResidual(Ctx &cx) {
  const HostValue &x = cx.in(0), &y = cx.in(1);
  HostValue &o = cx.out(0);
  const int64_t H = x.cols, k = cx.op.attrs.chunk;
  checkAttr(cx, "H", cx.op.attrs.H, H);
  Table tb = readTable(cx, 2, 3, H);
  if (x.numel() != y.numel() || o.numel() != x.numel())
    cx.error("gate_residual operands differ in shape");
  for (int64_t m = 0; m < x.batch * x.rows; ++m) {
    const float *gate = tb.chunk(tb.rowOf(m), k);
    for (int64_t i = 0; i < H; ++i)
      o.f[size_t(m * H + i)] = roundBf16(std::fmaf(gate[i], y.f[size_t(m * H + i)], x.f[size_t(m * H + i)]));
  }
}

// ---- host tables, time embedding, pack/unpack -------------------------------------------------------------------

void runRopeTable(Ctx &cx) {
  // Operand 0 is the positions [S, 3] F32 in canonical order (canonicalization already ordered the rows, so the
  // index operands are not needed).
  const HostValue &pos = cx.in(0);
  if (pos.dtype != DType::F32 || pos.cols != 3 || pos.rows != cx.env.req.S || pos.batch != 1)
    cx.error("rope_table reads positions [S, 3] F32");
  std::vector<float> c, s;
  ropeTable(cx.c, pos.f.data(), pos.rows, c, s);
  HostValue &oc = cx.out(0);
  if (oc.numel() != int64_t(c.size()))
    cx.error(fmt::format("cos must be [S, {}]", cx.c.rotaryDim()));
  oc.f = std::move(c);
  HostValue &os = cx.out(1);
  if (os.numel() != int64_t(s.size()))
    cx.error(fmt::format("sin must be [S, {}]", cx.c.rotaryDim()));
  os.f = std::move(s);
}

std::vector<float> linearF32(Ctx &cx, const std::vector<float> &x, int64_t M, const std::string &w,
                             const std::string &b) {
  const auto &spec = cx.spec(w);
  const int64_t N = spec.shape[0], K = spec.shape[1];
  if (int64_t(x.size()) != M * K)
    cx.error(fmt::format("{} expects K = {}", w, K));
  std::vector<float> acc = gemm(cx, x, M, K, w);
  addBias(cx, acc, M, N, b, spec.dtype == DType::BF16);
  return acc;
}

void runTimestepSinusoid(Ctx &cx) {
  const HostValue &t = cx.in(0);
  if (t.dtype != DType::F32 || t.cols != 1)
    cx.error("expects @timestep [T] F32");
  HostValue &o = cx.out(0);
  std::vector<float> emb = timestepSinusoid(cx.c, t.f);
  if (o.numel() != int64_t(emb.size()))
    cx.error(fmt::format("output must be [T, {}]", cx.c.freq_dim));
  o.f = std::move(emb);
}

// time_embed: linear_1, silu, linear_2 (all F32) over the host-computed sinusoid (the time_proj value).
void runTimeEmbed(Ctx &cx) {
  const HostValue &s = cx.in(0);
  if (s.dtype != DType::F32 || s.cols != cx.op.attrs.freqDim)
    cx.error(fmt::format("expects the sinusoid [T, {}] F32", cx.op.attrs.freqDim));
  if (cx.op.weights.size() != 2 || cx.op.biases.size() != 2)
    cx.error("time_embed reads [linear_1, linear_2] weights and biases");
  const int64_t T = s.rows;
  auto h = linearF32(cx, s.f, T, cx.weight(0), cx.bias(0));
  for (auto &e : h)
    e = cpu::siluF(e);
  auto y = linearF32(cx, h, T, cx.weight(1), cx.bias(1));
  HostValue &o = cx.out(0);
  if (o.numel() != int64_t(y.size()))
    cx.error(fmt::format("output must be [T, {}]", cx.op.attrs.outDim));
  o.f = std::move(y);
}

void runPack(Ctx &cx) {
  const auto &q = cx.env.req;
  const HostValue &tx = cx.in(0), &vx = cx.in(1), &ax = cx.in(2);
  HostValue &o = cx.out(0);
  const int64_t H = o.cols;
  if (tx.cols != H || vx.cols != H || ax.cols != H || o.rows != q.S)
    cx.error("pack stream widths disagree with the packed value");
  for (int64_t b = 0; b < q.B; ++b) {
    const std::pair<const HostValue *, int64_t> parts[] = {{&tx, 0}, {&vx, q.Nt}, {&ax, q.Nt + q.Nv}};
    for (auto &[src, off] : parts)
      for (int64_t r = 0; r < src->rows; ++r)
        for (int64_t c = 0; c < H; ++c)
          o.f[size_t((b * q.S + off + r) * H + c)] = roundBf16(src->f[size_t((b * src->rows + r) * H + c)]);
  }
  // The per-row metadata in canonical order: positions (F32), tags, ts_index (I64) at output positions 1, 2, 3.
  HostValue &mp = cx.out(1);
  if (mp.dtype != DType::F32 || mp.numel() != int64_t(q.positions.size()))
    cx.error(fmt::format("pack output '{}' must be F32 [S, 3]", cx.op.out[1]));
  mp.f = q.positions;
  const std::vector<int64_t> *meta[] = {&q.tags, &q.tsIndex};
  for (size_t k = 2; k < 4; ++k) {
    HostValue &m = cx.out(k);
    if (m.numel() != int64_t(meta[k - 2]->size()))
      cx.error(fmt::format("pack output '{}' has {} values, expected {}", cx.op.out[k], m.numel(), meta[k - 2]->size()));
    m.i = *meta[k - 2];
  }
}

void runUnpack(Ctx &cx) {
  const auto &q = cx.env.req;
  const HostValue &yv = cx.in(0), &ya = cx.in(1);
  HostValue &sv = cx.out(0);
  HostValue &sa = cx.out(1);
  if (yv.rows != q.S || ya.rows != q.S || sv.rows != q.Nv || sa.rows != q.Na || sv.cols != yv.cols ||
      sa.cols != ya.cols)
    cx.error("unpack shapes disagree");
  for (int64_t b = 0; b < q.B; ++b) {
    for (int64_t r = 0; r < q.Nv; ++r)
      std::copy_n(&yv.f[size_t((b * q.S + q.Nt + r) * yv.cols)], yv.cols, &sv.f[size_t((b * q.Nv + r) * sv.cols)]);
    for (int64_t r = 0; r < q.Na; ++r)
      std::copy_n(&ya.f[size_t((b * q.S + q.Nt + q.Nv + r) * ya.cols)], ya.cols,
                  &sa.f[size_t((b * q.Na + r) * sa.cols)]);
  }
}

} // namespace

void runCpuOp(const plan::Op &op, OpEnv &env, ValueMap &values) {
  Ctx cx{op, env, values, env.plan.config, env.precision == Precision::Fp64};
  switch (op.kind) {
  case OpKind::Linear:
  case OpKind::LoraDown:  // t = bf(x A^T): a plain BF16 linear over the down slot (section 13)
  case OpKind::AdalnTable: return runLinear(cx);
  case OpKind::QkvLinear: return runQkvLinear(cx);
  case OpKind::RmsNorm: return runRmsNorm(cx);
  case OpKind::NormModulate: return runNormModulate(cx);
  case OpKind::QkNorm: return runQkNorm(cx);
  case OpKind::Rope: return runRope(cx);
  case OpKind::QkNormRope: return runQkNormRope(cx);
  case OpKind::Attention: return runAttention(cx);
  case OpKind::Swiglu: return runSwiglu(cx);
  case OpKind::Silu: return runSilu(cx);
  case OpKind::Residual: return runResidual(cx);
  case OpKind::GateResidual: return runGateResidual(cx);
  case OpKind::RopeTable: return runRopeTable(cx);
  case OpKind::TimestepSinusoid: return runTimestepSinusoid(cx);
  case OpKind::TimeEmbed: return runTimeEmbed(cx);
  case OpKind::Pack: return runPack(cx);
  case OpKind::Unpack: return runUnpack(cx);
  case OpKind::AllGather:
  case OpKind::Split:
    fail(op.where, "a {} moves values between ranks: the executor runs it (runLayoutOp)", plan::opKindName(op.kind));
  default:
    if (plan::isGradOp(op.kind))
      fail(op.where, "'{}' is a gradient op: it runs in the backward (runCpuGradOp)", plan::opKindName(op.kind));
  }
  fail(op.where + "/op", "the CPU executor has no implementation of '{}'", plan::opKindName(op.kind));
}

} // namespace h3c::rt
