// The plan writer (io.h): the JSON spelling of every struct of plan.h, and the atomic plan folder.
#include "h3c/plan/io.h"

#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;

namespace h3c::plan {

namespace {

std::string dt(DType d) { return std::string(dtypeName(d)); }

} // namespace

json orderToJson(const Order &o) {
  if (o.kind == OrderKind::None) return nullptr;
  json j{{"kind", orderKindName(o.kind)}, {"acc", "f32"}};
  if (o.kind == OrderKind::KChunks) {
    j["k_step"] = o.kStep;
    j["units"] = o.units;
  } else if (o.kind == OrderKind::LaneTree) {
    j["lanes"] = o.lanes;
  } else if (o.kind == OrderKind::RowUnits) {
    j["unit"] = o.unit;
    j["k_step"] = o.kStep;
  } else {
    j["kv_block"] = o.kvBlock;
    j["k_step"] = o.kStep;
    j["p"] = "bf16";
  }
  return j;
}

namespace {

json segmentsToJson(const Segments &s) {
  json segs = json::array();
  for (auto [b, e] : s) segs.push_back({b, e});
  return segs;
}

json shardToJson(const Shard &s) {
  json j{{"kind", shardKindName(s.kind)}, {"tp", s.tp}};
  if (s.kind == ShardKind::Column) j["segments"] = segmentsToJson(s.segments);
  return j;
}

json ranksToJson(const Plan &p) {
  json list = json::array();
  for (const Rank &r : rankGrid(p.options.sp, p.options.tp))
    list.push_back({{"rank", r.rank},
                    {"sp_index", r.spIndex},
                    {"tp_index", r.tpIndex},
                    {"rows", {{"domain", "S"}, {"begin", {r.spIndex, p.options.sp}}, {"end", {r.spIndex + 1, p.options.sp}}}},
                    {"cols", {{"part", r.tpIndex}, {"parts", p.options.tp}}}});
  return {{"sp", p.options.sp}, {"tp", p.options.tp}, {"count", p.options.sp * p.options.tp}, {"order", "sp_major"},
          {"list", list}};
}

json attrsToJson(const Op &op) {
  const OpAttrs &a = op.attrs;
  json j = json::object();
  j["out_dtype"] = dt(a.outDtype);
  if (!isLayoutOp(op.kind)) j["shard"] = shardToJson(a.shard);
  if (!op.in.empty()) j["x_dtype"] = dt(a.xDtype);
  if (!op.weights.empty()) j["w_dtype"] = dt(a.wDtype);
  for (const auto &k : attrKeys(op.kind, a)) {
    if (k == "K") j[k] = a.K;
    else if (k == "N") j[k] = a.N;
    else if (k == "epilogue") j[k] = epilogueName(a.epilogue);
    else if (k == "chunk") j[k] = a.chunk;
    else if (k == "num_chunks") j[k] = a.numChunks;
    else if (k == "shift_chunk") j[k] = a.shiftChunk;
    else if (k == "scale_chunk") j[k] = a.scaleChunk;
    else if (k == "rows_per_timestep") j[k] = a.rowsPerTimestep;
    else if (k == "row_index") j[k] = rowIndexName(a.rowIndex);
    else if (k == "eps") j[k] = a.eps;
    else if (k == "theta") j[k] = a.theta;
    else if (k == "scale") j[k] = a.scale;
    else if (k == "heads") j[k] = a.heads;
    else if (k == "head_dim") j[k] = a.headDim;
    else if (k == "rotary_dim") j[k] = a.rotaryDim;
    else if (k == "domain") j[k] = domainName(a.domain);
    else if (k == "H") j[k] = a.H;
    else if (k == "F") j[k] = a.F;
    else if (k == "cols") j[k] = a.cols;
    else if (k == "video_cols") j[k] = a.videoCols;
    else if (k == "audio_cols") j[k] = a.audioCols;
    else if (k == "freq_dim") j[k] = a.freqDim;
    else if (k == "hidden") j[k] = a.hidden;
    else if (k == "out_dim") j[k] = a.outDim;
    else if (k == "axis") j[k] = axisName(a.axis);
    else if (k == "parts") j[k] = a.parts;
    else if (k == "segments") j[k] = segmentsToJson(a.segments);
    else if (k == "dtype") j[k] = dt(a.dtype);
    else if (k == "lora_k") j[k] = a.loraK;
    else if (k == "lse") j[k] = a.lse;
    else if (k == "table_grad") j[k] = a.tableGrad;
    else if (k == "swiglu_x") j[k] = a.swigluX;
    else if (k == "group") j[k] = a.group;
    else if (k == "kv_block") j[k] = a.kvBlock;
    else fail(op.where, "the writer has no spelling for attr '{}'", k);
  }
  return j;
}

const char *roleName(OperandRole r) {
  switch (r) {
  case OperandRole::In: return "in";
  case OperandRole::Out: return "out";
  case OperandRole::Weight: return "weight";
  case OperandRole::Bias: return "bias";
  }
  return "?";
}

json paramToJson(const KernelParam &p) {
  switch (p.kind) {
  case KernelParam::Kind::Buffer:
    return {{"kind", "buffer"}, {"name", p.name}, {"role", roleName(p.role)}, {"index", p.index}, {"span", p.span}};
  case KernelParam::Kind::Scalar:
    return {{"kind", "scalar"}, {"name", p.name}, {"type", "i64"}, {"value", p.value.text()}};
  case KernelParam::Kind::Scratch:
    return {{"kind", "scratch"}, {"name", p.name}, {"bytes", p.value.text()}};
  case KernelParam::Kind::TensorMap: {
    json dims = json::array(), strides = json::array();
    for (const auto &d : p.map.dims) dims.push_back(d.text());
    for (const auto &s : p.map.strides) strides.push_back(s.text());
    json j = {{"kind", "tensor_map"}, {"name", p.name},        {"dtype", dt(p.map.dtype)}, {"dims", dims},
              {"strides", strides},    {"box", p.map.box},     {"swizzle", p.map.swizzle},
              {"l2_promotion", p.map.l2Promotion}, {"oob", p.map.oobZero ? "zero" : "nan"}};
    if (p.scratch.empty()) {
      j["role"] = roleName(p.role);
      j["index"] = p.index;
      j["span"] = p.span;
    } else {
      j["scratch"] = p.scratch;
    }
    return j;
  }
  }
  return nullptr;
}

json launchToJson(const Launch &l) {
  json grid = json::array();
  for (const auto &g : l.grid) grid.push_back({{"extent", g.extent.text()}, {"div", g.div}, {"max_per_sm", g.maxPerSm}});
  return {{"block", l.block},
          {"smem_bytes", l.smemBytes},
          {"grid", grid},
          {"cluster", l.cluster},
          {"grid_dependency", l.gridDependency}};
}

json kernelToJson(const Kernel &k) {
  json params = json::array();
  for (const auto &p : k.params) params.push_back(paramToJson(p));
  json j = {{"file", k.file},
            {"sha256", k.sha256},
            {"entry", k.entry},
            {"arch", k.arch},
            {"nvrtc_options", k.nvrtcOptions},
            {"launch", launchToJson(k.launch)},
            {"params", params}};
  if (!k.phases.empty()) {  // written only where there are phases: the plans of single-launch kernels stay as they were
    json phases = json::array();
    for (const auto &ph : k.phases) phases.push_back({{"entry", ph.entry}, {"launch", launchToJson(ph.launch)}});
    j["phases"] = phases;
  }
  return j;
}

json opToJson(const Op &op) {
  json weights = {{"weight", op.weights}, {"bias", op.biases}};
  if (emitsWeightGrads(op.kind)) weights["grads"] = op.grads;
  return {{"op", opKindName(op.kind)},
          {"nodes", op.nodes},
          {"in", op.in},
          {"out", op.out},
          {"weights", weights},
          {"attrs", attrsToJson(op)},
          {"order", orderToJson(op.order)},
          {"kernel", op.kernel ? json(*op.kernel) : json(nullptr)}};
}

} // namespace

std::string computePlanSha256(const json &j) {
  json copy = j;
  copy.erase("plan_sha256");
  return sha256Hex(canonicalJson(copy));
}

json planToJson(const Plan &p) {
  json j;
  j["schema"] = kPlanSchema;
  j["fingerprint_sha256"] = p.fingerprintSha256;
  if (!p.producer.is_null())
    j["producer"] = p.producer;
  j["config"] = h3::configToJson(p.config);
  j["options"] = {{"arch", p.options.arch}, {"sp", p.options.sp}, {"tp", p.options.tp}, {"fuse", p.options.fuse},
                  {"wgmma", p.options.wgmma}};
  j["ranks"] = ranksToJson(p);
  json values = json::object();
  for (const auto &[name, v] : p.values) {
    values[name] = {{"dtype", dt(v.dtype)}, {"rows", domainName(v.rows)}, {"cols", v.cols}, {"batch", v.batch},
                    {"slot", v.slot}};
    if (v.recomputeSlot >= 0) values[name]["recompute_slot"] = v.recomputeSlot;  // checkpointed plans only
  }
  j["values"] = values;
  json slots = json::array();
  for (const auto &s : p.slots) {
    json bpr = json::object();
    for (auto [d, b] : s.bytesPerRow) bpr[domainName(d)] = b;
    slots.push_back({{"id", s.id}, {"bytes_per_row", bpr}, {"fixed_bytes", s.fixedBytes}});
  }
  j["slots"] = slots;
  json weights = json::array();
  for (const auto &b : p.weights) {
    json ts = json::array();
    for (const auto &t : b.tensors) {
      json e{{"name", t.name}, {"dtype", dt(t.dtype)}, {"shape", t.shape}};
      if (!t.split.empty()) e["split"] = {{"parts", t.splitParts}, {"segments", segmentsToJson(t.split)}};
      if (t.adapter) e["adapter"] = true;
      ts.push_back(e);
    }
    weights.push_back({{"buffer", b.name}, {"tensors", ts}});
  }
  j["weights"] = weights;
  json fns = json::object();
  for (const auto &[name, fn] : p.functions) {
    json ops = json::array();
    for (const auto &op : fn.ops) ops.push_back(opToJson(op));
    fns[name] = {{"inputs", fn.inputs}, {"outputs", fn.outputs}, {"ops", ops}};
    if (name == "backward") fns[name]["trainable"] = fn.trainable;
    if (name == "backward" && !fn.checkpoints.empty()) {
      json cs = json::array();
      for (const Checkpoint &c : fn.checkpoints)
        cs.push_back({{"segment", c.segment}, {"forward_ops", {c.first, c.end}}, {"kept", c.kept},
                      {"recompute", c.recompute}, {"backward_ops", {c.before, c.last}}});
      fns[name]["checkpoints"] = cs;
    }
  }
  j["functions"] = fns;
  json kernels = json::object();
  for (const auto &[id, k] : p.kernels) kernels[id] = kernelToJson(k);
  j["kernels"] = kernels;
  j["stats"] = p.stats;
  j["plan_sha256"] = computePlanSha256(j);
  return j;
}

std::string writePlanFolder(const Plan &p, const fs::path &outIn) {
  fs::path out = outIn;
  while (!out.empty() && out.filename().empty()) out = out.parent_path();  // "OUT/" -> "OUT"
  if (out.empty()) fail(outIn.string(), "not a folder name");
  bool replace = false;
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec) || !fs::exists(out / "plan.json", ec))
      fail(out.string(), "exists and is not a previous plan folder (no plan.json); refusing to replace it");
    // Replacing must not delete anything a plan folder does not own.
    for (const auto &e : fs::directory_iterator(out)) {
      std::string n = e.path().filename().string();
      if (n != "plan.json" && n != "kernels")
        fail(out.string(), "holds '{}', which is not part of a plan; refusing to replace the folder", n);
    }
    // kernels/ holds kernel sources only (regular <id>.cu files): anything else there is someone else's.
    if (fs::exists(out / "kernels", ec)) {
      if (!fs::is_directory(fs::symlink_status(out / "kernels", ec)))
        fail((out / "kernels").string(), "is not a folder of kernel sources; refusing to replace the plan folder");
      for (const auto &e : fs::directory_iterator(out / "kernels")) {
        std::string n = e.path().filename().string();
        if (!e.is_regular_file(ec) || e.is_symlink(ec) || n.size() < 4 || n.compare(n.size() - 3, 3, ".cu") != 0)
          fail(out.string(), "kernels/{} is not a kernel source of a plan; refusing to replace the folder", n);
      }
    }
    replace = true;
  }
  json j = planToJson(p);
  AtomicDirectory dir(out, replace);
  if (!p.kernels.empty()) fs::create_directories(dir.tempPath() / "kernels");
  for (const auto &[id, k] : p.kernels) {
    if (sha256Hex(k.source) != k.sha256) fail("kernel " + id, "recorded sha256 does not match its source");
    writeFileAtomic(dir.tempPath() / k.file, k.source);
  }
  writeFileAtomic(dir.tempPath() / "plan.json", j.dump(1) + "\n");
  dir.commit();
  return j["plan_sha256"].get<std::string>();
}

} // namespace h3c::plan
