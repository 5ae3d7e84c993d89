// Requests: reading/writing diffusers forward arguments as safetensors, validation, canonical row order, and the
// synthetic requests `h3c request make` builds.
#include "h3c/runtime/request.h"

#include "h3c/support/error.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"
#include "h3c/support/synth_rng.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

namespace fs = std::filesystem;

namespace h3c::rt {

const std::vector<std::string> &requestTensorNames() {
  static const std::vector<std::string> k = {"hidden_states",    "audio_hidden_states", "encoder_hidden_states",
                                             "timestep",         "timestep_indices",    "token_tags",
                                             "position_ids",     "video_indices",       "audio_indices",
                                             "text_indices"};
  return k;
}

Request loadRequest(const fs::path &path) {
  st::File f(path);
  Request r;
  r.metadata = f.header().metadata;
  std::set<std::string> want(requestTensorNames().begin(), requestTensorNames().end());
  for (const auto &t : f.tensors()) {
    if (!want.count(t.name))
      fail(path.string(), "unexpected tensor '{}' (a request holds exactly: hidden_states, audio_hidden_states, "
                          "encoder_hidden_states, timestep, timestep_indices, token_tags, position_ids, "
                          "video_indices, audio_indices, text_indices)",
           t.name);
    Tensor x;
    x.dtype = t.dtype;
    x.shape = t.shape;
    const uint8_t *p = f.data(t);
    x.bytes.assign(p, p + t.nbytes());
    r.tensors[t.name] = std::move(x);
  }
  for (const auto &n : requestTensorNames())
    if (!r.tensors.count(n))
      fail(path.string(), "missing tensor '{}'", n);
  return r;
}

void writeRequest(const fs::path &path, const Request &r) {
  std::vector<st::TensorDecl> decls;
  for (const auto &[name, t] : r.tensors)
    decls.push_back({name, t.dtype, t.shape});
  st::Writer w(path, decls, r.metadata);
  for (const auto &info : w.order()) {
    const Tensor &t = r.tensors.at(info.name);
    w.write(info.name, t.bytes.data(), t.bytes.size());
  }
  w.commit();
}

int64_t CanonicalRequest::rows(const std::string &d) const {
  if (d == "S") return S;
  if (d == "Nt") return Nt;
  if (d == "Nv") return Nv;
  if (d == "Na") return Na;
  if (d == "T") return T;
  if (d == "T3") return 3 * T;
  if (d == "1") return 1;
  fail("plan", "unknown row domain '{}'", d);
}

namespace {

const Tensor &get(const Request &r, const std::string &name, const std::string &where) {
  auto it = r.tensors.find(name);
  if (it == r.tensors.end())
    fail(where, "missing tensor '{}'", name);
  return it->second;
}

void expectRank(const Tensor &t, size_t rank, const std::string &where) {
  if (t.shape.size() != rank)
    fail(where, "expected a rank-{} tensor, got shape {}", rank, t.shapeString());
}

void expectFloat(const Tensor &t, const std::string &where) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16)
    fail(where, "expected F32 or BF16, got {}", dtypeName(t.dtype));
}

void expectI64(const Tensor &t, const std::string &where) {
  if (t.dtype != DType::I64)
    fail(where, "expected I64, got {}", dtypeName(t.dtype));
}

// Element k of an I64 tensor whose dtype and size were checked.
int64_t readI64(const Tensor &t, int64_t k) {
  int64_t v;
  std::memcpy(&v, t.bytes.data() + size_t(k) * 8, 8);
  return v;
}

} // namespace

CanonicalRequest canonicalize(const Request &r, const h3::Config &c, const std::string &where, Activations activations) {
  for (const auto &[name, t] : r.tensors) {
    if (std::find(requestTensorNames().begin(), requestTensorNames().end(), name) == requestTensorNames().end())
      fail(where + ":" + name, "not a request tensor");
    if (t.bytes.size() != size_t(t.numel()) * dtypeSize(t.dtype))
      fail(where + ":" + name, "byte size does not match shape {}", t.shapeString());
  }
  auto at = [&](const std::string &n) { return where + ":" + n; };
  const Tensor &hs = get(r, "hidden_states", where), &ahs = get(r, "audio_hidden_states", where),
               &ehs = get(r, "encoder_hidden_states", where), &ts = get(r, "timestep", where),
               &tsi = get(r, "timestep_indices", where), &tags = get(r, "token_tags", where),
               &pos = get(r, "position_ids", where), &vi = get(r, "video_indices", where),
               &ai = get(r, "audio_indices", where), &ti = get(r, "text_indices", where);
  expectRank(hs, 3, at("hidden_states"));
  expectRank(ahs, 3, at("audio_hidden_states"));
  expectRank(ehs, 3, at("encoder_hidden_states"));
  expectFloat(hs, at("hidden_states"));
  expectFloat(ahs, at("audio_hidden_states"));
  expectFloat(ehs, at("encoder_hidden_states"));
  expectFloat(ts, at("timestep"));
  expectRank(ts, 1, at("timestep"));
  for (const char *n : {"timestep_indices", "token_tags", "video_indices", "audio_indices", "text_indices"}) {
    expectI64(get(r, n, where), at(n));
    expectRank(get(r, n, where), 1, at(n));
  }
  if (pos.dtype != DType::F64 && pos.dtype != DType::F32 && pos.dtype != DType::I64)
    fail(at("position_ids"), "expected F64, F32 or I64, got {}", dtypeName(pos.dtype));
  expectRank(pos, 2, at("position_ids"));

  CanonicalRequest q;
  q.B = hs.shape[0];
  if (q.B < 1)
    fail(at("hidden_states"), "batch must be >= 1, got shape {}", hs.shapeString());
  if (ahs.shape[0] != q.B || ehs.shape[0] != q.B)
    fail(where, "batch sizes disagree: hidden_states {}, audio_hidden_states {}, encoder_hidden_states {}",
         hs.shapeString(), ahs.shapeString(), ehs.shapeString());
  q.Nv = hs.shape[1];
  q.Na = ahs.shape[1];
  q.Nt = ehs.shape[1];
  if (hs.shape[2] != c.videoPatchDim())
    fail(at("hidden_states"), "expected {} channels (in_channels * prod(patch_size)), got shape {}",
         c.videoPatchDim(), hs.shapeString());
  if (ahs.shape[2] != c.audio_in_channels)
    fail(at("audio_hidden_states"), "expected {} channels (audio_in_channels), got shape {}", c.audio_in_channels,
         ahs.shapeString());
  if (ehs.shape[2] != c.text_dim)
    fail(at("encoder_hidden_states"), "expected {} channels (text_dim), got shape {}", c.text_dim,
         ehs.shapeString());
  q.S = q.Nt + q.Nv + q.Na;
  if (q.S < 1)
    fail(where, "the packed sequence is empty");
  if (vi.shape[0] != q.Nv)
    fail(at("video_indices"), "expected {} entries (rows of hidden_states), got shape {}", q.Nv, vi.shapeString());
  if (ai.shape[0] != q.Na)
    fail(at("audio_indices"), "expected {} entries (rows of audio_hidden_states), got shape {}", q.Na,
         ai.shapeString());
  if (ti.shape[0] != q.Nt)
    fail(at("text_indices"), "expected {} entries (rows of encoder_hidden_states), got shape {}", q.Nt,
         ti.shapeString());
  for (const char *n : {"timestep_indices", "token_tags"})
    if (get(r, n, where).shape[0] != q.S)
      fail(at(n), "expected S = {} entries (Nt {} + Nv {} + Na {}), got shape {}", q.S, q.Nt, q.Nv, q.Na,
           get(r, n, where).shapeString());
  if (pos.shape[0] != q.S || pos.shape[1] != 3)
    fail(at("position_ids"), "expected shape [{}, 3], got {}", q.S, pos.shapeString());
  q.T = ts.shape[0];
  if (q.T < 1)
    fail(at("timestep"), "at least one timestep is required");

  q.videoCols = hs.shape[2];
  q.audioCols = ahs.shape[2];
  q.textCols = ehs.shape[2];
  q.videoDtype = hs.dtype;
  q.audioDtype = ahs.dtype;
  q.textDtype = ehs.dtype;
  q.timestep = ts.toFloats();
  {
    // Distinct timesteps: each value against the first entry that held it (an ordered map, not all pairs: T is not
    // bounded by anything but the request). -0 and +0 are one value, as == says.
    std::map<float, int64_t> first;
    for (int64_t i = 0; i < q.T; ++i) {
      float t = q.timestep[size_t(i)];
      if (!std::isfinite(t) || t < 0.f || t > 1.f)
        fail(at("timestep") + "[" + std::to_string(i) + "]", "timesteps lie in [0, 1], got {}", t);
      auto [it, fresh] = first.emplace(t, i);
      if (!fresh)
        fail(at("timestep") + "[" + std::to_string(i) + "]", "timesteps must be distinct; {} repeats entry {}", t,
             it->second);
    }
  }

  // The index tensors must partition [0, S); canonical row c = text rows, video rows, audio rows in tensor order.
  // One pass over each tensor, O(S), no allocation per row; the place of an error is spelled only when there is one.
  const size_t S = size_t(q.S);
  std::vector<int64_t> owner(S, -1);
  std::vector<uint8_t> canonTag(S);
  q.packedRow.resize(S);
  const std::pair<const Tensor *, const char *> mods[] = {{&ti, "text_indices"}, {&vi, "video_indices"},
                                                          {&ai, "audio_indices"}};
  const uint8_t modTag[] = {1, 0, 2};  // text rows may also carry 0 (a vision block of the prompt)
  size_t cr = 0;
  for (int m = 0; m < 3; ++m) {
    const Tensor &idx = *mods[m].first;
    for (int64_t k = 0, n = idx.numel(); k < n; ++k, ++cr) {
      const int64_t p = readI64(idx, k);
      auto w = [&] { return at(mods[m].second) + "[" + std::to_string(k) + "]"; };
      if (p < 0 || p >= q.S)
        fail(w(), "index {} is out of range [0, {})", p, q.S);
      if (owner[size_t(p)] >= 0)
        fail(w(), "index {} overlaps an earlier index of the packed sequence (canonical row {})", p, owner[size_t(p)]);
      owner[size_t(p)] = int64_t(cr);
      q.packedRow[cr] = p;
      canonTag[cr] = modTag[m];
    }
  }
  for (size_t p = 0; p < S; ++p)
    if (owner[p] < 0)  // unreachable given the counts, kept as a guard
      fail(where, "packed position {} is covered by no index tensor", p);

  // position_ids.to(float32): F64 and I64 round to nearest even, F32 as is. Non-finite coordinates are rejected
  // (checked in packed order, before the per-row checks below, so the first error named is the same as ever).
  auto coordinate = [&](size_t k) -> float {
    if (pos.dtype == DType::I64)
      return float(readI64(pos, int64_t(k)));
    if (pos.dtype == DType::F64) {
      double d;
      std::memcpy(&d, pos.bytes.data() + k * 8, 8);
      return float(d);
    }
    float f;
    std::memcpy(&f, pos.bytes.data() + k * 4, 4);
    return f;
  };
  q.positions.resize(S * 3);  // canonical order, filled from posPacked below
  std::vector<float> posPacked(S * 3);
  for (size_t k = 0; k < S * 3; ++k) {
    posPacked[k] = coordinate(k);
    if (!std::isfinite(posPacked[k]))
      fail(at("position_ids") + "[" + std::to_string(k / 3) + "][" + std::to_string(k % 3) + "]",
           "coordinates must be finite (as float32)");
  }
  q.tags.resize(S);
  q.tsIndex.resize(S);
  for (size_t c = 0; c < S; ++c) {
    const int64_t p = q.packedRow[c];
    const int64_t tag = readI64(tags, p), t = readI64(tsi, p);
    if (tag != canonTag[c] && !(canonTag[c] == 1 && tag == 0))
      fail(at("token_tags") + "[" + std::to_string(p) + "]",
           "packed row {} is a {} row by the index tensors, so its tag must be {}, got {}", p,
           canonTag[c] == 0 ? "video" : canonTag[c] == 1 ? "text" : "audio",
           canonTag[c] == 1 ? "1 (or 0 for a vision block)" : std::to_string(canonTag[c]), tag);
    if (t < 0 || t >= q.T)
      fail(at("timestep_indices") + "[" + std::to_string(p) + "]", "index {} is out of range [0, {})", t, q.T);
    q.tags[c] = tag;
    q.tsIndex[c] = t;
    for (size_t a = 0; a < 3; ++a)
      q.positions[c * 3 + a] = posPacked[size_t(p) * 3 + a];
  }
  // Non-finite inputs are refused in every mode: nothing a NaN input computes is worth a ledger. A scan of the bit
  // patterns (Tensor::nonFinite), no conversion.
  for (const char *n : {"encoder_hidden_states", "hidden_states", "audio_hidden_states", "timestep"}) {
    const Tensor::NonFinite nf = get(r, n, where).nonFinite();
    if (nf.first >= 0)
      fail(at(n), "input values must be finite: {}", nf.text());
  }
  if (activations == Activations::Borrowed) {
    q.textIn = &ehs;
    q.videoIn = &hs;
    q.audioIn = &ahs;
  } else {
    q.text = ehs.toFloats();
    q.video = hs.toFloats();
    q.audio = ahs.toFloats();
  }
  return q;
}

std::vector<float> activationFloats(const CanonicalRequest &q, const std::string &modality) {
  const std::vector<float> *copied = modality == "text" ? &q.text : modality == "video" ? &q.video
                                     : modality == "audio" ? &q.audio : nullptr;
  const Tensor *borrowed = modality == "text" ? q.textIn : modality == "video" ? q.videoIn
                           : modality == "audio" ? q.audioIn : nullptr;
  if (!copied)
    fail("request", "no activation '{}' (text, video or audio)", modality);
  return borrowed ? borrowed->toFloats() : *copied;
}

std::string requestSha256(const Request &r) {
  Sha256 h;
  for (const auto &[name, t] : r.tensors) {
    h.update(name);
    h.update(dtypeName(t.dtype));
    for (auto d : t.shape)
      h.update(&d, sizeof d);
    h.update(t.bytes.data(), t.bytes.size());
  }
  return h.hexDigest();
}

// ---- synthetic requests -------------------------------------------------------------------------------------------

Tensor synthRequestFloats(const std::string &name, uint64_t seed, std::vector<int64_t> shape, DType dt) {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  auto key = synth::tensorKey(seed, name.data(), name.size());
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = synth::normalish(key, uint64_t(i), 1.0 * H3C_SYNTH_UNIT_SCALE);
  return Tensor::fromFloats(dt, std::move(shape), v.data());
}

Request makeRequest(const h3::Config &c, const RequestShape &sh, uint64_t seed) {
  if (sh.text < 0 || sh.audio < 0 || sh.videoT < 0 || sh.videoH < 0 || sh.videoW < 0)
    fail("request make", "row counts must be >= 0");
  if (sh.batch < 1)
    fail("--batch", "must be >= 1, got {}", sh.batch);
  if (sh.timesteps < 1)
    fail("--timesteps", "must be >= 1, got {}", sh.timesteps);
  const int64_t Nt = sh.text, Nv = sh.videoT * sh.videoH * sh.videoW, Na = sh.audio, S = Nt + Nv + Na, B = sh.batch;
  if (S < 1)
    fail("request make", "the request has no rows");
  Request r;
  r.tensors["hidden_states"] = synthRequestFloats("hidden_states", seed, {B, Nv, c.videoPatchDim()}, sh.floatDtype);
  r.tensors["audio_hidden_states"] =
      synthRequestFloats("audio_hidden_states", seed, {B, Na, c.audio_in_channels}, sh.floatDtype);
  r.tensors["encoder_hidden_states"] = synthRequestFloats("encoder_hidden_states", seed, {B, Nt, c.text_dim}, sh.floatDtype);
  // Distinct timesteps in (0, 1): evenly spaced, offset by a seed-dependent fraction of the spacing.
  std::vector<float> ts(size_t(sh.timesteps));
  uint64_t u = synth::splitmix64(seed ^ 0x7473ull);
  double off = double(u >> 11) / double(1ull << 53);
  for (int64_t k = 0; k < sh.timesteps; ++k)
    ts[size_t(k)] = float((double(k) + 0.1 + 0.8 * off) / double(sh.timesteps));
  r.tensors["timestep"] = Tensor::fromFloats(DType::F32, {sh.timesteps}, ts.data());  // diffusers: float32
  // Packed layout: text, then video, then audio (shuffled below on request).
  std::vector<int64_t> tsi(static_cast<size_t>(S)), tags(static_cast<size_t>(S)), pos(size_t(S * 3), 0), ti(static_cast<size_t>(Nt)), vi(static_cast<size_t>(Nv)),
      ai(static_cast<size_t>(Na));
  int64_t p = 0;
  for (int64_t k = 0; k < Nt; ++k, ++p) {
    ti[size_t(k)] = p;
    tags[size_t(p)] = 1;
    tsi[size_t(p)] = k % sh.timesteps;
    pos[size_t(p * 3)] = k;  // text: a 1-D position along t
  }
  for (int64_t t = 0; t < sh.videoT; ++t)
    for (int64_t h = 0; h < sh.videoH; ++h)
      for (int64_t w = 0; w < sh.videoW; ++w, ++p) {
        int64_t k = p - Nt;
        vi[size_t(k)] = p;
        tags[size_t(p)] = 0;
        tsi[size_t(p)] = (k / std::max<int64_t>(1, sh.videoH * sh.videoW)) % sh.timesteps;  // per frame
        pos[size_t(p * 3)] = t;
        pos[size_t(p * 3 + 1)] = h;
        pos[size_t(p * 3 + 2)] = w;
      }
  for (int64_t k = 0; k < Na; ++k, ++p) {
    ai[size_t(k)] = p;
    tags[size_t(p)] = 2;
    tsi[size_t(p)] = k % sh.timesteps;
    pos[size_t(p * 3)] = k;
  }
  r.tensors["timestep_indices"] = Tensor::fromInts({S}, tsi.data());
  r.tensors["token_tags"] = Tensor::fromInts({S}, tags.data());
  r.tensors["position_ids"] = Tensor::fromInts({S, 3}, pos.data());
  r.tensors["text_indices"] = Tensor::fromInts({Nt}, ti.data());
  r.tensors["video_indices"] = Tensor::fromInts({Nv}, vi.data());
  r.tensors["audio_indices"] = Tensor::fromInts({Na}, ai.data());
  r.metadata["h3c_request_seed"] = std::to_string(seed);
  if (sh.shuffle) {
    // Fisher-Yates driven by the counter-based generator: reproducible for a seed.
    std::vector<int64_t> perm(static_cast<size_t>(S));
    std::iota(perm.begin(), perm.end(), 0);
    auto key = synth::splitmix64(seed ^ 0x5368756666ull);
    for (int64_t i = S - 1; i > 0; --i) {
      uint64_t h = synth::splitmix64(key + uint64_t(i));
      std::swap(perm[size_t(i)], perm[size_t(h % uint64_t(i + 1))]);
    }
    r = permuteRequest(r, perm);
  }
  return r;
}

Request permuteRequest(const Request &r, const std::vector<int64_t> &perm) {
  const Tensor &tags = r.tensors.at("token_tags");
  const int64_t S = tags.numel();
  if (int64_t(perm.size()) != S)
    fail("permute", "permutation has {} entries, the request {} rows", perm.size(), S);
  std::vector<int64_t> seen(size_t(S), 0);
  for (auto v : perm) {
    if (v < 0 || v >= S || seen[size_t(v)]++)
      fail("permute", "not a permutation of [0, {})", S);
  }
  Request out = r;
  auto move1 = [&](const char *name, int width) {
    auto src = r.tensors.at(name).toInts();
    std::vector<int64_t> dst(src.size());
    for (int64_t p = 0; p < S; ++p)
      for (int k = 0; k < width; ++k)
        dst[size_t(perm[size_t(p)] * width + k)] = src[size_t(p * width + k)];
    out.tensors[name] = Tensor::fromInts(r.tensors.at(name).shape, dst.data());
  };
  move1("token_tags", 1);
  move1("timestep_indices", 1);
  {  // position_ids keeps its dtype: move whole rows of bytes
    const Tensor &src = r.tensors.at("position_ids");
    const size_t row = 3 * dtypeSize(src.dtype);
    if (src.bytes.size() != size_t(S) * row)
      fail("permute", "position_ids is not [S, 3]");
    Tensor dst = src;
    for (int64_t p = 0; p < S; ++p)
      std::memcpy(dst.bytes.data() + size_t(perm[size_t(p)]) * row, src.bytes.data() + size_t(p) * row, row);
    out.tensors["position_ids"] = std::move(dst);
  }
  for (const char *name : {"text_indices", "video_indices", "audio_indices"}) {
    auto v = r.tensors.at(name).toInts();
    for (auto &x : v)
      x = perm[size_t(x)];
    out.tensors[name] = Tensor::fromInts(r.tensors.at(name).shape, v.data());
  }
  return out;
}

Request batchItem(const Request &r, int64_t b) {
  Request out = r;
  for (const char *name : {"hidden_states", "audio_hidden_states", "encoder_hidden_states"}) {
    const Tensor &t = r.tensors.at(name);
    if (b < 0 || b >= t.shape[0])
      fail("batch item", "item {} out of range for {} {}", b, name, t.shapeString());
    size_t item = t.bytes.size() / size_t(t.shape[0]);
    Tensor x = t;
    x.shape[0] = 1;
    x.bytes.assign(t.bytes.begin() + long(item * size_t(b)), t.bytes.begin() + long(item * size_t(b + 1)));
    out.tensors[name] = std::move(x);
  }
  return out;
}

} // namespace h3c::rt
