// The Diffusers <-> native (vLLM-Omni / raw release) tensor mapping, as byte ranges: no tensor is ever transposed,
// only renamed, split into row blocks (qkv_proj -> to_q/to_k/to_v) or re-stacked (fc1's halves swapped), so every
// target tensor is a concatenation of contiguous byte ranges of source tensors. Both directions are derived from one
// diffusers tensor list, which is checked first against the structure the config implies.
#include "h3c/models/checkpoint.h"

#include "h3c/support/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace h3c::h3 {

QkvLayout parseQkvLayout(const std::string &s) {
  if (s == "interleaved")
    return QkvLayout::Interleaved;
  if (s == "concat")
    return QkvLayout::Concat;
  fail("--qkv-layout", "expected interleaved or concat, got '{}'", s);
}

const char *qkvLayoutName(QkvLayout l) { return l == QkvLayout::Interleaved ? "interleaved" : "concat"; }
const char *formatName(CheckpointFormat f) { return f == CheckpointFormat::Diffusers ? "diffusers" : "native"; }

std::vector<float> ropeInvFreq(const Config &c) {
  // The reference's float32 steps: e = arange(0, 2f, 2) / (2f) (a correctly rounded float division), theta ** e, then
  // 1 / that, each rounded to float. pow is evaluated in double and rounded once, i.e. correctly rounded in practice.
  const int f = c.rope_freq_dim;
  std::vector<float> out(static_cast<size_t>(f));
  const float theta = float(c.rope_theta);
  for (int i = 0; i < f; ++i) {
    float e = float(2 * i) / float(2 * f);
    float p = float(std::pow(double(theta), double(e)));
    out[size_t(i)] = 1.0f / p;
  }
  return out;
}

namespace {

bool hasPrefix(const std::string &s, const char *p) { return s.rfind(p, 0) == 0; }

// Top-level renames (diffusers prefix -> native prefix), checked in order.
const std::pair<const char *, const char *> kTopRenames[] = {
    {"proj_in.", "video_patch_proj."},
    {"audio_proj_in.", "audio_patch_proj."},
    {"context_embedder.", "condition_proj."},
    {"time_embedder.linear_1.", "time_embedder.proj_in."},
    {"time_embedder.linear_2.", "time_embedder.proj_out."},
    {"norm_out.norm.", "final_layer.norm."},
    {"norm_out.linear.", "final_layer.adaln_proj.linear."},
    {"proj_out.", "final_layer.video_out."},
    {"audio_proj_out.", "final_layer.audio_out."},
};

// Renames inside a block (diffusers suffix -> native suffix); to_q/k/v and ff.net.0.proj are handled separately.
const std::pair<const char *, const char *> kBlockRenames[] = {
    {"norm1.weight", "norm1.weight"},
    {"norm2.weight", "norm2.weight"},
    {"attn.norm_q.weight", "attn.q_norm.weight"},
    {"attn.norm_k.weight", "attn.k_norm.weight"},
    {"attn.to_out.0.weight", "attn.out_proj.weight"},
    {"ff.net.2.weight", "mlp.fc2.weight"},
    {"adaln_proj.linear.weight", "adaln_proj.linear.weight"},
    {"adaln_proj.linear.bias", "adaln_proj.linear.bias"},
};

// Splits "transformer_blocks.7.attn.to_q.weight" into the diffusers block prefix, the matching native prefix and the
// suffix. Returns false for top-level names.
bool splitBlock(const std::string &name, std::string &dPrefix, std::string &nPrefix, std::string &suffix) {
  using P = std::pair<const char *, const char *>;
  for (auto [d, n] : {P{"transformer_blocks.", "blocks."}, P{"token_refiner.refiner_blocks.", "token_refiner.blocks."}}) {
    if (!hasPrefix(name, d))
      continue;
    size_t p = std::string(d).size();
    size_t dot = name.find('.', p);
    if (dot == std::string::npos || dot == p)
      return false;
    std::string idx = name.substr(p, dot - p);
    dPrefix = std::string(d) + idx + ".";
    nPrefix = std::string(n) + idx + ".";
    suffix = name.substr(dot + 1);
    return true;
  }
  return false;
}

// The diffusers list must be exactly the set of tensors the config implies, with the config's shapes; dtypes are the
// list's own (a fingerprint's mixed-precision map), but q/k/v of one block must agree.
std::map<std::string, const TensorSpec *> checkDiffusersList(const std::vector<TensorSpec> &list, const Config &c) {
  std::map<std::string, const TensorSpec *> byName;
  for (const auto &t : list)
    if (!byName.emplace(t.name, &t).second)
      fail(t.name, "duplicate tensor in the tensor list");
  std::set<std::string> expectedNames;
  for (const auto &e : diffusersTensors(c)) {
    expectedNames.insert(e.name);
    auto it = byName.find(e.name);
    if (it == byName.end()) {
      if (e.name.find(".attn.to_q.") != std::string::npos || e.name.find(".attn.to_k.") != std::string::npos ||
          e.name.find(".attn.to_v.") != std::string::npos)
        fail(e.name, "incomplete q/k/v set: this tensor is missing from the tensor list");
      fail(e.name, "missing from the tensor list");
    }
    if (it->second->shape != e.shape)
      fail(e.name, "shape {} disagrees with the config's {}", shapeText(it->second->shape), shapeText(e.shape));
    if (dtypeSize(it->second->dtype) == 0)
      fail(e.name, "unsupported dtype");
  }
  for (const auto &t : list)
    if (!expectedNames.count(t.name))
      fail(t.name, "unmapped tensor: not a tensor of this config's MiniMax-H3 model");
  return byName;
}

} // namespace

bool isNativeName(const std::string &n) {
  if (n == kRopeInvFreq)
    return true;
  for (const char *p : {"blocks.", "token_refiner.blocks.", "video_patch_proj.", "audio_patch_proj.", "condition_proj.",
                        "time_embedder.proj_in.", "time_embedder.proj_out.", "final_layer."})
    if (hasPrefix(n, p))
      return true;
  return false;
}

std::vector<MappedTensor> nativeFromDiffusers(const std::vector<TensorSpec> &diffusers, const Config &c,
                                              QkvLayout layout) {
  auto byName = checkDiffusersList(diffusers, c);
  const uint64_t H = uint64_t(c.hidden_size), D = uint64_t(c.attention_head_dim), F = uint64_t(c.ffn_dim);
  const uint64_t heads = uint64_t(c.num_attention_heads);
  std::vector<MappedTensor> out;
  for (const auto &t : diffusers) {
    const uint64_t es = dtypeSize(t.dtype);
    std::string dp, np, suffix;
    if (!splitBlock(t.name, dp, np, suffix)) {
      MappedTensor m{t, {{t.name, 0, uint64_t(t.numel()) * es}}};
      for (auto [d, n] : kTopRenames)
        if (hasPrefix(t.name, d)) {
          m.spec.name = std::string(n) + t.name.substr(std::string(d).size());
          break;
        }
      out.push_back(std::move(m));  // token_refiner.final_norm.weight keeps its name
      continue;
    }
    if (suffix == "attn.to_k.weight" || suffix == "attn.to_v.weight")
      continue;  // emitted with to_q
    if (suffix == "attn.to_q.weight") {
      const TensorSpec *k = byName.at(dp + "attn.to_k.weight"), *v = byName.at(dp + "attn.to_v.weight");
      if (k->dtype != t.dtype || v->dtype != t.dtype)
        fail(dp + "attn", "q/k/v dtypes differ ({}, {}, {}): they cannot share one qkv_proj", dtypeName(t.dtype),
             dtypeName(k->dtype), dtypeName(v->dtype));
      MappedTensor m{t, {}};
      m.spec.name = np + "attn.qkv_proj.weight";
      m.spec.shape = {3 * int64_t(c.innerDim()), int64_t(H)};
      const uint64_t head = D * H * es, all = heads * head;
      if (layout == QkvLayout::Interleaved) {
        for (uint64_t h = 0; h < heads; ++h)
          for (const std::string &src : {t.name, k->name, v->name})
            m.pieces.push_back({src, h * head, head});
      } else {
        for (const std::string &src : {t.name, k->name, v->name})
          m.pieces.push_back({src, 0, all});
      }
      out.push_back(std::move(m));
      continue;
    }
    if (suffix == "ff.net.0.proj.weight") {
      // diffusers [value; gate] -> native [gate; value]
      const uint64_t half = F * H * es;
      MappedTensor m{t, {{t.name, half, half}, {t.name, 0, half}}};
      m.spec.name = np + "mlp.fc1.weight";
      out.push_back(std::move(m));
      continue;
    }
    bool renamed = false;
    for (auto [d, n] : kBlockRenames)
      if (suffix == d) {
        MappedTensor m{t, {{t.name, 0, uint64_t(t.numel()) * es}}};
        m.spec.name = np + n;
        out.push_back(std::move(m));
        renamed = true;
        break;
      }
    if (!renamed)
      fail(t.name, "unmapped tensor: no native name");
  }
  TensorSpec rope{kRopeInvFreq, {int64_t(c.rope_freq_dim)}, DType::F32, TensorSpec::Init::Zeros};
  out.push_back(MappedTensor{rope, {}});
  return out;
}

std::vector<TensorSpec> nativeTensors(const std::vector<TensorSpec> &diffusers, const Config &c) {
  std::vector<TensorSpec> out;
  for (auto &m : nativeFromDiffusers(diffusers, c, QkvLayout::Interleaved))
    out.push_back(std::move(m.spec));
  return out;
}

std::vector<MappedTensor> diffusersFromNative(const std::vector<TensorSpec> &diffusers, const Config &c,
                                              QkvLayout layout) {
  // Invert the forward map: each native tensor's pieces say which byte range of which diffusers tensor lands where.
  std::vector<MappedTensor> forward = nativeFromDiffusers(diffusers, c, layout);
  std::map<std::string, std::vector<std::pair<uint64_t, SourcePiece>>> parts;  // diffusers name -> (its offset, piece)
  for (const auto &m : forward) {
    uint64_t at = 0;  // offset inside the native tensor
    for (const auto &p : m.pieces) {
      parts[p.source].push_back({p.offset, SourcePiece{m.spec.name, at, p.length}});
      at += p.length;
    }
  }
  std::vector<MappedTensor> out;
  for (const auto &t : diffusers) {
    auto &v = parts.at(t.name);
    std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    MappedTensor m{t, {}};
    uint64_t expect = 0;
    for (const auto &[off, piece] : v) {
      if (off != expect)  // cannot happen for a consistent forward map; guards the invariant
        fail(t.name, "internal error: native pieces do not tile the tensor");
      auto &last = m.pieces;
      if (!last.empty() && last.back().source == piece.source &&
          last.back().offset + last.back().length == piece.offset)
        last.back().length += piece.length;  // contiguous in the source: one range (zero-copy when it is the only one)
      else
        m.pieces.push_back(piece);
      expect += piece.length;
    }
    if (expect != uint64_t(t.numel()) * dtypeSize(t.dtype))
      fail(t.name, "internal error: native pieces cover {} bytes", expect);
    out.push_back(std::move(m));
  }
  return out;
}

} // namespace h3c::h3
