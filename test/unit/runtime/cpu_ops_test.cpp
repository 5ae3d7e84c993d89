// Single ops of the CPU reference against expectations computed by hand: the k_chunks chain (a cancellation that
// only the declared order gets right), the F32 sequential-fma order, the AdaLN row index, rope's halves, the flash
// attention bound (and a rank's query rows over all keys), the lane_tree norm, and the layout ops' copies.
#include "fp64_reference.h"
#include "h3c/support/detmath.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>

using namespace h3c;
using namespace h3c::rt;

namespace {

// Weights given by the test, tensor by tensor (names must exist in the config).
class GivenWeights final : public WeightSource {
public:
  explicit GivenWeights(const h3::Config &c) : WeightSource(c) {}
  std::map<std::string, std::vector<float>> values;
  Tensor load(const std::string &name) override {
    const auto &s = spec(name);
    auto it = values.find(name);
    if (it == values.end())
      throw Error(name, "not given");
    return Tensor::fromFloats(s.dtype, s.shape, it->second.data());
  }
  nlohmann::json describe() const override { return {{"kind", "test"}}; }
};

h3::Config cfg() {
  h3::Config c = h3::namedConfig("tiny");
  c.text_dim = 64;  // context_embedder K = 64: four 16-wide units
  return c;
}

struct Fixture {
  h3::Config c = cfg();
  plan::Plan plan;
  CanonicalRequest req;
  GivenWeights w{c};
  ValueMap vals;
  Fixture(int64_t Nt, int64_t Nv, int64_t Na, int64_t T) {
    plan.config = c;
    req.B = 1;
    req.Nt = Nt;
    req.Nv = Nv;
    req.Na = Na;
    req.S = Nt + Nv + Na;
    req.T = T;
  }
  void value(const std::string &n, DType dt, const char *rows, int64_t cols, bool batch = true) {
    plan::Value v;
    v.name = n;
    v.dtype = dt;
    plan::parseDomain(rows, v.rows);
    v.cols = cols;
    v.batch = batch;
    plan.values[n] = v;
  }
  void input(const std::string &n, DType dt, const char *rows, int64_t cols, std::vector<float> data,
             bool batch = true) {
    value(n, dt, rows, cols, batch);
    HostValue h;
    h.dtype = dt;
    h.rows = req.rows(rows);
    h.cols = cols;
    h.f = std::move(data);
    vals[n] = h;
  }
  void ints(const std::string &n, const char *rows, std::vector<int64_t> data) {
    value(n, DType::I64, rows, 1, false);
    HostValue h;
    h.dtype = DType::I64;
    h.rows = req.rows(rows);
    h.cols = 1;
    h.i = std::move(data);
    vals[n] = h;
  }
  plan::Op op(plan::OpKind kind, std::vector<std::string> nodes, std::vector<std::string> in,
              std::vector<std::string> out, std::vector<std::string> weights, std::vector<std::string> biases,
              plan::OpAttrs attrs = {}, plan::Order order = {}) {
    plan::Op o;
    o.kind = kind;
    o.nodes = std::move(nodes);
    o.in = std::move(in);
    o.out = std::move(out);
    o.weights = std::move(weights);
    o.biases = std::move(biases);
    o.attrs = attrs;
    o.order = order;
    o.where = "test-op";
    return o;
  }
  void run(const plan::Op &o, Precision p = Precision::Ordered, int threads = 2) {
    OpEnv env{plan, req, w, p, threads};
    runCpuOp(o, env, vals);
  }
};

plan::Order kChunks(int units) {
  plan::Order o;
  o.kind = plan::OrderKind::KChunks;
  o.kStep = 16;
  o.units = units;
  return o;
}

plan::Order laneTree() {
  plan::Order o;
  o.kind = plan::OrderKind::LaneTree;
  o.lanes = 32;
  return o;
}

plan::OpAttrs linearAttrs(int64_t K, int64_t N) {
  plan::OpAttrs a;
  a.K = K;
  a.N = N;
  return a;
}

// Attention inputs q, k, v [S, inner] (bf16 values of smooth functions with these frequencies and amplitude) and
// output o in `f`, the flash order and the attrs of the tiny config's heads.
struct AttentionCase {
  std::vector<float> q, k, v;
  plan::Order order;
  plan::OpAttrs attrs;
};
AttentionCase attentionCase(Fixture &f, int64_t S, float fq, float fk, float fv, float amp) {
  const int64_t I = f.c.innerDim(), d = f.c.attention_head_dim;
  AttentionCase c;
  c.q.resize(size_t(S * I));
  c.k.resize(size_t(S * I));
  c.v.resize(size_t(S * I));
  for (int64_t i = 0; i < S * I; ++i) {
    c.q[size_t(i)] = roundBf16(std::sin(fq * float(i)) * amp);
    c.k[size_t(i)] = roundBf16(std::cos(fk * float(i)) * amp);
    c.v[size_t(i)] = roundBf16(std::sin(fv * float(i)));
  }
  f.input("q", DType::BF16, "S", I, c.q);
  f.input("k", DType::BF16, "S", I, c.k);
  f.input("v", DType::BF16, "S", I, c.v);
  f.value("o", DType::BF16, "S", I);
  c.order.kind = plan::OrderKind::Flash;
  c.order.kvBlock = 128;
  c.order.kStep = 16;
  c.attrs.heads = I / d;
  c.attrs.headDim = d;
  return c;
}

} // namespace

// x . w over K = 64 with w = 1 and the chunk sums (2^24, 1, 1, -2^24). In F32 the k_chunks order (one chain, chunks
// added in order from 0) gives ((2^24 + 1 -> 2^24, tie to even) + 1 -> 2^24) - 2^24 = 0, while any tree over the
// chunks (e.g. (2^24 + 1) + (1 - 2^24) = 1) or an exact sum gives 1: the declared order is observable and the CPU
// follows it. Any order other than one unit is rejected (docs/contract.md section 4).
TEST(CpuOps, KChunksIsOneAscendingChain) {
  for (auto [units, expect] : {std::pair{1, 0.0f}, std::pair{2, -1.0f}, std::pair{4, -1.0f}}) {
    Fixture f(1, 0, 0, 1);
    std::vector<float> x(64, 0.f);
    x[0] = 16777216.f;  // 2^24, exact in bf16
    x[16] = 1.f;
    x[32] = 1.f;
    x[48] = -16777216.f;
    f.input("x", DType::BF16, "Nt", 64, x);
    const int64_t H = f.c.hidden_size;
    f.w.values["context_embedder.weight"] = std::vector<float>(size_t(H * 64), 1.f);
    f.w.values["context_embedder.bias"] = std::vector<float>(size_t(H), 0.f);
    f.value("y", DType::BF16, "Nt", H);
    auto op = f.op(plan::OpKind::Linear, {"context_embedder"}, {"x"}, {"y"}, {"context_embedder.weight"},
                   {"context_embedder.bias"}, linearAttrs(64, H), kChunks(units));
    if (expect < 0) {
      EXPECT_THROW(f.run(op), Error) << "units " << units;
      continue;
    }
    f.run(op);
    for (int64_t n = 0; n < H; ++n)
      ASSERT_EQ(f.vals["y"].f[size_t(n)], expect) << "units " << units;
  }
}

// F32 weights (time_embedder.linear_1) follow section 6: acc = fma(x_k, w_k, acc) ascending, then + bias.
TEST(CpuOps, F32LinearIsSequentialFma) {
  Fixture f(1, 0, 0, 1);
  const int64_t K = f.c.freq_dim, N = f.c.time_embed_hidden_dim;  // 8 -> 24
  std::vector<float> x(static_cast<size_t>(K)), w(size_t(N * K)), b(static_cast<size_t>(N));
  for (int64_t k = 0; k < K; ++k)
    x[size_t(k)] = 1.0f + float(k) / 3.0f;
  for (int64_t i = 0; i < N * K; ++i)
    w[size_t(i)] = std::sin(float(i)) * 0.37f;
  for (int64_t n = 0; n < N; ++n)
    b[size_t(n)] = 0.1f * float(n);
  f.input("t", DType::F32, "T", K, x, false);
  f.w.values["time_embedder.linear_1.weight"] = w;
  f.w.values["time_embedder.linear_1.bias"] = b;
  f.value("h", DType::F32, "T", N, false);
  f.run(f.op(plan::OpKind::Linear, {"time_embedder.linear_1"}, {"t"}, {"h"}, {"time_embedder.linear_1.weight"},
             {"time_embedder.linear_1.bias"}, linearAttrs(K, N), kChunks(1)));
  for (int64_t n = 0; n < N; ++n) {
    float acc = 0.f;
    for (int64_t k = 0; k < K; ++k)
      acc = std::fmaf(x[size_t(k)], w[size_t(n * K + k)], acc);
    EXPECT_EQ(f.vals["h"].f[size_t(n)], acc + b[size_t(n)]) << n;
  }
}

// norm_modulate picks table row timestep_index * 3 + tag of each canonical row, chunks (0, 1) for norm1; with a
// constant input row the norm is exactly 1, so y = bf(fma(1, bf(1 + scale), shift)) = 1 + row id (scale 0).
TEST(CpuOps, NormModulateUsesTheAdalnRowOfEachRow) {
  Fixture f(2, 3, 1, 2);
  const int64_t H = f.c.hidden_size, S = f.req.S;
  const std::vector<int64_t> tags = {1, 1, 0, 0, 0, 2}, ts = {0, 1, 1, 0, 1, 0};
  f.ints("ts", "S", ts);
  f.ints("tags", "S", tags);
  f.input("x", DType::BF16, "S", H, std::vector<float>(size_t(S * H), 3.0f));
  std::vector<float> table(size_t(6 * 6 * H), 0.f);  // [T*3, 6H]
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t i = 0; i < H; ++i)
      table[size_t(row * 6 * H + 0 * H + i)] = float(row);  // shift chunk 0 = row id; scale chunk 1 = 0
  f.input("tab", DType::BF16, "T3", 6 * H, table, false);
  f.w.values["transformer_blocks.0.norm1.weight"] = std::vector<float>(size_t(H), 1.f);
  f.value("y", DType::BF16, "S", H);
  plan::OpAttrs a;
  a.H = H;
  a.eps = f.c.norm_eps;
  a.shiftChunk = 0;
  a.scaleChunk = 1;
  a.numChunks = 6;
  a.rowIndex = plan::RowIndex::Adaln;
  f.run(f.op(plan::OpKind::NormModulate, {"transformer_blocks.0.norm1"}, {"x", "tab", "ts", "tags"}, {"y"},
             {"transformer_blocks.0.norm1.weight"}, {}, a, laneTree()));
  for (int64_t s = 0; s < S; ++s)
    EXPECT_EQ(f.vals["y"].f[size_t(s * H + 5)], 1.0f + float(ts[size_t(s)] * 3 + tags[size_t(s)])) << "row " << s;
  // A chunk outside the table's 6 (a plan edited by hand): refused, not read from the next row or past the table.
  for (int64_t bad : {6, -1}) {
    a.scaleChunk = bad;
    EXPECT_THROW(f.run(f.op(plan::OpKind::NormModulate, {"transformer_blocks.0.norm1"}, {"x", "tab", "ts", "tags"},
                            {"y"}, {"transformer_blocks.0.norm1.weight"}, {}, a, laneTree())),
                 Error)
        << bad;
  }
}

// rope: channels [0, R) rotate with x1 = first half, x2 = second half, rot = cat(-x2, x1), cos/sin rounded to bf16;
// channels R..d pass through. One head of 16 with R = 12.
TEST(CpuOps, RopeRotatesHalvesAndPassesTheRest) {
  Fixture f(0, 1, 0, 1);
  const int64_t I = f.c.innerDim(), d = f.c.attention_head_dim, R = f.c.rotaryDim();
  std::vector<float> x(static_cast<size_t>(I)), cs(static_cast<size_t>(R)), sn(static_cast<size_t>(R));
  for (int64_t i = 0; i < I; ++i)
    x[size_t(i)] = roundBf16(0.25f * float(i + 1));
  for (int64_t i = 0; i < R; ++i) {
    cs[size_t(i)] = std::cos(0.3f * float(i));
    sn[size_t(i)] = std::sin(0.3f * float(i));
  }
  f.input("q", DType::BF16, "S", I, x);
  f.input("cos", DType::F32, "S", R, cs, false);
  f.input("sin", DType::F32, "S", R, sn, false);
  f.value("y", DType::BF16, "S", I);
  plan::OpAttrs a;
  a.heads = I / d;
  a.headDim = d;
  a.rotaryDim = R;
  f.run(f.op(plan::OpKind::Rope, {"transformer_blocks.0.attn.rope_q"}, {"q", "cos", "sin"}, {"y"}, {}, {}, a));
  for (int64_t h = 0; h < I / d; ++h)
    for (int64_t i = 0; i < d; ++i) {
      float v = x[size_t(h * d + i)], want = v;
      if (i < R) {
        float rot = i < R / 2 ? -x[size_t(h * d + i + R / 2)] : x[size_t(h * d + i - R / 2)];
        want = roundBf16(v * roundBf16(cs[size_t(i)]) + rot * roundBf16(sn[size_t(i)]));
      }
      EXPECT_EQ(f.vals["y"].f[size_t(h * d + i)], want) << "head " << h << " channel " << i;
    }
}

// Flash attention over 150 keys (2 blocks of 128, or 3 of 64 as plans before 2026-12-04 carry) against an fp64
// softmax written here: within bf16 output rounding plus the bf16 P rounding (bound 2^-6 of the value scale). The
// CPU follows the plan's kv_block: the two block sizes round differently somewhere.
TEST(CpuOps, FlashAttentionAgreesWithFp64Softmax) {
  Fixture f(0, 150, 0, 1);
  const int64_t I = f.c.innerDim(), d = f.c.attention_head_dim, S = 150, heads = I / d;
  AttentionCase ac = attentionCase(f, S, 0.7f, 1.3f, 0.11f, 2.f);
  const std::vector<float> &q = ac.q, &k = ac.k, &v = ac.v;
  plan::OpAttrs a = ac.attrs;
  plan::Order fl = ac.order;
  auto op = f.op(plan::OpKind::Attention, {"transformer_blocks.0.attn.attention"}, {"q", "k", "v"}, {"o"}, {}, {}, a,
                 fl);
  ASSERT_EQ(fl.kvBlock, 128);
  std::vector<float> byKv[2];
  for (int64_t kv : {64, 128}) {
    op.order.kvBlock = kv;
    f.run(op, Precision::Ordered, 1);
    std::vector<float> o1 = f.vals["o"].f;
    f.run(op, Precision::Ordered, 3);
    EXPECT_EQ(o1, f.vals["o"].f);  // thread count never matters
    byKv[kv == 128] = o1;
  }
  EXPECT_NE(byKv[0], byKv[1]);
  const fp64ref::Mat ref = fp64ref::attention(q, k, v, S, I, heads, d);
  for (const std::vector<float> &o1 : byKv) {
    double worst = 0;
    for (size_t e = 0; e < ref.size(); ++e) worst = std::max(worst, std::fabs(ref[e] - double(o1[e])));
    EXPECT_LT(worst, 1.0 / 64);
    EXPECT_GT(worst, 0.0);
  }
}

// Sequence parallel: a rank's query rows (domain Sr) attend all key rows; each row's output is byte-equal to the
// same row of the one-rank run (attention is row-independent in its queries).
TEST(CpuOps, RankQueryRowsAttendAllKeysLikeTheFullRun) {
  Fixture f(0, 150, 0, 1);
  const int64_t I = f.c.innerDim();
  AttentionCase ac = attentionCase(f, 150, 0.3f, 0.9f, 0.05f, 3.f);
  const std::vector<float> &q = ac.q;
  plan::OpAttrs a = ac.attrs;
  plan::Order fl = ac.order;
  f.run(f.op(plan::OpKind::Attention, {"transformer_blocks.0.attn.attention"}, {"q", "k", "v"}, {"o"}, {}, {}, a, fl));
  const std::vector<float> full = f.vals["o"].f;
  // Rows [70, 107) as one rank's queries.
  const int64_t b = 70, n = 37;
  f.value("qr", DType::BF16, "Sr", I);
  HostValue qr;
  qr.dtype = DType::BF16;
  qr.rows = n;
  qr.cols = I;
  qr.f.assign(q.begin() + b * I, q.begin() + (b + n) * I);
  f.vals["qr"] = qr;
  f.value("or", DType::BF16, "Sr", I);
  OpEnv env{f.plan, f.req, f.w, Precision::Ordered, 2, n};
  runCpuOp(f.op(plan::OpKind::Attention, {"transformer_blocks.0.attn.attention"}, {"qr", "k", "v"}, {"or"}, {}, {}, a,
                fl),
           env, f.vals);
  EXPECT_EQ(f.vals["or"].f, std::vector<float>(full.begin() + b * I, full.begin() + (b + n) * I));
}

// all_gather and split over the ranks' value maps (section 5.2), against copies written out by hand: rows over sp
// (floor(i*S/sp) ranges of every batch item), columns over tp (part j of every segment).
TEST(CpuOps, LayoutOpsCopyRowsAndColumnSegments) {
  h3::Config c = cfg();
  plan::Plan p;
  p.config = c;
  p.options.sp = 2;
  p.options.tp = 2;
  CanonicalRequest req;
  req.B = 2;
  req.S = 5;
  auto op = [&](plan::OpKind kind, plan::Axis axis, int64_t cols, plan::Segments segs) {
    plan::Op o;
    o.kind = kind;
    o.in = {"a"};
    o.out = {"b"};
    o.attrs.axis = axis;
    o.attrs.parts = 2;
    o.attrs.cols = cols;
    o.attrs.segments = std::move(segs);
    o.where = "test-layout";
    return o;
  };
  // Full value [B = 2, S = 5, 4 columns]: element (b, r, c) = 100 b + 10 r + c.
  HostValue full;
  full.dtype = DType::BF16;
  full.batch = 2;
  full.rows = 5;
  full.cols = 4;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c2 = 0; c2 < 4; ++c2)
        full.f.push_back(float(100 * b + 10 * r + c2));
  std::vector<ValueMap> ranks(4);
  for (auto &m : ranks)
    m["a"] = full;
  runLayoutOp(op(plan::OpKind::Split, plan::Axis::Rows, 4, {}), p, req, ranks);
  // sp rank 0 holds rows [0, 2), rank 1 rows [2, 5) of each item.
  EXPECT_EQ(ranks[1]["b"].rows, 2);
  EXPECT_EQ(ranks[2]["b"].rows, 3);
  EXPECT_EQ(ranks[2]["b"].f[0], 20.f);             // item 0, row 2
  EXPECT_EQ(ranks[2]["b"].f[3 * 4 + 1], 121.f);    // item 1, row 2, column 1
  for (auto &m : ranks)
    m["a"] = m["b"];
  runLayoutOp(op(plan::OpKind::AllGather, plan::Axis::Rows, 4, {}), p, req, ranks);
  for (auto &m : ranks)
    EXPECT_EQ(m["b"].f, full.f);
  // Columns: segments [0, 2) and [2, 4); tp rank 1 holds columns 1 and 3.
  for (auto &m : ranks)
    m["a"] = full;
  runLayoutOp(op(plan::OpKind::Split, plan::Axis::Cols, 4, {{0, 2}, {2, 4}}), p, req, ranks);
  EXPECT_EQ(ranks[3]["b"].cols, 2);
  EXPECT_EQ(ranks[3]["b"].f[0], 1.f);
  EXPECT_EQ(ranks[3]["b"].f[1], 3.f);
  EXPECT_EQ(ranks[2]["b"].f[2], 10.f);  // tp rank 0, row 1: columns 0 and 2
  EXPECT_EQ(ranks[2]["b"].f[3], 12.f);
  for (auto &m : ranks)
    m["a"] = m["b"];
  runLayoutOp(op(plan::OpKind::AllGather, plan::Axis::Cols, 4, {{0, 2}, {2, 4}}), p, req, ranks);
  for (auto &m : ranks)
    EXPECT_EQ(m["b"].f, full.f);
  // A part of the wrong size is an error naming the op.
  ranks[1]["a"].cols = 3;
  EXPECT_THROW(runLayoutOp(op(plan::OpKind::AllGather, plan::Axis::Cols, 4, {{0, 2}, {2, 4}}), p, req, ranks), Error);
}

// rms_norm: y = bf(bf(x * inv) * w), inv = 1/sqrtf(ss/H + eps), ss by the lane tree (fma per lane, then the
// shuffle-down tree); for H = 24 (< 32 lanes) each lane holds one square, so the tree is checkable by hand.
TEST(CpuOps, RmsNormLaneTreeAndRoundingPoints) {
  Fixture f(1, 0, 0, 1);
  const int64_t H = f.c.hidden_size;
  std::vector<float> x(static_cast<size_t>(H)), w(static_cast<size_t>(H));
  for (int64_t i = 0; i < H; ++i) {
    x[size_t(i)] = roundBf16(0.1f * float(i) - 1.0f);
    w[size_t(i)] = roundBf16(1.0f + 0.01f * float(i));
  }
  f.input("x", DType::BF16, "Nt", H, x);
  f.w.values["token_refiner.refiner_blocks.0.norm1.weight"] = w;
  f.value("y", DType::BF16, "Nt", H);
  plan::OpAttrs a;
  a.H = H;
  a.eps = f.c.norm_eps;
  f.run(f.op(plan::OpKind::RmsNorm, {"token_refiner.refiner_blocks.0.norm1"}, {"x"}, {"y"},
             {"token_refiner.refiner_blocks.0.norm1.weight"}, {}, a, laneTree()));
  float p[32] = {};
  for (int64_t i = 0; i < H; ++i)
    p[i] = x[size_t(i)] * x[size_t(i)];  // fma(x, x, 0) = x*x rounded once
  for (int off = 16; off >= 1; off /= 2)
    for (int l = 0; l < off; ++l)
      p[l] = p[l] + p[l + off];
  float inv = 1.0f / std::sqrt(p[0] / float(H) + float(f.c.norm_eps));
  for (int64_t i = 0; i < H; ++i)
    EXPECT_EQ(f.vals["y"].f[size_t(i)], roundBf16(roundBf16(x[size_t(i)] * inv) * w[size_t(i)])) << i;
}

// qkv_linear with the qk_norm_rope epilogue (the Hopper fusion) is, bit for bit, qkv_linear followed by qk_norm_rope:
// with rope (a transformer block) and without (a refiner block), in the ordered and the fp64 precision.
TEST(CpuOps, QkvWithQkNormRopeEpilogueIsQkvThenQkNormRope) {
  for (Precision prec : {Precision::Ordered, Precision::Fp64})
    for (bool rope : {true, false}) {
      SCOPED_TRACE(std::string(rope ? "rope" : "norm only") + (prec == Precision::Fp64 ? ", fp64" : ""));
      Fixture f(0, 5, 2, 1);  // S = 7 rows
      const int64_t H = f.c.hidden_size, I = f.c.innerDim(), d = f.c.attention_head_dim, R = f.c.rotaryDim(),
                    S = f.req.S;
      uint32_t seed = 12345u;
      auto next = [&] {  // bf16 values in [-2, 2) from an LCG
        seed = seed * 1664525u + 1013904223u;
        return roundBf16(float(seed >> 8) / float(1u << 24) * 4.0f - 2.0f);
      };
      auto fill = [&](size_t n) {
        std::vector<float> v(n);
        for (auto &e : v) e = next();
        return v;
      };
      const std::string b = "transformer_blocks.0.attn.";
      for (const char *t : {"to_q", "to_k", "to_v"}) f.w.values[b + t + ".weight"] = fill(size_t(I * H));
      for (const char *t : {"norm_q", "norm_k"}) f.w.values[b + t + ".weight"] = fill(size_t(d));
      f.input("x", DType::BF16, "S", H, fill(size_t(S * H)));
      std::vector<float> cs(size_t(S * R)), sn(size_t(S * R));
      for (size_t i = 0; i < cs.size(); ++i) {
        cs[i] = std::cos(0.37f * float(i));
        sn[i] = std::sin(0.37f * float(i));
      }
      f.input("cos", DType::F32, "S", R, cs, false);
      f.input("sin", DType::F32, "S", R, sn, false);
      for (const char *v : {"q", "k", "v", "qr", "kr", "fq", "fk", "fv"}) f.value(v, DType::BF16, "S", I);
      plan::OpAttrs a;
      a.K = H;
      a.N = I;
      a.heads = I / d;
      a.headDim = d;
      a.eps = f.c.qk_norm_eps;
      a.rotaryDim = rope ? R : 0;
      const std::vector<std::string> gemmNodes = {b + "to_q", b + "to_k", b + "to_v"},
                                     gemmW = {b + "to_q.weight", b + "to_k.weight", b + "to_v.weight"},
                                     normW = {b + "norm_q.weight", b + "norm_k.weight"};
      std::vector<std::string> normNodes = {b + "norm_q", b + "norm_k"}, tables;
      if (rope) {
        normNodes.insert(normNodes.end(), {b + "rope_q", b + "rope_k"});
        tables = {"cos", "sin"};
      }
      // Unfused: the GEMM, then the norm (+ rope).
      f.run(f.op(plan::OpKind::QkvLinear, gemmNodes, {"x"}, {"q", "k", "v"}, gemmW, {}, a, kChunks(1)), prec);
      std::vector<std::string> in = {"q", "k"};
      in.insert(in.end(), tables.begin(), tables.end());
      f.run(f.op(plan::OpKind::QkNormRope, normNodes, in, {"qr", "kr"}, normW, {}, a, laneTree()), prec);
      // Fused.
      plan::OpAttrs fa = a;
      fa.epilogue = plan::Epilogue::QkNormRope;
      std::vector<std::string> nodes = gemmNodes, w = gemmW, fin = {"x"};
      nodes.insert(nodes.end(), normNodes.begin(), normNodes.end());
      w.insert(w.end(), normW.begin(), normW.end());
      fin.insert(fin.end(), tables.begin(), tables.end());
      f.run(f.op(plan::OpKind::QkvLinear, nodes, fin, {"fq", "fk", "fv"}, w, {}, fa, kChunks(1)), prec);
      for (auto [fused, want] : {std::pair{"fq", "qr"}, std::pair{"fk", "kr"}, std::pair{"fv", "v"}}) {
        const auto &got = f.vals.at(fused).f, &ref = f.vals.at(want).f;
        ASSERT_EQ(got.size(), ref.size()) << fused;
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(floatToBf16(got[i]), floatToBf16(ref[i])) << fused << " element " << i;
      }
      // The epilogue ran: the normed q is not the GEMM's q.
      EXPECT_NE(f.vals.at("fq").f, f.vals.at("q").f);
    }
}

// swiglu uses detmath's silu (bitwise equal to the GPU): y = bf(value * bf(silu(gate))).
TEST(CpuOps, SwigluIsValueTimesSiluGate) {
  Fixture f(1, 0, 0, 1);
  const int64_t F = f.c.ffn_dim;
  std::vector<float> x(size_t(2 * F));
  for (int64_t i = 0; i < 2 * F; ++i)
    x[size_t(i)] = roundBf16(0.3f * float(i) - 5.0f);
  f.input("x", DType::BF16, "Nt", 2 * F, x);
  f.value("y", DType::BF16, "Nt", F);
  f.run(f.op(plan::OpKind::Swiglu, {"token_refiner.refiner_blocks.1.ff.swiglu"}, {"x"}, {"y"}, {}, {}));
  for (int64_t i = 0; i < F; ++i) {
    float g = x[size_t(F + i)];
    float silu = g / (1.0f + detmath::expf(-g));
    EXPECT_EQ(f.vals["y"].f[size_t(i)], roundBf16(x[size_t(i)] * roundBf16(silu))) << i;
    EXPECT_NEAR(silu, g / (1.0 + std::exp(-double(g))), 1e-6 * (1 + std::fabs(g)));
  }
}

TEST(CpuOps, InconsistentOpsAreRejected) {
  Fixture f(1, 0, 0, 1);
  const int64_t H = f.c.hidden_size;
  f.input("x", DType::BF16, "Nt", 64, std::vector<float>(64, 1.f));
  f.value("y", DType::BF16, "Nt", H);
  f.w.values["context_embedder.weight"] = std::vector<float>(size_t(H * 64), 1.f);
  f.w.values["context_embedder.bias"] = std::vector<float>(size_t(H), 0.f);
  // More than one unit (the order has one chain).
  EXPECT_THROW(f.run(f.op(plan::OpKind::Linear, {"context_embedder"}, {"x"}, {"y"}, {"context_embedder.weight"},
                          {"context_embedder.bias"}, linearAttrs(64, H), kChunks(8))),
               Error);
  // attrs that disagree with the weight's shape.
  EXPECT_THROW(f.run(f.op(plan::OpKind::Linear, {"context_embedder"}, {"x"}, {"y"}, {"context_embedder.weight"},
                          {"context_embedder.bias"}, linearAttrs(64, H + 1), kChunks(1))),
               Error);
  // Another node's bias, narrower than N: refused, not read past its end.
  f.w.values["proj_out.bias"] = std::vector<float>(size_t(f.w.spec("proj_out.bias").numel()), 0.f);
  EXPECT_THROW(f.run(f.op(plan::OpKind::Linear, {"context_embedder"}, {"x"}, {"y"}, {"context_embedder.weight"},
                          {"proj_out.bias"}, linearAttrs(64, H), kChunks(1))),
               Error);
  // An input with the wrong width.
  f.input("x2", DType::BF16, "Nt", 32, std::vector<float>(32, 1.f));
  EXPECT_THROW(f.run(f.op(plan::OpKind::Linear, {"context_embedder"}, {"x2"}, {"y"}, {"context_embedder.weight"},
                          {"context_embedder.bias"}, linearAttrs(64, H), kChunks(1))),
               Error);
}

// `--threads 1000` under a memory limit (issue 18): when threads cannot start (no address space for their stacks),
// the calling thread does their parts; every index is visited exactly once and the call returns normally. Before,
// the first failed start threw out of the loop past joinable threads: std::terminate, an abort.
#ifndef H3C_SANITIZED
namespace {
// In a death-test child: exit 0 when parallelFor over 1000 threads visits every index once under the limit.
[[noreturn]] void parallelForUnderAnAddressSpaceLimit() {
  long pages = 0;
  if (FILE *f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1)
      pages = 0;
    std::fclose(f);
  }
  // Room for a few 8 MB thread stacks above what the process maps now, not for 1000.
  const rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(96) << 20);
  struct rlimit rl {};
  rl.rlim_cur = rl.rlim_max = limit;
  if (pages == 0 || ::setrlimit(RLIMIT_AS, &rl) != 0)
    std::_Exit(3);
  std::vector<std::atomic<int>> seen(100000);
  parallelFor(int64_t(seen.size()), 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      seen[size_t(i)]++;
  });
  for (auto &v : seen)
    if (v != 1)
      std::_Exit(4);
  std::_Exit(0);
}
} // namespace
#endif

TEST(CpuOpsDeathTest, ThreadsThatCannotStartAreDoneByTheCaller) {
#ifdef H3C_SANITIZED
  GTEST_SKIP() << "an address-space limit breaks the sanitizers' shadow memory";
#else
  EXPECT_EXIT(parallelForUnderAnAddressSpaceLimit(), ::testing::ExitedWithCode(0), "");
#endif
}
