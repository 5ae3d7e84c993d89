// The pinned architecture fingerprint (schema "h3-arch-fingerprint-v1"): the config, the mixed-precision map, the
// sampler, every tensor, and the node table (docs/contract.md section 2). The checked-in models/h3/fingerprint.json
// is derive(namedConfig("full")); `h3c fingerprint derive` writes it.
#pragma once

#include "h3c/models/config.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace h3c::h3 {

inline constexpr const char *kFingerprintSchema = "h3-arch-fingerprint-v1";
inline constexpr const char *kPinnedRepo = "MiniMaxAI/MiniMax-H3";
inline constexpr const char *kPinnedRevision = "42ed227";

// One reduction a node performs: what is summed and over which extent ("K" of a linear, "H" of a norm, ...).
struct Reduction {
  std::string kind;    // "dot", "sum_squares", "softmax", "dot_qk", "dot_pv"
  std::string extent;  // an integer as text ("5376") or a row domain ("S", "Nt")
};

struct Node {
  std::string id;     // e.g. "transformer_blocks.7.attn.to_q"
  std::string kind;   // rope_table, linear, rms_norm, norm_modulate, qk_norm, rope, attention, swiglu, silu,
                      // residual, gate_residual, timestep_sinusoid, adaln_table, pack, unpack
  std::string block;  // "transformer_blocks.7", "token_refiner.refiner_blocks.0", or "" for top-level nodes
  std::vector<std::string> inputs;   // value names (docs/contract.md: node ids, "id:port", "@input")
  std::vector<std::string> outputs;  // value names this node defines
  std::vector<std::string> outputRows;  // row domain of each output: "S", "Nt", "Nv", "Na", "T", "T3", "1"
  std::vector<DType> outputDtypes;      // storage dtype of each output
  std::vector<std::string> tensors;  // diffusers tensor names it reads
  std::vector<Reduction> reductions;
  nlohmann::json attrs;  // kind-specific: dims, dtypes, eps, chunk indices, row mode (see fingerprint.cpp)
};

struct Fingerprint {
  Config config;
  std::string configName;  // "full", "small", "tiny" or "custom"
  std::vector<TensorSpec> tensors;
  std::vector<Node> nodes;
  int videoShift = 12, audioShift = 3;

  const Node *findNode(const std::string &id) const;
  int64_t parameters() const { return parameterCount(tensors); }
  size_t blockNodeCount() const;  // nodes with a non-empty block
};

// A graph input ("@hidden_states", ...): the dtype the model consumes it in (after diffusers' casts) and its shape,
// each dimension a symbol ("B", "S", "Nv", "T", ...) or an integer as text.
struct GraphInput {
  std::string name;
  DType dtype;
  std::vector<std::string> shape;
};
std::vector<GraphInput> graphInputs(const Config &c);

// The attrs each node kind carries: kind -> [(attr name, type)], type one of "int", "number", "bool", "dtype",
// "domain", "domains" (list of domains), "ints" (list of integers), "enum:a|b|c". The table is documented in
// fingerprint.cpp and docs/contract.md section 6; the loader rejects missing, unknown and mistyped attrs.
const std::map<std::string, std::vector<std::pair<std::string, std::string>>> &nodeAttrSchema();
// diffusers' _keep_in_fp32_modules, in its order.
const std::vector<std::string> &f32Modules();

Fingerprint deriveFingerprint(const Config &c, const std::string &configName);
nlohmann::json fingerprintToJson(const Fingerprint &f);
// Validates the schema strictly: unknown fields, wrong types, inconsistent counts, tensors that disagree with the
// config, nodes that read unknown tensors or undefined values are errors naming the JSON pointer
// ("fingerprint.json#/nodes/17/inputs/0") and what was expected.
Fingerprint fingerprintFromJson(const nlohmann::json &j, const std::string &where);
Fingerprint loadFingerprint(const std::string &path);
// The checked-in fingerprint (models/h3/fingerprint.json of the source tree this binary was built from).
std::string pinnedFingerprintPath();

} // namespace h3c::h3
