// Derivation of the architecture fingerprint from a config: the tensor list, the precision map, the sampler and the
// node table of docs/contract.md section 2, wired the way diffusers' MiniMaxH3Transformer3DModel.forward computes.
//
// Every node carries: id, kind, block ("" at top level), inputs (value names, in operand order), outputs (the first
// named by the id itself or "id:port"), output_rows / output_dtypes (one per output), the diffusers tensors it reads,
// the reductions it performs ({kind, extent}: extent an integer as text or a row domain) and kind-specific attrs:
//
// | kind              | attrs                                                                                     |
// |-------------------|-------------------------------------------------------------------------------------------|
// | rope_table        | rope_freq_dim, theta, rotary_dim, head_dim                                                |
// | linear            | in_features, out_features, bias, weight_dtype, in_dtype, out_dtype                        |
// | adaln_table       | in_features, out_features, bias, activation ("silu", applied in in_dtype, then cast to    |
// |                   | weight_dtype), weight_dtype, in_dtype, out_dtype, rows_per_timestep (3 blocks, 1 norm_out),|
// |                   | chunks (total chunks of chunk_dim: 18 blocks, 2 norm_out), chunks_per_row (6 | 2), chunk_dim|
// | rms_norm          | dim, eps, weight                                                                          |
// | norm_modulate     | dim, eps, shift_chunk, scale_chunk, num_chunks, row_index ("adaln": row = ts*3 + tag,     |
// |                   | "timestep": row = ts), out_dtype                                                          |
// | qk_norm           | heads, head_dim, eps                                                                      |
// | rope              | heads, head_dim, rotary_dim                                                               |
// | attention         | heads, head_dim, domain ("S" | "Nt"), scale (head_dim^-0.5)                               |
// | swiglu            | ffn_dim (the output width; the input is [value; gate], 2*ffn_dim)                         |
// | silu              | dim                                                                                       |
// | residual          | dim                                                                                       |
// | gate_residual     | dim, chunk, num_chunks, row_index ("adaln")                                               |
// | timestep_sinusoid | dim, flip_sin_to_cos, shift, max_period                                                   |
// | pack              | dim, in_domains ([Nt, Nv, Na]), out_domain (S)                                            |
// | unpack            | in_domain (S), out_domains ([Nv, Na]), dims ([video patch dim, audio channels])          |
//
// Wiring choices that are not obvious from the contract's table:
// - rope reads @position_ids and the three index inputs: its rows are produced in canonical order (section 1), which
//   needs the permutation; it comes first, as in diffusers, so it cannot read pack:positions.
// - pack reads the refined text (token_refiner.final_norm), proj_in, audio_proj_in, the three index inputs (text,
//   video, audio) and the three per-row metadata inputs, which it gathers into pack:positions, pack:tags and
//   pack:ts_index.
// - block norm_modulate / gate_residual nodes read the stream value, the block's adaln_proj table and pack:ts_index +
//   pack:tags (row = ts*3 + tag); norm_out.norm reads pack:ts_index only (row = ts).
#include "h3c/models/fingerprint.h"

#include "h3c/support/error.h"

#include <cmath>

namespace h3c::h3 {

const std::map<std::string, std::vector<std::pair<std::string, std::string>>> &nodeAttrSchema() {
  static const std::map<std::string, std::vector<std::pair<std::string, std::string>>> s = {
      {"rope_table", {{"rope_freq_dim", "int"}, {"theta", "number"}, {"rotary_dim", "int"}, {"head_dim", "int"}}},
      {"linear",
       {{"in_features", "int"},
        {"out_features", "int"},
        {"bias", "bool"},
        {"weight_dtype", "dtype"},
        {"in_dtype", "dtype"},
        {"out_dtype", "dtype"}}},
      {"adaln_table",
       {{"in_features", "int"},
        {"out_features", "int"},
        {"bias", "bool"},
        {"activation", "enum:silu"},
        {"weight_dtype", "dtype"},
        {"in_dtype", "dtype"},
        {"out_dtype", "dtype"},
        {"rows_per_timestep", "int"},
        {"chunks", "int"},
        {"chunks_per_row", "int"},
        {"chunk_dim", "int"}}},
      {"rms_norm", {{"dim", "int"}, {"eps", "number"}, {"weight", "bool"}}},
      {"norm_modulate",
       {{"dim", "int"},
        {"eps", "number"},
        {"shift_chunk", "int"},
        {"scale_chunk", "int"},
        {"num_chunks", "int"},
        {"row_index", "enum:adaln|timestep"},
        {"out_dtype", "dtype"}}},
      {"qk_norm", {{"heads", "int"}, {"head_dim", "int"}, {"eps", "number"}}},
      {"rope", {{"heads", "int"}, {"head_dim", "int"}, {"rotary_dim", "int"}}},
      {"attention", {{"heads", "int"}, {"head_dim", "int"}, {"domain", "enum:S|Nt"}, {"scale", "number"}}},
      {"swiglu", {{"ffn_dim", "int"}}},
      {"silu", {{"dim", "int"}}},
      {"residual", {{"dim", "int"}}},
      {"gate_residual", {{"dim", "int"}, {"chunk", "int"}, {"num_chunks", "int"}, {"row_index", "enum:adaln"}}},
      {"timestep_sinusoid",
       {{"dim", "int"}, {"flip_sin_to_cos", "bool"}, {"shift", "number"}, {"max_period", "number"}}},
      {"pack", {{"dim", "int"}, {"in_domains", "domains"}, {"out_domain", "domain"}}},
      {"unpack", {{"in_domain", "domain"}, {"out_domains", "domains"}, {"dims", "ints"}}},
  };
  return s;
}

const std::vector<std::string> &f32Modules() {
  static const std::vector<std::string> m = {"proj_in",  "audio_proj_in",  "time_embedder",
                                             "proj_out", "audio_proj_out", "rope"};
  return m;
}

std::vector<GraphInput> graphInputs(const Config &c) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return {
      {"@hidden_states", DType::F32, {"B", "Nv", n(c.videoPatchDim())}},
      {"@audio_hidden_states", DType::F32, {"B", "Na", n(c.audio_in_channels)}},
      {"@encoder_hidden_states", DType::BF16, {"B", "Nt", n(c.text_dim)}},
      {"@timestep", DType::F32, {"T"}},
      {"@timestep_indices", DType::I64, {"S"}},
      {"@token_tags", DType::I64, {"S"}},
      {"@position_ids", DType::F32, {"S", "3"}},  // diffusers casts any real dtype to float32 first
      {"@video_indices", DType::I64, {"Nv"}},
      {"@audio_indices", DType::I64, {"Na"}},
      {"@text_indices", DType::I64, {"Nt"}},
  };
}

const Node *Fingerprint::findNode(const std::string &id) const {
  for (const auto &n : nodes)
    if (n.id == id)
      return &n;
  return nullptr;
}

size_t Fingerprint::blockNodeCount() const {
  size_t k = 0;
  for (const auto &n : nodes)
    k += !n.block.empty();
  return k;
}

namespace {

using nlohmann::json;

std::string dt(DType t) { return std::string(dtypeName(t)); }

// Builds the node table in contract order. `stream` tracks the value that carries the residual stream.
class GraphBuilder {
public:
  explicit GraphBuilder(const Config &c) : c_(c) {}

  std::vector<Node> build() {
    const int64_t H = c_.hidden_size, Dh = c_.attention_head_dim;
    const int64_t P = c_.videoPatchDim(), A = c_.audio_in_channels;

    add("", "rope", "rope_table", {"@position_ids", "@text_indices", "@video_indices", "@audio_indices"},
        {{"rope:cos", "S", DType::F32}, {"rope:sin", "S", DType::F32}}, {}, {},
        {{"rope_freq_dim", c_.rope_freq_dim},
         {"theta", c_.rope_theta},
         {"rotary_dim", c_.rotaryDim()},
         {"head_dim", Dh}});
    linear("", "proj_in", "@hidden_states", "Nv", P, H, true);
    linear("", "audio_proj_in", "@audio_hidden_states", "Na", A, H, true);
    linear("", "context_embedder", "@encoder_hidden_states", "Nt", c_.text_dim, H, true);

    std::string x = "context_embedder";
    for (int b = 0; b < c_.num_refiner_layers; ++b)
      x = refinerBlock("token_refiner.refiner_blocks." + std::to_string(b), x);
    rmsNorm("", "token_refiner.final_norm", x, "Nt", c_.final_norm_eps);

    add("", "pack", "pack",
        {"token_refiner.final_norm", "proj_in", "audio_proj_in", "@text_indices", "@video_indices", "@audio_indices",
         "@position_ids", "@token_tags", "@timestep_indices"},
        {{"pack", "S", DType::BF16},
         {"pack:positions", "S", DType::F32},
         {"pack:tags", "S", DType::I64},
         {"pack:ts_index", "S", DType::I64}},
        {}, {}, {{"dim", H}, {"in_domains", {"Nt", "Nv", "Na"}}, {"out_domain", "S"}});

    add("", "time_proj", "timestep_sinusoid", {"@timestep"}, {{"time_proj", "T", DType::F32}}, {}, {},
        {{"dim", c_.freq_dim}, {"flip_sin_to_cos", true}, {"shift", 0.0}, {"max_period", 10000.0}});
    linear("", "time_embedder.linear_1", "time_proj", "T", c_.freq_dim, c_.time_embed_hidden_dim, true);
    add("", "time_embedder.act", "silu", {"time_embedder.linear_1"}, {{"time_embedder.act", "T", DType::F32}}, {},
        {}, {{"dim", c_.time_embed_hidden_dim}});
    linear("", "time_embedder.linear_2", "time_embedder.act", "T", c_.time_embed_hidden_dim, c_.time_embed_dim,
           true);

    x = "pack";
    for (int b = 0; b < c_.num_layers; ++b)
      x = transformerBlock("transformer_blocks." + std::to_string(b), x);

    adalnTable("", "norm_out.linear", "norm_out.linear", 1, 2);
    add("", "norm_out.norm", "norm_modulate", {x, "norm_out.linear", "pack:ts_index"},
        {{"norm_out.norm", "S", DType::F32}}, {"norm_out.norm.weight"}, {{"sum_squares", std::to_string(H)}},
        {{"dim", H},
         {"eps", c_.final_norm_eps},
         {"shift_chunk", 0},
         {"scale_chunk", 1},
         {"num_chunks", 2},
         {"row_index", "timestep"},
         {"out_dtype", dt(DType::F32)}});
    linear("", "proj_out", "norm_out.norm", "S", H, P, true);
    linear("", "audio_proj_out", "norm_out.norm", "S", H, A, true);
    add("", "unpack", "unpack", {"proj_out", "audio_proj_out"},
        {{"unpack:sample", "Nv", DType::F32}, {"unpack:audio_sample", "Na", DType::F32}}, {}, {},
        {{"in_domain", "S"}, {"out_domains", {"Nv", "Na"}}, {"dims", {P, A}}});
    return std::move(nodes_);
  }

private:
  struct Out {
    std::string name, rows;
    DType dtype;
  };

  void add(const std::string &block, const std::string &id, const std::string &kind, std::vector<std::string> in,
           std::vector<Out> outs, std::vector<std::string> tensors, std::vector<std::pair<std::string, std::string>> red,
           json attrs) {
    Node n;
    n.id = id;
    n.kind = kind;
    n.block = block;
    n.inputs = std::move(in);
    for (auto &o : outs) {
      n.outputs.push_back(o.name);
      n.outputRows.push_back(o.rows);
      n.outputDtypes.push_back(o.dtype);
    }
    n.tensors = std::move(tensors);
    for (auto &r : red)
      n.reductions.push_back(Reduction{r.first, r.second});
    n.attrs = std::move(attrs);
    nodes_.push_back(std::move(n));
  }

  // A linear reading `in`: dtypes follow the module's storage dtype (diffusers casts the input to the weight dtype;
  // F32 modules produce F32, BF16 ones BF16).
  void linear(const std::string &block, const std::string &id, const std::string &in, const std::string &rows,
              int64_t k, int64_t n, bool bias) {
    DType w = isF32Module(id + ".weight") ? DType::F32 : DType::BF16;
    std::vector<std::string> t = {id + ".weight"};
    if (bias)
      t.push_back(id + ".bias");
    add(block, id, "linear", {in}, {{id, rows, w}}, t, {{"dot", std::to_string(k)}},
        {{"in_features", k},
         {"out_features", n},
         {"bias", bias},
         {"weight_dtype", dt(w)},
         {"in_dtype", dt(w)},
         {"out_dtype", dt(w)}});
  }

  void rmsNorm(const std::string &block, const std::string &id, const std::string &in, const std::string &rows,
               double eps) {
    add(block, id, "rms_norm", {in}, {{id, rows, DType::BF16}}, {id + ".weight"},
        {{"sum_squares", std::to_string(c_.hidden_size)}}, {{"dim", c_.hidden_size}, {"eps", eps}, {"weight", true}});
  }

  // silu(temb) (F32) -> cast to BF16 -> linear; rows_per_timestep rows of chunks_per_row chunks per timestep.
  void adalnTable(const std::string &block, const std::string &id, const std::string &tensorPrefix,
                  int rowsPerTimestep, int chunksPerRow) {
    const int64_t H = c_.hidden_size, E = c_.time_embed_dim;
    const int chunks = rowsPerTimestep * chunksPerRow;
    add(block, id, "adaln_table", {"time_embedder.linear_2"}, {{id, rowsPerTimestep == 3 ? "T3" : "T", DType::BF16}},
        {tensorPrefix + ".weight", tensorPrefix + ".bias"}, {{"dot", std::to_string(E)}},
        {{"in_features", E},
         {"out_features", chunks * H},
         {"bias", true},
         {"activation", "silu"},
         {"weight_dtype", dt(DType::BF16)},
         {"in_dtype", dt(DType::F32)},
         {"out_dtype", dt(DType::BF16)},
         {"rows_per_timestep", rowsPerTimestep},
         {"chunks", chunks},
         {"chunks_per_row", chunksPerRow},
         {"chunk_dim", H}});
  }

  // to_q/k/v, norm_q/k, [rope_q/k], attention, to_out.0; returns the to_out value.
  std::string attention(const std::string &p, const std::string &in, const std::string &rows, bool rope) {
    const int64_t H = c_.hidden_size, I = c_.innerDim(), Dh = c_.attention_head_dim, heads = c_.num_attention_heads;
    const std::string a = p + ".attn.";
    for (const char *w : {"to_q", "to_k", "to_v"})
      linear(p, a + w, in, rows, H, I, false);
    for (const char *w : {"norm_q", "norm_k"}) {
      std::string src = a + (w[5] == 'q' ? "to_q" : "to_k");
      add(p, a + w, "qk_norm", {src}, {{a + w, rows, DType::BF16}}, {a + w + ".weight"},
          {{"sum_squares", std::to_string(Dh)}}, {{"heads", heads}, {"head_dim", Dh}, {"eps", c_.qk_norm_eps}});
    }
    std::string q = a + "norm_q", k = a + "norm_k";
    if (rope) {
      for (const char *w : {"rope_q", "rope_k"}) {
        std::string src = a + (w[5] == 'q' ? "norm_q" : "norm_k");
        add(p, a + w, "rope", {src, "rope:cos", "rope:sin"}, {{a + w, rows, DType::BF16}}, {}, {},
            {{"heads", heads}, {"head_dim", Dh}, {"rotary_dim", c_.rotaryDim()}});
      }
      q = a + "rope_q";
      k = a + "rope_k";
    }
    add(p, a + "attention", "attention", {q, k, a + "to_v"}, {{a + "attention", rows, DType::BF16}}, {},
        {{"dot_qk", std::to_string(Dh)}, {"softmax", rows}, {"dot_pv", rows}},
        {{"heads", heads}, {"head_dim", Dh}, {"domain", rows}, {"scale", 1.0 / std::sqrt(double(Dh))}});
    linear(p, a + "to_out.0", a + "attention", rows, I, H, false);
    return a + "to_out.0";
  }

  // ff.net.0.proj, ff.swiglu, ff.net.2; returns the ff.net.2 value.
  std::string feedForward(const std::string &p, const std::string &in, const std::string &rows) {
    const int64_t H = c_.hidden_size, F = c_.ffn_dim;
    linear(p, p + ".ff.net.0.proj", in, rows, H, 2 * F, false);
    add(p, p + ".ff.swiglu", "swiglu", {p + ".ff.net.0.proj"}, {{p + ".ff.swiglu", rows, DType::BF16}}, {}, {},
        {{"ffn_dim", F}});
    linear(p, p + ".ff.net.2", p + ".ff.swiglu", rows, F, H, false);
    return p + ".ff.net.2";
  }

  std::string refinerBlock(const std::string &p, const std::string &x) {
    const int64_t H = c_.hidden_size;
    rmsNorm(p, p + ".norm1", x, "Nt", c_.norm_eps);
    std::string attnOut = attention(p, p + ".norm1", "Nt", /*rope=*/false);
    add(p, p + ".residual_attn", "residual", {x, attnOut}, {{p + ".residual_attn", "Nt", DType::BF16}}, {}, {},
        {{"dim", H}});
    rmsNorm(p, p + ".norm2", p + ".residual_attn", "Nt", c_.norm_eps);
    std::string ffOut = feedForward(p, p + ".norm2", "Nt");
    add(p, p + ".residual_ff", "residual", {p + ".residual_attn", ffOut}, {{p + ".residual_ff", "Nt", DType::BF16}},
        {}, {}, {{"dim", H}});
    return p + ".residual_ff";
  }

  void normModulate(const std::string &p, const std::string &id, const std::string &x, int shift, int scale) {
    const int64_t H = c_.hidden_size;
    add(p, id, "norm_modulate", {x, p + ".adaln_proj", "pack:ts_index", "pack:tags"}, {{id, "S", DType::BF16}},
        {id + ".weight"}, {{"sum_squares", std::to_string(H)}},
        {{"dim", H},
         {"eps", c_.norm_eps},
         {"shift_chunk", shift},
         {"scale_chunk", scale},
         {"num_chunks", kBlockAdaChunks},
         {"row_index", "adaln"},
         {"out_dtype", dt(DType::BF16)}});
  }

  void gateResidual(const std::string &p, const std::string &id, const std::string &x, const std::string &y,
                    int chunk) {
    add(p, id, "gate_residual", {x, y, p + ".adaln_proj", "pack:ts_index", "pack:tags"}, {{id, "S", DType::BF16}},
        {}, {}, {{"dim", c_.hidden_size}, {"chunk", chunk}, {"num_chunks", kBlockAdaChunks}, {"row_index", "adaln"}});
  }

  std::string transformerBlock(const std::string &p, const std::string &x) {
    // The table's tensors are adaln_proj.linear.*; the node is named after the module (contract section 2).
    adalnTable(p, p + ".adaln_proj", p + ".adaln_proj.linear", kModalities, kBlockAdaChunks);
    normModulate(p, p + ".norm1", x, 0, 1);
    std::string attnOut = attention(p, p + ".norm1", "S", /*rope=*/true);
    gateResidual(p, p + ".gate_residual_attn", x, attnOut, 2);
    normModulate(p, p + ".norm2", p + ".gate_residual_attn", 3, 4);
    std::string ffOut = feedForward(p, p + ".norm2", "S");
    gateResidual(p, p + ".gate_residual_ff", p + ".gate_residual_attn", ffOut, 5);
    return p + ".gate_residual_ff";
  }

  const Config &c_;
  std::vector<Node> nodes_;
};

} // namespace

Fingerprint deriveFingerprint(const Config &c, const std::string &configName) {
  c.validate("config");
  Fingerprint f;
  f.config = c;
  f.configName = configName;
  f.tensors = diffusersTensors(c);
  f.nodes = GraphBuilder(c).build();
  return f;
}

nlohmann::json fingerprintToJson(const Fingerprint &f) {
  json tensors = json::array();
  for (const auto &t : f.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", dt(t.dtype)}});
  json inputs = json::array();
  for (const auto &g : graphInputs(f.config))
    inputs.push_back({{"name", g.name}, {"dtype", dt(g.dtype)}, {"shape", g.shape}});
  json nodes = json::array();
  for (const auto &n : f.nodes) {
    json red = json::array();
    for (const auto &r : n.reductions)
      red.push_back({{"kind", r.kind}, {"extent", r.extent}});
    json dtypes = json::array();
    for (auto d : n.outputDtypes)
      dtypes.push_back(dt(d));
    nodes.push_back({{"id", n.id},
                     {"kind", n.kind},
                     {"block", n.block},
                     {"inputs", n.inputs},
                     {"outputs", n.outputs},
                     {"output_rows", n.outputRows},
                     {"output_dtypes", dtypes},
                     {"tensors", n.tensors},
                     {"reductions", red},
                     {"attrs", n.attrs.is_null() ? json::object() : n.attrs}});
  }
  return json{{"schema", kFingerprintSchema},
              {"model",
               {{"repo", kPinnedRepo}, {"revision", kPinnedRevision}, {"class_name", "MiniMaxH3Transformer3DModel"}}},
              {"config_name", f.configName},
              {"config", configToJson(f.config)},
              {"precision", {{"default", "BF16"}, {"f32_modules", f32Modules()}}},
              {"sampler", {{"kind", "rectified_flow_euler"}, {"video_shift", f.videoShift}, {"audio_shift", f.audioShift}}},
              {"tensors", tensors},
              {"totals",
               {{"tensors", f.tensors.size()},
                {"parameters", f.parameters()},
                {"nodes", f.nodes.size()},
                {"block_nodes", f.blockNodeCount()},
                {"top_level_nodes", f.nodes.size() - f.blockNodeCount()}}},
              {"graph", {{"inputs", inputs}, {"outputs", {{"sample", "unpack:sample"}, {"audio_sample", "unpack:audio_sample"}}}}},
              {"nodes", nodes}};
}

std::string pinnedFingerprintPath() { return H3C_FINGERPRINT_PATH; }

} // namespace h3c::h3
