// functions.backward against the forward it differentiates (docs/contract.md section 14), after read.cpp's format
// checks: a plan edited and re-hashed must not make an executor read outside a value or differentiate another graph.
//   - each gradient op differentiates one forward node of the kind it is for, with that node's tensors, and the
//     attrs an executor sizes its loops by are the forward op's (K, N, eps, chunks, heads, kv_block, ...);
//   - the forward values it reads (saved activations) are the ones the node's forward op read or wrote;
//   - every operand has the width its attrs imply, every gradient is F32, and every weight gradient is an F32
//     value of the tensor's element count (rows "1");
//   - the inputs are the gradients of the forward's outputs, the outputs exactly the gradients of the three
//     activation inputs and of every weight tensor, each tensor's gradient emitted by exactly one op.
#include "h3c/plan/plan.h"

#include "h3c/models/fingerprint.h"
#include "h3c/support/error.h"

#include <map>
#include <set>

namespace h3c::plan {
namespace backward_check {

// The forward node kind each gradient op differentiates (grad_add: any; it names the consumer node).
std::set<std::string> nodeKinds(OpKind k) {
  switch (k) {
  case OpKind::LinearGradX:
  case OpKind::LinearGradW: return {"linear"};
  case OpKind::SwigluGrad: return {"swiglu"};
  case OpKind::RmsNormGrad: return {"rms_norm", "qk_norm"};
  case OpKind::NormModulateGrad: return {"norm_modulate"};
  case OpKind::GateResidualGrad: return {"gate_residual"};
  case OpKind::RopeGrad: return {"rope"};
  case OpKind::AttentionGrad: return {"attention"};
  case OpKind::SiluGrad: return {"silu"};
  case OpKind::AdalnTableGrad: return {"adaln_table"};
  case OpKind::PackGrad: return {"pack"};
  case OpKind::UnpackGrad: return {"unpack"};
  default: return {};
  }
}

bool isBias(const std::string &t) { return t.size() > 5 && t.compare(t.size() - 5, 5, ".bias") == 0; }

struct Checker {
  const Plan &p;
  std::map<std::string, const h3::Node *> nodes;
  std::map<std::string, const Op *> forwardOf;  // node id -> the forward op implementing it

  // Operand `k` of `list` (in or out) has `cols` columns.
  void width(const Op &op, bool out, size_t k, int64_t cols) const {
    const auto &names = out ? op.out : op.in;
    const Value &v = p.value(names.at(k));
    if (v.cols != cols)
      fail(op.where + (out ? "/out/" : "/in/") + std::to_string(k), "'{}' has {} columns, the op's attrs imply {}",
           v.name, v.cols, cols);
  }
  // The operands that hold a gradient and its activation row for row: one row domain, one batch axis. `in` / `out`
  // are operand positions.
  void sameRows(const Op &op, std::initializer_list<size_t> in, std::initializer_list<size_t> out) const {
    const Value &a = p.value(op.in.at(*in.begin()));
    auto agree = [&](const std::string &name, const std::string &w) {
      const Value &v = p.value(name);
      if (v.rows != a.rows || v.batch != a.batch)
        fail(w, "'{}' has rows {}{}, '{}' rows {}{}: they must agree", v.name, domainName(v.rows),
             v.batch ? " (batched)" : "", a.name, domainName(a.rows), a.batch ? " (batched)" : "");
    };
    for (size_t k : in) agree(op.in.at(k), op.where + "/in/" + std::to_string(k));
    for (size_t k : out) agree(op.out.at(k), op.where + "/out/" + std::to_string(k));
  }
  // Operand k of op.in is the forward value `want` (a saved activation the node's forward op read or wrote).
  void saved(const Op &op, size_t k, const std::string &want) const {
    if (op.in.at(k) != want)
      fail(op.where + "/in/" + std::to_string(k), "reads '{}', but the forward op of {} has '{}' there", op.in[k],
           op.firstNode(), want);
  }
  template <class T>
  void same(const Op &op, const char *key, T got, T want) const {
    if (got != want)
      fail(op.where + "/attrs/" + key, "is {} but the forward op of {} has {}", got, op.firstNode(), want);
  }

  void check(const Op &op) const {
    const OpAttrs &a = op.attrs;
    if (op.kernel && !p.kernels.count(*op.kernel)) fail(op.where + "/kernel", "unknown kernel");
    if (a.shard.kind != ShardKind::Replicated) fail(op.where + "/attrs/shard", "a gradient op is not sharded");
    if (op.nodes.size() != 1) fail(op.where + "/nodes", "a gradient op names the one forward node it differentiates");
    auto nit = nodes.find(op.nodes[0]);
    if (nit == nodes.end()) fail(op.where + "/nodes/0", "'{}' is not a node of this config", op.nodes[0]);
    const h3::Node &n = *nit->second;
    const std::set<std::string> kinds = nodeKinds(op.kind);
    if (!kinds.empty() && !kinds.count(n.kind))
      fail(op.where + "/nodes/0", "a '{}' op differentiates a node of kind {}, '{}' is {}", opKindName(op.kind),
           *kinds.begin(), n.id, n.kind);
    // The tensors: those of the node (linear_grad_x reads the weight only; only the weight-gradient ops list them).
    std::vector<std::string> w, b;
    for (const auto &t : n.tensors) (isBias(t) ? b : w).push_back(t);
    if (op.kind == OpKind::LinearGradX) b.clear();
    if (op.kind != OpKind::LinearGradX && !emitsWeightGrads(op.kind)) w.clear(), b.clear();
    if (op.weights != w || op.biases != b)
      fail(op.where + "/weights", "expected weight [{}] and bias [{}] (the tensors of {})", fmt::join(w, ", "),
           fmt::join(b, ", "), n.id);
    for (size_t k = 0; k < op.out.size(); ++k)
      if (p.value(op.out[k]).dtype != DType::F32)
        fail(op.where + "/out/" + std::to_string(k), "a gradient is F32, '{}' is {}", op.out[k],
             dtypeName(p.value(op.out[k]).dtype));
    // The weight gradients after the activation outputs: F32 values of each tensor's element count.
    const size_t first = outputRoles(op.kind, a).size();
    for (size_t k = first; k < op.out.size(); ++k) {
      const std::string &t = k - first < op.weights.size() ? op.weights[k - first] : op.biases[k - first - op.weights.size()];
      const Value &v = p.value(op.out[k]);
      if (v.rows != Domain::One || v.batch || v.cols != p.weightTensor(t).numel())
        fail(op.where + "/out/" + std::to_string(k), "the gradient of '{}' is an F32 value of rows \"1\" and {} columns",
             t, p.weightTensor(t).numel());
    }
    if (op.kind == OpKind::GradAdd) {
      for (size_t k = 0; k < 2; ++k) width(op, false, k, a.cols);
      width(op, true, 0, a.cols);
      const Value &x = p.value(op.in[0]), &y = p.value(op.in[1]), &z = p.value(op.out[0]);
      if (x.rows != y.rows || x.rows != z.rows || x.batch != y.batch || x.batch != z.batch)
        fail(op.where, "grad_add's operands differ in rows or batch");
      return;
    }
    auto fit = forwardOf.find(n.id);
    if (fit == forwardOf.end()) fail(op.where + "/nodes/0", "no forward op implements '{}'", n.id);
    const Op &f = *fit->second;
    const OpAttrs &fa = f.attrs;
    switch (op.kind) {
    case OpKind::LinearGradX:
    case OpKind::LinearGradW:
      same(op, "K", a.K, fa.K);
      same(op, "N", a.N, fa.N);
      width(op, false, 0, a.N);
      if (op.kind == OpKind::LinearGradX) {
        width(op, true, 0, a.K);
        sameRows(op, {0}, {0});
      } else {
        saved(op, 1, f.in[0]);
        width(op, false, 1, a.K);
        sameRows(op, {0, 1}, {});
      }
      return;
    case OpKind::SwigluGrad:
      same(op, "F", a.F, fa.F);
      saved(op, 1, f.in[0]);
      sameRows(op, {0, 1}, {0});
      width(op, false, 0, a.F);
      width(op, false, 1, 2 * a.F);
      width(op, true, 0, 2 * a.F);
      return;
    case OpKind::RmsNormGrad:
      same(op, "eps", a.eps, fa.eps);
      same(op, "group", a.group, f.kind == OpKind::QkNorm ? fa.headDim : fa.H);
      saved(op, 1, f.in[0]);
      sameRows(op, {0, 1}, {0});
      for (size_t k = 0; k < 2; ++k) width(op, false, k, a.cols);
      width(op, true, 0, a.cols);
      width(op, false, 1, p.value(f.in[0]).cols);
      return;
    case OpKind::NormModulateGrad:
    case OpKind::GateResidualGrad: {
      const bool norm = op.kind == OpKind::NormModulateGrad;
      same(op, "H", a.H, fa.H);
      same(op, "num_chunks", a.numChunks, fa.numChunks);
      same(op, "row_index", std::string(rowIndexName(a.rowIndex)), std::string(rowIndexName(fa.rowIndex)));
      if (norm) {
        same(op, "eps", a.eps, fa.eps);
        same(op, "shift_chunk", a.shiftChunk, fa.shiftChunk);
        same(op, "scale_chunk", a.scaleChunk, fa.scaleChunk);
      } else {
        same(op, "chunk", a.chunk, fa.chunk);
      }
      // Forward in: norm_modulate [x, table, meta...], gate_residual [x, y, table, meta...]; the gradient op reads
      // [dy, x | y, table, meta...].
      const size_t skip = norm ? 0 : 1;
      for (size_t k = 1; k < op.in.size(); ++k) saved(op, k, f.in.at(k - 1 + skip));
      sameRows(op, {0, 1}, {0});
      sameRows(op, {2}, {1});
      for (size_t k = 0; k < 2; ++k) width(op, false, k, a.H);
      width(op, false, 2, a.numChunks * a.H);
      width(op, true, 0, a.H);
      width(op, true, 1, a.numChunks * a.H);
      return;
    }
    case OpKind::RopeGrad:
      same(op, "heads", a.heads, fa.heads);
      same(op, "head_dim", a.headDim, fa.headDim);
      same(op, "rotary_dim", a.rotaryDim, fa.rotaryDim);
      saved(op, 1, f.in[1]);
      saved(op, 2, f.in[2]);
      sameRows(op, {0}, {0});
      width(op, false, 0, a.heads * a.headDim);
      width(op, true, 0, a.heads * a.headDim);
      width(op, false, 1, a.rotaryDim);
      width(op, false, 2, a.rotaryDim);
      return;
    case OpKind::AttentionGrad:
      same(op, "heads", a.heads, fa.heads);
      same(op, "head_dim", a.headDim, fa.headDim);
      same(op, "kv_block", a.kvBlock, f.order.kvBlock);
      for (size_t k = 0; k < 3; ++k) saved(op, k, f.in[k]);
      saved(op, 3, f.out[0]);
      sameRows(op, {0, 1, 2, 3, 4}, {0, 1, 2});
      for (size_t k = 0; k < 5; ++k) width(op, false, k, a.heads * a.headDim);
      for (size_t k = 0; k < 3; ++k) width(op, true, k, a.heads * a.headDim);
      return;
    case OpKind::SiluGrad:
      same(op, "cols", a.cols, fa.cols);
      saved(op, 1, f.in[0]);
      sameRows(op, {0, 1}, {0});
      width(op, false, 0, a.cols);
      width(op, false, 1, a.cols);
      width(op, true, 0, a.cols);
      return;
    case OpKind::AdalnTableGrad:
      same(op, "K", a.K, fa.K);
      same(op, "N", a.N, fa.N);
      same(op, "rows_per_timestep", a.rowsPerTimestep, fa.rowsPerTimestep);
      saved(op, 1, f.in[0]);
      sameRows(op, {1}, {0});
      if (p.value(op.in[0]).rows != p.value(f.out[0]).rows || p.value(op.in[0]).batch)
        fail(op.where + "/in/0", "the table's gradient has the table's rows");
      width(op, false, 0, p.value(f.out[0]).cols);
      width(op, false, 1, a.K);
      width(op, true, 0, a.K);
      if (p.value(f.out[0]).cols * a.rowsPerTimestep != a.N)
        fail(op.where + "/attrs/N", "the table's rows of {} columns x {} per timestep are not N = {}",
             p.value(f.out[0]).cols, a.rowsPerTimestep, a.N);
      return;
    case OpKind::PackGrad:
      same(op, "H", a.H, fa.H);
      width(op, false, 0, a.H);
      for (size_t k = 0; k < 3; ++k) {
        width(op, true, k, p.value(f.in[k]).cols);
        if (p.value(op.out[k]).rows != p.value(f.in[k]).rows)
          fail(op.where + "/out/" + std::to_string(k), "has other rows than '{}'", f.in[k]);
      }
      if (p.value(op.in[0]).rows != p.value(f.out[0]).rows) fail(op.where + "/in/0", "has other rows than '{}'", f.out[0]);
      return;
    case OpKind::UnpackGrad:
      same(op, "video_cols", a.videoCols, fa.videoCols);
      same(op, "audio_cols", a.audioCols, fa.audioCols);
      width(op, false, 0, a.videoCols);
      width(op, false, 1, a.audioCols);
      width(op, true, 0, p.value(f.in[0]).cols);
      width(op, true, 1, p.value(f.in[1]).cols);
      for (size_t k = 0; k < 2; ++k) {
        if (p.value(op.in[k]).rows != p.value(f.out[k]).rows)
          fail(op.where + "/in/" + std::to_string(k), "has other rows than '{}'", f.out[k]);
        if (p.value(op.out[k]).rows != p.value(f.in[k]).rows)
          fail(op.where + "/out/" + std::to_string(k), "has other rows than '{}'", f.in[k]);
      }
      return;
    default: fail(op.where + "/op", "'{}' is no gradient op", opKindName(op.kind));
    }
  }
};

} // namespace backward_check

void checkBackward(const Plan &p, const h3::Fingerprint &model, const std::string &root) {
  const std::string fw = root + "/functions/backward";
  const Function &bwd = *p.backward();
  const Function &fwd = p.forward();
  // The backward of the unfused single-rank forward (h3-backward refuses the rest).
  if (p.options.fuse || p.options.sp != 1 || p.options.tp != 1)
    fail(fw, "a backward is written for the unfused one-rank forward (options fuse false, sp 1, tp 1)");
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors)
      if (t.adapter) fail(fw, "a plan with a backward has no LoRA adapter slots ('{}')", t.name);
  backward_check::Checker c{p, {}, {}};
  for (const auto &n : model.nodes) c.nodes[n.id] = &n;
  for (const Op &op : fwd.ops)
    for (const auto &n : op.nodes) c.forwardOf[n] = &op;
  std::set<std::string> bwdInputs;
  for (size_t i = 0; i < bwd.inputs.size(); ++i) {
    const Value &g = p.value(bwd.inputs[i]);
    const Value &y = p.value(bwd.inputs[i].substr(std::string("@grad:").size()));
    if (g.dtype != DType::F32 || g.rows != y.rows || g.cols != y.cols || g.batch != y.batch)
      fail(fw + "/inputs/" + std::to_string(i), "'{}' must be an F32 value of the shape of '{}'", g.name, y.name);
    bwdInputs.insert(bwd.inputs[i]);
  }
  for (const auto &[key, v] : fwd.outputs)
    if (!bwdInputs.count("@grad:" + v)) fail(fw + "/inputs", "missing '@grad:{}'", v);
  std::map<std::string, std::string> gradOf;  // "grad:<tensor>" -> the value an op emits it as
  for (const Op &op : bwd.ops) {
    c.check(op);
    if (!emitsWeightGrads(op.kind)) continue;
    size_t k = outputRoles(op.kind, op.attrs).size();
    for (const auto *list : {&op.weights, &op.biases})
      for (const auto &t : *list)
        if (!gradOf.emplace("grad:" + t, op.out[k++]).second)
          fail(op.where + "/weights", "the gradient of '{}' is emitted twice", t);
  }
  // Outputs: the activation inputs' gradients and every tensor's, each the value the backward computed for it.
  std::set<std::string> want;
  for (const char *in : {"@hidden_states", "@audio_hidden_states", "@encoder_hidden_states"}) want.insert(std::string("grad:") + in);
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors) want.insert("grad:" + t.name);
  for (const auto &[key, v] : bwd.outputs) {
    const std::string w = fw + "/outputs/" + key;
    if (!want.count(key)) fail(w, "is neither the gradient of an activation input nor of a weight tensor of the plan");
    if (key.rfind("grad:@", 0) == 0) {
      const Value &x = p.value(key.substr(5)), &g = p.value(v);
      if (g.dtype != DType::F32 || g.rows != x.rows || g.cols != x.cols || g.batch != x.batch)
        fail(w, "'{}' must be an F32 value of the shape of '{}'", v, x.name);
    } else if (gradOf.count(key) == 0 || gradOf.at(key) != v) {
      fail(w, "is '{}', but no gradient op emits the gradient of '{}' as that value", v, key.substr(5));
    }
  }
  for (const auto &k : want)
    if (!bwd.outputs.count(k)) fail(fw + "/outputs", "missing '{}'", k);
}

} // namespace h3c::plan
