// Plans written by hand for the runtime tests (before and independently of `h3c compile`): the whole model in the
// unfused form of docs/contract.md sections 2/3/7, optionally with the fused ops of section 3 and the TP shard attrs
// of section 4, exactly as a plan.json would spell them. Used by runtime_*_test.cpp only.
#pragma once

#include "h3c/models/config.h"
#include "h3c/runtime/plan.h"
#include "h3c/support/sha256.h"
#include "h3c/support/canonical_json.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace h3c::rt::testplans {

using nlohmann::json;

struct PlanBuilder {
  h3::Config c;
  bool fuse = false;
  int tp = 1;
  json values = json::object();
  json ops = json::array();

  void val(const std::string &name, const char *dtype, const char *rows, int64_t cols) {
    bool batch = std::string(rows) == "S" || std::string(rows) == "Nt" || std::string(rows) == "Nv" ||
                 std::string(rows) == "Na";
    if (std::string(dtype) == "I64" || name.rfind("rope:", 0) == 0)
      batch = false;  // per-row metadata and the rope tables are shared by the batch
    values[name] = {{"dtype", dtype}, {"rows", rows}, {"cols", cols}, {"batch", batch}};
  }
  static json kc(int units) { return {{"kind", "k_chunks"}, {"k_step", 16}, {"units", units}, {"acc", "f32"}}; }
  static json lt() { return {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}}; }
  static json fl() { return {{"kind", "flash"}, {"kv_block", 64}, {"k_step", 16}, {"acc", "f32"}, {"p", "bf16"}}; }
  void op(const std::string &kind, std::vector<std::string> nodes, std::vector<std::string> in,
          std::vector<std::string> out, json weights, json attrs, json order) {
    ops.push_back({{"op", kind},
                   {"nodes", nodes},
                   {"in", in},
                   {"out", out},
                   {"weights", weights},
                   {"attrs", attrs},
                   {"order", order},
                   {"kernel", nullptr}});
  }
  json shard(const char *kind) const { return tp > 1 ? json{{"kind", kind}, {"tp", tp}} : json(nullptr); }

  // A linear node: weight [+ bias], output `dtype`.
  void linear(const std::string &node, const std::string &x, const char *dtype, const char *rows, int64_t n,
              bool bias, int units = 1, const char *shardKind = nullptr) {
    val(node, dtype, rows, n);
    json w = {{"weight", {node + ".weight"}}, {"bias", bias ? json::array({node + ".bias"}) : json::array()}};
    json a = {{"out_dtype", dtype}};
    if (shardKind && tp > 1)
      a["shard"] = shard(shardKind);
    op("linear", {node}, {x}, {node}, w, a, kc(units));
  }

  // Section 5.1: the largest power of two U <= 8 with K % (U * 16) == 0.
  int unitsFor(int64_t K) const {
    for (int u = 8; u > 1; u /= 2)
      if (K % (u * 16) == 0)
        return u;
    return 1;
  }

  // The attention sub-graph of a block (refiner: no rope, domain Nt). Returns the attention output value.
  std::string attention(const std::string &p, const std::string &x, const char *rows, bool rope) {
    const int64_t I = c.innerDim(), d = c.attention_head_dim;
    std::string q = p + "attn.to_q", k = p + "attn.to_k", v = p + "attn.to_v";
    if (fuse) {
      for (auto &n : {q, k, v})
        val(n, "BF16", rows, I);
      json a = {{"K", c.hidden_size}, {"N", I}};
      if (tp > 1 && std::string(rows) == "S")  // TP shards the transformer blocks only
        a["shard"] = shard("column");
      op("qkv_linear", {q, k, v}, {x}, {q, k, v},
         {{"weight", {q + ".weight", k + ".weight", v + ".weight"}}, {"bias", json::array()}}, a, kc(1));
    } else {
      const char *sk = std::string(rows) == "S" ? "column" : nullptr;
      linear(q, x, "BF16", rows, I, false, 1, sk);
      linear(k, x, "BF16", rows, I, false, 1, sk);
      linear(v, x, "BF16", rows, I, false, 1, sk);
    }
    std::string nq = p + "attn.norm_q", nk = p + "attn.norm_k", rq = p + "attn.rope_q", rk = p + "attn.rope_k";
    std::string qa = q, ka = k;
    if (fuse) {
      std::string oq = rope ? rq : nq, ok = rope ? rk : nk;
      val(oq, "BF16", rows, I);
      val(ok, "BF16", rows, I);
      std::vector<std::string> nodes = {nq, nk};
      std::vector<std::string> in = {q, k};
      if (rope) {
        nodes.push_back(rq);
        nodes.push_back(rk);
        in.push_back("rope:cos");
        in.push_back("rope:sin");
      }
      op("qk_norm_rope", nodes, in, {oq, ok}, {{"weight", {nq + ".weight", nk + ".weight"}}},
         {{"heads", c.num_attention_heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}}, lt());
      qa = oq;
      ka = ok;
    } else {
      val(nq, "BF16", rows, I);
      val(nk, "BF16", rows, I);
      op("qk_norm", {nq}, {q}, {nq}, {{"weight", {nq + ".weight"}}}, {{"eps", c.qk_norm_eps}}, lt());
      op("qk_norm", {nk}, {k}, {nk}, {{"weight", {nk + ".weight"}}}, {{"eps", c.qk_norm_eps}}, lt());
      qa = nq;
      ka = nk;
      if (rope) {
        val(rq, "BF16", rows, I);
        val(rk, "BF16", rows, I);
        op("rope", {rq}, {nq, "rope:cos", "rope:sin"}, {rq}, json::object(), json::object(), nullptr);
        op("rope", {rk}, {nk, "rope:cos", "rope:sin"}, {rk}, json::object(), json::object(), nullptr);
        qa = rq;
        ka = rk;
      }
    }
    std::string at = p + "attn.attention";
    val(at, "BF16", rows, I);
    op("attention", {at}, {qa, ka, v}, {at}, json::object(), {{"heads", c.num_attention_heads}, {"head_dim", d}},
       fl());
    return at;
  }

  // to_out / fc2 (+ residual or gate_residual). Returns the new stream value.
  std::string outProj(const std::string &lin, const std::string &in, const std::string &stream,
                      const std::string &resNode, bool gated, const std::string &table, const char *rows, int64_t K,
                      int units) {
    const int64_t H = c.hidden_size;
    std::vector<std::string> extra = {stream};
    if (gated) {
      extra.push_back(table);
      extra.push_back("pack:ts_index");
      extra.push_back("pack:tags");
    }
    if (tp > 1 && units > 1) {
      // Section 5.1: linear (shard row, epilogue none) -> <node>:partials F32 with ranks = tp, then allreduce_tree
      // with the epilogue operands (fused: it covers the epilogue node; unfused: nodes [] and a separate epilogue).
      values[lin + ":partials"] = {{"dtype", "F32"}, {"rows", rows}, {"cols", H}, {"batch", true}, {"ranks", tp}};
      op("linear", {lin}, {in}, {lin + ":partials"}, {{"weight", {lin + ".weight"}}, {"bias", json::array()}},
         {{"K", K}, {"N", H}, {"out_dtype", "F32"}, {"epilogue", "none"}, {"shard", shard("row")}}, kc(units));
      json a = {{"tp", tp}, {"units", units}, {"N", H}};
      std::vector<std::string> ins = {lin + ":partials"};
      std::string out = fuse ? resNode : lin;
      if (fuse) {
        ins.insert(ins.end(), extra.begin(), extra.end());
        a["epilogue"] = gated ? "gate_residual" : "residual";
        if (gated) {
          a["chunk"] = resNode.find("attn") != std::string::npos ? 2 : 5;
          a["num_chunks"] = 6;
          a["row_index"] = "adaln";
        }
      } else {
        a["epilogue"] = "none";
      }
      val(out, "BF16", rows, H);
      op("allreduce_tree", fuse ? std::vector<std::string>{resNode} : std::vector<std::string>{}, ins, {out},
         {{"weight", json::array()}, {"bias", json::array()}}, a, kc(units));
      if (fuse)
        return resNode;
    } else if (fuse) {
      val(resNode, "BF16", rows, H);
      json a = {{"K", K}, {"N", H}, {"out_dtype", "BF16"}, {"epilogue", gated ? "gate_residual" : "residual"}};
      if (gated) {
        a["chunk"] = resNode.find("attn") != std::string::npos ? 2 : 5;
        a["num_chunks"] = 6;
        a["row_index"] = "adaln";
      }
      std::vector<std::string> ins = {in};
      ins.insert(ins.end(), extra.begin(), extra.end());
      op("linear", {lin, resNode}, ins, {resNode}, {{"weight", {lin + ".weight"}}, {"bias", json::array()}}, a,
         kc(units));
      return resNode;
    }
    if (!(tp > 1 && units > 1))
      linear(lin, in, "BF16", rows, H, false, units, nullptr);
    val(resNode, "BF16", rows, H);
    std::vector<std::string> ins = {stream, lin};
    if (gated) {
      ins.push_back(table);
      ins.push_back("pack:ts_index");
      ins.push_back("pack:tags");
      op("gate_residual", {resNode}, ins, {resNode}, json::object(),
         {{"chunk", resNode.find("attn") != std::string::npos ? 2 : 5}, {"num_chunks", 6}, {"row_index", "adaln"}},
         nullptr);
    } else {
      op("residual", {resNode}, ins, {resNode}, json::object(), json::object(), nullptr);
    }
    return resNode;
  }

  // fc1 + swiglu; returns the swiglu value.
  std::string ffIn(const std::string &p, const std::string &x, const char *rows) {
    const int64_t F = c.ffn_dim;
    std::string fc1 = p + "ff.net.0.proj", sw = p + "ff.swiglu";
    if (fuse) {
      val(sw, "BF16", rows, F);
      json a = {{"K", c.hidden_size}, {"N", 2 * F}, {"out_dtype", "BF16"}, {"epilogue", "swiglu"}};
      if (tp > 1 && std::string(rows) == "S")
        a["shard"] = shard("column");
      op("linear", {fc1, sw}, {x}, {sw}, {{"weight", {fc1 + ".weight"}}, {"bias", json::array()}}, a, kc(1));
      return sw;
    }
    linear(fc1, x, "BF16", rows, 2 * F, false, 1, std::string(rows) == "S" ? "column" : nullptr);
    val(sw, "BF16", rows, F);
    op("swiglu", {sw}, {fc1}, {sw}, json::object(), json::object(), nullptr);
    return sw;
  }

  json build() {
    const int64_t H = c.hidden_size, R = c.rotaryDim();
    for (auto [n, dt, rows, cols] : std::vector<std::tuple<const char *, const char *, const char *, int64_t>>{
             {"@hidden_states", "F32", "Nv", c.videoPatchDim()},
             {"@audio_hidden_states", "F32", "Na", c.audio_in_channels},
             {"@encoder_hidden_states", "F32", "Nt", c.text_dim},
             {"@timestep", "F32", "T", 1},
             {"@timestep_indices", "I64", "S", 1},
             {"@token_tags", "I64", "S", 1},
             {"@position_ids", "I64", "S", 3},
             {"@video_indices", "I64", "Nv", 1},
             {"@audio_indices", "I64", "Na", 1},
             {"@text_indices", "I64", "Nt", 1}})
      val(n, dt, rows, cols);
    val("rope:cos", "F32", "S", R);
    val("rope:sin", "F32", "S", R);
    op("rope_table", {"rope"}, {"@position_ids", "@text_indices", "@video_indices", "@audio_indices"},
       {"rope:cos", "rope:sin"}, json::object(), json::object(), nullptr);
    linear("proj_in", "@hidden_states", "F32", "Nv", H, true);
    linear("audio_proj_in", "@audio_hidden_states", "F32", "Na", H, true);
    linear("context_embedder", "@encoder_hidden_states", "BF16", "Nt", H, true);
    std::string x = "context_embedder";
    for (int b = 0; b < c.num_refiner_layers; ++b) {
      std::string p = "token_refiner.refiner_blocks." + std::to_string(b) + ".";
      val(p + "norm1", "BF16", "Nt", H);
      op("rms_norm", {p + "norm1"}, {x}, {p + "norm1"}, {{"weight", {p + "norm1.weight"}}}, {{"eps", c.norm_eps}},
         lt());
      std::string at = attention(p, p + "norm1", "Nt", false);
      x = outProj(p + "attn.to_out.0", at, x, p + "residual_attn", false, "", "Nt", c.innerDim(), 1);
      val(p + "norm2", "BF16", "Nt", H);
      op("rms_norm", {p + "norm2"}, {x}, {p + "norm2"}, {{"weight", {p + "norm2.weight"}}}, {{"eps", c.norm_eps}},
         lt());
      std::string sw = ffIn(p, p + "norm2", "Nt");
      x = outProj(p + "ff.net.2", sw, x, p + "residual_ff", false, "", "Nt", c.ffn_dim, 1);
    }
    val("token_refiner.final_norm", "BF16", "Nt", H);
    op("rms_norm", {"token_refiner.final_norm"}, {x}, {"token_refiner.final_norm"},
       {{"weight", {"token_refiner.final_norm.weight"}}}, {{"eps", c.final_norm_eps}}, lt());
    val("pack", "BF16", "S", H);
    val("pack:positions", "I64", "S", 3);
    val("pack:tags", "I64", "S", 1);
    val("pack:ts_index", "I64", "S", 1);
    op("pack", {"pack"},
       {"token_refiner.final_norm", "proj_in", "audio_proj_in", "@text_indices", "@video_indices", "@audio_indices",
        "@position_ids", "@token_tags", "@timestep_indices"},
       {"pack", "pack:positions", "pack:tags", "pack:ts_index"}, json::object(), json::object(), nullptr);
    std::string temb = "time_embedder.linear_2";
    if (fuse) {
      val(temb, "F32", "T", c.time_embed_dim);
      op("time_embed", {"time_proj", "time_embedder.linear_1", "time_embedder.act", "time_embedder.linear_2"},
         {"@timestep"}, {temb},
         {{"weight", {"time_embedder.linear_1.weight", "time_embedder.linear_2.weight"}},
          {"bias", {"time_embedder.linear_1.bias", "time_embedder.linear_2.bias"}}},
         json::object(), kc(1));
    } else {
      val("time_proj", "F32", "T", c.freq_dim);
      op("timestep_sinusoid", {"time_proj"}, {"@timestep"}, {"time_proj"}, json::object(), json::object(), nullptr);
      linear("time_embedder.linear_1", "time_proj", "F32", "T", c.time_embed_hidden_dim, true);
      val("time_embedder.act", "F32", "T", c.time_embed_hidden_dim);
      op("silu", {"time_embedder.act"}, {"time_embedder.linear_1"}, {"time_embedder.act"}, json::object(),
         json::object(), nullptr);
      linear("time_embedder.linear_2", "time_embedder.act", "F32", "T", c.time_embed_dim, true);
    }
    x = "pack";
    for (int b = 0; b < c.num_layers; ++b) {
      std::string p = "transformer_blocks." + std::to_string(b) + ".";
      std::string tab = p + "adaln_proj";
      val(tab, "BF16", "T3", 6 * H);
      json aa = {{"K", c.time_embed_dim}, {"N", 18 * H}};
      if (tp > 1)
        aa["shard"] = shard("column");
      op("adaln_table", {tab}, {temb}, {tab},
         {{"weight", {tab + ".linear.weight"}}, {"bias", {tab + ".linear.bias"}}}, aa, kc(1));
      json ma = {{"eps", c.norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6},
                 {"row_index", "adaln"}, {"out_dtype", "BF16"}};
      val(p + "norm1", "BF16", "S", H);
      op("norm_modulate", {p + "norm1"}, {x, tab, "pack:ts_index", "pack:tags"}, {p + "norm1"},
         {{"weight", {p + "norm1.weight"}}}, ma, lt());
      std::string at = attention(p, p + "norm1", "S", true);
      x = outProj(p + "attn.to_out.0", at, x, p + "gate_residual_attn", true, tab, "S", c.innerDim(),
                  unitsFor(c.innerDim()));
      ma["shift_chunk"] = 3;
      ma["scale_chunk"] = 4;
      val(p + "norm2", "BF16", "S", H);
      op("norm_modulate", {p + "norm2"}, {x, tab, "pack:ts_index", "pack:tags"}, {p + "norm2"},
         {{"weight", {p + "norm2.weight"}}}, ma, lt());
      std::string sw = ffIn(p, p + "norm2", "S");
      x = outProj(p + "ff.net.2", sw, x, p + "gate_residual_ff", true, tab, "S", c.ffn_dim, unitsFor(c.ffn_dim));
    }
    val("norm_out.linear", "BF16", "T", 2 * H);
    op("adaln_table", {"norm_out.linear"}, {temb}, {"norm_out.linear"},
       {{"weight", {"norm_out.linear.weight"}}, {"bias", {"norm_out.linear.bias"}}}, json::object(), kc(1));
    val("norm_out.norm", "F32", "S", H);
    op("norm_modulate", {"norm_out.norm"}, {x, "norm_out.linear", "pack:ts_index"}, {"norm_out.norm"},
       {{"weight", {"norm_out.norm.weight"}}},
       {{"eps", c.final_norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 2},
        {"row_index", "timestep"}, {"out_dtype", "F32"}},
       lt());
    linear("proj_out", "norm_out.norm", "F32", "S", c.videoPatchDim(), true);
    linear("audio_proj_out", "norm_out.norm", "F32", "S", c.audio_in_channels, true);
    val("unpack:sample", "F32", "Nv", c.videoPatchDim());
    val("unpack:audio_sample", "F32", "Na", c.audio_in_channels);
    op("unpack", {"unpack"}, {"proj_out", "audio_proj_out", "@video_indices", "@audio_indices"},
       {"unpack:sample", "unpack:audio_sample"}, json::object(), json::object(), nullptr);

    json inputs = json::array();
    for (const auto &n : graphInputs())
      inputs.push_back(n);
    json plan = {{"schema", kPlanSchema},
                 {"fingerprint_sha256", std::string(64, '0')},
                 {"config", h3::configToJson(c)},
                 {"options", {{"arch", "sm_90a"}, {"tp", tp}, {"fuse", fuse}}},
                 {"inputs", inputs},
                 {"outputs", {{"sample", "unpack:sample"}, {"audio_sample", "unpack:audio_sample"}}},
                 {"values", values},
                 {"slots", json::array()},
                 {"ops", ops},
                 {"kernels", json::object()}};
    plan["plan_sha256"] = sha256Hex(canonicalJson(plan));
    return plan;
  }
};

inline json modelPlan(const h3::Config &c, bool fuse = false, int tp = 1) {
  PlanBuilder b;
  b.c = c;
  b.fuse = fuse;
  b.tp = tp;
  return b.build();
}

// Re-hash after editing a plan (tests that tamper on purpose do not call this).
inline json rehash(json plan) {
  plan.erase("plan_sha256");
  plan["plan_sha256"] = sha256Hex(canonicalJson(plan));
  return plan;
}

} // namespace h3c::rt::testplans
