// The plan against the model it claims to compute (issue 18): after the format checks of read.cpp, a plan edited and
// re-hashed must still compute exactly the node graph of its config's fingerprint, or be refused. Three checks:
//   - wiring: every value is traced to the fingerprint value it holds (graph inputs are themselves; an op's outputs
//     are the outputs of its nodes that no other node of the op reads; a layout op's output is its input, moved),
//     and every op must read exactly the fingerprint values its nodes read from outside the op, in node order;
//   - values: the dtype and row domain of every traced value are the fingerprint's, and its width is the full width
//     of what it holds or, under tensor parallelism, a rank's part of it;
//   - attrs and operands: every attr an executor sizes its loops and reads by (K, N, H, heads, chunks, eps, ...) is
//     the one the op's nodes imply (a column shard's widths divided by tp), and every operand value has the width
//     the attrs imply, so no executor can read outside a value, a weight or a table.
#include "h3c/plan/plan.h"

#include "h3c/models/fingerprint.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <set>

namespace h3c::plan {
namespace {

using nlohmann::json;

// Node attrs by key, out of line: the many inlined nlohmann conversions were most of this file's compile time.
[[gnu::noinline]] int64_t I(const json &a, const char *k) { return a.at(k).get<int64_t>(); }
[[gnu::noinline]] double D(const json &a, const char *k) { return a.at(k).get<double>(); }
[[gnu::noinline]] std::string S(const json &a, const char *k) { return a.at(k).get<std::string>(); }

// The full (tp = 1) width of fingerprint value `v` defined by node `n` as its output `k`.
int64_t fullWidth(const h3::Node &n, size_t k) {
  const json &a = n.attrs;
  const std::string &kind = n.kind;
  if (kind == "linear") return I(a, "out_features");
  if (kind == "adaln_table") return I(a, "chunks_per_row") * I(a, "chunk_dim");
  if (kind == "rms_norm" || kind == "norm_modulate" || kind == "silu" || kind == "residual" ||
      kind == "gate_residual" || kind == "timestep_sinusoid")
    return I(a, "dim");
  if (kind == "qk_norm" || kind == "rope" || kind == "attention")
    return I(a, "heads") * I(a, "head_dim");
  if (kind == "swiglu") return I(a, "ffn_dim");
  if (kind == "rope_table") return I(a, "rotary_dim");
  if (kind == "unpack") return a.at("dims").at(k).get<int64_t>();
  if (kind == "pack") return k == 0 ? I(a, "dim") : k == 1 ? 3 : 1;  // x, positions, tags, ts_index
  fail("fingerprint", "node '{}' of unknown kind '{}'", n.id, kind);
}

struct Checker {
  const Plan &p;
  std::map<std::string, const h3::Node *> nodes;        // id -> node
  std::map<std::string, std::pair<const h3::Node *, size_t>> defs;  // fingerprint value -> (node, output index)
  std::map<std::string, std::string> held;              // plan value -> fingerprint value it holds

  const h3::Node &node(const Op &op, size_t i) const { return *nodes.at(op.nodes.at(i)); }
  const Value &value(const std::string &name) const { return p.value(name); }

  [[gnu::noinline]] void expect(const Op &op, const char *attr, int64_t got, int64_t want) const {
    if (got != want)
      fail(op.where + "/attrs/" + attr, "is {} but the op's nodes imply {} ({})", got, want, op.firstNode());
  }
  [[gnu::noinline]] void expectNum(const Op &op, const char *attr, double got, double want) const {
    if (!(got == want))
      fail(op.where + "/attrs/" + attr, "is {} but the op's nodes imply {} ({})", got, want, op.firstNode());
  }
  // A width a rank may hold whole or in part: ops without weights on rank-local data carry the rank's width whether
  // the compiler marked them column-sharded or not (the operand checks below keep every read inside its value).
  [[gnu::noinline]] void expectPart(const Op &op, const char *attr, int64_t got, int64_t full) const {
    const int64_t tp = p.options.tp;
    if (got != full && !(tp > 1 && full % tp == 0 && got * tp == full))
      fail(op.where + "/attrs/" + attr, "is {} but the op's nodes imply {}{} ({})", got, full,
           tp > 1 ? fmt::format(" (or {} per rank)", full / tp) : std::string(), op.firstNode());
  }
  [[gnu::noinline]] void cols(const Op &op, bool input, size_t k, int64_t want) const {
    const std::string &v = input ? op.in.at(k) : op.out.at(k);
    if (value(v).cols != want)
      fail(op.where + (input ? "/in/" : "/out/") + std::to_string(k), "value '{}' has {} columns; the op's attrs need {}",
           v, value(v).cols, want);
  }
  [[gnu::noinline]] void sameRows(const Op &op, size_t a, size_t b) const {
    if (value(op.in.at(a)).rows != value(op.in.at(b)).rows)
      fail(op.where + "/in/" + std::to_string(b), "value '{}' has other rows than '{}'", op.in.at(b), op.in.at(a));
  }

  // Wiring: what the op reads and defines, traced through the fingerprint.
  void wire(const Op &op) {
    if (isLayoutOp(op.kind)) {
      held[op.out.at(0)] = held.at(op.in.at(0));
      return;
    }
    // An unmerged LoRA path (docs/contract.md section 13) is no part of the model: its down projection's output
    // holds no fingerprint value ("~"), and the linear that reads it last is checked without it
    // (read.cpp checkLoraOperands ties the two together).
    if (op.kind == OpKind::LoraDown) {
      held[op.out.at(0)] = "~lora:" + op.in.at(0);
      return;
    }
    const size_t modelInputs = takesLora(op.kind) && op.attrs.loraK > 0 ? op.in.size() - 1 : op.in.size();
    std::set<std::string> internal;
    std::vector<std::string> reads;
    for (const auto &id : op.nodes) {
      for (const auto &in : nodes.at(id)->inputs)
        if (!internal.count(in) && std::find(reads.begin(), reads.end(), in) == reads.end()) reads.push_back(in);
      for (const auto &out : nodes.at(id)->outputs) internal.insert(out);
    }
    std::vector<std::string> got;
    for (size_t k = 0; k < modelInputs; ++k) got.push_back(held.count(op.in[k]) ? held.at(op.in[k]) : "?" + op.in[k]);
    if (got != reads)
      fail(op.where + "/in", "reads [{}] but its nodes ({}) read [{}]: the plan does not compute the model",
           fmt::join(got, ", "), fmt::join(op.nodes, ", "), fmt::join(reads, ", "));
    std::set<std::string> readInside;
    for (const auto &id : op.nodes)
      for (const auto &in : nodes.at(id)->inputs) readInside.insert(in);
    std::vector<std::string> defines;
    for (const auto &id : op.nodes)
      for (const auto &out : nodes.at(id)->outputs)
        if (!readInside.count(out)) defines.push_back(out);
    // qkv_linear lists its outputs q, k, v with or without its qk_norm_rope epilogue, whose q and k (the last two in
    // node order: rope_q, rope_k or norm_q, norm_k) come after to_v's output.
    if (op.kind == OpKind::QkvLinear && op.attrs.epilogue == Epilogue::QkNormRope && defines.size() == 3)
      std::rotate(defines.begin(), defines.begin() + 1, defines.end());
    // A linear that keeps the swiglu's x (h3-fuse training=true) defines the swiglu's output, then its linear node's
    // own (which the swiglu reads inside the op).
    if (op.kind == OpKind::Linear && op.attrs.swigluX && defines.size() == 1)
      defines.push_back(nodes.at(op.nodes.at(0))->outputs.at(0));
    // An attention's row statistics (lse, saved for the backward) hold no fingerprint value ("~"): checked with the
    // op's attrs below.
    const size_t modelOutputs = op.kind == OpKind::Attention && op.attrs.lse ? op.out.size() - 1 : op.out.size();
    if (defines.size() != modelOutputs)
      fail(op.where + "/out", "defines {} values but its nodes define [{}]", modelOutputs, fmt::join(defines, ", "));
    for (size_t k = 0; k < modelOutputs; ++k) held[op.out[k]] = defines[k];
    if (modelOutputs < op.out.size()) held[op.out.back()] = "~lse:" + defines[0];
  }

  // The value's dtype, rows and width against the fingerprint value it holds.
  void checkValue(const std::string &name, const std::string &where) const {
    auto it = held.find(name);
    // graph inputs: request-checked; a LoRA down projection: read.cpp checkLoraOperands
    if (it == held.end() || it->second.empty() || it->second[0] == '@' || it->second[0] == '~') return;
    auto [n, k] = defs.at(it->second);
    const Value &v = value(name);
    const std::string fpRows = n->outputRows.at(k);
    const bool rowsOk = fpRows == domainName(v.rows) || (fpRows == "S" && v.rows == Domain::Sr && p.options.sp > 1);
    if (!rowsOk || v.dtype != n->outputDtypes.at(k))
      fail(where, "value '{}' ({} rows {}) holds '{}', which is {} rows {}", name, dtypeName(v.dtype),
           domainName(v.rows), it->second, dtypeName(n->outputDtypes.at(k)), fpRows);
    const int64_t full = fullWidth(*n, k), tp = p.options.tp;
    if (v.cols != full && !(tp > 1 && full % tp == 0 && v.cols * tp == full))
      fail(where, "value '{}' has {} columns but holds '{}' of {} columns (or {} per rank)", name, v.cols, it->second,
           full, tp > 1 ? full / tp : full);
  }

  // Attrs against the op's nodes, operands against the attrs.
  void checkAttrs(const Op &op) const {
    if (isLayoutOp(op.kind) || op.kind == OpKind::LoraDown) return;  // lora_down: read.cpp checkLoraOperands
    const OpAttrs &a = op.attrs;
    const int64_t d = a.shard.kind == ShardKind::Column ? p.options.tp : 1;
    const json &n0 = node(op, 0).attrs;
    auto last = [&]() -> const json & { return node(op, op.nodes.size() - 1).attrs; };
    switch (op.kind) {
    case OpKind::Linear: {
      expect(op, "K", a.K, I(n0, "in_features"));
      const int64_t N = I(n0, "out_features") / d;
      expect(op, "N", a.N, N);
      cols(op, true, 0, a.K);
      cols(op, false, 0, a.epilogue == Epilogue::Swiglu ? a.N / 2 : a.N);
      if (a.epilogue == Epilogue::Residual || a.epilogue == Epilogue::GateResidual) {
        cols(op, true, 1, a.N);
        sameRows(op, 0, 1);
      }
      if (a.epilogue == Epilogue::GateResidual) {
        expect(op, "chunk", a.chunk, I(last(), "chunk"));
        expect(op, "num_chunks", a.numChunks, I(last(), "num_chunks"));
        cols(op, true, 2, a.numChunks * a.N);
      }
      if (a.epilogue == Epilogue::Swiglu) expect(op, "N", a.N, 2 * I(last(), "ffn_dim") / d);
      if (a.swigluX) cols(op, false, 1, a.N);  // the linear's own [v | g], kept for the backward
      return;
    }
    case OpKind::QkvLinear:
      expect(op, "K", a.K, I(n0, "in_features"));
      expect(op, "N", a.N, I(n0, "out_features") / d);
      expect(op, "heads", a.heads * a.headDim, a.N);
      cols(op, true, 0, a.K);
      for (size_t k = 0; k < 3; ++k) cols(op, false, k, a.N);
      if (a.epilogue == Epilogue::QkNormRope) {  // nodes: to_q, to_k, to_v, norm_q, norm_k(, rope_q, rope_k)
        const json &norm = node(op, 3).attrs;
        expect(op, "heads", a.heads, I(norm, "heads"));
        expect(op, "head_dim", a.headDim, I(norm, "head_dim"));
        expectNum(op, "eps", a.eps, D(norm, "eps"));
        const bool rope = op.nodes.size() == 7;
        expect(op, "rotary_dim", a.rotaryDim, rope ? I(last(), "rotary_dim") : 0);
        if (rope) {
          cols(op, true, 1, a.rotaryDim);
          cols(op, true, 2, a.rotaryDim);
        }
      }
      return;
    case OpKind::AdalnTable:
      expect(op, "K", a.K, I(n0, "in_features"));
      expect(op, "N", a.N, I(n0, "out_features") / d);
      expect(op, "num_chunks", a.numChunks, I(n0, "chunks_per_row"));
      expect(op, "rows_per_timestep", a.rowsPerTimestep, I(n0, "rows_per_timestep"));
      cols(op, true, 0, a.K);
      cols(op, false, 0, a.N / a.rowsPerTimestep);  // [T * rows_per_timestep, num_chunks * H]
      return;
    case OpKind::TimeEmbed:
      expect(op, "K", a.K, I(n0, "in_features"));
      expect(op, "freq_dim", a.freqDim, I(n0, "in_features"));
      expect(op, "hidden", a.hidden, I(n0, "out_features"));
      expect(op, "N", a.N, I(last(), "out_features"));
      expect(op, "out_dim", a.outDim, I(last(), "out_features"));
      cols(op, true, 0, a.K);
      cols(op, false, 0, a.N);
      return;
    case OpKind::RmsNorm:
      expect(op, "H", a.H, I(n0, "dim"));
      expectNum(op, "eps", a.eps, D(n0, "eps"));
      cols(op, true, 0, a.H);
      cols(op, false, 0, a.H);
      return;
    case OpKind::NormModulate:
      expect(op, "H", a.H, I(n0, "dim"));
      expectNum(op, "eps", a.eps, D(n0, "eps"));
      expect(op, "shift_chunk", a.shiftChunk, I(n0, "shift_chunk"));
      expect(op, "scale_chunk", a.scaleChunk, I(n0, "scale_chunk"));
      expect(op, "num_chunks", a.numChunks, I(n0, "num_chunks"));
      if (rowIndexName(a.rowIndex) != S(n0, "row_index"))
        fail(op.where + "/attrs/row_index", "differs from the node's {}", S(n0, "row_index"));
      cols(op, true, 0, a.H);
      cols(op, true, 1, a.numChunks * a.H);
      cols(op, false, 0, a.H);
      return;
    case OpKind::QkNorm:
    case OpKind::Rope:
    case OpKind::QkNormRope: {
      expectPart(op, "heads", a.heads, I(n0, "heads"));
      expect(op, "head_dim", a.headDim, I(n0, "head_dim"));
      if (op.kind != OpKind::Rope) expectNum(op, "eps", a.eps, D(n0, "eps"));
      const bool rope = op.kind == OpKind::Rope || (op.kind == OpKind::QkNormRope && op.nodes.size() == 4);
      expect(op, "rotary_dim", a.rotaryDim, rope ? I(last(), "rotary_dim") : 0);
      const int64_t w = a.heads * a.headDim;
      const size_t data = op.kind == OpKind::QkNormRope ? 2 : 1;
      for (size_t k = 0; k < data; ++k) {
        cols(op, true, k, w);
        cols(op, false, k, w);
      }
      if (rope) {
        cols(op, true, data, a.rotaryDim);
        cols(op, true, data + 1, a.rotaryDim);
      }
      return;
    }
    case OpKind::Attention:
      expectPart(op, "heads", a.heads, I(n0, "heads"));
      expect(op, "head_dim", a.headDim, I(n0, "head_dim"));
      expectNum(op, "scale", a.scale, D(n0, "scale"));
      if (domainName(a.domain) != S(n0, "domain") &&
          !(a.domain == Domain::Sr && S(n0, "domain") == "S"))
        fail(op.where + "/attrs/domain", "differs from the node's {}", S(n0, "domain"));
      for (size_t k = 0; k < 3; ++k) cols(op, true, k, a.heads * a.headDim);
      cols(op, false, 0, a.heads * a.headDim);
      sameRows(op, 1, 2);
      if (a.lse) {  // the row statistics: F32, one column per head, q's rows
        cols(op, false, 1, a.heads);
        const Value &l = value(op.out.at(1)), &q = value(op.in.at(0));
        if (l.dtype != DType::F32 || l.rows != q.rows || l.batch != q.batch)
          fail(op.where + "/out/1", "value '{}' (attention's row statistics) must be F32 with q's rows", l.name);
      }
      return;
    case OpKind::Swiglu:
      expectPart(op, "F", a.F, I(n0, "ffn_dim"));
      expect(op, "cols", a.cols, a.F);
      cols(op, true, 0, 2 * a.F);
      cols(op, false, 0, a.F);
      return;
    case OpKind::Silu:
    case OpKind::Residual:
      expectPart(op, "cols", a.cols, I(n0, "dim"));
      for (size_t k = 0; k < op.in.size(); ++k) cols(op, true, k, a.cols);
      cols(op, false, 0, a.cols);
      if (op.kind == OpKind::Residual) sameRows(op, 0, 1);
      return;
    case OpKind::GateResidual:
      expectPart(op, "H", a.H, I(n0, "dim"));
      expect(op, "chunk", a.chunk, I(n0, "chunk"));
      expect(op, "num_chunks", a.numChunks, I(n0, "num_chunks"));
      cols(op, true, 0, a.H);
      cols(op, true, 1, a.H);
      cols(op, true, 2, a.numChunks * a.H);
      cols(op, false, 0, a.H);
      sameRows(op, 0, 1);
      return;
    case OpKind::Pack:
      expect(op, "H", a.H, I(n0, "dim"));
      for (size_t k = 0; k < 3; ++k) cols(op, true, k, a.H);
      cols(op, false, 0, a.H);
      return;
    case OpKind::Unpack:
      expect(op, "video_cols", a.videoCols, n0.at("dims").at(0).get<int64_t>());
      expect(op, "audio_cols", a.audioCols, n0.at("dims").at(1).get<int64_t>());
      cols(op, true, 0, a.videoCols);
      cols(op, true, 1, a.audioCols);
      cols(op, false, 0, a.videoCols);
      cols(op, false, 1, a.audioCols);
      return;
    case OpKind::RopeTable:
      expect(op, "rotary_dim", a.rotaryDim, I(n0, "rotary_dim"));
      expectNum(op, "theta", a.theta, D(n0, "theta"));
      cols(op, false, 0, a.rotaryDim);
      cols(op, false, 1, a.rotaryDim);
      return;
    case OpKind::TimestepSinusoid:
      expect(op, "freq_dim", a.freqDim, I(n0, "dim"));
      cols(op, false, 0, a.freqDim);
      return;
    case OpKind::AllGather:
    case OpKind::Split:
    case OpKind::LoraDown: return;
    default: fail(op.where + "/op", "'{}' is a gradient op, which the forward never holds", opKindName(op.kind));
    }
  }
};

} // namespace

void checkPlanComputesModel(const Plan &p, const h3::Fingerprint &model, const std::string &root) {
  Checker c{p, {}, {}, {}};
  for (const auto &n : model.nodes) {
    c.nodes[n.id] = &n;
    for (size_t k = 0; k < n.outputs.size(); ++k) c.defs[n.outputs[k]] = {&n, k};
  }
  {
    const std::string name = "forward";
    const Function &fn = p.forward();
    c.held.clear();
    for (const auto &g : fn.inputs) c.held[g] = g;
    for (const Op &op : fn.ops) {
      c.wire(op);
      c.checkAttrs(op);
      for (size_t k = 0; k < op.out.size(); ++k) c.checkValue(op.out[k], op.where + "/out/" + std::to_string(k));
    }
    for (const auto &[key, v] : fn.outputs)
      if (c.held.at(v) != "unpack:" + key)
        fail(root + "/functions/" + name + "/outputs/" + key, "is '{}', which holds '{}', not 'unpack:{}'", v, c.held.at(v), key);
  }
}

} // namespace h3c::plan
