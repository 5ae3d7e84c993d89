// The op-kind tables of ops.h: names, operand positions, attrs and orders (docs/contract.md sections 3-6).
#include "h3c/plan/ops.h"

#include "h3c/plan/plan.h"

#include <algorithm>
#include <utility>

namespace h3c::plan {

namespace {

template <typename E, size_t N> const char *nameOf(const std::pair<E, const char *> (&table)[N], E v) {
  for (const auto &[e, n] : table)
    if (e == v) return n;
  return "?";
}
template <typename E, size_t N> bool parseFrom(const std::pair<E, const char *> (&table)[N], const std::string &s,
                                               E &out) {
  for (const auto &[e, n] : table)
    if (s == n) {
      out = e;
      return true;
    }
  return false;
}

const std::pair<OpKind, const char *> kOpKinds[] = {
    {OpKind::RopeTable, "rope_table"},   {OpKind::TimestepSinusoid, "timestep_sinusoid"},
    {OpKind::Linear, "linear"},          {OpKind::AdalnTable, "adaln_table"},
    {OpKind::QkvLinear, "qkv_linear"},   {OpKind::TimeEmbed, "time_embed"},
    {OpKind::RmsNorm, "rms_norm"},       {OpKind::NormModulate, "norm_modulate"},
    {OpKind::QkNorm, "qk_norm"},         {OpKind::Rope, "rope"},
    {OpKind::QkNormRope, "qk_norm_rope"}, {OpKind::Attention, "attention"},
    {OpKind::Swiglu, "swiglu"},          {OpKind::Silu, "silu"},
    {OpKind::Residual, "residual"},      {OpKind::GateResidual, "gate_residual"},
    {OpKind::Pack, "pack"},              {OpKind::Unpack, "unpack"},
    {OpKind::AllGather, "all_gather"},   {OpKind::Split, "split"},
    {OpKind::LoraDown, "lora_down"},
    {OpKind::GradAdd, "grad_add"},       {OpKind::LinearGradX, "linear_grad_x"},
    {OpKind::LinearGradW, "linear_grad_w"}, {OpKind::SwigluGrad, "swiglu_grad"},
    {OpKind::RmsNormGrad, "rms_norm_grad"}, {OpKind::NormModulateGrad, "norm_modulate_grad"},
    {OpKind::GateResidualGrad, "gate_residual_grad"}, {OpKind::RopeGrad, "rope_grad"},
    {OpKind::AttentionGrad, "attention_grad"}, {OpKind::SiluGrad, "silu_grad"},
    {OpKind::AdalnTableGrad, "adaln_table_grad"}, {OpKind::PackGrad, "pack_grad"},
    {OpKind::UnpackGrad, "unpack_grad"}, {OpKind::GradRound, "grad_round"},
};
const std::pair<Epilogue, const char *> kEpilogues[] = {{Epilogue::None, "none"},
                                                         {Epilogue::Residual, "residual"},
                                                         {Epilogue::GateResidual, "gate_residual"},
                                                         {Epilogue::Swiglu, "swiglu"},
                                                         {Epilogue::QkNormRope, "qk_norm_rope"}};
const std::pair<RowIndex, const char *> kRowIndices[] = {{RowIndex::Adaln, "adaln"}, {RowIndex::Timestep, "timestep"}};
const std::pair<ShardKind, const char *> kShardKinds[] = {{ShardKind::Replicated, "replicated"},
                                                           {ShardKind::Column, "column"}};
const std::pair<Axis, const char *> kAxes[] = {{Axis::Rows, "rows"}, {Axis::Cols, "cols"}};
const std::pair<OrderKind, const char *> kOrderKinds[] = {
    {OrderKind::None, "none"}, {OrderKind::KChunks, "k_chunks"}, {OrderKind::LaneTree, "lane_tree"},
    {OrderKind::Flash, "flash"}, {OrderKind::RowUnits, "row_units"}};

} // namespace

const char *opKindName(OpKind k) { return nameOf(kOpKinds, k); }
bool parseOpKind(const std::string &s, OpKind &out) { return parseFrom(kOpKinds, s, out); }
const std::vector<OpKind> &allOpKinds() {
  static const std::vector<OpKind> v = [] {
    std::vector<OpKind> r;
    for (const auto &e : kOpKinds) r.push_back(e.first);
    return r;
  }();
  return v;
}
const char *epilogueName(Epilogue e) { return nameOf(kEpilogues, e); }
bool parseEpilogue(const std::string &s, Epilogue &out) { return parseFrom(kEpilogues, s, out); }
const char *rowIndexName(RowIndex r) { return nameOf(kRowIndices, r); }
bool parseRowIndex(const std::string &s, RowIndex &out) { return parseFrom(kRowIndices, s, out); }
int64_t rowsPerTimestep(RowIndex r) { return r == RowIndex::Adaln ? 3 : 1; }
const char *shardKindName(ShardKind k) { return nameOf(kShardKinds, k); }
bool parseShardKind(const std::string &s, ShardKind &out) { return parseFrom(kShardKinds, s, out); }
const char *axisName(Axis a) { return nameOf(kAxes, a); }
bool parseAxis(const std::string &s, Axis &out) { return parseFrom(kAxes, s, out); }
const char *orderKindName(OrderKind k) { return nameOf(kOrderKinds, k); }
bool parseOrderKind(const std::string &s, OrderKind &out) { return parseFrom(kOrderKinds, s, out); }

OrderKind requiredOrder(OpKind k) {
  switch (k) {
  case OpKind::Linear:
  case OpKind::AdalnTable:
  case OpKind::QkvLinear:
  case OpKind::TimeEmbed:
  case OpKind::LoraDown:
  case OpKind::LinearGradX:
    return OrderKind::KChunks;
  case OpKind::LinearGradW:
  case OpKind::RmsNormGrad:
  case OpKind::NormModulateGrad:
  case OpKind::GateResidualGrad:
  case OpKind::AttentionGrad:
  case OpKind::AdalnTableGrad:
    return OrderKind::RowUnits;
  case OpKind::RmsNorm:
  case OpKind::NormModulate:
  case OpKind::QkNorm:
  case OpKind::QkNormRope:
    return OrderKind::LaneTree;
  case OpKind::Attention:
    return OrderKind::Flash;
  default:
    return OrderKind::None;
  }
}

bool runsOnHost(OpKind k) { return k == OpKind::RopeTable || k == OpKind::TimestepSinusoid; }

bool isLayoutOp(OpKind k) { return k == OpKind::AllGather || k == OpKind::Split; }

bool splitsWeights(OpKind k) { return k == OpKind::Linear || k == OpKind::QkvLinear || k == OpKind::AdalnTable; }

bool isGradOp(OpKind k) { return k >= OpKind::GradAdd; }

bool emitsWeightGrads(OpKind k) {
  return k == OpKind::LinearGradW || k == OpKind::RmsNormGrad || k == OpKind::NormModulateGrad ||
         k == OpKind::AdalnTableGrad;
}

bool takesLora(OpKind k) { return k == OpKind::Linear || k == OpKind::QkvLinear; }

std::vector<size_t> hostOutputs(OpKind k) {
  if (k == OpKind::Pack) return {1, 2, 3};
  return {};
}

namespace {

// The operands a linear's epilogue appends after x.
void epilogueInputs(std::vector<std::string> &v, Epilogue e) {
  if (e == Epilogue::Residual) v.push_back("residual");
  if (e == Epilogue::GateResidual)
    for (const char *r : {"residual", "table", "ts_index", "tags"}) v.push_back(r);
}

// An op with an unmerged LoRA path (section 13) lists what the op without it lists (`list` of its attrs with lora_k
// 0), then `extra`.
template <typename List>
std::vector<std::string> withLora(OpKind k, const OpAttrs &a, List list, const char *extra) {
  OpAttrs base = a;
  base.loraK = 0;
  std::vector<std::string> v = list(k, base);
  v.push_back(extra);
  return v;
}

} // namespace

int64_t inputIndex(OpKind k, const OpAttrs &a, const std::string &role) {
  const std::vector<std::string> roles = inputRoles(k, a);
  const auto it = std::find(roles.begin(), roles.end(), role);
  return it == roles.end() ? -1 : int64_t(it - roles.begin());
}

std::vector<std::string> inputRoles(OpKind k, const OpAttrs &a) {
  if (takesLora(k) && a.loraK > 0) return withLora(k, a, inputRoles, "lora_t");
  switch (k) {
  case OpKind::RopeTable: return {"positions", "text_indices", "video_indices", "audio_indices"};
  case OpKind::TimestepSinusoid: return {"t"};
  case OpKind::Linear: {
    std::vector<std::string> v = {"x"};
    epilogueInputs(v, a.epilogue);
    return v;
  }
  case OpKind::AdalnTable: return {"temb"};
  case OpKind::QkvLinear:
    if (a.epilogue == Epilogue::QkNormRope && a.rotaryDim > 0) return {"x", "cos", "sin"};
    return {"x"};
  case OpKind::TimeEmbed: return {"sinusoid"};
  case OpKind::RmsNorm: return {"x"};
  case OpKind::NormModulate:
    if (a.rowIndex == RowIndex::Adaln) return {"x", "table", "ts_index", "tags"};
    return {"x", "table", "ts_index"};
  case OpKind::QkNorm: return {"x"};
  case OpKind::Rope: return {"x", "cos", "sin"};
  case OpKind::QkNormRope:
    if (a.rotaryDim > 0) return {"q", "k", "cos", "sin"};
    return {"q", "k"};
  case OpKind::Attention: return {"q", "k", "v"};
  case OpKind::Swiglu: return {"x"};
  case OpKind::Silu: return {"x"};
  case OpKind::Residual: return {"x", "y"};
  case OpKind::GateResidual: return {"x", "y", "table", "ts_index", "tags"};
  case OpKind::Pack:
    return {"text", "video", "audio", "text_indices", "video_indices", "audio_indices", "position_ids",
            "token_tags", "timestep_indices"};
  case OpKind::Unpack: return {"y_video", "y_audio"};
  case OpKind::AllGather: return {"part"};
  case OpKind::Split: return {"full"};
  case OpKind::LoraDown: return {"x"};
  case OpKind::GradAdd: return {"a", "b"};
  case OpKind::LinearGradX: {  // dx = residual + dX (h3-fuse-grad); lora_t: a LoRA down path's dX taken in
    std::vector<std::string> v = {"g"};
    if (a.epilogue == Epilogue::Residual) v.push_back("residual");
    if (a.loraK > 0) v.push_back("lora_t");
    if (a.epilogue == Epilogue::Swiglu) v.push_back("swiglu_x");  // swiglu_grad taken in: its x = [v | g]
    return v;
  }
  case OpKind::LinearGradW: return {"g", "x"};
  case OpKind::RmsNormGrad:
    if (a.rotaryDim > 0) return {"dy", "x", "cos", "sin"};  // a qk_norm's, with the rope_grad before it folded in
    return {"dy", "x"};
  case OpKind::SwigluGrad:
  case OpKind::SiluGrad: return {"dy", "x"};
  case OpKind::NormModulateGrad: {  // with the residual epilogue (h3-fuse-grad: dx = residual + dx) "residual" last
    std::vector<std::string> r = {"dy", "x", "table", "ts_index"};
    if (a.rowIndex == RowIndex::Adaln) r.push_back("tags");
    if (a.epilogue == Epilogue::Residual) r.push_back("residual");
    return r;
  }
  case OpKind::GateResidualGrad: {  // y only for the table's gradient (table_grad)
    std::vector<std::string> r = {"dz"};
    if (a.tableGrad) r.push_back("y");
    for (const char *k : {"table", "ts_index"}) r.push_back(k);
    if (a.rowIndex == RowIndex::Adaln) r.push_back("tags");
    return r;
  }
  case OpKind::RopeGrad: return {"dy", "cos", "sin"};
  case OpKind::AttentionGrad:
    if (a.lse) return {"q", "k", "v", "o", "do", "lse"};
    return {"q", "k", "v", "o", "do"};
  case OpKind::AdalnTableGrad: return {"dtable", "temb"};
  case OpKind::PackGrad: return {"dx"};
  case OpKind::UnpackGrad: return {"dsample", "daudio_sample"};
  case OpKind::GradRound: return {"g"};
  }
  return {};
}

std::vector<std::string> outputRoles(OpKind k, const OpAttrs &a) {
  switch (k) {
  case OpKind::RopeTable: return {"cos", "sin"};
  case OpKind::QkvLinear: return {"q", "k", "v"};
  case OpKind::QkNormRope: return {"q", "k"};
  case OpKind::Pack: return {"x", "positions", "tags", "ts_index"};
  case OpKind::Unpack: return {"sample", "audio_sample"};
  case OpKind::AllGather: return {"full"};
  case OpKind::Split: return {"part"};
  case OpKind::AdalnTable: return {"table"};
  case OpKind::TimeEmbed: return {"temb"};
  case OpKind::Residual:
  case OpKind::GateResidual: return {"z"};
  case OpKind::GradAdd: return {"c"};
  case OpKind::GradRound: return {"gb"};
  case OpKind::LinearGradW: return {};
  case OpKind::LinearGradX:
  case OpKind::SwigluGrad:
  case OpKind::RmsNormGrad:
  case OpKind::RopeGrad:
  case OpKind::SiluGrad: return {"dx"};
  case OpKind::NormModulateGrad:
    if (!a.tableGrad) return {"dx"};
    return {"dx", "dtable"};
  case OpKind::GateResidualGrad:
    if (!a.tableGrad) return {"dy"};
    return {"dy", "dtable"};
  case OpKind::AttentionGrad: return {"dq", "dk", "dv"};
  case OpKind::Attention:
    if (a.lse) return {"y", "lse"};
    return {"y"};
  case OpKind::AdalnTableGrad: return {"dtemb"};
  case OpKind::PackGrad: return {"dtext", "dvideo", "daudio"};
  case OpKind::UnpackGrad: return {"dvideo", "daudio"};
  case OpKind::Linear:
    if (a.swigluX) return {"y", "swiglu_x"};  // the linear's own output kept beside swiglu's (h3-fuse training=true)
    return {"y"};
  default: return {"y"};
  }
}

std::vector<std::string> attrKeys(OpKind k, const OpAttrs &a) {
  if (takesLora(k) && a.loraK > 0) return withLora(k, a, attrKeys, "lora_k");
  static const std::vector<std::string> none, ropeTable = {"rotary_dim", "theta"}, sinusoid = {"freq_dim"},
      linear = {"K", "N", "epilogue"}, linearGate = {"K", "N", "epilogue", "chunk", "num_chunks", "row_index"},
      adaln = {"K", "N", "num_chunks", "rows_per_timestep"}, qkv = {"K", "N", "heads", "head_dim"},
      qkvNormRope = {"K", "N", "heads", "head_dim", "epilogue", "eps", "rotary_dim"},
      timeEmbed = {"K", "N", "freq_dim", "hidden", "out_dim"}, rms = {"H", "eps"},
      normMod = {"H", "eps", "shift_chunk", "scale_chunk", "num_chunks", "row_index"},
      normModRes = {"H", "eps", "shift_chunk", "scale_chunk", "num_chunks", "row_index", "epilogue"},
      qkNorm = {"heads", "head_dim", "eps"}, rope = {"heads", "head_dim", "rotary_dim"},
      qkNormRope = {"heads", "head_dim", "eps", "rotary_dim"}, attention = {"heads", "head_dim", "domain", "scale"},
      attentionLse = {"heads", "head_dim", "domain", "scale", "lse"},
      swiglu = {"F", "cols"}, colsDtype = {"cols", "dtype"}, gateRes = {"H", "chunk", "num_chunks", "row_index"},
      pack = {"H"}, unpack = {"video_cols", "audio_cols"}, layoutRows = {"axis", "parts", "cols", "dtype"},
      layoutCols = {"axis", "parts", "cols", "dtype", "segments"}, loraDown = {"K", "N"}, cols = {"cols"},
      kn = {"K", "N"}, F = {"F"}, rmsGrad = {"cols", "group", "eps"}, rmsGradRope = {"cols", "group", "eps", "rotary_dim"},
      gateResGrad = {"H", "chunk", "num_chunks", "row_index"}, attentionGrad = {"heads", "head_dim", "kv_block"},
      attentionGradLse = {"heads", "head_dim", "kv_block", "lse"},
      adalnGrad = {"K", "N", "rows_per_timestep"}, H = {"H"};
  switch (k) {
  case OpKind::RopeTable: return ropeTable;
  case OpKind::TimestepSinusoid: return sinusoid;
  case OpKind::Linear:
    if (a.swigluX) return {"K", "N", "epilogue", "swiglu_x"};
    return a.epilogue == Epilogue::GateResidual ? linearGate : linear;
  case OpKind::AdalnTable: return adaln;
  case OpKind::QkvLinear: return a.epilogue == Epilogue::QkNormRope ? qkvNormRope : qkv;
  case OpKind::TimeEmbed: return timeEmbed;
  case OpKind::RmsNorm: return rms;
  case OpKind::NormModulate: return normMod;
  case OpKind::QkNorm: return qkNorm;
  case OpKind::Rope: return rope;
  case OpKind::QkNormRope: return qkNormRope;
  case OpKind::Attention: return a.lse ? attentionLse : attention;
  case OpKind::Swiglu: return swiglu;
  case OpKind::Silu:
  case OpKind::Residual: return colsDtype;
  case OpKind::GateResidual: return gateRes;
  case OpKind::Pack: return pack;
  case OpKind::Unpack: return unpack;
  case OpKind::AllGather:
  case OpKind::Split: return a.axis == Axis::Cols ? layoutCols : layoutRows;
  case OpKind::LoraDown: return loraDown;
  case OpKind::GradAdd:
  case OpKind::GradRound:
  case OpKind::SiluGrad: return cols;
  case OpKind::LinearGradX: {
    std::vector<std::string> v = a.epilogue != Epilogue::None ? linear : kn;  // (residual, or swiglu_grad's)
    if (a.loraK > 0) v.push_back("lora_k");  // (h3-fuse-grad: a LoRA down path's dX taken in)
    return v;
  }
  case OpKind::LinearGradW: return kn;
  case OpKind::SwigluGrad: return F;
  case OpKind::RmsNormGrad: return a.rotaryDim > 0 ? rmsGradRope : rmsGrad;
  case OpKind::NormModulateGrad:
  case OpKind::GateResidualGrad: {
    std::vector<std::string> v = k == OpKind::GateResidualGrad ? gateResGrad
                                 : a.epilogue == Epilogue::Residual ? normModRes : normMod;
    if (!a.tableGrad) v.push_back("table_grad");  // (no key: 1, plans before the key)
    return v;
  }
  case OpKind::RopeGrad: return rope;
  case OpKind::AttentionGrad: return a.lse ? attentionGradLse : attentionGrad;
  case OpKind::AdalnTableGrad: return adalnGrad;
  case OpKind::PackGrad: return H;
  case OpKind::UnpackGrad: return unpack;
  }
  return none;
}

} // namespace h3c::plan
