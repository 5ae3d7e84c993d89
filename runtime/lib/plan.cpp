// Reading plan.json: strict, fail closed, every error names its JSON pointer.
#include "h3c/runtime/plan.h"

#include "h3c/runtime/nodes.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <climits>
#include <set>

namespace fs = std::filesystem;
using nlohmann::json;

namespace h3c::rt {

const std::vector<std::string> &opKinds() {
  static const std::vector<std::string> k = {
      "rope_table", "linear",     "adaln_table", "rms_norm",     "norm_modulate",  "qk_norm",
      "rope",       "attention",  "swiglu",      "silu",         "residual",       "gate_residual",
      "timestep_sinusoid", "pack", "unpack",     "qkv_linear",   "qk_norm_rope",   "time_embed",
      "allreduce_tree"};
  return k;
}

const std::vector<std::string> &graphInputs() {
  static const std::vector<std::string> k = {"@hidden_states",    "@audio_hidden_states", "@encoder_hidden_states",
                                             "@timestep",         "@timestep_indices",    "@token_tags",
                                             "@position_ids",     "@video_indices",       "@audio_indices",
                                             "@text_indices"};
  return k;
}

namespace {

const std::set<std::string> kDomains = {"S", "Nt", "Nv", "Na", "T", "T3", "1"};

// The reduction order each op kind must carry ("" = none).
std::string expectedOrder(const std::string &op) {
  if (op == "linear" || op == "adaln_table" || op == "qkv_linear" || op == "time_embed")
    return "k_chunks";
  if (op == "rms_norm" || op == "norm_modulate" || op == "qk_norm" || op == "qk_norm_rope")
    return "lane_tree";
  if (op == "attention")
    return "flash";
  if (op == "allreduce_tree")
    return "k_chunks";  // the upper levels of the row-parallel linear's unit tree
  return "";
}

const json &member(const json &j, const std::string &key, const std::string &where) {
  if (!j.is_object())
    fail(where, "expected an object");
  auto it = j.find(key);
  if (it == j.end())
    fail(where + "/" + key, "missing");
  return *it;
}

std::string str(const json &j, const std::string &where) {
  if (!j.is_string())
    fail(where, "expected a string, got {}", j.dump());
  return j.get<std::string>();
}

int64_t integer(const json &j, const std::string &where) {
  if (!j.is_number_integer())
    fail(where, "expected an integer, got {}", j.dump());
  return j.get<int64_t>();
}

std::vector<std::string> strList(const json &j, const std::string &where) {
  if (!j.is_array())
    fail(where, "expected an array of strings, got {}", j.dump());
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i)
    out.push_back(str(j[i], where + "/" + std::to_string(i)));
  return out;
}

void onlyKeys(const json &j, const std::set<std::string> &allowed, const std::string &where) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key()))
      fail(where + "/" + it.key(), "unknown field");
}

ReductionOrder parseOrder(const json &j, const std::string &where) {
  ReductionOrder o;
  o.json = j;
  if (j.is_null())
    return o;
  o.kind = str(member(j, "kind", where), where + "/kind");
  if (o.kind == "k_chunks") {
    onlyKeys(j, {"kind", "k_step", "units", "acc"}, where);
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    o.units = integer(member(j, "units", where), where + "/units");
    o.acc = str(member(j, "acc", where), where + "/acc");
    if (o.kStep != 16)
      fail(where + "/k_step", "expected 16 (the MMA K width), got {}", o.kStep);
    if (o.units < 1 || (o.units & (o.units - 1)))
      fail(where + "/units", "expected a power of two >= 1, got {}", o.units);
  } else if (o.kind == "lane_tree") {
    onlyKeys(j, {"kind", "lanes", "acc"}, where);
    o.lanes = integer(member(j, "lanes", where), where + "/lanes");
    o.acc = str(member(j, "acc", where), where + "/acc");
    if (o.lanes != 32)
      fail(where + "/lanes", "expected 32, got {}", o.lanes);
  } else if (o.kind == "flash") {
    onlyKeys(j, {"kind", "kv_block", "k_step", "acc", "p"}, where);
    o.kvBlock = integer(member(j, "kv_block", where), where + "/kv_block");
    o.kStep = integer(member(j, "k_step", where), where + "/k_step");
    o.acc = str(member(j, "acc", where), where + "/acc");
    o.p = str(member(j, "p", where), where + "/p");
    if (o.kvBlock != 64)
      fail(where + "/kv_block", "expected 64, got {}", o.kvBlock);
    if (o.kStep != 16)
      fail(where + "/k_step", "expected 16, got {}", o.kStep);
    if (o.p != "bf16")
      fail(where + "/p", "expected \"bf16\", got \"{}\"", o.p);
  } else {
    fail(where + "/kind", "unknown reduction order '{}' (expected k_chunks, lane_tree or flash)", o.kind);
  }
  if (o.acc != "f32")
    fail(where + "/acc", "expected \"f32\", got \"{}\"", o.acc);
  return o;
}

} // namespace

int64_t PlanOp::attrInt(const std::string &key, int64_t dflt) const {
  auto it = attrs.find(key);
  if (it == attrs.end() || it->is_null())
    return dflt;
  if (!it->is_number_integer())
    fail(where + "/attrs/" + key, "expected an integer, got {}", it->dump());
  return it->get<int64_t>();
}

std::string PlanOp::attrString(const std::string &key, const std::string &dflt) const {
  auto it = attrs.find(key);
  if (it == attrs.end() || it->is_null())
    return dflt;
  if (!it->is_string())
    fail(where + "/attrs/" + key, "expected a string, got {}", it->dump());
  return it->get<std::string>();
}

const std::vector<std::string> &PlanOp::weightList(const std::string &role) const {
  static const std::vector<std::string> kEmpty;
  auto it = weights.find(role);
  return it == weights.end() ? kEmpty : it->second;
}

std::string PlanOp::shardKind() const {
  auto it = attrs.find("shard");
  if (it == attrs.end() || it->is_null())
    return "none";
  if (!it->is_object() || !it->contains("kind") || !(*it)["kind"].is_string())
    fail(where + "/attrs/shard", "expected {{\"kind\": ..., \"tp\": N}}, got {}", it->dump());
  return (*it)["kind"].get<std::string>();
}

int64_t PlanOp::shardTp() const {
  auto it = attrs.find("shard");
  if (it == attrs.end() || it->is_null())
    return 1;
  if (!it->contains("tp") || !(*it)["tp"].is_number_integer())
    fail(where + "/attrs/shard/tp", "expected an integer");
  return (*it)["tp"].get<int64_t>();
}

const PlanValue &Plan::value(const std::string &name) const {
  auto it = values.find(name);
  if (it == values.end())
    fail("plan.json#/values", "no value named '{}'", name);
  return it->second;
}

std::map<std::string, size_t> Plan::lastUse() const {
  std::map<std::string, size_t> last;
  for (const auto &op : ops)
    for (const auto &v : op.in)
      last[v] = op.index;
  for (const auto &[k, v] : outputs)
    last[v] = SIZE_MAX;
  return last;
}

std::string computePlanSha256(const json &j) {
  json copy = j;
  copy.erase("plan_sha256");
  return sha256Hex(canonicalJson(copy));
}

Plan planFromJson(const json &j, const fs::path &dir, const std::string &file) {
  const std::string root = file + "#";
  if (!j.is_object())
    fail(root, "expected a JSON object");
  onlyKeys(j, {"schema", "fingerprint_sha256", "plan_sha256", "config", "options", "inputs", "outputs", "values",
               "slots", "ops", "kernels", "stats", "peak_bytes", "generator"},
           root);
  Plan p;
  p.dir = dir;
  p.json = j;
  std::string schema = str(member(j, "schema", root), root + "/schema");
  if (schema != kPlanSchema)
    fail(root + "/schema", "expected \"{}\", got \"{}\"", kPlanSchema, schema);
  p.planSha256 = str(member(j, "plan_sha256", root), root + "/plan_sha256");
  std::string actual = computePlanSha256(j);
  if (actual != p.planSha256)
    fail(root + "/plan_sha256", "recorded {} but the plan hashes to {}: the plan was modified", p.planSha256, actual);
  p.fingerprintSha256 = str(member(j, "fingerprint_sha256", root), root + "/fingerprint_sha256");
  p.config = h3::configFromJson(member(j, "config", root), root + "/config");

  const json &opts = member(j, "options", root);
  if (!opts.is_object())
    fail(root + "/options", "expected an object");
  p.arch = str(member(opts, "arch", root + "/options"), root + "/options/arch");
  p.tp = integer(member(opts, "tp", root + "/options"), root + "/options/tp");
  if (p.tp != 1 && p.tp != 2 && p.tp != 4 && p.tp != 8)
    fail(root + "/options/tp", "expected 1, 2, 4 or 8, got {}", p.tp);
  const json &fuse = member(opts, "fuse", root + "/options");
  if (!fuse.is_boolean())
    fail(root + "/options/fuse", "expected a boolean");
  p.fuse = fuse.get<bool>();

  p.inputs = strList(member(j, "inputs", root), root + "/inputs");
  std::set<std::string> defined;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const auto &n = p.inputs[i];
    bool known = false;
    for (const auto &g : graphInputs())
      known |= g == n;
    if (!known)
      fail(root + "/inputs/" + std::to_string(i), "'{}' is not a graph input of docs/contract.md section 2", n);
    if (!defined.insert(n).second)
      fail(root + "/inputs/" + std::to_string(i), "duplicate input '{}'", n);
  }

  // slots
  const json &slots = member(j, "slots", root);
  if (!slots.is_array())
    fail(root + "/slots", "expected an array");
  std::set<int64_t> slotIds;
  for (size_t i = 0; i < slots.size(); ++i) {
    std::string w = root + "/slots/" + std::to_string(i);
    onlyKeys(slots[i], {"id", "bytes_per_row", "fixed_bytes"}, w);
    PlanSlot s;
    s.id = integer(member(slots[i], "id", w), w + "/id");
    const json &bpr = member(slots[i], "bytes_per_row", w);
    if (!bpr.is_object())
      fail(w + "/bytes_per_row", "expected an object");
    for (auto it = bpr.begin(); it != bpr.end(); ++it) {
      if (!kDomains.count(it.key()))
        fail(w + "/bytes_per_row/" + it.key(), "unknown row domain");
      s.bytesPerRow[it.key()] = integer(it.value(), w + "/bytes_per_row/" + it.key());
    }
    s.fixedBytes = integer(member(slots[i], "fixed_bytes", w), w + "/fixed_bytes");
    if (!slotIds.insert(s.id).second)
      fail(w + "/id", "duplicate slot id {}", s.id);
    p.slots.push_back(s);
  }

  // values
  const json &values = member(j, "values", root);
  if (!values.is_object())
    fail(root + "/values", "expected an object");
  for (auto it = values.begin(); it != values.end(); ++it) {
    std::string w = root + "/values/" + it.key();
    const json &v = it.value();
    onlyKeys(v, {"dtype", "rows", "cols", "batch", "slot", "ranks"}, w);
    PlanValue pv;
    pv.name = it.key();
    std::string dt = str(member(v, "dtype", w), w + "/dtype");
    if (!parseDType(dt, pv.dtype) || !(pv.dtype == DType::F32 || pv.dtype == DType::BF16 || pv.dtype == DType::I64))
      fail(w + "/dtype", "expected F32, BF16 or I64, got \"{}\"", dt);
    pv.rows = str(member(v, "rows", w), w + "/rows");
    if (!kDomains.count(pv.rows))
      fail(w + "/rows", "unknown row domain '{}' (expected S, Nt, Nv, Na, T, T3 or 1)", pv.rows);
    pv.cols = integer(member(v, "cols", w), w + "/cols");
    if (pv.cols <= 0)
      fail(w + "/cols", "expected a positive column count, got {}", pv.cols);
    const json &b = member(v, "batch", w);
    if (!b.is_boolean())
      fail(w + "/batch", "expected a boolean");
    pv.batch = b.get<bool>();
    // Token-domain values may carry the batch axis (activations) or not (batch-shared per-row tables: rope:cos/sin,
    // pack metadata); T/T3/1 values never do.
    bool tokenDomain = pv.rows == "S" || pv.rows == "Nt" || pv.rows == "Nv" || pv.rows == "Na";
    if (pv.batch && !tokenDomain)
      fail(w + "/batch", "only token-domain values (S, Nt, Nv, Na) can carry the batch axis");
    if (v.contains("slot") && !v["slot"].is_null()) {
      pv.slot = integer(v["slot"], w + "/slot");
      if (!slotIds.count(pv.slot))
        fail(w + "/slot", "no slot with id {}", pv.slot);
    }
    if (v.contains("ranks")) {
      pv.ranks = integer(v["ranks"], w + "/ranks");
      if (pv.ranks < 1 || pv.ranks > p.tp)
        fail(w + "/ranks", "expected 1..tp ({}), got {}", p.tp, pv.ranks);
    }
    p.values[pv.name] = pv;
  }
  for (const auto &n : p.inputs)
    if (!p.values.count(n))
      fail(root + "/values", "graph input '{}' has no value entry", n);

  // kernels
  if (j.contains("kernels")) {
    const json &ks = j["kernels"];
    if (!ks.is_object())
      fail(root + "/kernels", "expected an object");
    for (auto it = ks.begin(); it != ks.end(); ++it) {
      std::string w = root + "/kernels/" + it.key();
      onlyKeys(it.value(), {"file", "sha256", "entry"}, w);
      PlanKernel k;
      k.id = it.key();
      k.file = str(member(it.value(), "file", w), w + "/file");
      k.sha256 = str(member(it.value(), "sha256", w), w + "/sha256");
      k.entry = str(member(it.value(), "entry", w), w + "/entry");
      if (fs::path(k.file).is_absolute() || k.file.find("..") != std::string::npos)
        fail(w + "/file", "kernel files must be relative to the plan folder, got '{}'", k.file);
      p.kernels[k.id] = k;
    }
  }

  // ops
  const json &ops = member(j, "ops", root);
  if (!ops.is_array())
    fail(root + "/ops", "expected an array");
  std::map<std::string, std::string> nodeOwner;
  std::set<std::string> usedKernels;
  for (size_t i = 0; i < ops.size(); ++i) {
    std::string w = root + "/ops/" + std::to_string(i);
    const json &o = ops[i];
    onlyKeys(o, {"op", "nodes", "in", "out", "weights", "attrs", "order", "kernel"}, w);
    PlanOp op;
    op.index = i;
    op.where = w;
    op.op = str(member(o, "op", w), w + "/op");
    bool known = false;
    for (const auto &k : opKinds())
      known |= k == op.op;
    if (!known)
      fail(w + "/op", "unknown op kind '{}'", op.op);
    op.nodes = strList(member(o, "nodes", w), w + "/nodes");
    for (size_t n = 0; n < op.nodes.size(); ++n) {
      auto [it, fresh] = nodeOwner.emplace(op.nodes[n], w);
      if (!fresh)
        fail(w + "/nodes/" + std::to_string(n), "node '{}' is already implemented by {}", op.nodes[n], it->second);
    }
    if (op.nodes.empty() && op.op != "allreduce_tree")
      fail(w + "/nodes", "an op must implement at least one node");
    op.in = strList(member(o, "in", w), w + "/in");
    op.out = strList(member(o, "out", w), w + "/out");
    for (size_t k = 0; k < op.in.size(); ++k) {
      if (!p.values.count(op.in[k]))
        fail(w + "/in/" + std::to_string(k), "unknown value '{}'", op.in[k]);
      if (!defined.count(op.in[k]))
        fail(w + "/in/" + std::to_string(k), "value '{}' is read before any op defines it", op.in[k]);
    }
    for (size_t k = 0; k < op.out.size(); ++k) {
      if (!p.values.count(op.out[k]))
        fail(w + "/out/" + std::to_string(k), "unknown value '{}'", op.out[k]);
      if (!defined.insert(op.out[k]).second)
        fail(w + "/out/" + std::to_string(k), "value '{}' is defined twice", op.out[k]);
    }
    if (o.contains("weights")) {
      const json &ws = o["weights"];
      if (!ws.is_object())
        fail(w + "/weights", "expected an object role -> [tensor names]");
      for (auto it = ws.begin(); it != ws.end(); ++it)
        op.weights[it.key()] = strList(it.value(), w + "/weights/" + it.key());
    }
    if (o.contains("attrs")) {
      if (!o["attrs"].is_object())
        fail(w + "/attrs", "expected an object");
      op.attrs = o["attrs"];
    }
    op.order = parseOrder(o.contains("order") ? o["order"] : json(), w + "/order");
    std::string want = expectedOrder(op.op);
    if (op.order.kind != want) {
      if (want.empty())
        fail(w + "/order", "op '{}' reduces nothing and must carry no order", op.op);
      fail(w + "/order", "op '{}' ({}) must carry a '{}' reduction order", op.op,
           op.nodes.empty() ? "-" : op.nodes[0], want);
    }
    if (o.contains("kernel") && !o["kernel"].is_null()) {
      op.kernel = str(o["kernel"], w + "/kernel");
      if (!p.kernels.count(*op.kernel))
        fail(w + "/kernel", "kernel '{}' is not in #/kernels", *op.kernel);
      usedKernels.insert(*op.kernel);
    }
    int64_t shardTp = op.shardTp();
    if (shardTp != 1 && shardTp != p.tp)
      fail(w + "/attrs/shard/tp", "shard degree {} differs from options.tp {}", shardTp, p.tp);
    p.ops.push_back(std::move(op));
  }

  const json &outs = member(j, "outputs", root);
  if (!outs.is_object())
    fail(root + "/outputs", "expected an object");
  for (const char *name : {"sample", "audio_sample"}) {
    std::string v = str(member(outs, name, root + "/outputs"), root + "/outputs/" + name);
    if (!defined.count(v))
      fail(root + "/outputs/" + name, "value '{}' is never defined", v);
    p.outputs[name] = v;
  }
  onlyKeys(outs, {"sample", "audio_sample"}, root + "/outputs");

  // Every logical node of the config in exactly one op (duplicates were rejected above).
  std::set<std::string> expected;
  for (const auto &n : expectedNodes(p.config))
    expected.insert(n.id);
  for (const auto &[id, w] : nodeOwner)
    if (!expected.count(id))
      fail(w + "/nodes", "'{}' is not a node of this config (docs/contract.md section 2)", id);
  for (const auto &id : expected)
    if (!nodeOwner.count(id))
      fail(root + "/ops", "node '{}' is implemented by no op", id);

  // Kernel sources: present and matching their recorded hash.
  for (const auto &id : usedKernels) {
    const PlanKernel &k = p.kernels[id];
    fs::path f = dir / k.file;
    if (!fs::exists(f))
      fail(root + "/kernels/" + id + "/file", "kernel source {} does not exist", f.string());
    std::string h = sha256File(f);
    if (h != k.sha256)
      fail(root + "/kernels/" + id + "/sha256", "recorded {} but {} hashes to {}", k.sha256, f.string(), h);
  }
  return p;
}

Plan loadPlan(const fs::path &path) {
  fs::path file = fs::is_directory(path) ? path / "plan.json" : path;
  std::string text = readFile(file);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error &e) {
    fail(file.string(), "invalid JSON: {}", e.what());
  }
  return planFromJson(j, file.parent_path(), file.string());
}

} // namespace h3c::rt
