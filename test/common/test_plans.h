// Plans written by hand for the runtime tests (before and independently of `h3c compile`): the whole model in the
// unfused form of docs/contract.md sections 2/3/7, optionally with the fused ops of section 3 and the sequence- and
// tensor-parallel layout of section 5.2 (rank-local values, column shards, all_gather / split), exactly as a
// plan.json would spell them (schema h3c-plan-v3). The attrs every op carries (out_dtype, x_dtype, w_dtype, shard),
// one slot per value, one weight buffer per tensor with its split, and the ranks are filled in by finish() from the
// rules of section 5. Used by the runtime and plan tests only (no kernels: CPU runs).
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
  int sp = 1, tp = 1;
  json values = json::object();
  json ops = json::array();

  static bool tokenRows(const std::string &rows) {
    return rows == "S" || rows == "Nt" || rows == "Nv" || rows == "Na" || rows == "Sr";
  }
  void val(const std::string &name, const char *dtype, const std::string &rows, int64_t cols) {
    bool batch = tokenRows(rows);
    if (std::string(dtype) == "I64" || name.rfind("rope:", 0) == 0 || name == "@position_ids" ||
        name == "pack:positions")
      batch = false;  // per-row metadata (F32 positions, I64 tags and indices) and the rope tables: no batch axis
    values[name] = {{"dtype", dtype}, {"rows", rows}, {"cols", cols}, {"batch", batch}};
  }
  static json kc() { return {{"kind", "k_chunks"}, {"k_step", 16}, {"units", 1}, {"acc", "f32"}}; }
  static json lt() { return {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}}; }
  static json fl() { return {{"kind", "flash"}, {"kv_block", 128}, {"k_step", 16}, {"acc", "f32"}, {"p", "bf16"}}; }
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
  // Section 5.2: a column shard over tp ranks with `count` equal segments of `full` columns.
  json column(int64_t full, int64_t count) const {
    json segs = json::array();
    for (int64_t k = 0; k < count; ++k)
      segs.push_back({k * full / count, (k + 1) * full / count});
    return {{"kind", "column"}, {"tp", tp}, {"segments", segs}};
  }
  void shardColumns(json &attrs, int64_t full, int64_t count) const {
    if (tp > 1)
      attrs["shard"] = column(full, count);
  }

  // ---- layout ops (section 5.2) ----
  std::string dtypeOf(const std::string &v) { return values.at(v)["dtype"]; }
  std::string layout(const char *kind, const std::string &in, const std::string &out, const char *axis, int parts,
                     int64_t fullCols, int64_t segments) {
    json a = {{"axis", axis}, {"parts", parts}, {"cols", fullCols}, {"dtype", dtypeOf(in)}};
    if (std::string(axis) == "cols") {
      json segs = json::array();
      for (int64_t k = 0; k < segments; ++k)
        segs.push_back({k * fullCols / segments, (k + 1) * fullCols / segments});
      a["segments"] = segs;
    }
    op(kind, {}, {in}, {out}, json::object(), a, nullptr);
    return out;
  }
  // All columns of a value a tp rank holds part of (segments equal segments of `full` columns).
  std::string gatherCols(const std::string &v, int64_t full, int64_t segments = 1) {
    if (tp == 1)
      return v;
    val(v + ":gather_cols", dtypeOf(v).c_str(), values[v]["rows"].get<std::string>(), full);
    return layout("all_gather", v, v + ":gather_cols", "cols", tp, full, segments);
  }
  std::string splitCols(const std::string &v, int64_t full) {
    if (tp == 1)
      return v;
    val(v + ":split_cols", dtypeOf(v).c_str(), values[v]["rows"].get<std::string>(), full / tp);
    return layout("split", v, v + ":split_cols", "cols", tp, full, 1);
  }
  std::string gatherRows(const std::string &v) {
    if (sp == 1)
      return v;
    const int64_t cols = values[v]["cols"];
    val(v + ":gather_rows", dtypeOf(v).c_str(), "S", cols);
    return layout("all_gather", v, v + ":gather_rows", "rows", sp, cols, 1);
  }
  std::string splitRows(const std::string &v) {
    if (sp == 1)
      return v;
    const int64_t cols = values[v]["cols"];
    val(v + ":split_rows", dtypeOf(v).c_str(), "Sr", cols);
    return layout("split", v, v + ":split_rows", "rows", sp, cols, 1);
  }

  // A linear node: weight [+ bias], output `dtype`; `n` output columns (the rank's when `shardCount` > 0: a column
  // shard with that many segments of `fullN`).
  h3::TensorSpec specOf(const std::string &tensor) const {
    for (const auto &t : h3::diffusersTensors(c))
      if (t.name == tensor)
        return t;
    throw std::runtime_error("no tensor " + tensor);
  }
  void linear(const std::string &node, const std::string &x, const char *dtype, const std::string &rows, bool bias,
              int shardCount = 0) {
    const h3::TensorSpec &spec = specOf(node + ".weight");
    const int64_t fullN = spec.shape[0], N = shardCount ? fullN / tp : fullN;
    val(node, dtype, rows, N);
    json w = {{"weight", {node + ".weight"}}, {"bias", bias ? json::array({node + ".bias"}) : json::array()}};
    json a = {{"K", spec.shape[1]}, {"N", N}, {"epilogue", "none"}};
    if (shardCount)
      shardColumns(a, fullN, shardCount);
    op("linear", {node}, {x}, {node}, w, a, kc());
  }

  // The attention sub-graph of a block (refiner: no rope, domain Nt, never sharded). Returns the attention output
  // (the rank's heads in a sharded block).
  std::string attention(const std::string &p, const std::string &x, const std::string &rows, bool block) {
    const int S = block ? tp : 1;  // column split of this block
    const int64_t I = c.innerDim(), d = c.attention_head_dim, Il = I / S, heads = c.num_attention_heads / S;
    const std::string cosv = block ? rope_[0] : "", sinv = block ? rope_[1] : "";
    std::string q = p + "attn.to_q", k = p + "attn.to_k", v = p + "attn.to_v";
    if (fuse) {
      for (auto &n : {q, k, v})
        val(n, "BF16", rows, Il);
      json a = {{"K", c.hidden_size}, {"N", Il}, {"heads", heads}, {"head_dim", d}};
      if (block)
        shardColumns(a, 3 * I, 3);
      op("qkv_linear", {q, k, v}, {x}, {q, k, v},
         {{"weight", {q + ".weight", k + ".weight", v + ".weight"}}, {"bias", json::array()}}, a, kc());
    } else {
      linear(q, x, "BF16", rows, false, block && tp > 1 ? 1 : 0);
      linear(k, x, "BF16", rows, false, block && tp > 1 ? 1 : 0);
      linear(v, x, "BF16", rows, false, block && tp > 1 ? 1 : 0);
    }
    auto headShard = [&](json &a) {
      if (block)
        shardColumns(a, I, 1);
    };
    std::string nq = p + "attn.norm_q", nk = p + "attn.norm_k", rq = p + "attn.rope_q", rk = p + "attn.rope_k";
    std::string qa = q, ka = k;
    if (fuse) {
      std::string oq = block ? rq : nq, ok = block ? rk : nk;
      val(oq, "BF16", rows, Il);
      val(ok, "BF16", rows, Il);
      std::vector<std::string> nodes = {nq, nk};
      std::vector<std::string> in = {q, k};
      if (block) {
        nodes.push_back(rq);
        nodes.push_back(rk);
        in.push_back(cosv);
        in.push_back(sinv);
      }
      json a = {{"heads", heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}, {"rotary_dim", block ? c.rotaryDim() : 0}};
      headShard(a);
      op("qk_norm_rope", nodes, in, {oq, ok}, {{"weight", {nq + ".weight", nk + ".weight"}}}, a, lt());
      qa = oq;
      ka = ok;
    } else {
      val(nq, "BF16", rows, Il);
      val(nk, "BF16", rows, Il);
      json na = {{"heads", heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}};
      headShard(na);
      op("qk_norm", {nq}, {q}, {nq}, {{"weight", {nq + ".weight"}}}, na, lt());
      op("qk_norm", {nk}, {k}, {nk}, {{"weight", {nk + ".weight"}}}, na, lt());
      qa = nq;
      ka = nk;
      if (block) {
        val(rq, "BF16", rows, Il);
        val(rk, "BF16", rows, Il);
        json ra = {{"heads", heads}, {"head_dim", d}, {"rotary_dim", c.rotaryDim()}};
        headShard(ra);
        op("rope", {rq}, {nq, cosv, sinv}, {rq}, json::object(), ra, nullptr);
        op("rope", {rk}, {nk, cosv, sinv}, {rk}, json::object(), ra, nullptr);
        qa = rq;
        ka = rk;
      }
    }
    // Sequence parallel: the rank's query rows attend every key row.
    std::string kk = block ? gatherRows(ka) : ka, vv = block ? gatherRows(v) : v;
    std::string at = p + "attn.attention";
    val(at, "BF16", rows, Il);
    json aa = {{"heads", heads}, {"head_dim", d}, {"domain", rows}, {"scale", 1.0 / std::sqrt(double(d))}};
    headShard(aa);
    op("attention", {at}, {qa, kk, vv}, {at}, json::object(), aa, fl());
    return at;
  }

  // to_out / fc2 (+ residual or gate_residual) on the whole input `in`; `stream` is the residual stream (the rank's
  // columns in a sharded block), `table` the AdaLN table (the rank's columns too). Returns the new stream value.
  std::string outProj(const std::string &lin, const std::string &in, const std::string &stream,
                      const std::string &resNode, bool gated, const std::string &table, const std::string &rows,
                      int64_t K, bool block) {
    const int64_t H = c.hidden_size, Hl = block ? H / tp : H;
    std::vector<std::string> extra = {stream};
    if (gated) {
      extra.push_back(table);
      extra.push_back(meta_[0]);
      extra.push_back(meta_[1]);
    }
    json gate = {{"chunk", resNode.find("attn") != std::string::npos ? 2 : 5}, {"num_chunks", 6},
                 {"row_index", "adaln"}};
    if (fuse) {
      val(resNode, "BF16", rows, Hl);
      json a = {{"K", K}, {"N", Hl}, {"epilogue", gated ? "gate_residual" : "residual"}};
      if (gated)
        a.update(gate);
      if (block)
        shardColumns(a, H, 1);
      std::vector<std::string> ins = {in};
      ins.insert(ins.end(), extra.begin(), extra.end());
      op("linear", {lin, resNode}, ins, {resNode}, {{"weight", {lin + ".weight"}}, {"bias", json::array()}}, a, kc());
      return resNode;
    }
    linear(lin, in, "BF16", rows, false, block && tp > 1 ? 1 : 0);
    val(resNode, "BF16", rows, Hl);
    std::vector<std::string> ins = {stream, lin};
    if (gated) {
      ins.insert(ins.end(), extra.begin() + 1, extra.end());
      json a = {{"H", Hl}};
      a.update(gate);
      if (block)
        shardColumns(a, H, 1);
      op("gate_residual", {resNode}, ins, {resNode}, json::object(), a, nullptr);
    } else {
      op("residual", {resNode}, ins, {resNode}, json::object(), {{"cols", H}, {"dtype", "BF16"}}, nullptr);
    }
    return resNode;
  }

  // fc1 + swiglu; returns the swiglu value (the rank's columns in a sharded block).
  std::string ffIn(const std::string &p, const std::string &x, const std::string &rows, bool block) {
    const int64_t F = c.ffn_dim, Fl = block ? F / tp : F;
    std::string fc1 = p + "ff.net.0.proj", sw = p + "ff.swiglu";
    if (fuse) {
      val(sw, "BF16", rows, Fl);
      json a = {{"K", c.hidden_size}, {"N", 2 * Fl}, {"epilogue", "swiglu"}};
      if (block)
        shardColumns(a, 2 * F, 2);
      op("linear", {fc1, sw}, {x}, {sw}, {{"weight", {fc1 + ".weight"}}, {"bias", json::array()}}, a, kc());
      return sw;
    }
    linear(fc1, x, "BF16", rows, false, block && tp > 1 ? 2 : 0);
    val(sw, "BF16", rows, Fl);
    json a = {{"F", Fl}, {"cols", Fl}};
    if (block)
      shardColumns(a, F, 1);
    op("swiglu", {sw}, {fc1}, {sw}, json::object(), a, nullptr);
    return sw;
  }

  std::string meta_[2] = {"pack:ts_index", "pack:tags"};
  std::string rope_[2] = {"rope:cos", "rope:sin"};

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
    linear("proj_in", "@hidden_states", "F32", "Nv", true);
    linear("audio_proj_in", "@audio_hidden_states", "F32", "Na", true);
    linear("context_embedder", "@encoder_hidden_states", "BF16", "Nt", true);
    std::string x = "context_embedder";
    for (int b = 0; b < c.num_refiner_layers; ++b) {
      std::string p = "token_refiner.refiner_blocks." + std::to_string(b) + ".";
      val(p + "norm1", "BF16", "Nt", H);
      op("rms_norm", {p + "norm1"}, {x}, {p + "norm1"}, {{"weight", {p + "norm1.weight"}}},
         {{"H", H}, {"eps", c.norm_eps}}, lt());
      std::string at = attention(p, p + "norm1", "Nt", false);
      x = outProj(p + "attn.to_out.0", at, x, p + "residual_attn", false, "", "Nt", c.innerDim(), false);
      val(p + "norm2", "BF16", "Nt", H);
      op("rms_norm", {p + "norm2"}, {x}, {p + "norm2"}, {{"weight", {p + "norm2.weight"}}},
         {{"H", H}, {"eps", c.norm_eps}}, lt());
      std::string sw = ffIn(p, p + "norm2", "Nt", false);
      x = outProj(p + "ff.net.2", sw, x, p + "residual_ff", false, "", "Nt", c.ffn_dim, false);
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
    // Sequence parallel: the stream and its row metadata on the rank's rows from here on.
    const std::string rows = sp > 1 ? "Sr" : "S";
    x = splitRows("pack");
    meta_[0] = splitRows("pack:ts_index");
    meta_[1] = splitRows("pack:tags");
    rope_[0] = splitRows("rope:cos");
    rope_[1] = splitRows("rope:sin");
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
         kc());
    } else {
      linear("time_embedder.linear_1", "time_proj", "F32", "T", true);
      val("time_embedder.act", "F32", "T", c.time_embed_hidden_dim);
      op("silu", {"time_embedder.act"}, {"time_embedder.linear_1"}, {"time_embedder.act"}, json::object(),
         {{"cols", c.time_embed_hidden_dim}, {"dtype", "F32"}}, nullptr);
      linear("time_embedder.linear_2", "time_embedder.act", "F32", "T", true);
    }
    // Tensor parallel: every block keeps the stream whole (xs) and by the rank's columns (xl).
    std::string xs = x, xl = splitCols(x, H);
    for (int b = 0; b < c.num_layers; ++b) {
      std::string p = "transformer_blocks." + std::to_string(b) + ".";
      std::string tab = p + "adaln_proj";
      val(tab, "BF16", "T3", 6 * H / tp);
      json aa = {{"K", c.time_embed_dim}, {"N", 18 * H / tp}, {"num_chunks", 6}, {"rows_per_timestep", 3}};
      shardColumns(aa, 18 * H, 18);
      op("adaln_table", {tab}, {temb}, {tab},
         {{"weight", {tab + ".linear.weight"}}, {"bias", {tab + ".linear.bias"}}}, aa, kc());
      std::string tabAll = gatherCols(tab, 6 * H, 6);
      json ma = {{"H", H}, {"eps", c.norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6},
                 {"row_index", "adaln"}};
      val(p + "norm1", "BF16", rows, H);
      op("norm_modulate", {p + "norm1"}, {xs, tabAll, meta_[0], meta_[1]}, {p + "norm1"},
         {{"weight", {p + "norm1.weight"}}}, ma, lt());
      std::string at = attention(p, p + "norm1", rows, true);
      xl = outProj(p + "attn.to_out.0", gatherCols(at, c.innerDim()), xl, p + "gate_residual_attn", true, tab, rows,
                   c.innerDim(), true);
      xs = gatherCols(xl, H);
      ma["shift_chunk"] = 3;
      ma["scale_chunk"] = 4;
      val(p + "norm2", "BF16", rows, H);
      op("norm_modulate", {p + "norm2"}, {xs, tabAll, meta_[0], meta_[1]}, {p + "norm2"},
         {{"weight", {p + "norm2.weight"}}}, ma, lt());
      std::string sw = ffIn(p, p + "norm2", rows, true);
      xl = outProj(p + "ff.net.2", gatherCols(sw, c.ffn_dim), xl, p + "gate_residual_ff", true, tab, rows, c.ffn_dim,
                   true);
      xs = gatherCols(xl, H);
    }
    val("norm_out.linear", "BF16", "T", 2 * H);
    op("adaln_table", {"norm_out.linear"}, {temb}, {"norm_out.linear"},
       {{"weight", {"norm_out.linear.weight"}}, {"bias", {"norm_out.linear.bias"}}},
       {{"K", c.time_embed_dim}, {"N", 2 * H}, {"num_chunks", 2}, {"rows_per_timestep", 1}}, kc());
    val("norm_out.norm", "F32", rows, H);
    op("norm_modulate", {"norm_out.norm"}, {xs, "norm_out.linear", meta_[0]}, {"norm_out.norm"},
       {{"weight", {"norm_out.norm.weight"}}},
       {{"H", H}, {"eps", c.final_norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 2},
        {"row_index", "timestep"}},
       lt());
    linear("proj_out", "norm_out.norm", "F32", rows, true);
    linear("audio_proj_out", "norm_out.norm", "F32", rows, true);
    val("unpack:sample", "F32", "Nv", c.videoPatchDim());
    val("unpack:audio_sample", "F32", "Na", c.audio_in_channels);
    op("unpack", {"unpack"}, {gatherRows("proj_out"), gatherRows("audio_proj_out")},
       {"unpack:sample", "unpack:audio_sample"}, json::object(),
       {{"video_cols", c.videoPatchDim()}, {"audio_cols", c.audio_in_channels}}, nullptr);

    return finish();
  }

  // The attrs every op carries, slots, weight buffers (a column-sharded GEMM's tensors split by its segments) and
  // the document (docs/contract.md section 5).
  json finish() {
    std::map<std::string, h3::TensorSpec> specs;
    for (const auto &t : h3::diffusersTensors(c))
      specs[t.name] = t;
    json weights = json::array();
    for (auto &o : ops) {
      json &a = o["attrs"];
      const std::string kind = o["op"];
      a["out_dtype"] = values[o["out"][0].get<std::string>()]["dtype"];
      if (!o["in"].empty())
        a["x_dtype"] = values[o["in"][0].get<std::string>()]["dtype"];
      if (!o["weights"].contains("weight"))
        o["weights"]["weight"] = json::array();
      if (!o["weights"].contains("bias"))
        o["weights"]["bias"] = json::array();
      if (!o["weights"]["weight"].empty())
        a["w_dtype"] = std::string(dtypeName(specs.at(o["weights"]["weight"][0].get<std::string>()).dtype));
      const bool layoutOp = kind == "all_gather" || kind == "split";
      if (!layoutOp && !a.contains("shard"))
        a["shard"] = {{"kind", "replicated"}, {"tp", 1}};
      const bool splits = !layoutOp && a["shard"]["kind"] == "column" &&
                          (kind == "linear" || kind == "qkv_linear" || kind == "adaln_table");
      for (const char *role : {"weight", "bias"}) {
        int64_t off = 0;
        for (const auto &t : o["weights"][role]) {
          const h3::TensorSpec &s = specs.at(t.get<std::string>());
          json e = {{"name", s.name}, {"dtype", std::string(dtypeName(s.dtype))}, {"shape", s.shape}};
          if (splits) {
            // The op's segments that fall into this tensor's rows (stacked in the op's order).
            json segs = json::array();
            for (const auto &g : a["shard"]["segments"])
              if (g[0].get<int64_t>() >= off && g[1].get<int64_t>() <= off + s.shape[0])
                segs.push_back({g[0].get<int64_t>() - off, g[1].get<int64_t>() - off});
            e["split"] = {{"parts", tp}, {"segments", segs}};
          }
          off += s.shape[0];
          weights.push_back({{"buffer", s.name}, {"tensors", {e}}});
        }
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
    json rankList = json::array();
    for (int i = 0; i < sp; ++i)
      for (int j = 0; j < tp; ++j)
        rankList.push_back({{"rank", i * tp + j},
                            {"sp_index", i},
                            {"tp_index", j},
                            {"rows", {{"domain", "S"}, {"begin", {i, sp}}, {"end", {i + 1, sp}}}},
                            {"cols", {{"part", j}, {"parts", tp}}}});
    json plan = {{"schema", plan::kPlanSchema},
                 {"fingerprint_sha256", std::string(64, '0')},
                 {"config", h3::configToJson(c)},
                 {"options", {{"arch", "sm_90a"}, {"sp", sp}, {"tp", tp}, {"fuse", fuse}}},
                 {"ranks", {{"sp", sp}, {"tp", tp}, {"count", sp * tp}, {"order", "sp_major"}, {"list", rankList}}},
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

// tiny with 8 heads of 16 (hidden 32, ffn 128): q/k/v, fc1, to_out, fc2 and the AdaLN chunks split over up to 8
// tensor-parallel ranks.
inline h3::Config eightHeadConfig() {
  h3::Config c = h3::namedConfig("tiny");
  c.num_attention_heads = 8;
  c.attention_head_dim = 16;
  c.hidden_size = 32;
  c.ffn_dim = 128;
  c.time_embed_hidden_dim = 32;
  return c;
}

inline json modelPlan(const h3::Config &c, bool fuse = false, int tp = 1, int sp = 1) {
  PlanBuilder b;
  b.c = c;
  b.fuse = fuse;
  b.tp = tp;
  b.sp = sp;
  return b.build();
}

// modelPlan read through the plan reader (all its checks), as an executor gets it.
inline plan::Plan loadModelPlan(const h3::Config &c, bool fuse = false, int tp = 1, int sp = 1) {
  return plan::planFromJson(modelPlan(c, fuse, tp, sp), "/nonexistent", "test-plan.json");
}

// Re-hash after editing a plan (tests that tamper on purpose do not call this).
inline json rehash(json plan) {
  plan["plan_sha256"] = plan::computePlanSha256(plan);
  return plan;
}

// The ops array of a plan document (the forward function's).
inline json &opsOf(json &plan) { return plan["functions"]["forward"]["ops"]; }

} // namespace h3c::rt::testplans
