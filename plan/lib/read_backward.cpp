// functions.backward against the forward it differentiates (docs/contract.md section 14), after read.cpp's format
// checks: a plan edited and re-hashed must not make an executor read outside a value or differentiate another graph.
//   - each gradient op differentiates one forward node of the kind it is for, with that node's tensors, and the
//     attrs an executor sizes its loops by are the forward op's (K, N, eps, chunks, heads, kv_block, ...);
//   - the forward values it reads (saved activations) are the ones the node's forward op read or wrote;
//   - every operand has the width its attrs imply, every gradient is F32, and every weight gradient is an F32
//     value of the tensor's element count (rows "1");
//   - a linear_grad_x / _w over an adapter slot differentiates the unmerged LoRA path of its node's forward linear
//     (section 13): the up slot against that linear's lora_t, the down slot against the lora_down's x; one with a
//     LoRA down path's dX taken in (lora_k) reads a down slot over its linear's x and that path's bf16 dt;
//   - every op emits the gradients of exactly its trained tensors (the function's `trainable`, plan/trainable.h);
//   - the inputs are the gradients of the forward's outputs, the outputs exactly the gradients of the three
//     activation inputs and of every trained weight tensor, each tensor's gradient emitted by exactly one op.
#include "h3c/plan/plan.h"
#include "h3c/plan/trainable.h"

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
  std::map<std::string, const Op *> loraDownOf;  // a lora_down's output value -> that op
  std::vector<std::string> trainable;            // functions.backward.trainable
  std::set<std::string> roundedGrads;             // the backward's bf16 outputs (grad_round's, fused roundings)

  bool trained(const std::string &t) const { return trains(trainable, t, p.weightTensor(t).adapter); }

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

  // A linear_grad_x / _w over adapter slot op.weights[0]: the up slot of forward linear f (the GEMM over lora_t,
  // K = lora_k) or the down slot of the lora_down whose output f reads as lora_t (K = x's width, N = lora_k).
  void checkLora(const Op &op, const Op &f) const {
    const OpAttrs &a = op.attrs;
    const std::string &slot = op.weights[0];
    if (f.kind != OpKind::Linear || f.attrs.loraK == 0 || f.weights.empty() || f.in.empty())
      fail(op.where + "/weights", "adapter slot '{}': the forward op of {} has no LoRA path", slot, op.firstNode());
    auto d = loraDownOf.find(f.in.back());
    if (d == loraDownOf.end()) fail(op.where, "the LoRA input of {}'s forward op is no lora_down output", op.firstNode());
    const bool up = slot == f.weights.back();
    if (!up && slot != d->second->weights.at(0))
      fail(op.where + "/weights", "'{}' is neither the up nor the down slot of {}'s LoRA path", slot, op.firstNode());
    const int64_t K = up ? f.attrs.loraK : d->second->attrs.K, N = up ? f.attrs.N : d->second->attrs.N;
    if (a.K != K || a.N != N)
      fail(op.where + "/attrs", "K {} and N {} are not those of the {} slot's GEMM, {} and {}", a.K, a.N,
           up ? "up" : "down", K, N);
    width(op, false, 0, N);
    if (op.kind == OpKind::LinearGradX) {
      dxOperands(op, K);
    } else {
      saved(op, 1, up ? f.in.back() : d->second->in.at(0));
      width(op, false, 1, K);
      sameRows(op, {0, 1}, {});
    }
  }

  // A linear_grad_x's dx (K columns, g's rows; 2K with swiglu_grad taken in: checkFusedSwiglu) and, with the
  // residual epilogue, the residual it is added to (dx's width and rows).
  void dxOperands(const Op &op, int64_t K) const {
    width(op, true, 0, op.attrs.epilogue == Epilogue::Swiglu ? 2 * K : K);
    if (op.attrs.epilogue != Epilogue::Residual) return sameRows(op, {0}, {0});
    width(op, false, 1, K);
    sameRows(op, {0, 1}, {0});
  }

  // A linear_grad_x with a LoRA down path's dX taken in (h3-fuse-grad, lora_k): its last weight is the down slot of a
  // lora_down over the same x as its node's forward linear f (q, k and v share theirs), of lora_k rows and K
  // columns, and its last input (lora_t) that path's bf16 gradient of t, g's rows and lora_k columns.
  void checkFusedLora(const Op &op, const Op &f) const {
    const OpAttrs &a = op.attrs;
    const std::string &slot = op.weights.back();
    const Op *down = nullptr;
    for (const auto &[t, d] : loraDownOf)
      if (d->weights.at(0) == slot) down = d;
    if (!down) fail(op.where + "/weights", "'{}' is no lora_down's slot, but lora_k names a LoRA down path", slot);
    if (f.in.empty() || down->in.at(0) != f.in[0])
      fail(op.where + "/weights", "the LoRA down path of '{}' reads '{}', not {}'s x '{}'", slot, down->in.at(0),
           op.firstNode(), f.in.empty() ? "" : f.in[0]);
    if (down->attrs.N != a.loraK || down->attrs.K != a.K)
      fail(op.where + "/attrs", "lora_k {} and K {} are not the down slot's {} and {}", a.loraK, a.K, down->attrs.N,
           down->attrs.K);
    const size_t t = loraInput(op);
    width(op, false, t, a.loraK);
    sameRows(op, {0, t}, {});
    if (p.value(op.in[t]).dtype != DType::BF16 || !roundedGrads.count(op.in[t]))
      fail(op.where + "/in/" + std::to_string(t),
           "'{}' must be a bf16 gradient (bf(dt), rounded by a grad_round or as its dX stored it)", op.in[t]);
  }

  // Where a linear_grad_x with lora_k reads lora_t (inputRoles: after g and the residual).
  static size_t loraInput(const Op &op) { return size_t(inputIndex(op.kind, op.attrs, "lora_t")); }

  // A linear_grad_x with swiglu_grad taken in (h3-fuse-grad, epilogue swiglu): its second node is the swiglu whose
  // output the linear's forward op f reads as x, its last input that swiglu's x = [v | g] (a saved forward value of
  // 2K columns), its dx the swiglu_grad's (2K columns, F32 or bf16).
  // A swiglu node's forward op `s`: the swiglu op ([x] -> [y]), or the linear that keeps its x (h3-fuse
  // training=true: the swiglu in its epilogue, x = [v | g] its second output): F and the value x.
  std::pair<int64_t, std::string> swigluForward(const Op &s, const Op &op) const {
    if (s.kind == OpKind::Swiglu) return {s.attrs.F, s.in.at(0)};
    if (s.kind == OpKind::Linear && s.attrs.swigluX) return {s.attrs.N / 2, s.out.at(1)};
    fail(op.where + "/nodes", "the forward op of '{}' is neither a swiglu nor a linear that keeps the swiglu's x",
         op.nodes.back());
  }

  void checkFusedSwiglu(const Op &op, const Op &f) const {
    auto nit = nodes.find(op.nodes[1]);
    if (nit == nodes.end() || nit->second->kind != "swiglu")
      fail(op.where + "/nodes/1", "'{}' is no swiglu node of this config", op.nodes[1]);
    auto fit = forwardOf.find(op.nodes[1]);
    if (fit == forwardOf.end())
      fail(op.where + "/nodes/1", "'{}' is implemented by no forward op", op.nodes[1]);
    const Op &s = *fit->second;
    const auto [F, sx] = swigluForward(s, op);
    if (f.in.empty() || s.out.at(0) != f.in[0])
      fail(op.where + "/nodes", "the linear '{}' does not read the output of the swiglu '{}'", op.nodes[0],
           op.nodes[1]);
    same(op, "K", op.attrs.K, F);
    const size_t x = size_t(inputIndex(op.kind, op.attrs, "swiglu_x"));
    saved(op, x, sx);
    width(op, false, x, 2 * op.attrs.K);
    sameRows(op, {0, x}, {0});
  }

  // A linear gradient's g is F32, or bf16 (a grad_round's bf(g)) where the op multiplies bf(g) on the tensor cores:
  // a bf16 weight, and for dW no bias gradient (dbias sums the F32 g).
  void gradOperand(const Op &op) const {
    if (p.value(op.in.at(0)).dtype == DType::F32) return;
    const bool biasGradient = op.kind == OpKind::LinearGradW && !op.biases.empty() &&
                              std::find(op.grads.begin(), op.grads.end(), op.biases[0]) != op.grads.end();
    if (p.value(op.in.at(0)).dtype != DType::BF16 || op.attrs.wDtype != DType::BF16 || biasGradient)
      fail(op.where + "/in/0", "'{}' is {}: g is F32, or bf16 (bf(g)) only for a bf16 weight's dX or dW without dbias",
           op.in[0], dtypeName(p.value(op.in[0]).dtype));
  }

  // The rope a qk_norm's norm gradient folded in (nodes[1]): a rope node whose forward op rotates the output of the
  // norm's (`norm`: a rope reading it, or the same fused qk_norm_rope) with the norm's heads, and has the rotary_dim
  // and the tables the op reads (in 2, 3).
  void checkFoldedRope(const Op &op, const Op &norm) const {
    const OpAttrs &a = op.attrs;
    auto nit = nodes.find(op.nodes[1]);
    if (nit == nodes.end() || nit->second->kind != "rope")
      fail(op.where + "/nodes/1", "'{}' is no rope node of this config", op.nodes[1]);
    auto fit = forwardOf.find(op.nodes[1]);
    if (fit == forwardOf.end()) fail(op.where + "/nodes/1", "no forward op implements '{}'", op.nodes[1]);
    const Op &r = *fit->second;
    const bool fused = r.kind == OpKind::QkNormRope;
    if (!fused && r.kind != OpKind::Rope) fail(op.where + "/nodes/1", "'{}' is implemented by no rope", op.nodes[1]);
    if (fused ? &r != &norm : std::find(norm.out.begin(), norm.out.end(), r.in.at(0)) == norm.out.end())
      fail(op.where + "/nodes", "the rope '{}' does not rotate the output of the norm '{}'", op.nodes[1], op.nodes[0]);
    same(op, "rotary_dim", a.rotaryDim, r.attrs.rotaryDim);
    same(op, "group", a.group, r.attrs.headDim);
    same(op, "cols", a.cols, r.attrs.heads * r.attrs.headDim);
    saved(op, 2, r.in[fused ? 2 : 1]);  // cos (qk_norm_rope: [q, k, cos, sin])
    saved(op, 3, r.in[fused ? 3 : 2]);
    width(op, false, 2, a.rotaryDim);
    width(op, false, 3, a.rotaryDim);
  }

  void check(const Op &op) const {
    const OpAttrs &a = op.attrs;
    if (op.kind == OpKind::LinearGradX || op.kind == OpKind::LinearGradW) gradOperand(op);
    if (op.kernel && !p.kernels.count(*op.kernel)) fail(op.where + "/kernel", "unknown kernel");
    if (a.shard.kind != ShardKind::Replicated) fail(op.where + "/attrs/shard", "a gradient op is not sharded");
    // (A qk_norm's rms_norm_grad with the rope_grad before it folded in names the rope's node second.)
    // (A linear_grad_x with the swiglu_grad of its dX taken in names the swiglu's node second.)
    const bool fusedSwiglu = op.kind == OpKind::LinearGradX && a.epilogue == Epilogue::Swiglu;
    const size_t nodeCount = (op.kind == OpKind::RmsNormGrad && a.rotaryDim > 0) || fusedSwiglu ? 2 : 1;
    if (op.nodes.size() != nodeCount)
      fail(op.where + "/nodes", nodeCount == 1 ? "a gradient op names the one forward node it differentiates"
                                : fusedSwiglu ? "a dX with the swiglu_grad taken in names the linear and the swiglu"
                                              : "a qk_norm's norm gradient with the rope's folded in names both nodes");
    auto nit = nodes.find(op.nodes[0]);
    if (nit == nodes.end()) fail(op.where + "/nodes/0", "'{}' is not a node of this config", op.nodes[0]);
    const h3::Node &n = *nit->second;
    const std::set<std::string> kinds = nodeKinds(op.kind);
    if (!kinds.empty() && !kinds.count(n.kind))
      fail(op.where + "/nodes/0", "a '{}' op differentiates a node of kind {}, '{}' is {}", opKindName(op.kind),
           *kinds.begin(), n.id, n.kind);
    // The tensors: those of the node (linear_grad_x reads the weight only; only the weight-gradient ops list them),
    // or one adapter slot of the node's LoRA path (checked with the path below).
    const bool lora = (op.kind == OpKind::LinearGradX || op.kind == OpKind::LinearGradW) && op.weights.size() == 1 &&
                      p.weightTensor(op.weights[0]).adapter;
    const bool fusedLora = op.kind == OpKind::LinearGradX && a.loraK > 0;  // its last weight: checkFusedLora
    std::vector<std::string> w, b;
    if (!lora) {
      for (const auto &t : n.tensors) (isBias(t) ? b : w).push_back(t);
      if (op.kind == OpKind::LinearGradX) b.clear();
      if (op.kind != OpKind::LinearGradX && !emitsWeightGrads(op.kind)) w.clear(), b.clear();
      if (fusedLora && !op.weights.empty()) w.push_back(op.weights.back());
    } else {
      w = op.weights;
    }
    if (op.weights != w || op.biases != b)
      fail(op.where + "/weights", "expected weight [{}] and bias [{}] (the tensors of {})", fmt::join(w, ", "),
           fmt::join(b, ", "), n.id);
    // The gradients it emits: its trained tensors, weights then biases.
    if (emitsWeightGrads(op.kind)) {
      std::vector<std::string> g;
      for (const auto *list : {&w, &b})
        for (const auto &t : *list)
          if (trained(t)) g.push_back(t);
      if (op.grads != g)
        fail(op.where + "/weights/grads", "is [{}], but the function's trainable [{}] selects [{}] of the op's tensors",
             fmt::join(op.grads, ", "), fmt::join(trainable, ", "), fmt::join(g, ", "));
      if (op.kind == OpKind::LinearGradW && g.empty())
        fail(op.where + "/weights/grads", "a linear_grad_w of frozen tensors only computes nothing");
    }
    if (op.kind == OpKind::GradRound) {  // bf(g): any consumer's node; F32 in, bf16 out of g's shape
      width(op, true, 0, a.cols);
      width(op, false, 0, a.cols);
      sameRows(op, {0}, {0});
      if (p.value(op.in[0]).dtype != DType::F32 || p.value(op.out[0]).dtype != DType::BF16)
        fail(op.where, "grad_round rounds an F32 gradient to bf16: '{}' is {}, '{}' is {}", op.in[0],
             dtypeName(p.value(op.in[0]).dtype), op.out[0], dtypeName(p.value(op.out[0]).dtype));
      return;
    }
    // bf16 gradients exist for the tensor-core linear gradients only (h3-fuse-grad): what grad_round writes, or
    // these ops' first output with the rounding fused; only a linear gradient's g may read one (gradOperand).
    for (size_t k = 0; k < op.in.size(); ++k)
      if (p.value(op.in[k]).dtype == DType::BF16 && isGradOp(op.kind) && roundedGrads.count(op.in[k]) &&
          !((op.kind == OpKind::LinearGradX || op.kind == OpKind::LinearGradW) && k == 0) &&
          !(fusedLora && k == loraInput(op)))
        fail(op.where + "/in/" + std::to_string(k), "'{}' is a bf16 gradient: only a linear gradient's g reads one",
             op.in[k]);
    // The outputs that may store bf(g) (h3-fuse-grad's fused rounding): the first of these kinds, a bf16 weight's dX
    // (its rounding on the tensor cores' store), attention_grad's dv.
    const bool roundsFirst = op.kind == OpKind::SwigluGrad || op.kind == OpKind::RmsNormGrad ||
                             op.kind == OpKind::GateResidualGrad ||
                             (op.kind == OpKind::LinearGradX && a.wDtype == DType::BF16);
    const int64_t roundedOut = op.kind == OpKind::AttentionGrad ? 2 : roundsFirst ? 0 : -1;
    for (size_t k = 0; k < op.out.size(); ++k)
      if (p.value(op.out[k]).dtype != DType::F32 &&
          !(int64_t(k) == roundedOut && p.value(op.out[k]).dtype == DType::BF16))
        fail(op.where + "/out/" + std::to_string(k), "a gradient is F32, '{}' is {}", op.out[k],
             dtypeName(p.value(op.out[k]).dtype));
    // The weight gradients after the activation outputs: F32 values of each tensor's element count.
    const size_t first = outputRoles(op.kind, a).size();
    for (size_t k = first; k < op.out.size(); ++k) {
      const std::string &t = op.grads.at(k - first);
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
    if (lora) {
      if (fusedLora) fail(op.where + "/attrs/lora_k", "a LoRA path's own dX takes in no other path");
      if (fusedSwiglu) fail(op.where + "/attrs/epilogue", "a LoRA path's own dX takes in no swiglu_grad");
      return checkLora(op, f);
    }
    switch (op.kind) {
    case OpKind::LinearGradX:
    case OpKind::LinearGradW:
      same(op, "K", a.K, fa.K);
      same(op, "N", a.N, fa.N);
      width(op, false, 0, a.N);
      if (op.kind == OpKind::LinearGradX) {
        dxOperands(op, a.K);
        if (fusedLora) checkFusedLora(op, f);
        if (fusedSwiglu) checkFusedSwiglu(op, f);
      } else {
        saved(op, 1, f.in[0]);
        width(op, false, 1, a.K);
        sameRows(op, {0, 1}, {});
      }
      return;
    case OpKind::SwigluGrad: {
      const auto [F, x] = swigluForward(f, op);
      same(op, "F", a.F, F);
      saved(op, 1, x);
      sameRows(op, {0, 1}, {0});
      width(op, false, 0, a.F);
      width(op, false, 1, 2 * a.F);
      width(op, true, 0, 2 * a.F);
      return;
    }
    case OpKind::RmsNormGrad: {
      // A qk_norm's forward op may be the qk_norm_rope of its block (h3-fuse training=true: nodes norm_q, norm_k,
      // rope_q, rope_k; inputs q, k, cos, sin): its x is the fused op's q or k.
      const size_t xi = f.kind == OpKind::QkNormRope && f.nodes.size() > 1 && f.nodes[1] == n.id ? 1 : 0;
      same(op, "eps", a.eps, fa.eps);
      same(op, "group", a.group, f.kind == OpKind::QkNorm || f.kind == OpKind::QkNormRope ? fa.headDim : fa.H);
      saved(op, 1, f.in[xi]);
      sameRows(op, {0, 1}, {0});
      for (size_t k = 0; k < 2; ++k) width(op, false, k, a.cols);
      width(op, true, 0, a.cols);
      width(op, false, 1, p.value(f.in[xi]).cols);
      if (a.rotaryDim > 0) checkFoldedRope(op, f);
      return;
    }
    case OpKind::NormModulateGrad:
    case OpKind::GateResidualGrad: {
      const bool norm = op.kind == OpKind::NormModulateGrad;
      // A gate_residual's forward op may be its linear's, the gate_residual in the epilogue (h3-fuse training=true,
      // where the backward reads no y: table_grad 0): [x, residual x, table, meta..., (lora_t)], the gate at the same
      // positions as gate_residual's [x, y, table, meta...].
      const bool inEpilogue = !norm && f.kind == OpKind::Linear;
      if (inEpilogue && (fa.epilogue != Epilogue::GateResidual || a.tableGrad))
        fail(op.where, "the forward op of {} is a linear{}", op.nodes.at(0),
             fa.epilogue != Epilogue::GateResidual ? " without the gate_residual epilogue"
                                                   : ": its y is no value, so the table's gradient (which reads it) cannot be computed");
      same(op, "H", a.H, inEpilogue ? fa.N : fa.H);
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
      // [dy, x | y, table, meta...] (a gate_residual_grad without the table's gradient no y: [dz, table, meta...]),
      // a norm_modulate_grad with the residual epilogue the residual last (dx's width and rows: the other part of
      // dx's sum).
      const size_t noY = !norm && !a.tableGrad ? 1 : 0;
      const size_t skip = norm ? 0 : 1 + noY, residual = norm && a.epilogue == Epilogue::Residual ? 1 : 0;
      const size_t table = 2 - noY;
      for (size_t k = 1; k + residual < op.in.size(); ++k) saved(op, k, f.in.at(k - 1 + skip));
      if (residual) {
        width(op, false, op.in.size() - 1, a.H);
        sameRows(op, {0, op.in.size() - 1}, {});
      }
      if (noY) sameRows(op, {0}, {0});
      else sameRows(op, {0, 1}, {0});
      for (size_t k = 0; k < table; ++k) width(op, false, k, a.H);
      width(op, false, table, a.numChunks * a.H);
      width(op, true, 0, a.H);
      if (a.tableGrad) {
        sameRows(op, {table}, {1});
        width(op, true, 1, a.numChunks * a.H);
      }
      return;
    }
    case OpKind::RopeGrad:
      same(op, "heads", a.heads, fa.heads);
      same(op, "head_dim", a.headDim, fa.headDim);
      same(op, "rotary_dim", a.rotaryDim, fa.rotaryDim);
      saved(op, 1, f.in[f.kind == OpKind::QkNormRope ? 2 : 1]);  // cos (a fused qk_norm_rope: [q, k, cos, sin])
      saved(op, 2, f.in[f.kind == OpKind::QkNormRope ? 3 : 2]);
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
      if (a.lse) {  // the forward attention's own row statistics
        if (!fa.lse) fail(op.where + "/in/5", "reads row statistics its forward attention '{}' does not write", f.where);
        saved(op, 5, f.out.at(1));
      }
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
  backward_check::Checker c{p, {}, {}, {}, bwd.trainable, {}};
  for (const Op &op : bwd.ops)
    for (const auto &o : op.out)
      if (p.value(o).dtype == DType::BF16) c.roundedGrads.insert(o);
  // Every pattern selects a tensor (a typo would silently freeze what it meant to train).
  for (size_t i = 0; i < bwd.trainable.size(); ++i) {
    bool any = false;
    for (const auto &b : p.weights)
      for (const auto &t : b.tensors) any = any || trains({bwd.trainable[i]}, t.name, t.adapter);
    if (!any) fail(fw + "/trainable/" + std::to_string(i), "'{}' selects no weight tensor of the plan", bwd.trainable[i]);
  }
  for (const auto &n : model.nodes) c.nodes[n.id] = &n;
  for (const Op &op : fwd.ops) {
    for (const auto &n : op.nodes) c.forwardOf[n] = &op;
    if (op.kind == OpKind::LoraDown) c.loraDownOf[op.out.at(0)] = &op;
  }
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
    for (const auto &t : op.grads)
      if (!gradOf.emplace("grad:" + t, op.out[k++]).second)
        fail(op.where + "/weights", "the gradient of '{}' is emitted twice", t);
  }
  // Outputs: the activation inputs' gradients and every trained tensor's, each the value the backward computed.
  std::set<std::string> want;
  for (const char *in : {"@hidden_states", "@audio_hidden_states", "@encoder_hidden_states"}) want.insert(std::string("grad:") + in);
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors)
      if (c.trained(t.name)) want.insert("grad:" + t.name);
  for (const auto &[key, v] : bwd.outputs) {
    const std::string w = fw + "/outputs/" + key;
    if (!want.count(key))
      fail(w, "is neither the gradient of an activation input nor of a weight tensor the plan trains (trainable [{}])",
           fmt::join(bwd.trainable, ", "));
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
