// The backward's gradient ops on the CPU (cpu_grad_ops.h): operands by position, every one checked against the
// plan's declaration before any loop sized by the attrs reads it (the reader tied the declarations to the attrs),
// the numerics those of runtime/grad_ops.h.
#include "cpu_grad_ops.h"

#include "h3c/runtime/grad_ops.h"
#include "h3c/support/error.h"

#include <algorithm>

namespace h3c::rt {

// (a named namespace: the unity build compiles the runtime as one translation unit)
namespace cpu_grad_detail {

using plan::OpKind;

struct GradCtx {
  const plan::Op &op;
  OpEnv &env;
  ValueMap &vals;

  [[noreturn]] void error(const std::string &msg) const {
    fail(op.where, "{} ({}): {}", plan::opKindName(op.kind), op.firstNode(), msg);
  }
  int64_t rowsOf(const plan::Value &pv) const { return env.req.rows(plan::domainName(pv.rows)); }
  const HostValue &in(size_t i) const {
    if (i >= op.in.size()) error(fmt::format("expected at least {} inputs", i + 1));
    auto it = vals.find(op.in[i]);
    if (it == vals.end()) error(fmt::format("input '{}' has not been computed (or was freed)", op.in[i]));
    const HostValue &h = it->second;
    const plan::Value &pv = env.plan.value(op.in[i]);
    const int64_t batch = pv.batch ? env.req.B : 1;
    const size_t have = h.dtype == DType::I64 ? h.i.size() : h.f.size();
    if (h.cols != pv.cols || h.rows != rowsOf(pv) || h.batch != batch || have != size_t(h.numel()) ||
        (h.dtype == DType::I64) != (pv.dtype == DType::I64))
      error(fmt::format("input '{}' is [{} x {} x {}], the plan declares [{} x {} x {}]", op.in[i], h.batch, h.rows,
                        h.cols, batch, rowsOf(pv), pv.cols));
    return h;
  }
  // Output i as the plan declares it (F32), filled with `data` (which must have its element count).
  void out(size_t i, std::vector<float> data) {
    if (i >= op.out.size()) error(fmt::format("expected at least {} outputs", i + 1));
    const plan::Value &pv = env.plan.value(op.out[i]);
    HostValue h;
    h.dtype = pv.dtype;  // F32, or bf16: grad_round's, or an op whose rounding h3-fuse-grad fused (rounded below)
    h.batch = pv.batch ? env.req.B : 1;
    h.rows = rowsOf(pv);
    h.cols = pv.cols;
    if (data.size() != size_t(h.numel()))
      error(fmt::format("output '{}' has {} elements, the plan declares {}", op.out[i], data.size(), h.numel()));
    h.f = std::move(data);
    if (h.dtype == DType::BF16)
      for (float &e : h.f) e = roundBf16(e);
    vals[op.out[i]] = std::move(h);
  }
  // A weight tensor as floats, checked to hold `numel` elements.
  std::vector<float> weight(const std::string &name, int64_t numel) const {
    std::vector<float> w = env.weights.load(name).toFloats();
    if (w.size() != size_t(numel)) error(fmt::format("'{}' has {} elements, the op needs {}", name, w.size(), numel));
    return w;
  }
  bool f32Weight(const std::string &name) const { return env.weights.spec(name).dtype == DType::F32; }
  // The weight gradients follow the activation outputs (plan::emitsWeightGrads), one per op.grads entry: the trained
  // tensors only (a frozen one's gradient is never computed).
  // Writes tensor's gradient into its output, computing it only when the op emits it.
  template <class F>
  void weightGrad(const std::string &tensor, F &&compute) {
    auto it = std::find(op.grads.begin(), op.grads.end(), tensor);
    if (it != op.grads.end()) out(plan::outputRoles(op.kind, op.attrs).size() + size_t(it - op.grads.begin()), compute());
  }
};

// Operands that hold a gradient and the activation it belongs to row for row (dy and x, ...) have one shape, so a
// loop over one's rows stays inside the other.
void sameRows(const GradCtx &cx, std::initializer_list<const HostValue *> vs) {
  const HostValue &a = **vs.begin();
  for (const HostValue *v : vs)
    if (v->batch != a.batch || v->rows != a.rows)
      cx.error(fmt::format("operands of [{} x {}] and [{} x {}] rows must agree", a.batch, a.rows, v->batch, v->rows));
}

// The items of a value's rows: a batched value's B items of `rows` each, else one item.
grad::ItemRows itemsOf(const HostValue &v) {
  grad::ItemRows r{0};
  for (int64_t b = 0; b < v.batch; ++b) r.push_back(r.back() + v.rows);
  return r;
}

// Which AdaLN table row each flattened token row reads (the forward's rule: ts_index * 3 + tag, or ts_index), over
// the table's `count` rows; the metadata is shared by the batch items.
grad::TableRows tableRows(GradCtx &cx, size_t tsIn, int64_t M, int64_t count) {
  const plan::OpAttrs &a = cx.op.attrs;
  const bool perTag = a.rowIndex == plan::RowIndex::Adaln;
  const HostValue &ts = cx.in(tsIn);
  const HostValue *tags = perTag ? &cx.in(tsIn + 1) : nullptr;
  if (ts.rows < 1 || M % ts.rows) cx.error("the row metadata does not tile the rows");
  grad::TableRows t;
  t.count = count;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t r = m % ts.rows;
    const int64_t row = perTag ? ts.i[size_t(r)] * 3 + tags->i[size_t(r)] : ts.i[size_t(r)];
    if (row < 0 || row >= count) cx.error(fmt::format("row {} addresses table row {} of {}", r, row, count));
    t.row.push_back(row);
  }
  return t;
}

// Chunk k of every row of a table [count][chunks * H], as [count][H].
std::vector<float> chunkOf(const HostValue &table, int64_t k, int64_t H) {
  std::vector<float> c(size_t(table.rows * H));
  for (int64_t r = 0; r < table.rows; ++r)
    std::copy_n(&table.f[size_t(r * table.cols + k * H)], H, &c[size_t(r * H)]);
  return c;
}
// A table's gradient at full width: `parts` [count][H] into their chunks, zero elsewhere.
std::vector<float> fullTable(int64_t count, int64_t chunks, int64_t H,
                             std::initializer_list<std::pair<int64_t, const std::vector<float> *>> parts) {
  std::vector<float> t(size_t(count * chunks * H), 0.f);
  for (auto [k, part] : parts)
    for (int64_t r = 0; r < count; ++r) std::copy_n(&(*part)[size_t(r * H)], H, &t[size_t((r * chunks + k) * H)]);
  return t;
}

void linearGradX(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &g = cx.in(0);
  const int64_t M = g.batch * g.rows;
  const plan::Value &dx = cx.env.plan.value(cx.op.out.at(0));
  if ((dx.batch ? cx.env.req.B : 1) * cx.rowsOf(dx) != M) cx.error("dx and g differ in rows");
  const std::string &w = cx.op.weights.at(0);
  const std::vector<float> W = cx.weight(w, a.N * a.K);
  std::vector<float> d = cx.f32Weight(w) ? grad::linearDxF32(g.f.data(), M, a.N, W.data(), a.K, cx.env.threads)
                                         : grad::linearDx(g.f.data(), M, a.N, W.data(), a.K, cx.env.threads);
  // The part dX is added to: the residual, or with a LoRA down path taken in (h3-fuse-grad, lora_k) that path's dX
  // (bf(dt) down, its own chain) after the residual, as the path's op computed it before this one read it.
  const std::vector<float> *part = nullptr;
  if (a.epilogue == plan::Epilogue::Residual) {
    const HostValue &r = cx.in(1);
    sameRows(cx, {&g, &r});
    if (r.f.size() != d.size()) cx.error("the residual and dx differ in size");
    part = &r.f;
  }
  std::vector<float> path;
  if (a.loraK > 0) {
    const HostValue &t = cx.in(size_t(plan::inputIndex(cx.op.kind, a, "lora_t")));
    sameRows(cx, {&g, &t});
    const std::vector<float> down = cx.weight(cx.op.weights.at(1), a.loraK * a.K);
    path = grad::linearDx(t.f.data(), M, a.loraK, down.data(), a.K, cx.env.threads);
    if (part)
      for (size_t i = 0; i < path.size(); ++i) path[i] = (*part)[i] + path[i];
    part = &path;
  }
  if (part)  // grad_add's sum, part + dX (the same F32 addition)
    for (size_t i = 0; i < d.size(); ++i) d[i] = (*part)[i] + d[i];
  if (a.epilogue == plan::Epilogue::Swiglu) {  // swiglu_grad taken in (h3-fuse-grad): its dx over x = [v | g]
    const HostValue &x = cx.in(size_t(plan::inputIndex(cx.op.kind, a, "swiglu_x")));
    sameRows(cx, {&g, &x});
    if (x.f.size() != 2 * d.size()) cx.error("swiglu_x is not [rows, 2K]");
    d = grad::swigluGrad(d.data(), x.f.data(), M, a.K);
  }
  cx.out(0, std::move(d));
}

void linearGradW(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &g = cx.in(0), &x = cx.in(1);
  sameRows(cx, {&g, &x});
  const grad::ItemRows items = itemsOf(g);
  const std::string &w = cx.op.weights.at(0);
  cx.weightGrad(w, [&] {
    return cx.f32Weight(w) ? grad::linearDwF32(g.f.data(), x.f.data(), items, a.N, a.K, cx.env.threads)
                           : grad::linearDw(g.f.data(), x.f.data(), items, a.N, a.K, cx.env.threads);
  });
  for (const std::string &b : cx.op.biases) cx.weightGrad(b, [&] { return grad::biasGrad(g.f.data(), items, a.N); });
}

// rope's dx of dy (cx.in(0)) with the tables at inputs `tables`, `tables` + 1 (rope_grad's, and a qk_norm's
// rms_norm_grad with it folded in).
std::vector<float> ropeBack(GradCtx &cx, size_t tables, int64_t heads, int64_t headDim, int64_t R) {
  const HostValue &dy = cx.in(0), &cosv = cx.in(tables), &sinv = cx.in(tables + 1);
  // The tables are per canonical row, shared by the batch items: repeat them for each item.
  if (cosv.batch != 1 || cosv.rows != dy.rows || sinv.batch != 1 || sinv.rows != dy.rows) cx.error("the rope tables must hold one row per packed row");
  const int64_t M = dy.batch * dy.rows;
  std::vector<float> c(size_t(M * R)), s(size_t(M * R));
  for (int64_t b = 0; b < dy.batch; ++b) {
    std::copy(cosv.f.begin(), cosv.f.end(), c.begin() + b * dy.rows * R);
    std::copy(sinv.f.begin(), sinv.f.end(), s.begin() + b * dy.rows * R);
  }
  return grad::ropeGrad(dy.f.data(), c.data(), s.data(), M, heads, headDim, R);
}

void rmsNormGrad(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &dy = cx.in(0), &x = cx.in(1);
  sameRows(cx, {&dy, &x});
  std::vector<float> w;
  if (!cx.op.weights.empty()) w = cx.weight(cx.op.weights[0], a.group);
  // With the rope_grad before it folded in (rotary_dim): dy rotated back first, as that op computed it.
  std::vector<float> rotated;
  if (a.rotaryDim > 0) rotated = ropeBack(cx, 2, a.cols / a.group, a.group, a.rotaryDim);
  grad::NormGrad d = grad::rmsNormGrad(a.rotaryDim > 0 ? rotated.data() : dy.f.data(), x.f.data(),
                                       w.empty() ? nullptr : w.data(), itemsOf(x), a.cols, a.group, a.eps,
                                       !cx.op.grads.empty());
  cx.out(0, std::move(d.dx));
  if (!w.empty()) cx.weightGrad(cx.op.weights[0], [&] { return std::move(d.dw); });
}

void normModulateGrad(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &dy = cx.in(0), &x = cx.in(1), &table = cx.in(2);
  sameRows(cx, {&dy, &x});
  const int64_t M = x.batch * x.rows, H = a.H;
  std::vector<float> w;
  if (!cx.op.weights.empty()) w = cx.weight(cx.op.weights[0], H);
  const grad::TableRows rows = tableRows(cx, 3, M, table.rows);
  const std::vector<float> scale = chunkOf(table, a.scaleChunk, H);
  grad::NormModulateGrad d = grad::normModulateGrad(dy.f.data(), x.f.data(), w.empty() ? nullptr : w.data(),
                                                    scale.data(), rows, itemsOf(x), H, a.eps, !cx.op.grads.empty(),
                                                    a.tableGrad != 0);
  if (a.epilogue == plan::Epilogue::Residual) {  // h3-fuse-grad: grad_add's sum, residual + dx (one F32 addition)
    const HostValue &res = cx.in(cx.op.in.size() - 1);
    sameRows(cx, {&dy, &res});
    if (res.f.size() != d.dx.size()) cx.error("the residual and dx differ in size");
    for (size_t i = 0; i < d.dx.size(); ++i) d.dx[i] = res.f[i] + d.dx[i];
  }
  cx.out(0, std::move(d.dx));
  if (a.tableGrad) cx.out(1, fullTable(table.rows, a.numChunks, H, {{a.shiftChunk, &d.dshift}, {a.scaleChunk, &d.dscale}}));
  if (!w.empty()) cx.weightGrad(cx.op.weights[0], [&] { return std::move(d.dw); });
}

void gateResidualGrad(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  // Without the table's gradient (table_grad 0) the op reads no y: [dz, table, meta...].
  const size_t t = a.tableGrad ? 2 : 1;
  const HostValue &dz = cx.in(0), &table = cx.in(t);
  const HostValue *y = a.tableGrad ? &cx.in(1) : nullptr;
  if (y) sameRows(cx, {&dz, y});
  const int64_t M = dz.batch * dz.rows, H = a.H;
  const grad::TableRows rows = tableRows(cx, t + 1, M, table.rows);
  const std::vector<float> gate = chunkOf(table, a.chunk, H);
  grad::GateResidualGrad d =
      grad::gateResidualGrad(dz.f.data(), y ? y->f.data() : nullptr, gate.data(), rows, itemsOf(dz), H);
  cx.out(0, std::move(d.dy));
  if (y) cx.out(1, fullTable(table.rows, a.numChunks, H, {{a.chunk, &d.dgate}}));
}

void ropeGrad(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  cx.out(0, ropeBack(cx, 1, a.heads, a.headDim, a.rotaryDim));
}

void attentionGrad(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &q = cx.in(0), &k = cx.in(1), &v = cx.in(2), &o = cx.in(3), &dO = cx.in(4);
  sameRows(cx, {&q, &k, &v, &o, &dO});
  const float *lse = nullptr;  // the forward's row statistics (h3-fuse-grad)
  if (a.lse) {
    const HostValue &l = cx.in(5);
    if (l.numel() != q.batch * q.rows * a.heads) cx.error("lse must hold one L per row and head");
    lse = l.f.data();
  }
  grad::AttentionGrad d = grad::attentionGrad(q.f.data(), k.f.data(), v.f.data(), o.f.data(), dO.f.data(), itemsOf(q),
                                              a.heads, a.headDim, a.kvBlock, lse);
  cx.out(0, std::move(d.dq));
  cx.out(1, std::move(d.dk));
  cx.out(2, std::move(d.dv));
}

void adalnTableGrad(GradCtx &cx) {
  const plan::OpAttrs &a = cx.op.attrs;
  const HostValue &g = cx.in(0), &temb = cx.in(1);
  // The table's [T * rows, cols] gradient is the GEMM's [T, N] output gradient (a view).
  const int64_t T = temb.rows;
  if (g.rows * g.cols != T * a.N) cx.error("the table's gradient is not [T, N]");
  const std::vector<float> W = cx.weight(cx.op.weights.at(0), a.N * a.K);
  auto emits = [&](const std::string &t) { return std::find(cx.op.grads.begin(), cx.op.grads.end(), t) != cx.op.grads.end(); };
  grad::AdalnTableGrad d = grad::adalnTableGrad(g.f.data(), temb.f.data(), W.data(), T, a.N, a.K, cx.env.threads,
                                                emits(cx.op.weights.at(0)),
                                                !cx.op.biases.empty() && emits(cx.op.biases[0]));
  cx.out(0, std::move(d.dtemb));
  cx.weightGrad(cx.op.weights.at(0), [&] { return std::move(d.dw); });
  for (const std::string &b : cx.op.biases) cx.weightGrad(b, [&] { return std::move(d.dbias); });
}

// pack's gradient: canonical rows [0, Nt), [Nt, Nt + Nv), [Nt + Nv, S) of every item back to text, video, audio.
void packGrad(GradCtx &cx) {
  const CanonicalRequest &q = cx.env.req;
  const HostValue &dx = cx.in(0);
  if (dx.batch != q.B || dx.rows != q.S) cx.error("dx must hold the B x S packed rows");
  const int64_t H = dx.cols;
  const int64_t begin[3] = {0, q.Nt, q.Nt + q.Nv}, count[3] = {q.Nt, q.Nv, q.Na};
  for (size_t part = 0; part < 3; ++part) {
    std::vector<float> d(size_t(q.B * count[part] * H));
    for (int64_t b = 0; b < q.B; ++b)
      std::copy_n(&dx.f[size_t((b * q.S + begin[part]) * H)], count[part] * H, &d[size_t(b * count[part] * H)]);
    cx.out(part, std::move(d));
  }
}

// unpack's gradient: the samples' gradients in their canonical rows of the heads' outputs, every other row 0.
void unpackGrad(GradCtx &cx) {
  const CanonicalRequest &q = cx.env.req;
  const int64_t begin[2] = {q.Nt, q.Nt + q.Nv}, count[2] = {q.Nv, q.Na};
  for (size_t part = 0; part < 2; ++part) {
    const HostValue &ds = cx.in(part);
    if (ds.batch != q.B || ds.rows != count[part]) cx.error("a sample's gradient must hold its modality's rows");
    const int64_t C = ds.cols;
    std::vector<float> d(size_t(q.B * q.S * C), 0.f);
    for (int64_t b = 0; b < q.B; ++b)
      std::copy_n(&ds.f[size_t(b * count[part] * C)], count[part] * C, &d[size_t((b * q.S + begin[part]) * C)]);
    cx.out(part, std::move(d));
  }
}

} // namespace cpu_grad_detail

void runCpuGradOp(const plan::Op &op, OpEnv &env, ValueMap &values) {
  using namespace cpu_grad_detail;
  GradCtx cx{op, env, values};
  if (env.precision != Precision::Ordered) cx.error("the backward has no fp64 reference binding");
  switch (op.kind) {
  case OpKind::GradAdd: {
    const HostValue &a = cx.in(0), &b = cx.in(1);
    sameRows(cx, {&a, &b});
    if (a.f.size() != b.f.size()) cx.error("the two parts differ in size");
    std::vector<float> c(a.f.size());
    for (size_t i = 0; i < c.size(); ++i) c[i] = a.f[i] + b.f[i];
    return cx.out(0, std::move(c));
  }
  case OpKind::GradRound: return cx.out(0, cx.in(0).f);  // bf(g) once for its readers (out rounds to bf16)
  case OpKind::LinearGradX: return linearGradX(cx);
  case OpKind::LinearGradW: return linearGradW(cx);
  case OpKind::SwigluGrad: {
    const HostValue &dy = cx.in(0), &x = cx.in(1);
    sameRows(cx, {&dy, &x});
    return cx.out(0, grad::swigluGrad(dy.f.data(), x.f.data(), x.batch * x.rows, op.attrs.F));
  }
  case OpKind::RmsNormGrad: return rmsNormGrad(cx);
  case OpKind::NormModulateGrad: return normModulateGrad(cx);
  case OpKind::GateResidualGrad: return gateResidualGrad(cx);
  case OpKind::RopeGrad: return ropeGrad(cx);
  case OpKind::AttentionGrad: return attentionGrad(cx);
  case OpKind::SiluGrad: {
    const HostValue &dy = cx.in(0), &x = cx.in(1);
    sameRows(cx, {&dy, &x});
    return cx.out(0, grad::siluGrad(dy.f.data(), x.f.data(), x.numel()));
  }
  case OpKind::AdalnTableGrad: return adalnTableGrad(cx);
  case OpKind::PackGrad: return packGrad(cx);
  case OpKind::UnpackGrad: return unpackGrad(cx);
  default: cx.error("is no gradient op (the forward's ops run in runCpuOp)");
  }
}

} // namespace h3c::rt
