#include "h3c/runtime/nodes.h"

namespace h3c::rt {

namespace {

void refinerBlock(std::vector<NodeInfo> &out, const std::string &p) {
  static const std::pair<const char *, const char *> kNodes[] = {
      {"norm1", "rms_norm"},          {"attn.to_q", "linear"},    {"attn.to_k", "linear"},
      {"attn.to_v", "linear"},        {"attn.norm_q", "qk_norm"}, {"attn.norm_k", "qk_norm"},
      {"attn.attention", "attention"}, {"attn.to_out.0", "linear"}, {"residual_attn", "residual"},
      {"norm2", "rms_norm"},          {"ff.net.0.proj", "linear"}, {"ff.swiglu", "swiglu"},
      {"ff.net.2", "linear"},         {"residual_ff", "residual"}};
  for (auto &[n, k] : kNodes)
    out.push_back({p + n, k});
}

void transformerBlock(std::vector<NodeInfo> &out, const std::string &p) {
  static const std::pair<const char *, const char *> kNodes[] = {
      {"adaln_proj", "adaln_table"},    {"norm1", "norm_modulate"},      {"attn.to_q", "linear"},
      {"attn.to_k", "linear"},          {"attn.to_v", "linear"},         {"attn.norm_q", "qk_norm"},
      {"attn.norm_k", "qk_norm"},       {"attn.rope_q", "rope"},         {"attn.rope_k", "rope"},
      {"attn.attention", "attention"},  {"attn.to_out.0", "linear"},     {"gate_residual_attn", "gate_residual"},
      {"norm2", "norm_modulate"},       {"ff.net.0.proj", "linear"},     {"ff.swiglu", "swiglu"},
      {"ff.net.2", "linear"},           {"gate_residual_ff", "gate_residual"}};
  for (auto &[n, k] : kNodes)
    out.push_back({p + n, k});
}

} // namespace

std::vector<NodeInfo> expectedNodes(const h3::Config &c) {
  std::vector<NodeInfo> out;
  out.push_back({"rope", "rope_table"});
  out.push_back({"proj_in", "linear"});
  out.push_back({"audio_proj_in", "linear"});
  out.push_back({"context_embedder", "linear"});
  for (int b = 0; b < c.num_refiner_layers; ++b)
    refinerBlock(out, "token_refiner.refiner_blocks." + std::to_string(b) + ".");
  out.push_back({"token_refiner.final_norm", "rms_norm"});
  out.push_back({"pack", "pack"});
  out.push_back({"time_proj", "timestep_sinusoid"});
  out.push_back({"time_embedder.linear_1", "linear"});
  out.push_back({"time_embedder.act", "silu"});
  out.push_back({"time_embedder.linear_2", "linear"});
  for (int b = 0; b < c.num_layers; ++b)
    transformerBlock(out, "transformer_blocks." + std::to_string(b) + ".");
  out.push_back({"norm_out.linear", "adaln_table"});
  out.push_back({"norm_out.norm", "norm_modulate"});
  out.push_back({"proj_out", "linear"});
  out.push_back({"audio_proj_out", "linear"});
  out.push_back({"unpack", "unpack"});
  return out;
}

} // namespace h3c::rt
