// The plan reader: strict and fail closed (io.h). Every problem is an h3c::Error whose `where` is the JSON pointer.
#include "h3c/plan/io.h"

#include "json_fields.h"

#include "h3c/models/fingerprint.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <climits>

namespace fs = std::filesystem;

namespace h3c::plan {

using namespace detail;

namespace {

DType floatDtype(const json &j, const std::string &where, bool allowI64 = false) {
  std::string s = str(j, where);
  DType d;
  if (!parseDType(s, d) || !(d == DType::F32 || d == DType::BF16 || (allowI64 && d == DType::I64)))
    fail(where, "expected {}, got \"{}\"", allowI64 ? "F32, BF16 or I64" : "F32 or BF16", s);
  return d;
}

Domain domain(const json &j, const std::string &where) {
  std::string s = str(j, where);
  Domain d;
  if (!parseDomain(s, d)) fail(where, "unknown row domain '{}' (expected S, Nt, Nv, Na, T, T3 or 1)", s);
  return d;
}

Order parseOrder(const json &j, const std::string &where) {
  Order o;
  if (j.is_null()) return o;
  std::string kind = str(member(j, "kind", where), where + "/kind");
  if (!parseOrderKind(kind, o.kind) || o.kind == OrderKind::None)
    fail(where + "/kind", "unknown reduction order '{}' (expected k_chunks, lane_tree or flash)", kind);
  if (o.kind == OrderKind::KChunks) {
    onlyKeys(j, {"kind", "k_step", "units", "acc"}, where);
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    o.units = integer(member(j, "units", where), where + "/units");
    if (o.kStep != 16) fail(where + "/k_step", "expected 16 (the MMA K width), got {}", o.kStep);
    if (o.units < 1 || o.units > 64 || (o.units & (o.units - 1)))
      fail(where + "/units", "expected a power of two in [1, 64], got {}", o.units);
  } else if (o.kind == OrderKind::LaneTree) {
    onlyKeys(j, {"kind", "lanes", "acc"}, where);
    o.lanes = integer(member(j, "lanes", where), where + "/lanes");
    if (o.lanes != 32) fail(where + "/lanes", "expected 32, got {}", o.lanes);
  } else {
    onlyKeys(j, {"kind", "kv_block", "k_step", "acc", "p"}, where);
    o.kvBlock = integer(member(j, "kv_block", where), where + "/kv_block");
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    if (o.kvBlock != 64) fail(where + "/kv_block", "expected 64, got {}", o.kvBlock);
    if (o.kStep != 16) fail(where + "/k_step", "expected 16, got {}", o.kStep);
    std::string p = str(member(j, "p", where), where + "/p");
    if (p != "bf16") fail(where + "/p", "expected \"bf16\", got \"{}\"", p);
    o.p = DType::BF16;
  }
  std::string acc = str(member(j, "acc", where), where + "/acc");
  if (acc != "f32") fail(where + "/acc", "expected \"f32\", got \"{}\"", acc);
  return o;
}

Shard parseShard(const json &j, int64_t planTp, const std::string &where) {
  Shard s;
  std::string kind = str(member(j, "kind", where), where + "/kind");
  if (!parseShardKind(kind, s.kind)) fail(where + "/kind", "expected replicated, column or row, got '{}'", kind);
  s.tp = positive(member(j, "tp", where), where + "/tp", 8);
  if (s.tp != 1 && s.tp != planTp) fail(where + "/tp", "shard degree {} differs from options.tp {}", s.tp, planTp);
  if (s.kind == ShardKind::Column) {
    onlyKeys(j, {"kind", "tp", "segments"}, where);
    const json &segs = array(member(j, "segments", where), where + "/segments");
    if (segs.empty()) fail(where + "/segments", "a column shard needs at least one segment");
    int64_t at = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
      std::string w = where + "/segments/" + std::to_string(i);
      if (!segs[i].is_array() || segs[i].size() != 2) fail(w, "expected [begin, end]");
      int64_t b = nonNegative(segs[i][0], w + "/0"), e = positive(segs[i][1], w + "/1");
      if (b != at || e <= b) fail(w, "segments must tile the columns from 0 in order; got [{}, {}) after {}", b, e, at);
      if ((e - b) % s.tp) fail(w, "segment of {} columns does not split over tp = {}", e - b, s.tp);
      s.segments.emplace_back(b, e);
      at = e;
    }
  } else {
    onlyKeys(j, {"kind", "tp"}, where);
  }
  return s;
}

// Typed attrs of an op (ops.h attrKeys + the common ones). `hasWeights`/`hasInputs` decide the common keys.
OpAttrs parseAttrs(OpKind kind, const json &j, bool hasInputs, bool hasWeights, int64_t planTp,
                   const std::string &where) {
  if (!j.is_object()) fail(where, "expected an object");
  OpAttrs a;
  // The epilogue and the rotary width decide which other keys exist: read them first.
  if (j.contains("epilogue")) {
    std::string e = str(j["epilogue"], where + "/epilogue");
    if (!parseEpilogue(e, a.epilogue))
      fail(where + "/epilogue", "expected none, residual, gate_residual or swiglu, got \"{}\"", e);
  }
  std::set<std::string> allowed = {"out_dtype", "shard"};
  if (hasInputs) allowed.insert("x_dtype");
  if (hasWeights) allowed.insert("w_dtype");
  for (const auto &k : attrKeys(kind, a)) allowed.insert(k);
  onlyKeys(j, allowed, where);
  for (const auto &k : allowed)
    if (!j.contains(k)) fail(where + "/" + k, "missing (a '{}' op carries {} attrs)", opKindName(kind), allowed.size());
  auto w = [&](const char *k) { return where + "/" + k; };
  for (const auto &k : allowed) {
    const json &v = j[k];
    if (k == "K") a.K = positive(v, w("K"));
    else if (k == "N") a.N = positive(v, w("N"));
    else if (k == "chunk") a.chunk = nonNegative(v, w("chunk"));
    else if (k == "num_chunks") a.numChunks = positive(v, w("num_chunks"), 1024);
    else if (k == "shift_chunk") a.shiftChunk = nonNegative(v, w("shift_chunk"));
    else if (k == "scale_chunk") a.scaleChunk = nonNegative(v, w("scale_chunk"));
    else if (k == "rows_per_timestep") a.rowsPerTimestep = positive(v, w("rows_per_timestep"), 3);
    else if (k == "row_index") {
      std::string s = str(v, w("row_index"));
      if (!parseRowIndex(s, a.rowIndex)) fail(w("row_index"), "expected \"adaln\" or \"timestep\", got \"{}\"", s);
    } else if (k == "eps") {
      a.eps = number(v, w("eps"));
      if (!(a.eps > 0 && a.eps < 1)) fail(w("eps"), "expected a number in (0, 1), got {}", a.eps);
    } else if (k == "theta") {
      a.theta = number(v, w("theta"));
      if (!(a.theta > 1)) fail(w("theta"), "expected a number > 1");
    } else if (k == "scale") {
      a.scale = number(v, w("scale"));
      if (!(a.scale > 0)) fail(w("scale"), "expected a positive number");
    } else if (k == "heads") a.heads = positive(v, w("heads"), 4096);
    else if (k == "head_dim") a.headDim = positive(v, w("head_dim"), 1024);
    else if (k == "rotary_dim") a.rotaryDim = nonNegative(v, w("rotary_dim"), 1024);
    else if (k == "domain") a.domain = domain(v, w("domain"));
    else if (k == "H") a.H = positive(v, w("H"));
    else if (k == "F") a.F = positive(v, w("F"));
    else if (k == "cols") a.cols = positive(v, w("cols"));
    else if (k == "video_cols") a.videoCols = positive(v, w("video_cols"));
    else if (k == "audio_cols") a.audioCols = positive(v, w("audio_cols"));
    else if (k == "freq_dim") a.freqDim = positive(v, w("freq_dim"));
    else if (k == "hidden") a.hidden = positive(v, w("hidden"));
    else if (k == "out_dim") a.outDim = positive(v, w("out_dim"));
    else if (k == "tp") a.tp = positive(v, w("tp"), 8);
    else if (k == "units") a.units = positive(v, w("units"), 64);
    else if (k == "dtype") a.dtype = floatDtype(v, w("dtype"));
    else if (k == "x_dtype") a.xDtype = floatDtype(v, w("x_dtype"), true);
    else if (k == "w_dtype") a.wDtype = floatDtype(v, w("w_dtype"));
    else if (k == "out_dtype") a.outDtype = floatDtype(v, w("out_dtype"));
    else if (k == "shard") a.shard = parseShard(v, planTp, w("shard"));
  }
  if (kind == OpKind::Linear || kind == OpKind::AllreduceTree) {
    if (a.epilogue == Epilogue::GateResidual && a.chunk >= a.numChunks)
      fail(w("chunk"), "chunk {} out of [0, num_chunks = {})", a.chunk, a.numChunks);
  } else if (j.contains("epilogue")) {
    fail(w("epilogue"), "unknown field");
  }
  if (kind == OpKind::NormModulate && (a.shiftChunk >= a.numChunks || a.scaleChunk >= a.numChunks))
    fail(where, "shift_chunk {} / scale_chunk {} out of [0, num_chunks = {})", a.shiftChunk, a.scaleChunk,
         a.numChunks);
  if (kind == OpKind::GateResidual && a.chunk >= a.numChunks)
    fail(w("chunk"), "chunk {} out of [0, num_chunks = {})", a.chunk, a.numChunks);
  if ((kind == OpKind::Rope || kind == OpKind::QkNormRope) && (a.rotaryDim > a.headDim || a.rotaryDim % 2))
    fail(w("rotary_dim"), "expected an even width <= head_dim ({}), got {}", a.headDim, a.rotaryDim);
  return a;
}

Launch parseLaunch(const json &j, const std::string &where) {
  onlyKeys(j, {"block", "smem_bytes", "grid", "cluster"}, where);
  Launch l;
  auto dims3 = [&](const json &a, const std::string &w, std::array<int64_t, 3> &out) {
    array(a, w);
    if (a.size() != 3) fail(w, "expected [x, y, z]");
    for (size_t i = 0; i < 3; ++i) out[i] = positive(a[i], w + "/" + std::to_string(i), 1024);
  };
  dims3(member(j, "block", where), where + "/block", l.block);
  if (l.block[0] * l.block[1] * l.block[2] > 1024) fail(where + "/block", "more than 1024 threads per block");
  l.smemBytes = nonNegative(member(j, "smem_bytes", where), where + "/smem_bytes", 232448);
  dims3(member(j, "cluster", where), where + "/cluster", l.cluster);
  if (l.cluster[0] * l.cluster[1] * l.cluster[2] > 16) fail(where + "/cluster", "more than 16 CTAs per cluster");
  const json &g = array(member(j, "grid", where), where + "/grid");
  if (g.size() != 3) fail(where + "/grid", "expected three dimensions");
  for (size_t i = 0; i < 3; ++i) {
    std::string w = where + "/grid/" + std::to_string(i);
    onlyKeys(g[i], {"extent", "div", "max_per_sm"}, w);
    l.grid[i].extent = Extent::parse(str(member(g[i], "extent", w), w + "/extent"), w + "/extent");
    l.grid[i].div = positive(member(g[i], "div", w), w + "/div");
    l.grid[i].maxPerSm = nonNegative(member(g[i], "max_per_sm", w), w + "/max_per_sm", 64);
  }
  return l;
}

OperandRole parseRole(const json &j, const std::string &where) {
  std::string r = str(j, where);
  if (r == "in") return OperandRole::In;
  if (r == "out") return OperandRole::Out;
  if (r == "weight") return OperandRole::Weight;
  if (r == "bias") return OperandRole::Bias;
  fail(where, "expected in, out, weight or bias, got \"{}\"", r);
}

KernelParam parseParam(const json &j, const std::string &where) {
  KernelParam p;
  std::string kind = str(member(j, "kind", where), where + "/kind");
  p.name = str(member(j, "name", where), where + "/name");
  if (p.name.empty() || !(std::isalpha(static_cast<unsigned char>(p.name[0])) || p.name[0] == '_'))
    fail(where + "/name", "expected a C identifier, got \"{}\"", p.name);
  for (char c : p.name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      fail(where + "/name", "expected a C identifier, got \"{}\"", p.name);
  if (kind == "buffer") {
    onlyKeys(j, {"kind", "name", "role", "index", "span"}, where);
    p.kind = KernelParam::Kind::Buffer;
    p.role = parseRole(member(j, "role", where), where + "/role");
    p.index = nonNegative(member(j, "index", where), where + "/index", 64);
    p.span = positive(member(j, "span", where), where + "/span", 64);
  } else if (kind == "scalar") {
    onlyKeys(j, {"kind", "name", "type", "value"}, where);
    p.kind = KernelParam::Kind::Scalar;
    if (str(member(j, "type", where), where + "/type") != "i64") fail(where + "/type", "expected \"i64\"");
    p.value = Extent::parse(str(member(j, "value", where), where + "/value"), where + "/value");
  } else if (kind == "tensor_map") {
    onlyKeys(j, {"kind", "name", "role", "index", "span", "dtype", "dims", "strides", "box", "swizzle", "l2_promotion",
                 "oob"},
             where);
    p.kind = KernelParam::Kind::TensorMap;
    p.role = parseRole(member(j, "role", where), where + "/role");
    p.index = nonNegative(member(j, "index", where), where + "/index", 64);
    p.span = positive(member(j, "span", where), where + "/span", 64);
    p.map.dtype = floatDtype(member(j, "dtype", where), where + "/dtype");
    const json &dims = array(member(j, "dims", where), where + "/dims");
    const json &strides = array(member(j, "strides", where), where + "/strides");
    const json &box = array(member(j, "box", where), where + "/box");
    if (dims.empty() || dims.size() > 5) fail(where + "/dims", "expected 1 to 5 dimensions");
    if (strides.size() + 1 != dims.size()) fail(where + "/strides", "expected one stride per dimension after the first");
    if (box.size() != dims.size()) fail(where + "/box", "expected one box size per dimension");
    for (size_t i = 0; i < dims.size(); ++i) {
      p.map.dims.push_back(Extent::parse(str(dims[i], where + "/dims/" + std::to_string(i)), where + "/dims"));
      p.map.box.push_back(positive(box[i], where + "/box/" + std::to_string(i), 256));
    }
    for (size_t i = 0; i < strides.size(); ++i)
      p.map.strides.push_back(Extent::parse(str(strides[i], where + "/strides/" + std::to_string(i)), where + "/strides"));
    p.map.swizzle = str(member(j, "swizzle", where), where + "/swizzle");
    if (p.map.swizzle != "none" && p.map.swizzle != "32B" && p.map.swizzle != "64B" && p.map.swizzle != "128B")
      fail(where + "/swizzle", "expected none, 32B, 64B or 128B");
    p.map.l2Promotion = str(member(j, "l2_promotion", where), where + "/l2_promotion");
    if (p.map.l2Promotion != "none" && p.map.l2Promotion != "64B" && p.map.l2Promotion != "128B" &&
        p.map.l2Promotion != "256B")
      fail(where + "/l2_promotion", "expected none, 64B, 128B or 256B");
    std::string oob = str(member(j, "oob", where), where + "/oob");
    if (oob != "zero" && oob != "nan") fail(where + "/oob", "expected zero or nan");
    p.map.oobZero = oob == "zero";
  } else {
    fail(where + "/kind", "expected buffer, scalar or tensor_map, got \"{}\"", kind);
  }
  return p;
}

Kernel parseKernel(const std::string &id, const json &j, const Options &opt, const fs::path &dir,
                   const std::string &where) {
  onlyKeys(j, {"file", "sha256", "entry", "arch", "nvrtc_options", "launch", "params"}, where);
  Kernel k;
  k.id = id;
  k.file = str(member(j, "file", where), where + "/file");
  k.sha256 = str(member(j, "sha256", where), where + "/sha256");
  k.entry = str(member(j, "entry", where), where + "/entry");
  k.arch = str(member(j, "arch", where), where + "/arch");
  if (k.arch != opt.arch) fail(where + "/arch", "kernel built for {} in a plan for {}", k.arch, opt.arch);
  k.nvrtcOptions = strList(member(j, "nvrtc_options", where), where + "/nvrtc_options");
  if (fs::path(k.file).is_absolute() || k.file.find("..") != std::string::npos || k.file.rfind("kernels/", 0) != 0)
    fail(where + "/file", "kernel files live in the plan's kernels/ folder, got '{}'", k.file);
  k.launch = parseLaunch(member(j, "launch", where), where + "/launch");
  const json &ps = array(member(j, "params", where), where + "/params");
  std::set<std::string> names;
  for (size_t i = 0; i < ps.size(); ++i) {
    k.params.push_back(parseParam(ps[i], where + "/params/" + std::to_string(i)));
    if (!names.insert(k.params.back().name).second)
      fail(where + "/params/" + std::to_string(i) + "/name", "duplicate parameter name '{}'", k.params.back().name);
  }
  if (dir.empty()) fail(where + "/file", "the plan was read without its folder, so kernel sources cannot be read");
  fs::path f = dir / k.file;
  std::error_code ec;
  if (!fs::is_regular_file(f, ec)) fail(where + "/file", "kernel source {} does not exist", f.string());
  k.source = readFile(f);
  std::string h = sha256Hex(k.source);
  if (h != k.sha256) fail(where + "/sha256", "recorded {} but {} hashes to {}", k.sha256, f.string(), h);
  return k;
}

// A tensor map over weights must stay inside the tensors it spans: its dims are constants, and the last byte it can
// address lies within them (a map wider than its weights would read whatever the runtime placed behind them).
void checkWeightMapFits(const Plan &p, const Kernel &k, const Op &op, const KernelParam &q) {
  const auto &names = q.role == OperandRole::Weight ? op.weights : op.biases;
  int64_t bytes = 0;
  for (int64_t s = 0; s < q.span; ++s) {
    auto [buf, off] = p.weightLocation(names[size_t(q.index + s)]);
    (void)off;
    for (const auto &t : buf->tensors)
      if (t.name == names[size_t(q.index + s)]) bytes += t.numel() * int64_t(dtypeSize(t.dtype));
  }
  const Extents small{1, 1, 1, 1, 1, 1}, large{8, 100000, 1000, 100000, 1000, 100};
  auto constant = [&](const Extent &e, const char *what) {
    int64_t v = e.eval(small);
    if (v != e.eval(large))
      fail(op.where + "/kernel", "kernel {} tensor map '{}': {} of a weight map must be a constant, got \"{}\"", k.id,
           q.name, what, e.text());
    return v;
  };
  int64_t last = int64_t(dtypeSize(q.map.dtype));
  for (size_t i = 0; i < q.map.dims.size(); ++i) {
    int64_t d = constant(q.map.dims[i], "a dimension");
    int64_t stride = i == 0 ? int64_t(dtypeSize(q.map.dtype)) : constant(q.map.strides[i - 1], "a stride");
    if (d < 1) fail(op.where + "/kernel", "kernel {} tensor map '{}': dimension {} is {}", k.id, q.name, i, d);
    last += (d - 1) * stride;
  }
  if (last > bytes)
    fail(op.where + "/kernel", "kernel {} tensor map '{}' addresses {} bytes, but the {} weight tensor(s) it spans hold {}",
         k.id, q.name, last, q.span, bytes);
}

// A kernel's buffer and tensor-map parameters must point at operands the op has.
void checkKernelFitsOp(const Plan &p, const Kernel &k, const Op &op) {
  for (size_t i = 0; i < k.params.size(); ++i) {
    const KernelParam &q = k.params[i];
    if (q.kind == KernelParam::Kind::Scalar) continue;
    size_t have = q.role == OperandRole::In ? op.in.size()
                  : q.role == OperandRole::Out ? op.out.size()
                  : q.role == OperandRole::Weight ? op.weights.size()
                                                  : op.biases.size();
    int64_t span = q.kind == KernelParam::Kind::Scalar ? 1 : q.span;
    if (size_t(q.index + span) > have)
      fail(op.where + "/kernel", "kernel {} parameter '{}' reads operand {}..{} of a role the op has {} of", k.id,
           q.name, q.index, q.index + span - 1, have);
    if (q.kind == KernelParam::Kind::TensorMap && (q.role == OperandRole::Weight || q.role == OperandRole::Bias))
      checkWeightMapFits(p, k, op, q);
    if (span > 1) {
      if (q.role != OperandRole::Weight && q.role != OperandRole::Bias)
        fail(op.where + "/kernel", "kernel {} parameter '{}': only weights can span several operands", k.id, q.name);
      const auto &names = q.role == OperandRole::Weight ? op.weights : op.biases;
      auto [buf, off] = p.weightLocation(names[size_t(q.index)]);
      int64_t at = off;
      for (int64_t s = 0; s < span; ++s) {
        auto [b2, o2] = p.weightLocation(names[size_t(q.index + s)]);
        if (b2 != buf || o2 != at)
          fail(op.where + "/kernel", "kernel {} reads {} as one array, but it does not follow in weight buffer '{}'",
               k.id, names[size_t(q.index + s)], buf->name);
        for (const auto &t : buf->tensors)
          if (t.name == names[size_t(q.index + s)]) at += t.numel();
      }
    }
  }
}

// The node kinds an op kind implements (docs/contract.md section 3: a fused op covers exactly its parts): the
// required kinds in order, then the optional ones that may follow.
struct NodeShape {
  std::vector<std::string> required, optional;
};

NodeShape nodeShape(const Op &op) {
  const OpAttrs &a = op.attrs;
  switch (op.kind) {
  case OpKind::Linear: {
    if (a.epilogue == Epilogue::None) return {{"linear"}, {}};
    const char *e = a.epilogue == Epilogue::Residual ? "residual"
                    : a.epilogue == Epilogue::GateResidual ? "gate_residual"
                                                           : "swiglu";
    return {{"linear", e}, {}};
  }
  case OpKind::AllreduceTree:
    if (a.epilogue == Epilogue::None) return {{}, {}};
    return {{a.epilogue == Epilogue::Residual ? "residual" : "gate_residual"}, {}};
  case OpKind::QkvLinear: return {{"linear", "linear", "linear"}, {}};
  case OpKind::TimeEmbed: return {{"linear", "silu", "linear"}, {}};
  case OpKind::QkNormRope:
    if (a.rotaryDim > 0) return {{"qk_norm", "qk_norm", "rope", "rope"}, {}};
    return {{"qk_norm", "qk_norm"}, {}};
  default: return {{opKindName(op.kind)}, {}};
  }
}

// The op's nodes are of the kinds its op kind implements, and it binds exactly the tensors those nodes read:
// weights = the nodes' "*.weight" tensors in node order, biases = their "*.bias" tensors (section 5.1).
void checkOpNodes(const Op &op, const std::map<std::string, const h3::Node *> &nodes) {
  NodeShape shape = nodeShape(op);
  std::vector<std::string> kinds;
  for (const auto &id : op.nodes) {
    auto it = nodes.find(id);
    if (it == nodes.end()) continue;  // reported by the coverage check
    kinds.push_back(it->second->kind);
  }
  if (kinds != shape.required)
    fail(op.where + "/nodes", "a '{}' op implements nodes of kinds [{}], got [{}]", opKindName(op.kind),
         fmt::join(shape.required, ", "), fmt::join(kinds, ", "));
  if (op.kind == OpKind::AllreduceTree) return;  // its bias is the partial linear's (none in H3)
  std::vector<std::string> weights, biases;
  for (const auto &id : op.nodes)
    for (const auto &t : nodes.at(id)->tensors) {
      bool bias = t.size() > 5 && t.compare(t.size() - 5, 5, ".bias") == 0;
      (bias ? biases : weights).push_back(t);
    }
  if (weights != op.weights)
    fail(op.where + "/weights/weight", "expected [{}] (the tensors of its nodes), got [{}]", fmt::join(weights, ", "),
         fmt::join(op.weights, ", "));
  if (biases != op.biases)
    fail(op.where + "/weights/bias", "expected [{}] (the tensors of its nodes), got [{}]", fmt::join(biases, ", "),
         fmt::join(op.biases, ", "));
}

} // namespace

Plan planFromJson(const json &j, const fs::path &dir, const std::string &file) {
  const std::string root = file + "#";
  if (!j.is_object()) fail(root, "expected a JSON object");
  onlyKeys(j, {"schema", "fingerprint_sha256", "plan_sha256", "config", "options", "values", "slots", "weights",
               "functions", "kernels", "stats"},
           root);
  Plan p;
  p.dir = dir;
  std::string schema = str(member(j, "schema", root), root + "/schema");
  if (schema != kPlanSchema)
    fail(root + "/schema", "expected \"{}\", got \"{}\" (recompile the plan with this h3c)", kPlanSchema, schema);
  p.planSha256 = str(member(j, "plan_sha256", root), root + "/plan_sha256");
  std::string actual = computePlanSha256(j);
  if (actual != p.planSha256)
    fail(root + "/plan_sha256", "recorded {} but the plan hashes to {}: the plan was modified", p.planSha256, actual);
  p.fingerprintSha256 = str(member(j, "fingerprint_sha256", root), root + "/fingerprint_sha256");
  p.config = h3::configFromJson(member(j, "config", root), root + "/config");

  const json &opts = member(j, "options", root);
  onlyKeys(opts, {"arch", "tp", "fuse", "wgmma"}, root + "/options");
  p.options.arch = str(member(opts, "arch", root + "/options"), root + "/options/arch");
  if (p.options.arch != "sm_90a" && p.options.arch != "sm_100a")
    fail(root + "/options/arch", "expected sm_90a or sm_100a, got \"{}\"", p.options.arch);
  p.options.tp = integer(member(opts, "tp", root + "/options"), root + "/options/tp");
  if (p.options.tp != 1 && p.options.tp != 2 && p.options.tp != 4 && p.options.tp != 8)
    fail(root + "/options/tp", "expected 1, 2, 4 or 8, got {}", p.options.tp);
  p.options.fuse = boolean(member(opts, "fuse", root + "/options"), root + "/options/fuse");
  if (opts.contains("wgmma")) p.options.wgmma = boolean(opts["wgmma"], root + "/options/wgmma");

  if (j.contains("stats")) {
    const json &st = j["stats"];
    if (!st.is_object()) fail(root + "/stats", "expected an object");
    for (auto it = st.begin(); it != st.end(); ++it) p.stats[it.key()] = integer(it.value(), root + "/stats/" + it.key());
  }

  // slots
  const json &slots = array(member(j, "slots", root), root + "/slots");
  std::set<int64_t> slotIds;
  for (size_t i = 0; i < slots.size(); ++i) {
    std::string w = root + "/slots/" + std::to_string(i);
    onlyKeys(slots[i], {"id", "bytes_per_row", "fixed_bytes"}, w);
    Slot s;
    s.id = nonNegative(member(slots[i], "id", w), w + "/id", 1 << 20);
    const json &bpr = member(slots[i], "bytes_per_row", w);
    if (!bpr.is_object()) fail(w + "/bytes_per_row", "expected an object");
    for (auto it = bpr.begin(); it != bpr.end(); ++it) {
      Domain d;
      if (!parseDomain(it.key(), d)) fail(w + "/bytes_per_row/" + it.key(), "unknown row domain");
      s.bytesPerRow[d] = nonNegative(it.value(), w + "/bytes_per_row/" + it.key());
    }
    s.fixedBytes = nonNegative(member(slots[i], "fixed_bytes", w), w + "/fixed_bytes");
    if (!slotIds.insert(s.id).second) fail(w + "/id", "duplicate slot id {}", s.id);
    p.slots.push_back(s);
  }

  // values
  const json &values = member(j, "values", root);
  if (!values.is_object()) fail(root + "/values", "expected an object");
  for (auto it = values.begin(); it != values.end(); ++it) {
    std::string w = root + "/values/" + it.key();
    const json &v = it.value();
    onlyKeys(v, {"dtype", "rows", "cols", "batch", "slot", "ranks"}, w);
    Value pv;
    pv.name = it.key();
    pv.dtype = floatDtype(member(v, "dtype", w), w + "/dtype", true);
    pv.rows = domain(member(v, "rows", w), w + "/rows");
    pv.cols = positive(member(v, "cols", w), w + "/cols");
    pv.batch = boolean(member(v, "batch", w), w + "/batch");
    if (pv.batch && !isTokenDomain(pv.rows))
      fail(w + "/batch", "only token-domain values (S, Nt, Nv, Na) can carry the batch axis");
    pv.slot = nonNegative(member(v, "slot", w), w + "/slot", 1 << 20);
    if (!slotIds.count(pv.slot)) fail(w + "/slot", "no slot with id {}", pv.slot);
    if (v.contains("ranks")) {
      pv.ranks = positive(v["ranks"], w + "/ranks", 8);
      if (pv.ranks > p.options.tp) fail(w + "/ranks", "expected 1..tp ({}), got {}", p.options.tp, pv.ranks);
    }
    p.values[pv.name] = pv;
  }

  // weight buffers
  const json &wb = array(member(j, "weights", root), root + "/weights");
  std::set<std::string> tensorNames;
  for (size_t i = 0; i < wb.size(); ++i) {
    std::string w = root + "/weights/" + std::to_string(i);
    onlyKeys(wb[i], {"buffer", "tensors"}, w);
    WeightBuffer b;
    b.name = str(member(wb[i], "buffer", w), w + "/buffer");
    const json &ts = array(member(wb[i], "tensors", w), w + "/tensors");
    if (ts.empty()) fail(w + "/tensors", "a weight buffer holds at least one tensor");
    for (size_t t = 0; t < ts.size(); ++t) {
      std::string wt = w + "/tensors/" + std::to_string(t);
      onlyKeys(ts[t], {"name", "dtype", "shape"}, wt);
      WeightTensor x;
      x.name = str(member(ts[t], "name", wt), wt + "/name");
      x.dtype = floatDtype(member(ts[t], "dtype", wt), wt + "/dtype");
      const json &sh = array(member(ts[t], "shape", wt), wt + "/shape");
      if (sh.empty() || sh.size() > 4) fail(wt + "/shape", "expected 1 to 4 dimensions");
      for (size_t d = 0; d < sh.size(); ++d) x.shape.push_back(positive(sh[d], wt + "/shape/" + std::to_string(d), 1 << 30));
      if (!tensorNames.insert(x.name).second) fail(wt + "/name", "tensor '{}' is in two weight buffers", x.name);
      b.tensors.push_back(x);
    }
    p.weights.push_back(b);
  }
  // The tensors must be those of the config, with the config's dtypes and shapes.
  std::map<std::string, h3::TensorSpec> specs;
  for (auto &s : h3::diffusersTensors(p.config)) specs[s.name] = s;
  for (size_t i = 0; i < p.weights.size(); ++i)
    for (size_t t = 0; t < p.weights[i].tensors.size(); ++t) {
      const WeightTensor &x = p.weights[i].tensors[t];
      std::string wt = root + "/weights/" + std::to_string(i) + "/tensors/" + std::to_string(t);
      auto it = specs.find(x.name);
      if (it == specs.end()) fail(wt + "/name", "'{}' is not a tensor of this config", x.name);
      if (it->second.dtype != x.dtype || it->second.shape != x.shape)
        fail(wt, "'{}' differs from the config's {} {}", x.name, dtypeName(it->second.dtype),
             fmt::format("{}", fmt::join(it->second.shape, "x")));
    }

  // kernels (sources read and hash-checked here; fit to each op checked below)
  if (j.contains("kernels")) {
    const json &ks = j["kernels"];
    if (!ks.is_object()) fail(root + "/kernels", "expected an object");
    for (auto it = ks.begin(); it != ks.end(); ++it)
      p.kernels[it.key()] = parseKernel(it.key(), it.value(), p.options, dir, root + "/kernels/" + it.key());
  }

  // functions
  const json &fns = member(j, "functions", root);
  onlyKeys(fns, {"forward"}, root + "/functions");
  std::map<std::string, std::string> nodeOwner;
  std::set<std::string> usedKernels;
  for (auto fit = fns.begin(); fit != fns.end(); ++fit) {
    const std::string fw = root + "/functions/" + fit.key();
    const json &fj = fit.value();
    onlyKeys(fj, {"inputs", "outputs", "ops"}, fw);
    Function fn;
    fn.name = fit.key();
    fn.inputs = strList(member(fj, "inputs", fw), fw + "/inputs");
    std::set<std::string> known, defined;
    for (const auto &g : h3::graphInputs(p.config)) known.insert(g.name);
    for (size_t i = 0; i < fn.inputs.size(); ++i) {
      const std::string w = fw + "/inputs/" + std::to_string(i);
      if (!known.count(fn.inputs[i])) fail(w, "'{}' is not a graph input (docs/contract.md section 2)", fn.inputs[i]);
      if (!p.values.count(fn.inputs[i])) fail(w, "graph input '{}' has no value entry", fn.inputs[i]);
      if (!defined.insert(fn.inputs[i]).second) fail(w, "duplicate input '{}'", fn.inputs[i]);
    }
    const json &ops = array(member(fj, "ops", fw), fw + "/ops");
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string w = fw + "/ops/" + std::to_string(i);
      const json &o = ops[i];
      onlyKeys(o, {"op", "nodes", "in", "out", "weights", "attrs", "order", "kernel"}, w);
      Op op;
      op.index = i;
      op.where = w;
      std::string kind = str(member(o, "op", w), w + "/op");
      if (!parseOpKind(kind, op.kind)) fail(w + "/op", "unknown op kind '{}'", kind);
      op.nodes = strList(member(o, "nodes", w), w + "/nodes");
      if (op.nodes.empty() && op.kind != OpKind::AllreduceTree) fail(w + "/nodes", "an op implements at least one node");
      for (size_t n = 0; n < op.nodes.size(); ++n) {
        auto [it, fresh] = nodeOwner.emplace(op.nodes[n], w);
        if (!fresh) fail(w + "/nodes/" + std::to_string(n), "node '{}' is already implemented by {}", op.nodes[n], it->second);
      }
      op.in = strList(member(o, "in", w), w + "/in");
      op.out = strList(member(o, "out", w), w + "/out");
      const json &ws = member(o, "weights", w);
      onlyKeys(ws, {"weight", "bias"}, w + "/weights");
      op.weights = strList(member(ws, "weight", w + "/weights"), w + "/weights/weight");
      op.biases = strList(member(ws, "bias", w + "/weights"), w + "/weights/bias");
      for (const auto *list : {&op.weights, &op.biases})
        for (const auto &t : *list)
          if (!tensorNames.count(t)) fail(w + "/weights", "tensor '{}' is in no weight buffer (#/weights)", t);
      op.attrs = parseAttrs(op.kind, member(o, "attrs", w), !op.in.empty(), !op.weights.empty(), p.options.tp,
                            w + "/attrs");
      // Fixed operand positions: the arity follows from the kind and its attrs.
      auto inRoles = inputRoles(op.kind, op.attrs), outRoles = outputRoles(op.kind, op.attrs);
      if (op.in.size() != inRoles.size())
        fail(w + "/in", "a '{}' op takes {} inputs ({}), got {}", kind, inRoles.size(), fmt::join(inRoles, ", "),
             op.in.size());
      if (op.out.size() != outRoles.size())
        fail(w + "/out", "a '{}' op has {} outputs ({}), got {}", kind, outRoles.size(), fmt::join(outRoles, ", "),
             op.out.size());
      for (size_t k = 0; k < op.in.size(); ++k) {
        if (!p.values.count(op.in[k])) fail(w + "/in/" + std::to_string(k), "unknown value '{}'", op.in[k]);
        if (!defined.count(op.in[k]))
          fail(w + "/in/" + std::to_string(k), "value '{}' is read before any op defines it", op.in[k]);
      }
      for (size_t k = 0; k < op.out.size(); ++k) {
        if (!p.values.count(op.out[k])) fail(w + "/out/" + std::to_string(k), "unknown value '{}'", op.out[k]);
        if (!defined.insert(op.out[k]).second)
          fail(w + "/out/" + std::to_string(k), "value '{}' is defined twice", op.out[k]);
      }
      op.order = parseOrder(o.contains("order") ? o["order"] : json(), w + "/order");
      OrderKind want = requiredOrder(op.kind);
      if (op.order.kind != want) {
        if (want == OrderKind::None) fail(w + "/order", "op '{}' reduces nothing and must carry no order", kind);
        fail(w + "/order", "op '{}' ({}) must carry a '{}' reduction order", kind, op.firstNode(), orderKindName(want));
      }
      const json &kj = member(o, "kernel", w);
      if (!kj.is_null()) {
        op.kernel = str(kj, w + "/kernel");
        if (runsOnHost(op.kind)) fail(w + "/kernel", "a '{}' op runs on the host and has no kernel", kind);
        auto kit = p.kernels.find(*op.kernel);
        if (kit == p.kernels.end()) fail(w + "/kernel", "kernel '{}' is not in #/kernels", *op.kernel);
        usedKernels.insert(*op.kernel);
      }
      fn.ops.push_back(std::move(op));
    }
    const json &outs = member(fj, "outputs", fw);
    onlyKeys(outs, {"sample", "audio_sample"}, fw + "/outputs");
    for (const char *name : {"sample", "audio_sample"}) {
      std::string v = str(member(outs, name, fw + "/outputs"), fw + "/outputs/" + name);
      if (!defined.count(v)) fail(fw + "/outputs/" + name, "value '{}' is never defined", v);
      fn.outputs[name] = v;
    }
    p.functions[fn.name] = std::move(fn);
  }
  if (!p.functions.count("forward")) fail(root + "/functions/forward", "missing");
  for (const auto &[id, k] : p.kernels)
    if (!usedKernels.count(id)) fail(root + "/kernels/" + id, "no op launches this kernel");
  for (const auto &[name, fn] : p.functions)
    for (const Op &op : fn.ops)
      if (op.kernel) checkKernelFitsOp(p, p.kernels.at(*op.kernel), op);

  // Every logical node of the config in exactly one op (duplicates were rejected above), each op implementing
  // nodes of its kind with exactly their tensors.
  const h3::Fingerprint derived = h3::deriveFingerprint(p.config, "plan");
  std::map<std::string, const h3::Node *> expected;
  for (const auto &n : derived.nodes) expected[n.id] = &n;
  for (const auto &[id, w] : nodeOwner)
    if (!expected.count(id)) fail(w + "/nodes", "'{}' is not a node of this config (docs/contract.md section 2)", id);
  for (const auto &[id, n] : expected)
    if (!nodeOwner.count(id)) fail(root + "/functions/forward/ops", "node '{}' is implemented by no op", id);
  for (const auto &[name, fn] : p.functions)
    for (const Op &op : fn.ops) checkOpNodes(op, expected);
  return p;
}

Plan loadPlan(const fs::path &path) {
  std::error_code ec;
  fs::path file = fs::is_directory(path, ec) ? path / "plan.json" : path;
  std::string text = readFile(file);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error &e) {
    fail(file.string(), "invalid JSON: {}", e.what());
  }
  return planFromJson(j, file.parent_path(), file.string());
}

} // namespace h3c::plan
