// The strict fingerprint loader. Everything in the file is checked, in this order, and the first problem is reported
// with its JSON pointer and what was expected:
//   1. structure: required fields present, no unknown fields anywhere, every value of the right JSON type;
//   2. header: schema string, pinned model, config (valid, equal to the named config when config_name names one),
//      precision map, sampler;
//   3. tensors: no duplicate names, and names/shapes/dtypes equal to diffusersTensors(config), in order;
//   4. graph: inputs equal graphInputs(config); node ids unique; every input defined before use (a graph input or an
//      earlier node's output); outputs named "id" or "id:port" and defined once; output_rows/output_dtypes aligned
//      with outputs; tensors read exist and are read by exactly one node; reductions and attrs typed per kind;
//      graph outputs defined;
//   5. totals equal what the file holds;
//   6. the node table equals the derivation from the config (the fingerprint is a function of the config).
#include "h3c/models/fingerprint.h"

#include "h3c/support/json_read.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace h3c::h3 {
namespace {

using nlohmann::json;

const std::set<std::string> kDomains = {"S", "Nt", "Nv", "Na", "T", "T3", "1"};
const std::set<std::string> kReductionKinds = {"dot", "sum_squares", "softmax", "dot_qk", "dot_pv"};

std::string ptr(const std::string &base, const std::string &key) { return base + "/" + key; }
std::string ptr(const std::string &base, size_t i) { return base + "/" + std::to_string(i); }

// Checks that `j` is an object with exactly the `keys` (all required, no others).
void expectObject(const json &j, const std::string &where, const std::vector<std::string> &keys) {
  if (!j.is_object())
    fail(where, "expected an object with fields {}, got {}", fmt::join(keys, ", "), j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end())
      fail(ptr(where, it.key()), "unknown field (expected one of {})", fmt::join(keys, ", "));
  for (const auto &k : keys)
    if (!j.contains(k))
      fail(ptr(where, k), "missing required field");
}

const std::string &str(const json &j, const std::string &where) {
  if (!j.is_string())
    fail(where, "expected a string, got {}", j.dump());
  return j.get_ref<const std::string &>();
}

int64_t integer(const json &j, const std::string &where) {
  if (!j.is_number_integer())
    fail(where, "expected an integer, got {}", j.dump());
  return j.get<int64_t>();
}

const json &array(const json &j, const std::string &where) {
  if (!j.is_array())
    fail(where, "expected an array, got {}", j.type_name());
  return j;
}

std::vector<std::string> strings(const json &j, const std::string &where) {
  std::vector<std::string> out;
  for (size_t i = 0; i < array(j, where).size(); ++i)
    out.push_back(str(j[i], ptr(where, i)));
  return out;
}

DType dtype(const json &j, const std::string &where) {
  DType t;
  if (!parseDType(str(j, where), t))
    fail(where, "expected a dtype (F32, BF16, I64, ...), got {}", j.dump());
  return t;
}

std::string domain(const json &j, const std::string &where) {
  const auto &s = str(j, where);
  if (!kDomains.count(s))
    fail(where, "expected a row domain (S, Nt, Nv, Na, T, T3, 1), got \"{}\"", s);
  return s;
}

void checkAttr(const json &v, const std::string &type, const std::string &where) {
  if (type == "int") {
    integer(v, where);
  } else if (type == "number") {
    if (!v.is_number())
      fail(where, "expected a number, got {}", v.dump());
  } else if (type == "bool") {
    if (!v.is_boolean())
      fail(where, "expected true or false, got {}", v.dump());
  } else if (type == "dtype") {
    dtype(v, where);
  } else if (type == "domain") {
    domain(v, where);
  } else if (type == "domains") {
    for (size_t i = 0; i < array(v, where).size(); ++i)
      domain(v[i], ptr(where, i));
  } else if (type == "ints") {
    for (size_t i = 0; i < array(v, where).size(); ++i)
      integer(v[i], ptr(where, i));
  } else if (type.rfind("enum:", 0) == 0) {
    std::string allowed = type.substr(5);
    const auto &s = str(v, where);
    std::set<std::string> ok;
    for (size_t a = 0, b; a <= allowed.size(); a = b + 1) {
      b = allowed.find('|', a);
      if (b == std::string::npos)
        b = allowed.size();
      ok.insert(allowed.substr(a, b - a));
    }
    if (!ok.count(s))
      fail(where, "expected one of {}, got \"{}\"", allowed, s);
  } else {
    fail(where, "internal: unknown attr type {}", type);
  }
}

// A value name a node may define: its id, or "id:port".
bool ownsValue(const std::string &id, const std::string &value) {
  if (value == id)
    return true;
  return value.size() > id.size() + 1 && value.compare(0, id.size(), id) == 0 && value[id.size()] == ':';
}

template <typename T> std::string show(const T &v) { return json(v).dump(); }

} // namespace

Fingerprint fingerprintFromJson(const json &j, const std::string &where) {
  expectObject(j, where,
               {"schema", "model", "config_name", "config", "precision", "sampler", "tensors", "totals", "graph",
                "nodes"});
  Fingerprint f;

  // 2. header
  if (str(j["schema"], ptr(where, "schema")) != kFingerprintSchema)
    fail(ptr(where, "schema"), "expected \"{}\", got {}", kFingerprintSchema, j["schema"].dump());
  {
    const std::string w = ptr(where, "model");
    expectObject(j["model"], w, {"repo", "revision", "class_name"});
    const std::pair<const char *, const char *> pins[] = {
        {"repo", kPinnedRepo}, {"revision", kPinnedRevision}, {"class_name", "MiniMaxH3Transformer3DModel"}};
    for (auto [k, v] : pins)
      if (str(j["model"][k], ptr(w, k)) != v)
        fail(ptr(w, k), "expected \"{}\" (the pinned model), got {}", v, j["model"][k].dump());
  }
  f.configName = str(j["config_name"], ptr(where, "config_name"));
  if (f.configName != "full" && f.configName != "small" && f.configName != "tiny" && f.configName != "custom")
    fail(ptr(where, "config_name"), "expected full, small, tiny or custom, got \"{}\"", f.configName);
  {
    const std::string w = ptr(where, "config");
    if (!j["config"].is_object())
      fail(w, "expected an object of diffusers config keys, got {}", j["config"].type_name());
    const json expectedKeys = configToJson(Config{});
    for (auto it = expectedKeys.begin(); it != expectedKeys.end(); ++it)
      if (!j["config"].contains(it.key()))
        fail(ptr(w, it.key()), "missing required config key");
    for (auto it = j["config"].begin(); it != j["config"].end(); ++it)
      if (!expectedKeys.contains(it.key()))
        fail(ptr(w, it.key()), "unknown field (not a MiniMaxH3Transformer3DModel config key)");
    f.config = configFromJson(j["config"], w);
    if (f.configName != "custom" && configToJson(namedConfig(f.configName)) != configToJson(f.config))
      fail(w, "does not equal the named config \"{}\" given by config_name", f.configName);
  }
  {
    const std::string w = ptr(where, "precision");
    expectObject(j["precision"], w, {"default", "f32_modules"});
    if (str(j["precision"]["default"], ptr(w, "default")) != "BF16")
      fail(ptr(w, "default"), "expected \"BF16\", got {}", j["precision"]["default"].dump());
    auto mods = strings(j["precision"]["f32_modules"], ptr(w, "f32_modules"));
    if (mods != f32Modules())
      fail(ptr(w, "f32_modules"), "expected {} (diffusers' _keep_in_fp32_modules), got {}", show(f32Modules()),
           show(mods));
  }
  {
    const std::string w = ptr(where, "sampler");
    expectObject(j["sampler"], w, {"kind", "video_shift", "audio_shift"});
    if (str(j["sampler"]["kind"], ptr(w, "kind")) != "rectified_flow_euler")
      fail(ptr(w, "kind"), "expected \"rectified_flow_euler\", got {}", j["sampler"]["kind"].dump());
    for (const char *k : {"video_shift", "audio_shift"}) {
      int64_t v = integer(j["sampler"][k], ptr(w, k));
      if (v <= 0 || v > 1000)
        fail(ptr(w, k), "expected a positive shift, got {}", v);
      (k[0] == 'v' ? f.videoShift : f.audioShift) = int(v);
    }
  }

  // 3. tensors
  const auto expectedTensors = diffusersTensors(f.config);
  {
    const std::string w = ptr(where, "tensors");
    const json &ts = array(j["tensors"], w);
    std::unordered_map<std::string, size_t> seen;
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string wi = ptr(w, i);
      expectObject(ts[i], wi, {"name", "shape", "dtype"});
      TensorSpec t;
      t.name = str(ts[i]["name"], ptr(wi, "name"));
      if (!seen.emplace(t.name, i).second)
        fail(ptr(wi, "name"), "duplicate tensor name \"{}\" (first at {}/{})", t.name, w, seen[t.name]);
      for (size_t d = 0; d < array(ts[i]["shape"], ptr(wi, "shape")).size(); ++d) {
        int64_t v = integer(ts[i]["shape"][d], ptr(ptr(wi, "shape"), d));
        if (v <= 0)
          fail(ptr(ptr(wi, "shape"), d), "expected a positive dimension, got {}", v);
        t.shape.push_back(v);
      }
      t.dtype = dtype(ts[i]["dtype"], ptr(wi, "dtype"));
      f.tensors.push_back(std::move(t));
    }
    for (size_t i = 0; i < std::min(f.tensors.size(), expectedTensors.size()); ++i) {
      const auto &got = f.tensors[i], &exp = expectedTensors[i];
      if (got.name != exp.name)
        fail(ptr(ptr(w, i), "name"), "expected tensor \"{}\" of the config's tensor list, got \"{}\"", exp.name,
             got.name);
      if (got.shape != exp.shape)
        fail(ptr(ptr(w, i), "shape"), "tensor {}: expected shape {}, got {}", exp.name, show(exp.shape),
             show(got.shape));
      if (got.dtype != exp.dtype)
        fail(ptr(ptr(w, i), "dtype"), "tensor {}: expected dtype {}, got {}", exp.name, dtypeName(exp.dtype),
             dtypeName(got.dtype));
      f.tensors[i].init = exp.init;
    }
    if (f.tensors.size() != expectedTensors.size())
      fail(w, "expected {} tensors for this config, got {}", expectedTensors.size(), f.tensors.size());
  }

  // 4. graph
  std::unordered_set<std::string> defined;
  {
    const std::string w = ptr(where, "graph");
    expectObject(j["graph"], w, {"inputs", "outputs"});
    const std::string wi = ptr(w, "inputs");
    const json &ins = array(j["graph"]["inputs"], wi);
    const auto expected = graphInputs(f.config);
    for (size_t i = 0; i < ins.size(); ++i) {
      const std::string wii = ptr(wi, i);
      expectObject(ins[i], wii, {"name", "dtype", "shape"});
      GraphInput g{str(ins[i]["name"], ptr(wii, "name")), dtype(ins[i]["dtype"], ptr(wii, "dtype")),
                   strings(ins[i]["shape"], ptr(wii, "shape"))};
      if (i >= expected.size())
        fail(wii, "unexpected graph input {} (the model has {} inputs)", g.name, expected.size());
      if (g.name != expected[i].name)
        fail(ptr(wii, "name"), "expected graph input \"{}\", got \"{}\"", expected[i].name, g.name);
      if (g.dtype != expected[i].dtype)
        fail(ptr(wii, "dtype"), "expected {}, got {}", dtypeName(expected[i].dtype), dtypeName(g.dtype));
      if (g.shape != expected[i].shape)
        fail(ptr(wii, "shape"), "expected {}, got {}", show(expected[i].shape), show(g.shape));
      defined.insert(g.name);
    }
    if (ins.size() != expected.size())
      fail(wi, "expected {} graph inputs, got {}", expected.size(), ins.size());
  }

  std::unordered_map<std::string, size_t> tensorIndex, tensorReader, nodeIds;
  for (size_t i = 0; i < f.tensors.size(); ++i)
    tensorIndex[f.tensors[i].name] = i;
  const auto &schema = nodeAttrSchema();
  const std::string wn = ptr(where, "nodes");
  const json &nodes = array(j["nodes"], wn);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string w = ptr(wn, i);
    const json &jn = nodes[i];
    expectObject(jn, w,
                 {"id", "kind", "block", "inputs", "outputs", "output_rows", "output_dtypes", "tensors", "reductions",
                  "attrs"});
    Node n;
    n.id = str(jn["id"], ptr(w, "id"));
    if (n.id.empty())
      fail(ptr(w, "id"), "expected a non-empty node id");
    if (!nodeIds.emplace(n.id, i).second)
      fail(ptr(w, "id"), "duplicate node id \"{}\" (first at {}/{})", n.id, wn, nodeIds[n.id]);
    n.kind = str(jn["kind"], ptr(w, "kind"));
    auto kindIt = schema.find(n.kind);
    if (kindIt == schema.end())
      fail(ptr(w, "kind"), "unknown node kind \"{}\"", n.kind);
    n.block = str(jn["block"], ptr(w, "block"));
    if (!n.block.empty() && n.id.rfind(n.block + ".", 0) != 0)
      fail(ptr(w, "block"), "node \"{}\" does not belong to block \"{}\" (its id must start with the block)", n.id,
           n.block);

    n.inputs = strings(jn["inputs"], ptr(w, "inputs"));
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (!defined.count(n.inputs[k]))
        fail(ptr(ptr(w, "inputs"), k), "value \"{}\" is not a graph input nor an output of an earlier node",
             n.inputs[k]);

    n.outputs = strings(jn["outputs"], ptr(w, "outputs"));
    if (n.outputs.empty())
      fail(ptr(w, "outputs"), "expected at least one output");
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string wo = ptr(ptr(w, "outputs"), k);
      if (!ownsValue(n.id, n.outputs[k]))
        fail(wo, "output \"{}\" must be named \"{}\" or \"{}:<port>\"", n.outputs[k], n.id, n.id);
      if (!defined.insert(n.outputs[k]).second)
        fail(wo, "value \"{}\" is defined twice", n.outputs[k]);
    }
    const std::string wr = ptr(w, "output_rows");
    if (array(jn["output_rows"], wr).size() != n.outputs.size())
      fail(wr, "expected {} entries (one per output), got {}", n.outputs.size(), jn["output_rows"].size());
    for (size_t k = 0; k < n.outputs.size(); ++k)
      n.outputRows.push_back(domain(jn["output_rows"][k], ptr(wr, k)));
    const std::string wd = ptr(w, "output_dtypes");
    if (array(jn["output_dtypes"], wd).size() != n.outputs.size())
      fail(wd, "expected {} entries (one per output), got {}", n.outputs.size(), jn["output_dtypes"].size());
    for (size_t k = 0; k < n.outputs.size(); ++k)
      n.outputDtypes.push_back(dtype(jn["output_dtypes"][k], ptr(wd, k)));

    n.tensors = strings(jn["tensors"], ptr(w, "tensors"));
    for (size_t k = 0; k < n.tensors.size(); ++k) {
      const std::string wt = ptr(ptr(w, "tensors"), k);
      if (!tensorIndex.count(n.tensors[k]))
        fail(wt, "tensor \"{}\" is not in the fingerprint's tensor list", n.tensors[k]);
      auto [it, fresh] = tensorReader.emplace(n.tensors[k], i);
      if (!fresh)
        fail(wt, "tensor \"{}\" is already read by node {}/{} (each tensor belongs to one node)", n.tensors[k], wn,
             it->second);
    }

    const std::string wred = ptr(w, "reductions");
    for (size_t k = 0; k < array(jn["reductions"], wred).size(); ++k) {
      const std::string wk = ptr(wred, k);
      expectObject(jn["reductions"][k], wk, {"kind", "extent"});
      Reduction r{str(jn["reductions"][k]["kind"], ptr(wk, "kind")),
                  str(jn["reductions"][k]["extent"], ptr(wk, "extent"))};
      if (!kReductionKinds.count(r.kind))
        fail(ptr(wk, "kind"), "expected one of dot, sum_squares, softmax, dot_qk, dot_pv, got \"{}\"", r.kind);
      bool digits = !r.extent.empty() && r.extent.find_first_not_of("0123456789") == std::string::npos &&
                    r.extent[0] != '0';
      if (!digits && !kDomains.count(r.extent))
        fail(ptr(wk, "extent"), "expected a positive integer as text or a row domain, got \"{}\"", r.extent);
      n.reductions.push_back(std::move(r));
    }

    const std::string wa = ptr(w, "attrs");
    std::vector<std::string> attrNames;
    for (const auto &a : kindIt->second)
      attrNames.push_back(a.first);
    expectObject(jn["attrs"], wa, attrNames);
    for (const auto &a : kindIt->second)
      checkAttr(jn["attrs"][a.first], a.second, ptr(wa, a.first));
    n.attrs = jn["attrs"];
    f.nodes.push_back(std::move(n));
  }
  for (size_t i = 0; i < f.tensors.size(); ++i)
    if (!tensorReader.count(f.tensors[i].name))
      fail(ptr(ptr(where, "tensors"), i), "tensor \"{}\" is read by no node", f.tensors[i].name);
  {
    const std::string w = ptr(ptr(where, "graph"), "outputs");
    expectObject(j["graph"]["outputs"], w, {"sample", "audio_sample"});
    for (const char *k : {"sample", "audio_sample"}) {
      const auto &v = str(j["graph"]["outputs"][k], ptr(w, k));
      if (!defined.count(v))
        fail(ptr(w, k), "value \"{}\" is defined by no node", v);
    }
  }

  // 5. totals
  {
    const std::string w = ptr(where, "totals");
    expectObject(j["totals"], w, {"tensors", "parameters", "nodes", "block_nodes", "top_level_nodes"});
    const std::pair<const char *, int64_t> totals[] = {
        {"tensors", int64_t(f.tensors.size())},
        {"parameters", f.parameters()},
        {"nodes", int64_t(f.nodes.size())},
        {"block_nodes", int64_t(f.blockNodeCount())},
        {"top_level_nodes", int64_t(f.nodes.size() - f.blockNodeCount())}};
    for (auto [k, v] : totals)
      if (integer(j["totals"][k], ptr(w, k)) != v)
        fail(ptr(w, k), "expected {} (counted in this file), got {}", v, j["totals"][k].dump());
  }

  // 6. the node table is a function of the config
  {
    const json derived = fingerprintToJson(deriveFingerprint(f.config, f.configName))["nodes"];
    for (size_t i = 0; i < std::min(nodes.size(), derived.size()); ++i)
      for (auto it = derived[i].begin(); it != derived[i].end(); ++it)
        if (nodes[i][it.key()] != it.value())
          fail(ptr(ptr(wn, i), it.key()), "node \"{}\" does not match the derivation from the config: expected {}, "
               "got {}", derived[i]["id"].get<std::string>(), it.value().dump(), nodes[i][it.key()].dump());
    if (nodes.size() != derived.size())
      fail(wn, "expected {} nodes for this config, got {}", derived.size(), nodes.size());
  }
  return f;
}

Fingerprint loadFingerprint(const std::string &path) {
  return fingerprintFromJson(readJsonFile(path), path + "#");
}

} // namespace h3c::h3
