// The CPU reference implementation of every plan op (docs/contract.md sections 3 and 4). The op's numerics are
// derived from the op kind and the fingerprint nodes it covers (a fused op computes exactly the composition of its
// nodes, with the same rounding points); the plan's attrs are checked against that derivation where present.
#include "h3c/runtime/cpu_ops.h"

#include "cpu_kernels.h"
#include "h3c/runtime/host_ops.h"
#include "h3c/runtime/nodes.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <thread>

namespace h3c::rt {

std::vector<int64_t> HostValue::shape() const {
  std::vector<int64_t> s;
  if (ranks > 1)
    s.push_back(ranks);
  s.push_back(batch);
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

void parallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  int t = int(std::min<int64_t>(std::max(1, threads), n));
  if (t == 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  std::exception_ptr err;
  std::mutex mu;
  for (int i = 0; i < t; ++i) {
    int64_t b = n * i / t, e = n * (i + 1) / t;
    pool.emplace_back([&, b, e] {
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!err)
          err = std::current_exception();
      }
    });
  }
  for (auto &th : pool)
    th.join();
  if (err)
    std::rethrow_exception(err);
}

ValueMap graphInputValues(const CanonicalRequest &q) {
  ValueMap m;
  auto floats = [&](const char *name, const std::vector<float> &v, int64_t rows, int64_t cols, DType dt) {
    HostValue h;
    h.dtype = dt;
    h.batch = q.B;
    h.rows = rows;
    h.cols = cols;
    h.f = v;
    m[name] = std::move(h);
  };
  floats("@hidden_states", q.video, q.Nv, q.videoCols, q.videoDtype);
  floats("@audio_hidden_states", q.audio, q.Na, q.audioCols, q.audioDtype);
  floats("@encoder_hidden_states", q.text, q.Nt, q.textCols, q.textDtype);
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
  ints("@position_ids", q.positions, q.S, 3);
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

bool endsWith(const std::string &s, const std::string &suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool startsWith(const std::string &s, const std::string &p) { return s.rfind(p, 0) == 0; }

const std::map<std::string, std::string> &nodeKinds(const h3::Config &c) {
  static std::mutex mu;
  static std::map<std::string, std::map<std::string, std::string>> cache;
  std::lock_guard<std::mutex> g(mu);
  std::string key = h3::configToJson(c).dump();
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  auto &m = cache[key];
  for (auto &n : expectedNodes(c))
    m[n.id] = n.kind;
  return m;
}

float bfIf(bool round, float v) { return round ? roundBf16(v) : v; }

struct Ctx {
  const PlanOp &op;
  OpEnv &env;
  ValueMap &vals;
  const h3::Config &c;
  bool exact;  // Precision::Fp64
  const std::map<std::string, std::string> &kinds;

  [[noreturn]] void error(const std::string &msg) const {
    fail(op.where, "{} ({}): {}", op.op, op.nodes.empty() ? "-" : op.nodes[0], msg);
  }
  const HostValue &in(size_t i) const {
    if (i >= op.in.size())
      error(fmt::format("expected at least {} inputs, got {}", i + 1, op.in.size()));
    auto it = vals.find(op.in[i]);
    if (it == vals.end())
      error(fmt::format("input '{}' has not been computed (or was freed)", op.in[i]));
    return it->second;
  }
  // The first input whose plan value lies in `domain` (optionally skipping index `skip`), or -1.
  int findIn(const std::string &domain, int skip = -1, DType notType = DType::U8) const {
    for (size_t i = 0; i < op.in.size(); ++i) {
      if (int(i) == skip)
        continue;
      const auto &pv = env.plan.value(op.in[i]);
      if (pv.rows == domain && pv.dtype != notType)
        return int(i);
    }
    return -1;
  }
  HostValue &out(size_t i) {
    if (i >= op.out.size())
      error(fmt::format("expected at least {} outputs, got {}", i + 1, op.out.size()));
    const PlanValue &pv = env.plan.value(op.out[i]);
    HostValue h;
    h.dtype = pv.dtype;
    h.ranks = pv.ranks;
    h.batch = pv.batch ? env.req.B : 1;
    h.rows = env.req.rows(pv.rows);
    h.cols = pv.cols;
    if (pv.dtype == DType::I64)
      h.i.assign(size_t(h.numel()), 0);
    else
      h.f.assign(size_t(h.numel()), 0.f);
    HostValue &slot = vals[op.out[i]];
    slot = std::move(h);
    return slot;
  }
  // The node of this op with the given kind (exactly one), or "" when absent.
  std::string node(const std::string &kind, bool required = true) const {
    std::string found;
    for (const auto &n : op.nodes) {
      auto it = kinds.find(n);
      if (it == kinds.end())
        error(fmt::format("'{}' is not a node of this config", n));
      if (it->second == kind) {
        if (!found.empty())
          error(fmt::format("covers two {} nodes ({}, {}); expected one", kind, found, n));
        found = n;
      }
    }
    if (found.empty() && required)
      error(fmt::format("covers no {} node", kind));
    return found;
  }
  std::vector<std::string> nodesOf(const std::string &kind) const {
    std::vector<std::string> v;
    for (const auto &n : op.nodes)
      if (kinds.at(n) == kind)
        v.push_back(n);
    return v;
  }
  // A tensor the op reads: must be listed in the plan op's weights.
  bool listed(const std::string &tensor) const {
    for (const auto &[role, names] : op.weights)
      for (const auto &n : names)
        if (n == tensor)
          return true;
    return false;
  }
  bool configHas(const std::string &tensor) const {
    try {
      env.weights.spec(tensor);
      return true;
    } catch (const Error &) {
      return false;
    }
  }
  std::string weight(const std::string &tensor) const {
    if (!configHas(tensor))
      error(fmt::format("tensor '{}' does not exist in this config", tensor));
    if (!listed(tensor))
      error(fmt::format("the plan does not bind tensor '{}' (#/weights)", tensor));
    return tensor;
  }
  // Optional tensor (biases): present in the config <=> must be bound.
  std::string optWeight(const std::string &tensor) const {
    if (!configHas(tensor)) {
      if (listed(tensor))
        error(fmt::format("binds '{}', which this config does not have", tensor));
      return "";
    }
    return weight(tensor);
  }
  std::vector<float> load(const std::string &tensor) const { return env.weights.load(tensor).toFloats(); }
  std::vector<float> loadRows(const std::string &tensor, int64_t b, int64_t e) const {
    return env.weights.loadRows(tensor, b, e).toFloats();
  }
  DType wdtype(const std::string &tensor) const { return env.weights.spec(tensor).dtype; }
  double eps(double dflt) const {
    auto it = op.attrs.find("eps");
    if (it != op.attrs.end() && it->is_number()) {
      // Plans may carry eps as written in the config or already rounded to F32 (what the kernels use).
      if (it->get<double>() != dflt && float(it->get<double>()) != float(dflt))
        error(fmt::format("attrs.eps {} differs from the config's {}", it->get<double>(), dflt));
    }
    return dflt;
  }
};

// ---- linear family ---------------------------------------------------------------------------------------------

std::string linearWeightName(const std::string &node, const std::string &kind) {
  if (kind == "adaln_table" && endsWith(node, "adaln_proj"))
    return node + ".linear";
  return node;
}

// Accumulates y[M][N] = x W^T over rows [n0, n1) of W (a column shard) or all of W, following the op's k_chunks
// order, with TP row sharding simulated when the op is row-parallel. Output: F32 reductions, no bias.
// When `partials` is given (a separate allreduce_tree follows), the per-rank sub-tree results are written there
// ([tp][M][N]) instead of being combined.
struct GemmSpec {
  std::string tensor;
  int64_t n0 = 0, n1 = 0;  // weight rows
};

void gemmSharded(Ctx &cx, const std::vector<float> &x, int64_t M, int64_t K, const std::vector<GemmSpec> &parts,
                 std::vector<float> &y, int64_t N, std::vector<float> *partials) {
  const std::string shard = cx.op.shardKind();
  const int64_t tp = cx.op.shardTp();
  const int64_t U = cx.op.order.units;
  y.assign(size_t(M * N), 0.f);
  // Output column offset of each part, in order.
  int64_t col = 0;
  for (const auto &p : parts) {
    const int64_t pn = p.n1 - p.n0;
    std::vector<float> yp(size_t(M * pn));
    if (cx.exact) {
      auto w = cx.loadRows(p.tensor, p.n0, p.n1);
      cpu::gemmFp64(x.data(), M, K, w.data(), pn, nullptr, yp.data(), cx.env.threads);
    } else if (cx.wdtype(p.tensor) == DType::F32) {
      // F32 linears run the sequential-fma order (section 6), never sharded by rows of K.
      if (shard == "row" && tp > 1)
        cx.error("an F32 linear cannot be row-parallel");
      auto w = cx.loadRows(p.tensor, p.n0, p.n1);
      cpu::gemmSeqFma(x.data(), M, K, w.data(), pn, yp.data(), cx.env.threads);
    } else if (shard == "row" && tp > 1) {
      if (U % tp)
        cx.error(fmt::format("row-parallel over tp={} needs the unit count {} to be a multiple", tp, U));
      if (K % (U * 16))
        cx.error(fmt::format("K = {} is not {} units of whole 16-wide chunks", K, U));
      auto w = cx.loadRows(p.tensor, p.n0, p.n1);
      const int64_t Kr = K / tp;
      std::vector<std::vector<float>> rank(static_cast<size_t>(tp));
      for (int64_t r = 0; r < tp; ++r) {
        // Rank r holds columns [r*Kr, (r+1)*Kr) of W and of x: U/tp contiguous units.
        std::vector<float> xs(size_t(M * Kr)), ws(size_t(pn * Kr));
        for (int64_t m = 0; m < M; ++m)
          std::copy_n(x.begin() + m * K + r * Kr, Kr, xs.begin() + m * Kr);
        for (int64_t n = 0; n < pn; ++n)
          std::copy_n(w.begin() + n * K + r * Kr, Kr, ws.begin() + n * Kr);
        rank[size_t(r)].resize(size_t(M * pn));
        cpu::gemmKChunks(xs.data(), M, Kr, ws.data(), pn, U / tp, 0, U / tp, rank[size_t(r)].data(),
                         cx.env.threads);
      }
      if (partials) {
        partials->assign(size_t(tp * M * N), 0.f);
        for (int64_t r = 0; r < tp; ++r)
          for (int64_t m = 0; m < M; ++m)
            std::copy_n(rank[size_t(r)].begin() + m * pn, pn, partials->begin() + (r * M + m) * N + col);
      }
      // allreduce_tree: the upper levels of the same pairwise tree over the rank partials.
      std::vector<float> p(static_cast<size_t>(tp));
      for (int64_t i = 0; i < M * pn; ++i) {
        for (int64_t r = 0; r < tp; ++r)
          p[size_t(r)] = rank[size_t(r)][size_t(i)];
        yp[size_t(i)] = cpu::pairwiseTree(p);
      }
    } else if (shard == "column" && tp > 1) {
      if (pn % tp)
        cx.error(fmt::format("column-parallel over tp={}: {} rows of {} do not split evenly", tp, pn, p.tensor));
      const int64_t pr = pn / tp;
      for (int64_t r = 0; r < tp; ++r) {
        auto w = cx.loadRows(p.tensor, p.n0 + r * pr, p.n0 + (r + 1) * pr);  // rank r's slice only
        std::vector<float> yr(size_t(M * pr));
        cpu::gemmKChunks(x.data(), M, K, w.data(), pr, U, 0, U, yr.data(), cx.env.threads);
        for (int64_t m = 0; m < M; ++m)
          std::copy_n(yr.begin() + m * pr, pr, yp.begin() + m * pn + r * pr);
      }
    } else {
      auto w = cx.loadRows(p.tensor, p.n0, p.n1);
      cpu::gemmKChunks(x.data(), M, K, w.data(), pn, U, 0, U, yp.data(), cx.env.threads);
    }
    for (int64_t m = 0; m < M; ++m)
      std::copy_n(yp.begin() + m * pn, pn, y.begin() + m * N + col);
    col += pn;
  }
  if (col != N)
    cx.error(fmt::format("weight rows {} do not match the output width {}", col, N));
}

// Adaln row of canonical row r for block tables (timestep_index * 3 + tag) or norm_out (timestep_index).
int64_t tableRow(const CanonicalRequest &q, int64_t r, bool perTag) {
  return perTag ? q.tsIndex[size_t(r)] * 3 + q.tags[size_t(r)] : q.tsIndex[size_t(r)];
}

// Reads the table of a block (or norm_out) as [rows][chunks*H].
struct Table {
  const float *data = nullptr;
  int64_t rows = 0, width = 0, H = 0, chunks = 0;
  bool perTag = true;
  const float *chunk(int64_t row, int64_t k) const { return data + row * width + k * H; }
};

Table readTable(Ctx &cx, const HostValue &t, const std::string &nodeId) {
  Table tb;
  tb.H = cx.c.hidden_size;
  tb.perTag = startsWith(nodeId, "transformer_blocks.");
  tb.chunks = tb.perTag ? 6 : 2;
  tb.width = tb.chunks * tb.H;
  tb.rows = cx.env.req.T * (tb.perTag ? 3 : 1);
  if (t.numel() != tb.rows * tb.width)
    cx.error(fmt::format("AdaLN table has {} values, expected {} x {}", t.numel(), tb.rows, tb.width));
  tb.data = t.f.data();
  return tb;
}

int64_t chunkOf(const std::string &node) {
  if (endsWith(node, "gate_residual_attn")) return 2;
  if (endsWith(node, "gate_residual_ff")) return 5;
  if (endsWith(node, ".norm1")) return 0;
  if (endsWith(node, ".norm2")) return 3;
  if (node == "norm_out.norm") return 0;
  fail("plan", "no AdaLN chunk for node '{}'", node);
}

// The plan's table attrs (section 6) must agree with what the node implies.
void checkTableAttrs(const PlanOp &op, const Table &tb, int64_t chunk, bool norm) {
  auto want = [&](const char *key, int64_t v) {
    int64_t got = op.attrInt(key, v);
    if (got != v)
      fail(op.where + "/attrs/" + key, "{} for {}, the node implies {}", got, op.nodes.at(0), v);
  };
  if (norm) {
    want("shift_chunk", chunk);
    want("scale_chunk", chunk + 1);
  } else {
    want("chunk", chunk);
  }
  want("num_chunks", tb.chunks);
  std::string ri = op.attrString("row_index", tb.perTag ? "adaln" : "timestep");
  if (ri != (tb.perTag ? "adaln" : "timestep"))
    fail(op.where + "/attrs/row_index", "'{}' for {}, the node implies '{}'", ri, op.nodes.at(0),
         tb.perTag ? "adaln" : "timestep");
}

// M rows of x (flattened batch x rows) converted to the weight dtype.
std::vector<float> asWeightDtype(const HostValue &x, DType wdt) {
  std::vector<float> v = x.f;
  if (wdt == DType::BF16)
    for (auto &e : v)
      e = roundBf16(e);
  return v;
}

void checkAttr(Ctx &cx, const char *key, int64_t want) {
  int64_t got = cx.op.attrInt(key, want);
  if (got != want)
    cx.error(fmt::format("attrs.{} = {} but the operands give {}", key, got, want));
}

void runLinear(Ctx &cx) {
  const std::string lin = cx.node(cx.op.op == "adaln_table" ? "adaln_table" : "linear");
  const std::string base = linearWeightName(lin, cx.kinds.at(lin));
  const std::string wname = cx.weight(base + ".weight"), bname = cx.optWeight(base + ".bias");
  const DType wdt = cx.wdtype(wname);
  const auto &wspec = cx.env.weights.spec(wname);
  const int64_t N = wspec.shape[0], K = wspec.shape[1];

  // Epilogue: from the covered nodes; attrs.epilogue must agree when present.
  std::string epi = "none";
  if (!cx.node("gate_residual", false).empty()) epi = "gate_residual";
  else if (!cx.node("residual", false).empty()) epi = "residual";
  else if (!cx.node("swiglu", false).empty()) epi = "swiglu";
  if (cx.op.op == "adaln_table" && cx.op.nodes.size() != 1)
    cx.error("adaln_table covers exactly one node");
  std::string attrEpi = cx.op.attrString("epilogue", epi);
  if (attrEpi != epi && !(attrEpi == "none" && epi == "none"))
    cx.error(fmt::format("attrs.epilogue '{}' disagrees with the covered nodes ('{}')", attrEpi, epi));
  if (cx.op.nodes.size() != (epi == "none" ? 1u : 2u))
    cx.error("a linear covers its linear node plus at most one epilogue node");

  const HostValue &x = cx.in(0);
  if (x.cols != K)
    cx.error(fmt::format("input '{}' has {} columns, weight {} has K = {}", cx.op.in[0], x.cols, wname, K));
  checkAttr(cx, "K", K);
  checkAttr(cx, "N", N);
  const int64_t M = x.batch * x.rows;
  std::vector<float> xa;
  if (cx.op.op == "adaln_table") {
    xa = x.f;  // a = bf(silu(temb)) at temb's F32 precision, rounded to the projection's dtype
    for (auto &e : xa)
      e = bfIf(wdt == DType::BF16, cpu::siluF(e));
  } else {
    xa = asWeightDtype(x, wdt);
  }

  // Column-parallel shards (section 5.1): rank r takes its contiguous slice of every part: fc1's value half and gate
  // half (so swiglu pairs stay on one rank), each of the 18 (6 x 3) AdaLN chunks, or the whole weight.
  std::vector<GemmSpec> parts;
  if (cx.op.shardKind() == "column" && cx.op.shardTp() > 1 && endsWith(lin, "ff.net.0.proj")) {
    parts = {{wname, 0, N / 2}, {wname, N / 2, N}};
  } else if (cx.op.shardKind() == "column" && cx.op.shardTp() > 1 && endsWith(lin, "adaln_proj")) {
    const int64_t chunks = int64_t(h3::kBlockAdaChunks) * h3::kModalities, H = N / chunks;
    for (int64_t k = 0; k < chunks; ++k)
      parts.push_back({wname, k * H, (k + 1) * H});
  } else {
    parts = {{wname, 0, N}};
  }
  const PlanValue &outPv = cx.env.plan.value(cx.op.out.at(0));
  const bool toPartials = outPv.ranks > 1;
  std::vector<float> acc, partials;
  gemmSharded(cx, xa, M, K, parts, acc, N, toPartials ? &partials : nullptr);
  if (toPartials) {
    if (cx.op.shardKind() != "row")
      cx.error("only a row-parallel linear writes rank partials");
    HostValue &o = cx.out(0);
    if (o.numel() != int64_t(partials.size()))
      cx.error(fmt::format("partials value has {} elements, expected {}", o.numel(), partials.size()));
    o.f = std::move(partials);
    return;
  }
  std::vector<float> bias = bname.empty() ? std::vector<float>() : cx.load(bname);
  // The linear node's own output (diffusers: the weight's dtype): acc + bias in F32, rounded for BF16 weights.
  const bool roundLin = wdt == DType::BF16;
  if (cx.exact) {
    // gemmFp64 added no bias; do it in double here.
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        acc[size_t(m * N + n)] = bias.empty() ? acc[size_t(m * N + n)]
                                              : float(double(acc[size_t(m * N + n)]) + double(bias[size_t(n)]));
  } else if (!bias.empty()) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        acc[size_t(m * N + n)] = acc[size_t(m * N + n)] + bias[size_t(n)];
  }
  for (auto &e : acc)
    e = bfIf(roundLin, e);

  HostValue &o = cx.out(0);
  if (epi == "none") {
    if (o.numel() != int64_t(acc.size()))
      cx.error(fmt::format("output '{}' has {} elements, the linear produces {} x {}", cx.op.out[0], o.numel(), M, N));
    const bool roundOut = o.dtype == DType::BF16;
    for (size_t i = 0; i < acc.size(); ++i)
      o.f[i] = bfIf(roundOut, acc[i]);
    return;
  }
  if (epi == "swiglu") {
    const int64_t F = N / 2;
    if (o.cols != F || o.batch * o.rows != M)
      cx.error(fmt::format("swiglu output must be [{}, {}]", M, F));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t f = 0; f < F; ++f) {
        float val = acc[size_t(m * N + f)], gate = acc[size_t(m * N + F + f)];
        o.f[size_t(m * F + f)] = roundBf16(val * roundBf16(cpu::siluF(gate)));
      }
    return;
  }
  // residual / gate_residual: the residual stream is the other S/Nt-domain input.
  const std::string dom = cx.env.plan.value(cx.op.in[0]).rows;
  int ri = cx.findIn(dom, 0, DType::I64);
  if (ri < 0)
    cx.error("epilogue needs the residual input");
  const HostValue &res = cx.in(static_cast<size_t>(ri));
  if (res.numel() != M * N || o.numel() != M * N)
    cx.error("residual / output shapes disagree with the linear");
  if (epi == "residual") {
    for (int64_t i = 0; i < M * N; ++i)
      o.f[size_t(i)] = roundBf16(res.f[size_t(i)] + acc[size_t(i)]);
    return;
  }
  const std::string gnode = cx.node("gate_residual");
  int ti = cx.findIn("T3");
  if (ti < 0)
    ti = cx.findIn("T");
  if (ti < 0)
    cx.error("gate_residual needs the AdaLN table input");
  Table tb = readTable(cx, cx.in(static_cast<size_t>(ti)), gnode);
  const int64_t k = chunkOf(gnode), rows = res.rows;
  checkTableAttrs(cx.op, tb, k, false);
  for (int64_t m = 0; m < M; ++m) {
    const float *gate = tb.chunk(tableRow(cx.env.req, m % rows, tb.perTag), k);
    for (int64_t n = 0; n < N; ++n)
      o.f[size_t(m * N + n)] = roundBf16(std::fmaf(gate[n], acc[size_t(m * N + n)], res.f[size_t(m * N + n)]));
  }
}

void runQkvLinear(Ctx &cx) {
  auto lins = cx.nodesOf("linear");
  if (lins.size() != 3 || cx.op.nodes.size() != 3 || cx.op.out.size() != 3)
    cx.error("qkv_linear covers to_q, to_k, to_v and has three outputs");
  const HostValue &x = cx.in(0);
  const int64_t M = x.batch * x.rows;
  for (int i = 0; i < 3; ++i) {
    static const char *kSuffix[] = {"attn.to_q", "attn.to_k", "attn.to_v"};
    const std::string &n = lins[size_t(i)];
    if (!endsWith(n, kSuffix[i]))
      cx.error(fmt::format("node {} should be {}", n, kSuffix[i]));
    const std::string w = cx.weight(n + ".weight");
    const auto &spec = cx.env.weights.spec(w);
    if (spec.shape[1] != x.cols)
      cx.error(fmt::format("{} has K = {}, input has {} columns", w, spec.shape[1], x.cols));
    const int64_t N = spec.shape[0];
    std::vector<float> xa = asWeightDtype(x, spec.dtype), acc;
    gemmSharded(cx, xa, M, x.cols, {{w, 0, N}}, acc, N, nullptr);
    HostValue &o = cx.out(static_cast<size_t>(i));
    if (o.numel() != M * N)
      cx.error(fmt::format("output '{}' shape disagrees with {}", cx.op.out[size_t(i)], w));
    for (int64_t j = 0; j < M * N; ++j)
      o.f[size_t(j)] = roundBf16(acc[size_t(j)]);
  }
}

void runAllreduce(Ctx &cx) {
  const HostValue &p = cx.in(0);
  const int64_t tp = p.ranks;
  if (tp != cx.env.plan.tp)
    cx.error(fmt::format("partials carry {} ranks, the plan tp is {}", tp, cx.env.plan.tp));
  HostValue &o = cx.out(0);
  const int64_t n = o.numel();
  if (p.numel() != tp * n)
    cx.error("partials and output sizes disagree");
  std::vector<float> acc(static_cast<size_t>(n)), q(static_cast<size_t>(tp));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < tp; ++r)
      q[size_t(r)] = p.f[size_t(r * n + i)];
    acc[size_t(i)] = cx.exact ? [&] {
      double s = 0;
      for (float v : q) s += v;
      return float(s);
    }() : cpu::pairwiseTree(q);
  }
  // Epilogue after the combine: bias, rounding, residual / gate_residual (same rules as runLinear).
  std::string bname;
  for (const auto &[role, names] : cx.op.weights)
    for (const auto &nm : names)
      if (endsWith(nm, ".bias")) bname = nm;
  const int64_t N = o.cols, M = n / N;
  if (!bname.empty()) {
    auto b = cx.load(bname);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j)
        acc[size_t(m * N + j)] = acc[size_t(m * N + j)] + b[size_t(j)];
  }
  std::string epi = cx.op.attrString("epilogue", "none");
  for (auto &e : acc)
    e = roundBf16(e);  // row-parallel linears (to_out, fc2) are BF16
  if (epi == "none") {
    for (int64_t i = 0; i < n; ++i)
      o.f[size_t(i)] = bfIf(o.dtype == DType::BF16, acc[size_t(i)]);
    return;
  }
  int ri = cx.findIn(cx.env.plan.value(cx.op.out[0]).rows, 0, DType::I64);
  if (ri < 0)
    cx.error("epilogue needs the residual input");
  const HostValue &res = cx.in(static_cast<size_t>(ri));
  if (epi == "residual") {
    for (int64_t i = 0; i < n; ++i)
      o.f[size_t(i)] = roundBf16(res.f[size_t(i)] + acc[size_t(i)]);
    return;
  }
  if (epi != "gate_residual")
    cx.error(fmt::format("unknown epilogue '{}'", epi));
  std::string gnode = cx.node("gate_residual");
  int ti = cx.findIn("T3");
  if (ti < 0) ti = cx.findIn("T");
  Table tb = readTable(cx, cx.in(static_cast<size_t>(ti)), gnode);
  for (int64_t m = 0; m < M; ++m) {
    const float *gate = tb.chunk(tableRow(cx.env.req, m % res.rows, tb.perTag), chunkOf(gnode));
    for (int64_t j = 0; j < N; ++j)
      o.f[size_t(m * N + j)] = roundBf16(std::fmaf(gate[j], acc[size_t(m * N + j)], res.f[size_t(m * N + j)]));
  }
}

// ---- norms ---------------------------------------------------------------------------------------------------

// inv = 1/sqrtf(ss/n + eps) with ss by lane_tree (ordered) or in double (reference).
float invRms(const float *x, int64_t n, double eps, bool exact) {
  if (exact) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i)
      ss += double(x[i]) * double(x[i]);
    return float(1.0 / std::sqrt(ss / double(n) + eps));
  }
  float ss = cpu::laneTreeSumSquares(x, n);
  return 1.0f / std::sqrt(ss / float(n) + float(eps));
}

// y = bf(bf(x*inv) * w) (no weight: bf(x*inv)).
void rmsRow(const float *x, int64_t n, const float *w, double eps, bool exact, float *y) {
  float inv = invRms(x, n, eps, exact);
  for (int64_t i = 0; i < n; ++i) {
    float nv = roundBf16(x[i] * inv);
    y[i] = w ? roundBf16(nv * w[i]) : nv;
  }
}

double normEps(const h3::Config &c, const std::string &node) {
  if (node == "token_refiner.final_norm" || node == "norm_out.norm")
    return c.final_norm_eps;
  if (endsWith(node, "attn.norm_q") || endsWith(node, "attn.norm_k"))
    return c.qk_norm_eps;
  return c.norm_eps;
}

void runRmsNorm(Ctx &cx) {
  const std::string node = cx.node("rms_norm");
  const std::string w = cx.optWeight(node + ".weight");
  std::vector<float> wv = w.empty() ? std::vector<float>() : cx.load(w);
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  if (o.numel() != x.numel() || o.cols != x.cols)
    cx.error("output shape differs from the input");
  const double eps = cx.eps(normEps(cx.c, node));
  parallelFor(x.batch * x.rows, cx.env.threads, [&](int64_t a, int64_t b) {
    for (int64_t m = a; m < b; ++m)
      rmsRow(&x.f[size_t(m * x.cols)], x.cols, wv.empty() ? nullptr : wv.data(), eps, cx.exact,
             &o.f[size_t(m * x.cols)]);
  });
}

void runNormModulate(Ctx &cx) {
  const std::string node = cx.node("norm_modulate");
  const std::string w = cx.weight(node + ".weight");
  auto wv = cx.load(w);
  const HostValue &x = cx.in(0);
  int ti = cx.findIn("T3");
  if (ti < 0) ti = cx.findIn("T");
  if (ti < 0)
    cx.error("norm_modulate needs the AdaLN table input");
  Table tb = readTable(cx, cx.in(static_cast<size_t>(ti)), node);
  HostValue &o = cx.out(0);
  const int64_t H = x.cols;
  if (H != cx.c.hidden_size || o.numel() != x.numel())
    cx.error("shapes disagree with hidden_size");
  const int64_t k = chunkOf(node);
  checkTableAttrs(cx.op, tb, k, true);
  const double eps = cx.eps(normEps(cx.c, node));
  const bool roundOut = true;  // bf() always; norm_out then widens to F32 (a no-op on the value)
  parallelFor(x.batch * x.rows, cx.env.threads, [&](int64_t a, int64_t b) {
    std::vector<float> n(static_cast<size_t>(H));
    for (int64_t m = a; m < b; ++m) {
      rmsRow(&x.f[size_t(m * H)], H, wv.data(), eps, cx.exact, n.data());
      int64_t row = tableRow(cx.env.req, m % x.rows, tb.perTag);
      const float *shift = tb.chunk(row, k), *scale = tb.chunk(row, k + 1);
      for (int64_t i = 0; i < H; ++i)
        o.f[size_t(m * H + i)] = bfIf(roundOut, std::fmaf(n[size_t(i)], roundBf16(1.0f + scale[i]), shift[i]));
    }
  });
}

// Per-head rms norm over d channels (weight [d]) of one [M, heads*d] value, in place into `y`.
void qkNorm(Ctx &cx, const HostValue &x, const std::string &node, HostValue &y) {
  const std::string w = cx.weight(node + ".weight");
  auto wv = cx.load(w);
  const int64_t d = cx.c.attention_head_dim;
  if (int64_t(wv.size()) != d || x.cols % d || y.numel() != x.numel())
    cx.error(fmt::format("{}: shapes disagree with head_dim {}", node, d));
  const double eps = cx.eps(normEps(cx.c, node));
  const int64_t units = x.batch * x.rows * (x.cols / d);
  parallelFor(units, cx.env.threads, [&](int64_t a, int64_t b) {
    for (int64_t u = a; u < b; ++u)
      rmsRow(&x.f[size_t(u * d)], d, wv.data(), eps, cx.exact, &y.f[size_t(u * d)]);
  });
}

// rope in place on y (values already normed), cos/sin [S, R] F32 tables.
void ropeApply(Ctx &cx, HostValue &y, const HostValue &cosv, const HostValue &sinv) {
  const int64_t d = cx.c.attention_head_dim, R = cx.c.rotaryDim(), half = R / 2;
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
  const std::string node = cx.node("qk_norm");
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  qkNorm(cx, x, node, o);
}

void runRope(Ctx &cx) {
  cx.node("rope");
  const HostValue &x = cx.in(0);
  HostValue xcopy = x;
  const HostValue &c = cx.in(1), &s = cx.in(2);
  ropeApply(cx, xcopy, c, s);
  HostValue &o = cx.out(0);
  o.f = std::move(xcopy.f);
}

void runQkNormRope(Ctx &cx) {
  auto norms = cx.nodesOf("qk_norm");
  auto ropes = cx.nodesOf("rope");
  if (norms.size() != 2 || (ropes.size() != 0 && ropes.size() != 2) || cx.op.out.size() != 2)
    cx.error("qk_norm_rope covers norm_q, norm_k (and rope_q, rope_k) with two outputs");
  for (int i = 0; i < 2; ++i) {
    const HostValue &x = cx.in(static_cast<size_t>(i));
    HostValue &o = cx.out(static_cast<size_t>(i));
    const std::string &norm = norms[size_t(i)];
    if (!endsWith(norm, i == 0 ? "attn.norm_q" : "attn.norm_k"))
      cx.error(fmt::format("expected norm_q then norm_k, got {}", norm));
    qkNorm(cx, x, norm, o);
    if (!ropes.empty())
      ropeApply(cx, o, cx.in(2), cx.in(3));
  }
}

// ---- attention -----------------------------------------------------------------------------------------------

void runAttention(Ctx &cx) {
  cx.node("attention");
  const HostValue &q = cx.in(0), &k = cx.in(1), &v = cx.in(2);
  HostValue &o = cx.out(0);
  const int64_t d = cx.c.attention_head_dim, heads = q.cols / d, n = q.rows, ld = q.cols;
  if (q.cols % d || k.numel() != q.numel() || v.numel() != q.numel() || o.numel() != q.numel())
    cx.error("q, k, v and the output must have the same [B, rows, heads*d] shape");
  const double scale = 1.0 / std::sqrt(double(d));
  const float scalef = float(scale);
  parallelFor(q.batch * heads * n, cx.env.threads, [&](int64_t a, int64_t b) {
    std::vector<float> out(static_cast<size_t>(d));
    for (int64_t t = a; t < b; ++t) {
      const int64_t bi = t / (heads * n), h = (t / n) % heads, r = t % n;
      const size_t base = size_t(bi * n * ld + h * d);
      const float *qr = &q.f[base + size_t(r * ld)], *kb = &k.f[base], *vb = &v.f[base];
      if (cx.exact)
        cpu::attentionRowFp64(qr, kb, vb, ld, n, d, scale, out.data());
      else
        cpu::flashRow(qr, kb, vb, ld, n, d, scalef, out.data());
      for (int64_t c = 0; c < d; ++c)
        o.f[base + size_t(r * ld + c)] = roundBf16(out[size_t(c)]);
    }
  });
}

// ---- elementwise -----------------------------------------------------------------------------------------------

void runSwiglu(Ctx &cx) {
  cx.node("swiglu");
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
  cx.node("silu");
  const HostValue &x = cx.in(0);
  HostValue &o = cx.out(0);
  if (o.numel() != x.numel())
    cx.error("silu keeps the shape");
  for (int64_t i = 0; i < x.numel(); ++i)
    o.f[size_t(i)] = bfIf(o.dtype == DType::BF16, cpu::siluF(x.f[size_t(i)]));
}

void runResidual(Ctx &cx) {
  cx.node("residual");
  const HostValue &x = cx.in(0), &y = cx.in(1);
  HostValue &o = cx.out(0);
  if (x.numel() != y.numel() || o.numel() != x.numel())
    cx.error("residual operands differ in shape");
  for (int64_t i = 0; i < x.numel(); ++i)
    o.f[size_t(i)] = roundBf16(x.f[size_t(i)] + y.f[size_t(i)]);
}

void runGateResidual(Ctx &cx) {
  const std::string node = cx.node("gate_residual");
  const HostValue &x = cx.in(0), &y = cx.in(1);
  int ti = cx.findIn("T3");
  if (ti < 0) ti = cx.findIn("T");
  if (ti < 0)
    cx.error("gate_residual needs the AdaLN table input");
  Table tb = readTable(cx, cx.in(static_cast<size_t>(ti)), node);
  HostValue &o = cx.out(0);
  const int64_t H = x.cols, k = chunkOf(node);
  checkTableAttrs(cx.op, tb, k, false);
  if (x.numel() != y.numel() || o.numel() != x.numel())
    cx.error("gate_residual operands differ in shape");
  for (int64_t m = 0; m < x.batch * x.rows; ++m) {
    const float *gate = tb.chunk(tableRow(cx.env.req, m % x.rows, tb.perTag), k);
    for (int64_t i = 0; i < H; ++i)
      o.f[size_t(m * H + i)] = roundBf16(std::fmaf(gate[i], y.f[size_t(m * H + i)], x.f[size_t(m * H + i)]));
  }
}

// ---- host tables, time embedding, pack/unpack -------------------------------------------------------------------

void runRopeTable(Ctx &cx) {
  cx.node("rope_table");
  // The positions operand: the [S, 3] I64 input (@position_ids, canonical here, or pack:positions); the index inputs
  // the node also lists are not needed since canonicalization already ordered the rows.
  int pi = -1;
  for (size_t i = 0; i < cx.op.in.size(); ++i)
    if (cx.env.plan.value(cx.op.in[i]).cols == 3 && cx.env.plan.value(cx.op.in[i]).dtype == DType::I64)
      pi = int(i);
  if (pi < 0)
    cx.error("rope_table needs the positions [S, 3] I64 input");
  const HostValue &pos = cx.in(size_t(pi));
  if (pos.dtype != DType::I64 || pos.cols != 3 || pos.rows != cx.env.req.S)
    cx.error("rope_table reads positions [S, 3] I64");
  std::vector<float> c, s;
  ropeTable(cx.c, pos.i.data(), pos.rows, c, s);
  HostValue &oc = cx.out(0);
  if (oc.numel() != int64_t(c.size()))
    cx.error(fmt::format("cos must be [S, {}]", cx.c.rotaryDim()));
  oc.f = std::move(c);
  HostValue &os = cx.out(1);
  if (os.numel() != int64_t(s.size()))
    cx.error(fmt::format("sin must be [S, {}]", cx.c.rotaryDim()));
  os.f = std::move(s);
}

std::vector<float> linearF32(Ctx &cx, const std::vector<float> &x, int64_t M, const std::string &node) {
  const std::string w = cx.weight(node + ".weight"), b = cx.optWeight(node + ".bias");
  const auto &spec = cx.env.weights.spec(w);
  const int64_t N = spec.shape[0], K = spec.shape[1];
  if (int64_t(x.size()) != M * K)
    cx.error(fmt::format("{} expects K = {}", node, K));
  std::vector<float> acc;
  gemmSharded(cx, x, M, K, {{w, 0, N}}, acc, N, nullptr);
  if (!b.empty()) {
    auto bv = cx.load(b);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        acc[size_t(m * N + n)] = cx.exact ? float(double(acc[size_t(m * N + n)]) + double(bv[size_t(n)]))
                                          : acc[size_t(m * N + n)] + bv[size_t(n)];
  }
  if (spec.dtype == DType::BF16)
    for (auto &e : acc)
      e = roundBf16(e);
  return acc;
}

void runTimestep(Ctx &cx) {
  const HostValue &t = cx.in(0);
  // The input is @timestep [T] (the op computes time_proj on the host) or an already host-computed sinusoid
  // [T, freq_dim] (section 6's time_embed operand).
  const bool given = cx.op.op == "time_embed" && t.cols == cx.c.freq_dim && t.cols != 1;
  if (t.dtype != DType::F32 || (t.cols != 1 && !given))
    cx.error("expects @timestep [T] F32 (or the sinusoid [T, freq_dim])");
  std::vector<float> emb = given ? t.f : timestepSinusoid(cx.c, t.f);
  if (cx.op.op == "timestep_sinusoid") {
    cx.node("timestep_sinusoid");
    HostValue &o = cx.out(0);
    if (o.numel() != int64_t(emb.size()))
      cx.error(fmt::format("output must be [T, {}]", cx.c.freq_dim));
    o.f = std::move(emb);
    return;
  }
  // time_embed: time_proj, linear_1, act, linear_2 (all F32).
  for (const char *n : {"time_proj", "time_embedder.linear_1", "time_embedder.act", "time_embedder.linear_2"})
    if (std::find(cx.op.nodes.begin(), cx.op.nodes.end(), n) == cx.op.nodes.end())
      cx.error(fmt::format("time_embed must cover {}", n));
  const int64_t T = t.rows;
  auto h = linearF32(cx, emb, T, "time_embedder.linear_1");
  for (auto &e : h)
    e = cpu::siluF(e);
  auto y = linearF32(cx, h, T, "time_embedder.linear_2");
  HostValue &o = cx.out(0);
  if (o.numel() != int64_t(y.size()))
    cx.error(fmt::format("output must be [T, {}]", cx.c.time_embed_dim));
  o.f = std::move(y);
}

void runPack(Ctx &cx) {
  cx.node("pack");
  const auto &q = cx.env.req;
  int it = cx.findIn("Nt", -1, DType::I64), iv = cx.findIn("Nv", -1, DType::I64), ia = cx.findIn("Na", -1, DType::I64);
  if (it < 0 || iv < 0 || ia < 0)
    cx.error("pack reads the text [B,Nt,H], video [B,Nv,H] and audio [B,Na,H] streams");
  const HostValue &tx = cx.in(static_cast<size_t>(it)), &vx = cx.in(static_cast<size_t>(iv)), &ax = cx.in(static_cast<size_t>(ia));
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
  for (size_t k = 1; k < cx.op.out.size(); ++k) {
    const std::string &name = cx.op.out[k];
    HostValue &m = cx.out(k);
    if (endsWith(name, ":positions") && m.numel() == q.S * 3) m.i = q.positions;
    else if (endsWith(name, ":tags") && m.numel() == q.S) m.i = q.tags;
    else if (endsWith(name, ":ts_index") && m.numel() == q.S) m.i = q.tsIndex;
    else cx.error(fmt::format("unknown or misshaped pack output '{}'", name));
  }
}

void runUnpack(Ctx &cx) {
  cx.node("unpack");
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

void runCpuOp(const PlanOp &op, OpEnv &env, ValueMap &values) {
  Ctx cx{op, env, values, env.plan.config, env.precision == Precision::Fp64, nodeKinds(env.plan.config)};
  const std::string &k = op.op;
  if (k == "linear" || k == "adaln_table") runLinear(cx);
  else if (k == "qkv_linear") runQkvLinear(cx);
  else if (k == "allreduce_tree") runAllreduce(cx);
  else if (k == "rms_norm") runRmsNorm(cx);
  else if (k == "norm_modulate") runNormModulate(cx);
  else if (k == "qk_norm") runQkNorm(cx);
  else if (k == "rope") runRope(cx);
  else if (k == "qk_norm_rope") runQkNormRope(cx);
  else if (k == "attention") runAttention(cx);
  else if (k == "swiglu") runSwiglu(cx);
  else if (k == "silu") runSilu(cx);
  else if (k == "residual") runResidual(cx);
  else if (k == "gate_residual") runGateResidual(cx);
  else if (k == "rope_table") runRopeTable(cx);
  else if (k == "timestep_sinusoid" || k == "time_embed") runTimestep(cx);
  else if (k == "pack") runPack(cx);
  else if (k == "unpack") runUnpack(cx);
  else fail(op.where + "/op", "the CPU executor has no implementation of '{}'", k);
}

} // namespace h3c::rt
