// Plans written by hand for the runtime tests (before and independently of `h3c compile`): the whole model in the
// unfused form of docs/contract.md sections 2/3/7, optionally with the fused ops of section 3 and the TP shard attrs
// of section 4, exactly as a plan.json would spell them (schema h3c-plan-v2). The attrs every op carries (out_dtype,
// x_dtype, w_dtype, shard with its column segments), one slot per value and one weight buffer per tensor are filled
// in by finish() from the rules of section 5.1. Used by the runtime tests only (no kernels: CPU runs).
#pragma once

#include "h3c/models/config.h"
#include "h3c/models/fingerprint.h"
#include "h3c/plan/io.h"
#include "h3c/support/sha256.h"
#include "h3c/support/canonical_json.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <stdexcept>
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
    if (std::string(dtype) == "I64" || name.rfind("rope:", 0) == 0 || name == "@position_ids" ||
        name == "pack:positions")
      batch = false;  // per-row metadata (F32 positions, I64 tags and indices) and the rope tables: no batch axis
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
  h3::TensorSpec specOf(const std::string &tensor) const {
    for (const auto &t : h3::diffusersTensors(c))
      if (t.name == tensor)
        return t;
    throw std::runtime_error("no tensor " + tensor);
  }

  void linear(const std::string &node, const std::string &x, const char *dtype, const char *rows, int64_t n,
              bool bias, int units = 1, const char *shardKind = nullptr) {
    val(node, dtype, rows, n);
    json w = {{"weight", {node + ".weight"}}, {"bias", bias ? json::array({node + ".bias"}) : json::array()}};
    const h3::TensorSpec &spec = specOf(node + ".weight");
    json a = {{"K", spec.shape[1]}, {"N", spec.shape[0]}, {"epilogue", "none"}};
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
      json a = {{"K", c.hidden_size}, {"N", I}, {"heads", c.num_attention_heads}, {"head_dim", d}};
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
         {{"heads", c.num_attention_heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}, {"rotary_dim", rope ? c.rotaryDim() : 0}},
         lt());
      qa = oq;
      ka = ok;
    } else {
      val(nq, "BF16", rows, I);
      val(nk, "BF16", rows, I);
      json na = {{"heads", c.num_attention_heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}};
      op("qk_norm", {nq}, {q}, {nq}, {{"weight", {nq + ".weight"}}}, na, lt());
      op("qk_norm", {nk}, {k}, {nk}, {{"weight", {nk + ".weight"}}}, na, lt());
      qa = nq;
      ka = nk;
      if (rope) {
        val(rq, "BF16", rows, I);
        val(rk, "BF16", rows, I);
        json ra = {{"heads", c.num_attention_heads}, {"head_dim", d}, {"rotary_dim", c.rotaryDim()}};
        op("rope", {rq}, {nq, "rope:cos", "rope:sin"}, {rq}, json::object(), ra, nullptr);
        op("rope", {rk}, {nk, "rope:cos", "rope:sin"}, {rk}, json::object(), ra, nullptr);
        qa = rq;
        ka = rk;
      }
    }
    std::string at = p + "attn.attention";
    val(at, "BF16", rows, I);
    json aa = {{"heads", c.num_attention_heads}, {"head_dim", d}, {"domain", rows},
               {"scale", 1.0 / std::sqrt(double(d))}};
    if (tp > 1 && std::string(rows) == "S")
      aa["shard"] = shard("column");
    op("attention", {at}, {qa, ka, v}, {at}, json::object(), aa, fl());
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
         {{"K", K}, {"N", H}, {"epilogue", "none"}, {"shard", shard("row")}}, kc(units));
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
      json a = {{"K", K}, {"N", H}, {"epilogue", gated ? "gate_residual" : "residual"}};
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
         {{"H", H}, {"chunk", resNode.find("attn") != std::string::npos ? 2 : 5}, {"num_chunks", 6},
          {"row_index", "adaln"}},
         nullptr);
    } else {
      op("residual", {resNode}, ins, {resNode}, json::object(), {{"cols", H}, {"dtype", "BF16"}}, nullptr);
    }
    return resNode;
  }

  // fc1 + swiglu; returns the swiglu value.
  std::string ffIn(const std::string &p, const std::string &x, const char *rows) {
    const int64_t F = c.ffn_dim;
    std::string fc1 = p + "ff.net.0.proj", sw = p + "ff.swiglu";
    if (fuse) {
      val(sw, "BF16", rows, F);
      json a = {{"K", c.hidden_size}, {"N", 2 * F}, {"epilogue", "swiglu"}};
      if (tp > 1 && std::string(rows) == "S")
        a["shard"] = shard("column");
      op("linear", {fc1, sw}, {x}, {sw}, {{"weight", {fc1 + ".weight"}}, {"bias", json::array()}}, a, kc(1));
      return sw;
    }
    linear(fc1, x, "BF16", rows, 2 * F, false, 1, std::string(rows) == "S" ? "column" : nullptr);
    val(sw, "BF16", rows, F);
    op("swiglu", {sw}, {fc1}, {sw}, json::object(), {{"F", F}, {"cols", F}}, nullptr);
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
             {"@position_ids", "F32", "S", 3},
             {"@video_indices", "I64", "Nv", 1},
             {"@audio_indices", "I64", "Na", 1},
             {"@text_indices", "I64", "Nt", 1}})
      val(n, dt, rows, cols);
    val("rope:cos", "F32", "S", R);
    val("rope:sin", "F32", "S", R);
    op("rope_table", {"rope"}, {"@position_ids", "@text_indices", "@video_indices", "@audio_indices"},
       {"rope:cos", "rope:sin"}, json::object(), {{"rotary_dim", R}, {"theta", c.rope_theta}}, nullptr);
    linear("proj_in", "@hidden_states", "F32", "Nv", H, true);
    linear("audio_proj_in", "@audio_hidden_states", "F32", "Na", H, true);
    linear("context_embedder", "@encoder_hidden_states", "BF16", "Nt", H, true);
    std::string x = "context_embedder";
    for (int b = 0; b < c.num_refiner_layers; ++b) {
      std::string p = "token_refiner.refiner_blocks." + std::to_string(b) + ".";
      val(p + "norm1", "BF16", "Nt", H);
      op("rms_norm", {p + "norm1"}, {x}, {p + "norm1"}, {{"weight", {p + "norm1.weight"}}},
         {{"H", H}, {"eps", c.norm_eps}}, lt());
      std::string at = attention(p, p + "norm1", "Nt", false);
      x = outProj(p + "attn.to_out.0", at, x, p + "residual_attn", false, "", "Nt", c.innerDim(), 1);
      val(p + "norm2", "BF16", "Nt", H);
      op("rms_norm", {p + "norm2"}, {x}, {p + "norm2"}, {{"weight", {p + "norm2.weight"}}},
         {{"H", H}, {"eps", c.norm_eps}}, lt());
      std::string sw = ffIn(p, p + "norm2", "Nt");
      x = outProj(p + "ff.net.2", sw, x, p + "residual_ff", false, "", "Nt", c.ffn_dim, 1);
    }
    val("token_refiner.final_norm", "BF16", "Nt", H);
    op("rms_norm", {"token_refiner.final_norm"}, {x}, {"token_refiner.final_norm"},
       {{"weight", {"token_refiner.final_norm.weight"}}}, {{"H", H}, {"eps", c.final_norm_eps}}, lt());
    val("pack", "BF16", "S", H);
    val("pack:positions", "F32", "S", 3);
    val("pack:tags", "I64", "S", 1);
    val("pack:ts_index", "I64", "S", 1);
    op("pack", {"pack"},
       {"token_refiner.final_norm", "proj_in", "audio_proj_in", "@text_indices", "@video_indices", "@audio_indices",
        "@position_ids", "@token_tags", "@timestep_indices"},
       {"pack", "pack:positions", "pack:tags", "pack:ts_index"}, json::object(), {{"H", H}}, nullptr);
    std::string temb = "time_embedder.linear_2";
    val("time_proj", "F32", "T", c.freq_dim);
    op("timestep_sinusoid", {"time_proj"}, {"@timestep"}, {"time_proj"}, json::object(), {{"freq_dim", c.freq_dim}},
       nullptr);
    if (fuse) {
      val(temb, "F32", "T", c.time_embed_dim);
      op("time_embed", {"time_embedder.linear_1", "time_embedder.act", "time_embedder.linear_2"}, {"time_proj"},
         {temb},
         {{"weight", {"time_embedder.linear_1.weight", "time_embedder.linear_2.weight"}},
          {"bias", {"time_embedder.linear_1.bias", "time_embedder.linear_2.bias"}}},
         {{"K", c.freq_dim}, {"N", c.time_embed_dim}, {"freq_dim", c.freq_dim}, {"hidden", c.time_embed_hidden_dim},
          {"out_dim", c.time_embed_dim}},
         kc(1));
    } else {
      linear("time_embedder.linear_1", "time_proj", "F32", "T", c.time_embed_hidden_dim, true);
      val("time_embedder.act", "F32", "T", c.time_embed_hidden_dim);
      op("silu", {"time_embedder.act"}, {"time_embedder.linear_1"}, {"time_embedder.act"}, json::object(),
         {{"cols", c.time_embed_hidden_dim}, {"dtype", "F32"}}, nullptr);
      linear("time_embedder.linear_2", "time_embedder.act", "F32", "T", c.time_embed_dim, true);
    }
    x = "pack";
    for (int b = 0; b < c.num_layers; ++b) {
      std::string p = "transformer_blocks." + std::to_string(b) + ".";
      std::string tab = p + "adaln_proj";
      val(tab, "BF16", "T3", 6 * H);
      json aa = {{"K", c.time_embed_dim}, {"N", 18 * H}, {"num_chunks", 6}, {"rows_per_timestep", 3}};
      if (tp > 1)
        aa["shard"] = shard("column");
      op("adaln_table", {tab}, {temb}, {tab},
         {{"weight", {tab + ".linear.weight"}}, {"bias", {tab + ".linear.bias"}}}, aa, kc(1));
      json ma = {{"H", H}, {"eps", c.norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6},
                 {"row_index", "adaln"}};
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
       {{"weight", {"norm_out.linear.weight"}}, {"bias", {"norm_out.linear.bias"}}},
       {{"K", c.time_embed_dim}, {"N", 2 * H}, {"num_chunks", 2}, {"rows_per_timestep", 1}}, kc(1));
    val("norm_out.norm", "F32", "S", H);
    op("norm_modulate", {"norm_out.norm"}, {x, "norm_out.linear", "pack:ts_index"}, {"norm_out.norm"},
       {{"weight", {"norm_out.norm.weight"}}},
       {{"H", H}, {"eps", c.final_norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 2},
        {"row_index", "timestep"}},
       lt());
    linear("proj_out", "norm_out.norm", "F32", "S", c.videoPatchDim(), true);
    linear("audio_proj_out", "norm_out.norm", "F32", "S", c.audio_in_channels, true);
    val("unpack:sample", "F32", "Nv", c.videoPatchDim());
    val("unpack:audio_sample", "F32", "Na", c.audio_in_channels);
    op("unpack", {"unpack"}, {"proj_out", "audio_proj_out"}, {"unpack:sample", "unpack:audio_sample"},
       json::object(), {{"video_cols", c.videoPatchDim()}, {"audio_cols", c.audio_in_channels}}, nullptr);

    return finish();
  }

  // The attrs every op carries, slots, weight buffers and the document (docs/contract.md section 5).
  json finish() {
    std::map<std::string, h3::TensorSpec> specs;
    for (const auto &t : h3::diffusersTensors(c))
      specs[t.name] = t;
    json weights = json::array();
    for (auto &o : ops) {
      json &a = o["attrs"];
      a["out_dtype"] = values[o["out"][0].get<std::string>()]["dtype"];
      if (!o["in"].empty())
        a["x_dtype"] = values[o["in"][0].get<std::string>()]["dtype"];
      if (!o["weights"].contains("weight"))
        o["weights"]["weight"] = json::array();
      if (!o["weights"].contains("bias"))
        o["weights"]["bias"] = json::array();
      if (!o["weights"]["weight"].empty())
        a["w_dtype"] = std::string(dtypeName(specs.at(o["weights"]["weight"][0].get<std::string>()).dtype));
      for (const char *role : {"weight", "bias"})
        for (const auto &t : o["weights"][role]) {
          const h3::TensorSpec &s = specs.at(t.get<std::string>());
          weights.push_back({{"buffer", s.name},
                             {"tensors", {{{"name", s.name}, {"dtype", std::string(dtypeName(s.dtype))}, {"shape", s.shape}}}}});
        }
      if (!a.contains("shard") || a["shard"].is_null())
        a["shard"] = {{"kind", "replicated"}, {"tp", 1}};
      if (a["shard"]["kind"] == "column") {
        // Column segments (section 5.1): qkv one per output, fc1 its value and gate halves, the AdaLN table one per
        // chunk, head ops the whole width.
        const std::string kind = o["op"];
        const int64_t I = c.innerDim(), H = c.hidden_size;
        json segs = json::array();
        if (kind == "qkv_linear")
          segs = {{0, I}, {I, 2 * I}, {2 * I, 3 * I}};
        else if (kind == "linear" && a.value("epilogue", "") == "swiglu")
          segs = {{0, c.ffn_dim}, {c.ffn_dim, 2 * c.ffn_dim}};
        else if (kind == "linear")
          segs = {{0, a["N"]}};
        else if (kind == "adaln_table")
          for (int64_t k = 0; k < 18; ++k)
            segs.push_back({k * H, (k + 1) * H});
        else
          segs = {{0, I}};
        a["shard"]["segments"] = segs;
      }
    }
    json slots = json::array();
    int64_t id = 0;
    for (auto it = values.begin(); it != values.end(); ++it, ++id) {
      it.value()["slot"] = id;
      slots.push_back({{"id", id}, {"bytes_per_row", {{it.value()["rows"].get<std::string>(), 16}}}, {"fixed_bytes", 0}});
    }
    json inputs = json::array();
    for (const auto &g : h3::graphInputs(c))
      inputs.push_back(g.name);
    json plan = {{"schema", plan::kPlanSchema},
                 {"fingerprint_sha256", std::string(64, '0')},
                 {"config", h3::configToJson(c)},
                 {"options", {{"arch", "sm_90a"}, {"tp", tp}, {"fuse", fuse}}},
                 {"values", values},
                 {"slots", slots},
                 {"weights", weights},
                 {"functions",
                  {{"forward",
                    {{"inputs", inputs},
                     {"outputs", {{"sample", "unpack:sample"}, {"audio_sample", "unpack:audio_sample"}}},
                     {"ops", ops}}}}},
                 {"kernels", json::object()}};
    plan["plan_sha256"] = plan::computePlanSha256(plan);
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
  plan["plan_sha256"] = plan::computePlanSha256(plan);
  return plan;
}

// The ops array of a plan document (the forward function's).
inline json &opsOf(json &plan) { return plan["functions"]["forward"]["ops"]; }

} // namespace h3c::rt::testplans
