// The plan reader: strict and fail closed (io.h). Every problem is an h3c::Error whose `where` is the JSON pointer.
#include "h3c/plan/io.h"
#include "h3c/plan/checkpoint.h"
#include "h3c/plan/slots.h"
#include "h3c/plan/trainable.h"

#include "json_fields.h"

#include "h3c/models/fingerprint.h"
#include "h3c/support/json_read.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <climits>

namespace fs = std::filesystem;

namespace h3c::plan {

using namespace detail;

// read_model.cpp: the plan computes exactly its config's node graph (wiring, values, attrs and operand widths).
void checkPlanComputesModel(const Plan &p, const h3::Fingerprint &model, const std::string &root);
// read_backward.cpp: functions.backward differentiates the forward (section 14).
void checkBackward(const Plan &p, const h3::Fingerprint &model, const std::string &root);

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
    fail(where + "/kind", "unknown reduction order '{}' (expected k_chunks, lane_tree, flash or row_units)", kind);
  if (o.kind == OrderKind::KChunks) {
    onlyKeys(j, {"kind", "k_step", "units", "acc"}, where);
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    o.units = integer(member(j, "units", where), where + "/units");
    if (o.kStep != 16) fail(where + "/k_step", "expected 16 (the MMA K width), got {}", o.kStep);
    if (o.units != 1)
      fail(where + "/units", "expected 1 (every linear reduces K in one chain; docs/contract.md section 4), got {}",
           o.units);
  } else if (o.kind == OrderKind::LaneTree) {
    onlyKeys(j, {"kind", "lanes", "acc"}, where);
    o.lanes = integer(member(j, "lanes", where), where + "/lanes");
    if (o.lanes != 32) fail(where + "/lanes", "expected 32, got {}", o.lanes);
  } else if (o.kind == OrderKind::RowUnits) {
    onlyKeys(j, {"kind", "unit", "k_step", "acc"}, where);
    o.unit = integer(member(j, "unit", where), where + "/unit");
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    if (o.unit != 128) fail(where + "/unit", "expected 128 (the rows of a unit partial; docs/contract.md section 14), got {}", o.unit);
    if (o.kStep != 16) fail(where + "/k_step", "expected 16, got {}", o.kStep);
  } else {
    onlyKeys(j, {"kind", "kv_block", "k_step", "acc", "p"}, where);
    o.kvBlock = integer(member(j, "kv_block", where), where + "/kv_block");
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    // 128 is what the compiler pins today; 64 is what plans compiled before 2026-12-04 carry (their kernels and the
    // CPU reference follow the plan's value).
    if (o.kvBlock != 64 && o.kvBlock != 128) fail(where + "/kv_block", "expected 128 (or 64), got {}", o.kvBlock);
    if (o.kStep != 16) fail(where + "/k_step", "expected 16, got {}", o.kStep);
    std::string p = str(member(j, "p", where), where + "/p");
    if (p != "bf16") fail(where + "/p", "expected \"bf16\", got \"{}\"", p);
    o.p = DType::BF16;
  }
  std::string acc = str(member(j, "acc", where), where + "/acc");
  if (acc != "f32") fail(where + "/acc", "expected \"f32\", got \"{}\"", acc);
  return o;
}

// Segments tiling [0, total) from 0 in order (total < 0: any end), each splitting evenly over `parts`.
Segments parseSegments(const json &j, int64_t parts, int64_t total, const std::string &where) {
  const json &segs = array(j, where);
  if (segs.empty()) fail(where, "expected at least one segment");
  Segments out;
  int64_t at = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    std::string w = where + "/" + std::to_string(i);
    if (!segs[i].is_array() || segs[i].size() != 2) fail(w, "expected [begin, end]");
    int64_t b = nonNegative(segs[i][0], w + "/0"), e = positive(segs[i][1], w + "/1");
    if (b != at || e <= b) fail(w, "segments must tile the columns from 0 in order; got [{}, {}) after {}", b, e, at);
    if ((e - b) % parts) fail(w, "segment of {} columns does not split into {} equal parts", e - b, parts);
    out.emplace_back(b, e);
    at = e;
  }
  if (total >= 0 && at != total) fail(where, "segments cover [0, {}), expected [0, {})", at, total);
  return out;
}

int64_t segmentsWidth(const Segments &s) { return s.empty() ? 0 : s.back().second; }

Shard parseShard(const json &j, int64_t planTp, const std::string &where) {
  Shard s;
  std::string kind = str(member(j, "kind", where), where + "/kind");
  if (!parseShardKind(kind, s.kind)) fail(where + "/kind", "expected replicated or column, got '{}'", kind);
  s.tp = positive(member(j, "tp", where), where + "/tp", 8);
  if (s.kind == ShardKind::Column) {
    onlyKeys(j, {"kind", "tp", "segments"}, where);
    if (s.tp != planTp || s.tp < 2)
      fail(where + "/tp", "a column shard splits over options.tp = {} ranks (> 1), got {}", planTp, s.tp);
    s.segments = parseSegments(member(j, "segments", where), s.tp, -1, where + "/segments");
  } else {
    onlyKeys(j, {"kind", "tp"}, where);
    if (s.tp != 1) fail(where + "/tp", "a replicated op records tp = 1, got {}", s.tp);
  }
  return s;
}

// Typed attrs of an op (ops.h attrKeys + the common ones). `hasWeights`/`hasInputs` decide the common keys.
OpAttrs parseAttrs(OpKind kind, const json &j, bool hasInputs, bool hasWeights, const Options &opt,
                   const std::string &where) {
  if (!j.is_object()) fail(where, "expected an object");
  OpAttrs a;
  // The epilogue and a layout op's axis decide which other keys exist: read them first.
  if (j.contains("epilogue")) {
    std::string e = str(j["epilogue"], where + "/epilogue");
    if (!parseEpilogue(e, a.epilogue))
      fail(where + "/epilogue", "expected none, residual, gate_residual, swiglu or qk_norm_rope, got \"{}\"", e);
  }
  // A linear_grad_x's and a norm_modulate_grad's epilogue is residual (h3-fuse-grad: dx = residual + dx), which
  // adds the input "residual"; a linear_grad_x's may be swiglu (h3-fuse-grad: the swiglu_grad of its dX taken in),
  // which adds the input "swiglu_x" and makes dx that swiglu_grad's.
  if ((kind == OpKind::LinearGradX || kind == OpKind::NormModulateGrad) && j.contains("epilogue") &&
      a.epilogue != Epilogue::Residual && !(kind == OpKind::LinearGradX && a.epilogue == Epilogue::Swiglu))
    fail(where + "/epilogue", "a {}'s epilogue is \"residual\"{} or absent, got \"{}\"", opKindName(kind),
         kind == OpKind::LinearGradX ? ", \"swiglu\"" : "", epilogueName(a.epilogue));
  // A key that is absent or holds its one other value (`value`): whether it is there.
  auto flag = [&](const char *key, int64_t value) {
    if (!j.contains(key)) return false;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() != value)
      fail(where + "/" + key, "expected {} (or no key)", value);
    return true;
  };
  // lse (attention's row statistics saved for the backward) adds an output to attention, an input to attention_grad.
  if ((kind == OpKind::Attention || kind == OpKind::AttentionGrad) && flag("lse", 1)) a.lse = 1;
  // table_grad 0 (nothing reads the AdaLN table's gradient) takes the output "dtable" (and gate_residual_grad's input
  // "y") away; no key: 1.
  if ((kind == OpKind::NormModulateGrad || kind == OpKind::GateResidualGrad) && flag("table_grad", 0)) a.tableGrad = 0;
  // swiglu_x 1 on a linear with the swiglu epilogue adds the output "swiglu_x" (its own [v | g], kept for the backward).
  if (kind == OpKind::Linear && flag("swiglu_x", 1)) {
    if (a.epilogue != Epilogue::Swiglu) fail(where + "/swiglu_x", "a linear keeps swiglu's x with the swiglu epilogue only");
    a.swigluX = 1;
  }
  // rotary_dim on a qk_norm's rms_norm_grad (h3-fuse-grad: the rope_grad before it folded in) adds the inputs cos, sin.
  if (kind == OpKind::RmsNormGrad && j.contains("rotary_dim"))
    a.rotaryDim = positive(j["rotary_dim"], where + "/rotary_dim", 1024);
  // lora_k (an unmerged LoRA path) adds an attr, an input and a weight (ops.h).
  if ((takesLora(kind) || kind == OpKind::LinearGradX) && j.contains("lora_k"))
    a.loraK = positive(j["lora_k"], where + "/lora_k", 1 << 16);
  if (isLayoutOp(kind) && j.contains("axis")) {
    std::string ax = str(j["axis"], where + "/axis");
    if (!parseAxis(ax, a.axis)) fail(where + "/axis", "expected rows or cols, got \"{}\"", ax);
  }
  std::set<std::string> allowed = {"out_dtype"};
  if (!isLayoutOp(kind)) allowed.insert("shard");
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
    else if (k == "parts") a.parts = positive(v, w("parts"), 8);
    else if (k == "dtype") a.dtype = floatDtype(v, w("dtype"), isLayoutOp(kind));
    else if (k == "x_dtype") a.xDtype = floatDtype(v, w("x_dtype"), true);
    else if (k == "w_dtype") a.wDtype = floatDtype(v, w("w_dtype"));
    else if (k == "out_dtype") a.outDtype = floatDtype(v, w("out_dtype"), isLayoutOp(kind));
    else if (k == "shard") a.shard = parseShard(v, opt.tp, w("shard"));
    else if (k == "group") a.group = positive(v, w("group"), 1 << 20);
    else if (k == "kv_block") {
      a.kvBlock = positive(v, w("kv_block"), 1024);
      if (a.kvBlock != 64 && a.kvBlock != 128) fail(w("kv_block"), "expected 128 (or 64), got {}", a.kvBlock);
    } else if (k == "lse" || k == "table_grad" || k == "swiglu_x") {
      // (read above)
    } else if (k == "lora_k") {
      // Whole 64-column k-blocks of the Hopper GEMM, so lora_t's chunks start a block of their own (section 13); a
      // dX's LoRA down path (h3-fuse-grad) is one k-block of whole 16-wide chunks (section 14).
      if (kind == OpKind::LinearGradX) {
        if (a.loraK > 64 || a.loraK % 16) fail(w("lora_k"), "expected 16, 32, 48 or 64, got {}", a.loraK);
      } else if (a.loraK % 64) {
        fail(w("lora_k"), "expected a multiple of 64, got {}", a.loraK);
      }
    }
  }
  if (isLayoutOp(kind)) {
    // Rows move over the sequence-parallel group, columns over the tensor-parallel group (section 5.2).
    const int64_t group = a.axis == Axis::Rows ? opt.sp : opt.tp;
    if (a.parts != group || group < 2)
      fail(w("parts"), "a {} {} moves {} parts (options.{} = {}, which must be > 1), got {}", opKindName(kind),
           axisName(a.axis), a.axis == Axis::Rows ? "sp" : "tp", a.axis == Axis::Rows ? "sp" : "tp", group, a.parts);
    if (a.axis == Axis::Cols) a.segments = parseSegments(j["segments"], a.parts, a.cols, w("segments"));
    if (a.dtype != a.outDtype || a.dtype != a.xDtype)
      fail(w("dtype"), "a layout op copies: dtype, x_dtype and out_dtype must agree");
  }
  if (kind == OpKind::Linear) {
    if (a.epilogue == Epilogue::QkNormRope) fail(w("epilogue"), "qk_norm_rope is an epilogue of qkv_linear only");
    if (a.epilogue == Epilogue::GateResidual && a.chunk >= a.numChunks)
      fail(w("chunk"), "chunk {} out of [0, num_chunks = {})", a.chunk, a.numChunks);
  } else if (kind == OpKind::QkvLinear) {
    // Without the key: the plain qkv GEMM (plans compiled before the fused epilogue read as before).
    if (j.contains("epilogue") && a.epilogue != Epilogue::QkNormRope)
      fail(w("epilogue"), "a qkv_linear's epilogue is \"qk_norm_rope\" or absent, got \"{}\"",
           epilogueName(a.epilogue));
  } else if (j.contains("epilogue") && kind != OpKind::LinearGradX && kind != OpKind::NormModulateGrad) {  // (checked above)
    fail(w("epilogue"), "unknown field");
  }
  if (kind == OpKind::RmsNormGrad && a.cols % a.group)
    fail(w("group"), "a norm group of {} channels does not divide the {} columns", a.group, a.cols);
  if (kind == OpKind::RmsNormGrad && a.rotaryDim > 0 && (a.rotaryDim > a.group || a.rotaryDim % 2))
    fail(w("rotary_dim"), "expected an even width <= the group (a head: {}), got {}", a.group, a.rotaryDim);
  if ((kind == OpKind::NormModulate || kind == OpKind::NormModulateGrad) && (a.shiftChunk >= a.numChunks || a.scaleChunk >= a.numChunks))
    fail(where, "shift_chunk {} / scale_chunk {} out of [0, num_chunks = {})", a.shiftChunk, a.scaleChunk,
         a.numChunks);
  if ((kind == OpKind::GateResidual || kind == OpKind::GateResidualGrad) && a.chunk >= a.numChunks)
    fail(w("chunk"), "chunk {} out of [0, num_chunks = {})", a.chunk, a.numChunks);
  if ((kind == OpKind::Rope || kind == OpKind::RopeGrad || kind == OpKind::QkNormRope ||
       (kind == OpKind::QkvLinear && a.epilogue == Epilogue::QkNormRope)) &&
      (a.rotaryDim > a.headDim || a.rotaryDim % 2))
    fail(w("rotary_dim"), "expected an even width <= head_dim ({}), got {}", a.headDim, a.rotaryDim);
  return a;
}

Launch parseLaunch(const json &j, const std::string &where) {
  onlyKeys(j, {"block", "smem_bytes", "grid", "cluster", "grid_dependency"}, where);
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
  if (j.contains("grid_dependency")) l.gridDependency = boolean(j["grid_dependency"], where + "/grid_dependency");
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
  } else if (kind == "scratch") {
    onlyKeys(j, {"kind", "name", "bytes"}, where);
    p.kind = KernelParam::Kind::Scratch;
    p.value = Extent::parse(str(member(j, "bytes", where), where + "/bytes"), where + "/bytes");
  } else if (kind == "tensor_map") {
    p.kind = KernelParam::Kind::TensorMap;
    if (j.contains("scratch")) {  // over the kernel's scratch parameter of that name (checkKernelFitsOp)
      onlyKeys(j, {"kind", "name", "scratch", "dtype", "dims", "strides", "box", "swizzle", "l2_promotion", "oob"},
               where);
      p.scratch = str(j["scratch"], where + "/scratch");
      if (p.scratch.empty()) fail(where + "/scratch", "expected the name of a scratch parameter");
    } else {
      onlyKeys(j, {"kind", "name", "role", "index", "span", "dtype", "dims", "strides", "box", "swizzle",
                   "l2_promotion", "oob"},
               where);
      p.role = parseRole(member(j, "role", where), where + "/role");
      p.index = nonNegative(member(j, "index", where), where + "/index", 64);
      p.span = positive(member(j, "span", where), where + "/span", 64);
    }
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
    fail(where + "/kind", "expected buffer, scalar, tensor_map or scratch, got \"{}\"", kind);
  }
  return p;
}

Kernel parseKernel(const std::string &id, const json &j, const Options &opt, const fs::path &dir,
                   const std::string &where) {
  onlyKeys(j, {"file", "sha256", "entry", "arch", "nvrtc_options", "launch", "phases", "params"}, where);
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
  if (j.contains("phases")) {
    const json &phs = array(j["phases"], where + "/phases");
    if (phs.empty()) fail(where + "/phases", "expected at least one phase (leave the key out for none)");
    std::set<std::string> entries{k.entry};
    for (size_t i = 0; i < phs.size(); ++i) {
      const std::string w = where + "/phases/" + std::to_string(i);
      onlyKeys(phs[i], {"entry", "launch"}, w);
      KernelPhase ph;
      ph.entry = str(member(phs[i], "entry", w), w + "/entry");
      if (!entries.insert(ph.entry).second) fail(w + "/entry", "entry '{}' is launched twice", ph.entry);
      ph.launch = parseLaunch(member(phs[i], "launch", w), w + "/launch");
      k.phases.push_back(std::move(ph));
    }
  }
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
// address lies within them (a map wider than its weights would read whatever the runtime placed behind them). A
// rank's weights are its part of a split tensor (section 5.2), so the bound is the rank's size.
void checkWeightMapFits(const Plan &p, const Kernel &k, const Op &op, const KernelParam &q) {
  const auto &names = q.role == OperandRole::Weight ? op.weights : op.biases;
  int64_t bytes = 0;
  for (int64_t s = 0; s < q.span; ++s) {
    const WeightTensor &t = p.weightTensor(names[size_t(q.index + s)]);
    int64_t n = 1;
    for (int64_t d : t.localShape()) n *= d;
    bytes += n * int64_t(dtypeSize(t.dtype));
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

// A tensor map over a scratch parameter: the kernel has one of that name, and the map stays inside its bytes (at a
// one-row request and a large one; the runtime checks the request it launches).
void checkScratchMapFits(const Kernel &k, const Op &op, const KernelParam &q) {
  auto it = std::find_if(k.params.begin(), k.params.end(), [&](const KernelParam &s) {
    return s.kind == KernelParam::Kind::Scratch && s.name == q.scratch;
  });
  if (it == k.params.end())
    fail(op.where + "/kernel", "kernel {} tensor map '{}' is over scratch '{}', which the kernel has no parameter of",
         k.id, q.name, q.scratch);
  for (const Extents &e : {Extents{1, 1, 1, 1, 1, 1, 1}, Extents{8, 100000, 1000, 100000, 1000, 100, 100000}})
    if (q.map.spanBytes(e) > it->value.eval(e))
      fail(op.where + "/kernel", "kernel {} tensor map '{}' addresses {} bytes, but scratch '{}' holds {}", k.id, q.name,
           q.map.spanBytes(e), q.scratch, it->value.eval(e));
}

// A kernel's buffer and tensor-map parameters must point at operands the op has.
void checkKernelFitsOp(const Plan &p, const Kernel &k, const Op &op) {
  for (size_t i = 0; i < k.params.size(); ++i) {
    const KernelParam &q = k.params[i];
    if (q.kind == KernelParam::Kind::Scalar || q.kind == KernelParam::Kind::Scratch) continue;
    if (q.kind == KernelParam::Kind::TensorMap && !q.scratch.empty()) {
      checkScratchMapFits(k, op, q);
      continue;
    }
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
        at += p.weightTensor(names[size_t(q.index + s)]).numel();
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
  case OpKind::AllGather:
  case OpKind::Split:
  case OpKind::LoraDown: return {{}, {}};
  case OpKind::QkvLinear:
    if (a.epilogue != Epilogue::QkNormRope) return {{"linear", "linear", "linear"}, {}};
    if (a.rotaryDim > 0) return {{"linear", "linear", "linear", "qk_norm", "qk_norm", "rope", "rope"}, {}};
    return {{"linear", "linear", "linear", "qk_norm", "qk_norm"}, {}};
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
  std::vector<std::string> weights, biases;
  for (const auto &id : op.nodes)
    for (const auto &t : nodes.at(id)->tensors) {
      bool bias = t.size() > 5 && t.compare(t.size() - 5, 5, ".bias") == 0;
      (bias ? biases : weights).push_back(t);
    }
  // The adapter slots an unmerged LoRA path adds (checkLoraOperands) are no tensors of the nodes.
  std::vector<std::string> own = op.weights;
  if (op.kind == OpKind::LoraDown) own.clear();
  else if (takesLora(op.kind) && op.attrs.loraK > 0 && !own.empty()) own.pop_back();
  if (weights != own)
    fail(op.where + "/weights/weight", "expected [{}] (the tensors of its nodes{}), got [{}]", fmt::join(weights, ", "),
         own.size() == op.weights.size() ? "" : ", then the LoRA up slot", fmt::join(op.weights, ", "));
  if (biases != op.biases)
    fail(op.where + "/weights/bias", "expected [{}] (the tensors of its nodes), got [{}]", fmt::join(biases, ", "),
         fmt::join(op.biases, ", "));
}

// Unmerged LoRA (docs/contract.md section 13): adapter slots are read only where the contract puts them, with the
// shapes the ops imply. A lora_down op reads one slot [N, K] (N = its lora_k width, a multiple of 64) and defines
// the value that a linear / qkv_linear with lora_k = N reads as its last input; that op's last weight is the up slot
// [all its weight rows, N]. Every other op reads no slot, and every slot is read by exactly one op.
void checkLoraOperands(const Plan &p, const Function &fn) {
  std::map<std::string, const Op *> downOf;  // lora_down output -> the op
  std::set<std::string> slotsRead;
  auto slot = [&](const Op &op, const std::string &name, int64_t rows, int64_t cols) {
    const WeightTensor &t = p.weightTensor(name);
    if (!t.adapter) fail(op.where + "/weights/weight", "'{}' must be an adapter slot (weights: \"adapter\": true)", name);
    if (t.shape != std::vector<int64_t>{rows, cols})
      fail(op.where + "/weights/weight", "adapter slot '{}' is {}x{}, the op needs {}x{}", name, t.shape[0],
           t.shape[1], rows, cols);
    if (!slotsRead.insert(name).second) fail(op.where + "/weights/weight", "adapter slot '{}' is read by two ops", name);
  };
  for (const Op &op : fn.ops) {
    const OpAttrs &a = op.attrs;
    if (op.kind == OpKind::LoraDown) {
      if (op.weights.size() != 1 || !op.biases.empty())
        fail(op.where + "/weights", "a lora_down op reads one adapter slot and no bias");
      if (a.N % 64) fail(op.where + "/attrs/N", "a lora_down width is a multiple of 64, got {}", a.N);
      if (a.shard.kind != ShardKind::Replicated) fail(op.where + "/attrs/shard", "a lora_down op is not sharded");
      if (p.value(op.in[0]).cols != a.K || p.value(op.out[0]).cols != a.N || p.value(op.out[0]).dtype != DType::BF16 ||
          p.value(op.out[0]).rows != p.value(op.in[0]).rows)
        fail(op.where, "a lora_down op maps x [rows, K = {}] to a BF16 [rows, N = {}]", a.K, a.N);
      slot(op, op.weights[0], a.N, a.K);
      downOf[op.out[0]] = &op;
      continue;
    }
    for (const auto *list : {&op.weights, &op.biases})
      for (size_t i = 0; i < list->size(); ++i) {
        const bool up = list == &op.weights && takesLora(op.kind) && a.loraK > 0 && i + 1 == list->size();
        if (!up && p.weightTensor((*list)[i]).adapter)
          fail(op.where + "/weights", "'{}' is an adapter slot, which only a LoRA path reads", (*list)[i]);
      }
    if (!takesLora(op.kind) || a.loraK == 0) continue;
    if (a.shard.kind != ShardKind::Replicated)
      fail(op.where + "/attrs/shard", "an unmerged LoRA path is not split over tensor-parallel ranks");
    if (op.weights.empty()) fail(op.where + "/weights", "no up slot");
    const std::string &t = op.in.back();
    auto it = downOf.find(t);
    if (it == downOf.end()) fail(op.where + "/in", "its lora_t '{}' is no lora_down op's output", t);
    const Op &down = *it->second;
    if (down.in[0] != op.in[0]) fail(op.where + "/in", "its lora_t is the down projection of '{}', not of its x '{}'", down.in[0], op.in[0]);
    if (down.attrs.N != a.loraK) fail(op.where + "/attrs/lora_k", "is {} but its lora_t has {} columns", a.loraK, down.attrs.N);
    int64_t rows = 0;
    for (size_t i = 0; i + 1 < op.weights.size(); ++i) {
      if (op.kind == OpKind::QkvLinear && i >= 3) break;  // qkv's norm weights follow its three matrices
      rows += p.weightTensor(op.weights[i]).shape[0];
    }
    slot(op, op.weights.back(), rows, a.loraK);
    if (a.wDtype != DType::BF16 || a.xDtype != DType::BF16)
      fail(op.where + "/attrs", "an unmerged LoRA path runs on the BF16 GEMM (x and W in BF16)");
  }
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors)
      if (t.adapter && !slotsRead.count(t.name)) fail("#/weights", "adapter slot '{}' is read by no op", t.name);
}

// The "ranks" section: exactly the grid of section 5.2 for options.sp x options.tp, spelled out.
std::vector<Rank> parseRanks(const json &j, const Options &opt, const std::string &where) {
  onlyKeys(j, {"sp", "tp", "count", "order", "list"}, where);
  if (integer(member(j, "sp", where), where + "/sp") != opt.sp) fail(where + "/sp", "differs from options.sp");
  if (integer(member(j, "tp", where), where + "/tp") != opt.tp) fail(where + "/tp", "differs from options.tp");
  if (integer(member(j, "count", where), where + "/count") != opt.sp * opt.tp)
    fail(where + "/count", "expected sp x tp = {}", opt.sp * opt.tp);
  if (str(member(j, "order", where), where + "/order") != "sp_major")
    fail(where + "/order", "expected \"sp_major\" (rank = sp_index * tp + tp_index)");
  std::vector<Rank> grid = rankGrid(opt.sp, opt.tp);
  const json &list = array(member(j, "list", where), where + "/list");
  if (list.size() != grid.size()) fail(where + "/list", "expected {} ranks, got {}", grid.size(), list.size());
  for (size_t r = 0; r < grid.size(); ++r) {
    const std::string w = where + "/list/" + std::to_string(r);
    const json &e = list[r];
    onlyKeys(e, {"rank", "sp_index", "tp_index", "rows", "cols"}, w);
    const Rank &g = grid[r];
    for (auto [key, want] : {std::pair{"rank", g.rank}, std::pair{"sp_index", g.spIndex}, std::pair{"tp_index", g.tpIndex}})
      if (integer(member(e, key, w), w + "/" + key) != want) fail(w + "/" + key, "expected {}", want);
    const json &rows = member(e, "rows", w);
    onlyKeys(rows, {"domain", "begin", "end"}, w + "/rows");
    if (str(member(rows, "domain", w + "/rows"), w + "/rows/domain") != "S") fail(w + "/rows/domain", "expected \"S\"");
    for (auto [key, num] : {std::pair{"begin", g.spIndex}, std::pair{"end", g.spIndex + 1}}) {
      const std::string wk = w + "/rows/" + key;
      const json &f = member(rows, key, w + "/rows");
      if (!f.is_array() || f.size() != 2 || integer(f[0], wk + "/0") != num || integer(f[1], wk + "/1") != opt.sp)
        fail(wk, "expected [{}, {}] (row floor({} * S / {}))", num, opt.sp, num, opt.sp);
    }
    const json &cols = member(e, "cols", w);
    onlyKeys(cols, {"part", "parts"}, w + "/cols");
    if (integer(member(cols, "part", w + "/cols"), w + "/cols/part") != g.tpIndex)
      fail(w + "/cols/part", "expected {}", g.tpIndex);
    if (integer(member(cols, "parts", w + "/cols"), w + "/cols/parts") != opt.tp)
      fail(w + "/cols/parts", "expected {}", opt.tp);
  }
  return grid;
}

// all_gather / split: the part and full values agree with the axis, parts and segments (section 5.2).
void checkLayoutOp(const Plan &p, const Op &op) {
  const OpAttrs &a = op.attrs;
  const bool gather = op.kind == OpKind::AllGather;
  const Value &part = p.value(gather ? op.in[0] : op.out[0]), &full = p.value(gather ? op.out[0] : op.in[0]);
  const std::string w = op.where + (gather ? "/in/0" : "/out/0");
  if (part.dtype != a.dtype || full.dtype != a.dtype) fail(op.where + "/attrs/dtype", "differs from its values' dtype");
  if (part.batch != full.batch) fail(w, "'{}' and '{}' differ in the batch axis", part.name, full.name);
  if (a.axis == Axis::Rows) {
    if (full.rows != Domain::S || part.rows != Domain::Sr)
      fail(w, "a rows {} moves between a rank's rows (Sr) and all of S: '{}' is {}, '{}' is {}", opKindName(op.kind),
           part.name, domainName(part.rows), full.name, domainName(full.rows));
    if (part.cols != a.cols || full.cols != a.cols) fail(op.where + "/attrs/cols", "differs from its values' widths");
  } else {
    if (part.rows != full.rows) fail(w, "a cols {} keeps the rows", opKindName(op.kind));
    if (full.cols != a.cols || part.cols * a.parts != a.cols)
      fail(op.where + "/attrs/cols", "expected the full value '{}' of {} columns and parts of {} / {}", full.name,
           a.cols, a.cols, a.parts);
  }
}

// Column-sharded GEMMs read split weights whose segments, stacked in the op's weight order, are the op's segments;
// every other op reads whole tensors. GEMM widths (K, N) are the rank's.
void checkShardWeights(const Plan &p, const Op &op) {
  if (isLayoutOp(op.kind)) return;
  const Shard &sh = op.attrs.shard;
  const bool column = sh.kind == ShardKind::Column && splitsWeights(op.kind);
  auto tensorOf = [&](const std::string &name) -> const WeightTensor & {
    auto [buf, off] = p.weightLocation(name);
    for (const auto &t : buf->tensors)
      if (t.name == name) return t;
    fail(op.where, "no weight tensor '{}'", name);
  };
  for (const auto *list : {&op.weights, &op.biases}) {
    if (list->empty()) continue;
    const std::string w = op.where + (list == &op.weights ? "/weights/weight" : "/weights/bias");
    Segments stacked;
    int64_t off = 0;
    for (const auto &name : *list) {
      const WeightTensor &t = tensorOf(name);
      if (column != !t.split.empty())
        fail(w, "'{}' is {}split but the op is {}", name, t.split.empty() ? "not " : "", shardKindName(sh.kind));
      for (auto [b, e] : t.split) stacked.emplace_back(off + b, off + e);
      off += t.shape[0];
    }
    if (column && stacked != sh.segments)
      fail(w, "the split of its tensors (stacked in order) differs from attrs/shard/segments");
  }
  if (sh.kind == ShardKind::Column && !splitsWeights(op.kind)) {
    const Value &y = p.value(op.out[0]);
    if (y.cols * sh.tp != segmentsWidth(sh.segments))
      fail(op.where + "/attrs/shard/segments", "cover {} columns, but the rank's output '{}' holds {} of {} ranks",
           segmentsWidth(sh.segments), y.name, y.cols, sh.tp);
  }
  if (op.kind == OpKind::Linear || op.kind == OpKind::AdalnTable || op.kind == OpKind::QkvLinear)
    for (size_t i = 0; i < op.weights.size(); ++i) {
      if (op.kind == OpKind::QkvLinear && i >= 3) break;  // the qk_norm_rope epilogue's norm weights [head_dim]
      if (op.attrs.loraK > 0 && i + 1 == op.weights.size()) break;  // the LoRA up slot: checkLoraOperands
      const std::string &name = op.weights[i];
      std::vector<int64_t> local = tensorOf(name).localShape();
      if (local.size() != 2 || local[1] != op.attrs.K || local[0] != op.attrs.N)
        fail(op.where + "/attrs", "K = {}, N = {} but the rank holds {} rows of {} columns of '{}'", op.attrs.K,
             op.attrs.N, local[0], local.size() > 1 ? local[1] : 0, name);
    }
}

} // namespace

Plan planFromJson(const json &j, const fs::path &dir, const std::string &file) {
  const std::string root = file + "#";
  if (!j.is_object()) fail(root, "expected a JSON object");
  onlyKeys(j, {"schema", "fingerprint_sha256", "plan_sha256", "config", "options", "ranks", "values", "slots",
               "weights", "functions", "kernels", "stats", "producer"},
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
  if (j.contains("producer")) {
    if (!j["producer"].is_object()) fail(root + "/producer", "expected an object");
    p.producer = j["producer"];
  }
  p.config = h3::configFromJson(member(j, "config", root), root + "/config");

  const json &opts = member(j, "options", root);
  onlyKeys(opts, {"arch", "sp", "tp", "fuse", "wgmma"}, root + "/options");
  p.options.arch = str(member(opts, "arch", root + "/options"), root + "/options/arch");
  if (p.options.arch != "sm_90a" && p.options.arch != "sm_100a")
    fail(root + "/options/arch", "expected sm_90a or sm_100a, got \"{}\"", p.options.arch);
  for (auto [key, field] : {std::pair{"sp", &p.options.sp}, std::pair{"tp", &p.options.tp}}) {
    const std::string w = root + "/options/" + key;
    *field = integer(member(opts, key, root + "/options"), w);
    if (*field != 1 && *field != 2 && *field != 4 && *field != 8) fail(w, "expected 1, 2, 4 or 8, got {}", *field);
  }
  p.ranks = parseRanks(member(j, "ranks", root), p.options, root + "/ranks");
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
    onlyKeys(v, {"dtype", "rows", "cols", "batch", "slot", "recompute_slot"}, w);
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
    // A recomputed value's second slot (section 14): checkSlots, once the functions are read.
    if (v.contains("recompute_slot")) {
      pv.recomputeSlot = nonNegative(v["recompute_slot"], w + "/recompute_slot", 1 << 20);
      if (!slotIds.count(pv.recomputeSlot)) fail(w + "/recompute_slot", "no slot with id {}", pv.recomputeSlot);
    }
    if (pv.rows == Domain::Sr && p.options.sp == 1)
      fail(w + "/rows", "the row domain Sr (a rank's range of S) exists only under sequence parallelism (options.sp > 1)");
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
      onlyKeys(ts[t], {"name", "dtype", "shape", "split", "adapter"}, wt);
      WeightTensor x;
      x.name = str(member(ts[t], "name", wt), wt + "/name");
      x.dtype = floatDtype(member(ts[t], "dtype", wt), wt + "/dtype");
      const json &sh = array(member(ts[t], "shape", wt), wt + "/shape");
      if (sh.empty() || sh.size() > 4) fail(wt + "/shape", "expected 1 to 4 dimensions");
      for (size_t d = 0; d < sh.size(); ++d) x.shape.push_back(positive(sh[d], wt + "/shape/" + std::to_string(d), 1 << 30));
      if (ts[t].contains("adapter")) {
        x.adapter = boolean(ts[t]["adapter"], wt + "/adapter");
        if (!x.adapter) fail(wt + "/adapter", "written only as true");
        if (x.dtype != DType::BF16 || x.shape.size() != 2)
          fail(wt, "an adapter slot is a BF16 matrix, got {} with {} dimensions", dtypeName(x.dtype), x.shape.size());
      }
      if (ts[t].contains("split")) {
        const json &sp = ts[t]["split"];
        const std::string ws = wt + "/split";
        onlyKeys(sp, {"parts", "segments"}, ws);
        x.splitParts = positive(member(sp, "parts", ws), ws + "/parts", 8);
        if (x.splitParts != p.options.tp || x.splitParts < 2)
          fail(ws + "/parts", "a weight splits over options.tp = {} ranks (> 1), got {}", p.options.tp, x.splitParts);
        x.split = parseSegments(member(sp, "segments", ws), x.splitParts, x.shape[0], ws + "/segments");
      }
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
      if (x.adapter) {  // shapes checked against the ops that read it (checkLoraOperands)
        if (specs.count(x.name)) fail(wt + "/name", "'{}' is a tensor of the config, not an adapter slot", x.name);
        continue;
      }
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
  onlyKeys(fns, {"forward", "backward"}, root + "/functions");
  if (!fns.contains("forward")) fail(root + "/functions/forward", "missing");
  std::map<std::string, std::string> nodeOwner;
  std::set<std::string> usedKernels;
  // The forward first: the backward reads the values it defines (saved activations, section 14).
  std::set<std::string> defined;
  for (const char *fname : {"forward", "backward"}) {
    if (!fns.contains(fname)) continue;
    const bool backward = std::string(fname) == "backward";
    const std::string fw = root + "/functions/" + fname;
    const json &fj = fns[fname];
    if (backward) onlyKeys(fj, {"inputs", "outputs", "ops", "trainable", "checkpoints"}, fw);
    else onlyKeys(fj, {"inputs", "outputs", "ops"}, fw);
    Function fn;
    fn.name = fname;
    if (backward) {
      fn.trainable = strList(member(fj, "trainable", fw), fw + "/trainable");
      checkTrainable(fn.trainable, fw + "/trainable");
      // Checkpoint segments (section 14): their format here, their rules against both functions in
      // checkCheckpoints once the backward is read.
      if (fj.contains("checkpoints")) {
        const json &cs = array(fj["checkpoints"], fw + "/checkpoints");
        for (size_t i = 0; i < cs.size(); ++i) {
          const std::string w = fw + "/checkpoints/" + std::to_string(i);
          onlyKeys(cs[i], {"segment", "forward_ops", "kept", "recompute", "backward_ops"}, w);
          Checkpoint c;
          c.segment = str(member(cs[i], "segment", w), w + "/segment");
          auto pair = [&](const char *key) {
            const json &r = array(member(cs[i], key, w), w + "/" + key);
            if (r.size() != 2) fail(w + "/" + key, "expected two op indices");
            return std::make_pair(size_t(nonNegative(r[0], w + "/" + key + "/0")),
                                  size_t(nonNegative(r[1], w + "/" + key + "/1")));
          };
          std::tie(c.first, c.end) = pair("forward_ops");
          std::tie(c.before, c.last) = pair("backward_ops");
          c.kept = strList(member(cs[i], "kept", w), w + "/kept");
          const json &rc = array(member(cs[i], "recompute", w), w + "/recompute");
          for (size_t k = 0; k < rc.size(); ++k)
            c.recompute.push_back(size_t(nonNegative(rc[k], w + "/recompute/" + std::to_string(k))));
          fn.checkpoints.push_back(std::move(c));
        }
      }
    }
    fn.inputs = strList(member(fj, "inputs", fw), fw + "/inputs");
    std::set<std::string> known;
    if (backward) {
      for (const auto &[key, v] : p.forward().outputs) known.insert("@grad:" + v);
    } else {
      for (const auto &g : h3::graphInputs(p.config)) known.insert(g.name);
    }
    for (size_t i = 0; i < fn.inputs.size(); ++i) {
      const std::string w = fw + "/inputs/" + std::to_string(i);
      if (!known.count(fn.inputs[i]))
        fail(w, backward ? "'{}' is not the gradient of a forward output (\"@grad:<output value>\", section 14)"
                         : "'{}' is not a graph input (docs/contract.md section 2)",
             fn.inputs[i]);
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
      if (isGradOp(op.kind) != backward)
        fail(w + "/op", backward ? "'{}' is no gradient op (the backward holds only those, section 14)"
                                 : "'{}' is a gradient op, which only functions/backward holds",
             kind);
      op.nodes = strList(member(o, "nodes", w), w + "/nodes");
      if (op.nodes.empty() != (isLayoutOp(op.kind) || op.kind == OpKind::LoraDown))
        fail(w + "/nodes", isLayoutOp(op.kind)                ? "a layout op implements no node"
                           : op.kind == OpKind::LoraDown ? "a lora_down op implements no node (an adapter is no node of the model)"
                                                         : "an op implements at least one node");
      // A gradient op names the forward nodes it differentiates (several ops may share one: checkBackward).
      for (size_t n = 0; n < op.nodes.size() && !backward; ++n) {
        auto [it, fresh] = nodeOwner.emplace(op.nodes[n], w);
        if (!fresh) fail(w + "/nodes/" + std::to_string(n), "node '{}' is already implemented by {}", op.nodes[n], it->second);
      }
      op.in = strList(member(o, "in", w), w + "/in");
      op.out = strList(member(o, "out", w), w + "/out");
      const json &ws = member(o, "weights", w);
      if (emitsWeightGrads(op.kind)) onlyKeys(ws, {"weight", "bias", "grads"}, w + "/weights");
      else onlyKeys(ws, {"weight", "bias"}, w + "/weights");
      op.weights = strList(member(ws, "weight", w + "/weights"), w + "/weights/weight");
      op.biases = strList(member(ws, "bias", w + "/weights"), w + "/weights/bias");
      // A gradient op's weight gradients: a subsequence of its weights then biases (checkBackward ties it to the
      // function's trainable patterns).
      if (emitsWeightGrads(op.kind)) {
        op.grads = strList(member(ws, "grads", w + "/weights"), w + "/weights/grads");
        std::vector<std::string> listed(op.weights);
        listed.insert(listed.end(), op.biases.begin(), op.biases.end());
        size_t next = 0;
        for (size_t g = 0; g < op.grads.size(); ++g) {
          while (next < listed.size() && listed[next] != op.grads[g]) ++next;
          if (next++ == listed.size())
            fail(w + "/weights/grads/" + std::to_string(g), "'{}' is not the next of the op's weight, then bias "
                 "tensors (each at most once, in that order)", op.grads[g]);
        }
      }
      for (const auto *list : {&op.weights, &op.biases})
        for (const auto &t : *list)
          if (!tensorNames.count(t)) fail(w + "/weights", "tensor '{}' is in no weight buffer (#/weights)", t);
      op.attrs = parseAttrs(op.kind, member(o, "attrs", w), !op.in.empty(), !op.weights.empty(), p.options,
                            w + "/attrs");
      // Fixed operand positions: the arity follows from the kind and its attrs (and, for an op that emits weight
      // gradients, one output per tensor it lists).
      auto inRoles = inputRoles(op.kind, op.attrs), outRoles = outputRoles(op.kind, op.attrs);
      for (const auto &t : op.grads) outRoles.push_back("grad:" + t);
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
      if (isLayoutOp(op.kind)) checkLayoutOp(p, op);
      const json &kj = member(o, "kernel", w);
      if (!kj.is_null()) {
        op.kernel = str(kj, w + "/kernel");
        if (runsOnHost(op.kind)) fail(w + "/kernel", "a '{}' op runs on the host and has no kernel", kind);
        if (isLayoutOp(op.kind)) fail(w + "/kernel", "a '{}' op is performed by the runtime and has no kernel", kind);
        auto kit = p.kernels.find(*op.kernel);
        if (kit == p.kernels.end()) fail(w + "/kernel", "kernel '{}' is not in #/kernels", *op.kernel);
        usedKernels.insert(*op.kernel);
      }
      fn.ops.push_back(std::move(op));
    }
    const json &outs = member(fj, "outputs", fw);
    if (!outs.is_object()) fail(fw + "/outputs", "expected an object");
    if (!backward) onlyKeys(outs, {"sample", "audio_sample"}, fw + "/outputs");
    std::vector<std::string> keys;
    if (backward)
      for (auto it = outs.begin(); it != outs.end(); ++it) keys.push_back(it.key());  // checked by checkBackward
    else
      keys = {"sample", "audio_sample"};
    for (const auto &name : keys) {
      std::string v = str(member(outs, name, fw + "/outputs"), fw + "/outputs/" + name);
      if (!defined.count(v)) fail(fw + "/outputs/" + name, "value '{}' is never defined", v);
      fn.outputs[name] = v;
    }
    p.functions[fn.name] = std::move(fn);
  }
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
  for (const Op &op : p.forward().ops) {
    checkOpNodes(op, expected);
    checkShardWeights(p, op);
  }
  checkLoraOperands(p, p.forward());
  checkPlanComputesModel(p, derived, root);
  if (p.backward()) {
    checkBackward(p, derived, root);
    checkCheckpoints(p, root);
  }
  checkSlots(p, root);  // over the timeline an executor walks: after the checkpoints are checked
  return p;
}

Plan loadPlan(const fs::path &path) {
  std::error_code ec;
  fs::path file = fs::is_directory(path, ec) ? path / "plan.json" : path;
  return planFromJson(readJsonFile(file.string()), file.parent_path(), file.string());
}

} // namespace h3c::plan
