// The pipeline's packed layouts (request_layout.h), reproducing its float64 arithmetic operation for operation:
// numpy.linspace for the spatial grids, torch.cumsum (sequential) for the time axis, numpy's pairwise summation for
// the "last" keyframe anchor and Python's sum() for a video reference's span. Checked against diffusers
// itself by scripts/diffusers_layout_check.py (bit for bit) where diffusers runs.
#include "h3c/runtime/request_layout.h"

#include "h3c/support/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace h3c::rt {
namespace {

constexpr double kFrameRescale = 5.0 / 3.0;
constexpr int64_t kFramesPerLatent[5] = {1, 4, 4, 4, 4};
constexpr double kSpatialScale = 32.0;

// One spatial rotary axis (_spatial_position_grid): numpy.linspace(left, left + ratio, n, endpoint=False) * 32.
std::vector<double> spatialGrid(int64_t dim, int64_t patch, double sqrtArea) {
  const double ratio = double(dim) / sqrtArea;
  const double left = (1.0 - ratio) / 2.0;
  const int64_t n = dim / patch;
  std::vector<double> g(static_cast<size_t>(n));
  if (n == 0)
    return g;
  const double delta = (left + ratio) - left;
  const double step = delta / double(n);
  for (int64_t i = 0; i < n; ++i) {
    double y = step == 0.0 ? (double(i) / double(n)) * delta : double(i) * step;  // numpy's zero-step branch
    g[size_t(i)] = (y + left) * kSpatialScale;
  }
  return g;
}

struct FrameGrid {
  std::vector<double> h, w;  // per row of the frame, row-major over (height, width)
  std::vector<double> widthAxis;
};

FrameGrid frameGrid(int64_t H, int64_t W, int64_t ph, int64_t pw) {
  const double sqrtArea = std::sqrt(double(H * W));
  FrameGrid f;
  const std::vector<double> hg = spatialGrid(H, ph, sqrtArea);
  f.widthAxis = spatialGrid(W, pw, sqrtArea);
  for (double hv : hg)
    for (double wv : f.widthAxis) {
      f.h.push_back(hv);
      f.w.push_back(wv);
    }
  return f;
}

double frameSpan(int64_t j) { return kFrameRescale * double(kFramesPerLatent[j % 5]); }

// _temporal_position_grid: origin + cat([0], cumsum(spans[:-1])).
std::vector<double> temporalGrid(int64_t frames, double origin) {
  std::vector<double> t(static_cast<size_t>(frames));
  double cum = 0.0;
  for (int64_t j = 0; j < frames; ++j) {
    t[size_t(j)] = origin + cum;
    cum = cum + frameSpan(j);
  }
  return t;
}

// numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src, PW_BLOCKSIZE 128), as np.sum of a contiguous
// float64 array computes it (the reduction starts from 0.0, which adds exactly).
double numpyPairwiseSum(const double *a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i)
      res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k)
      r[k] = a[k];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; ++k)
        r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i)
      res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpyPairwiseSum(a, n2) + numpyPairwiseSum(a + n2, n - n2);
}

// Python's built-in sum() of the frame spans (a video reference's span): CPython >= 3.12 adds floats with Neumaier's
// compensated summation (the first term taken as is, the compensation added at the end); older CPython added them
// sequentially, which differs in the last ulp for some frame counts.
double pythonSum(int64_t frames) {
  if (frames == 0)
    return 0.0;
  double sum = frameSpan(0), comp = 0.0;
  for (int64_t j = 1; j < frames; ++j) {
    const double x = frameSpan(j), t = sum + x;
    if (std::fabs(sum) >= std::fabs(x))
      comp += (sum - t) + x;
    else
      comp += (x - t) + sum;
    sum = t;
  }
  return comp != 0.0 ? sum + comp : sum;
}

struct Builder {
  PackedLayout out;
  int64_t ph, pw;
  std::vector<int64_t> videoRows, audioRows;  // packed positions, in index-tensor order
  explicit Builder(int64_t S) {
    out.positions.assign(size_t(S * 3), 0.0);
    out.tags.assign(size_t(S), -1);
  }
  void set(int64_t row, int axis, double v) { out.positions[size_t(row * 3 + axis)] = v; }
  // Frames `frames` of an H x W grid from packed row `start`, frame j at time t[j].
  void videoBlock(int64_t start, int64_t frames, int64_t H, int64_t W, const std::vector<double> &t) {
    const FrameGrid g = frameGrid(H, W, ph, pw);
    const int64_t rpf = int64_t(g.h.size());
    for (int64_t j = 0; j < frames; ++j)
      for (int64_t k = 0; k < rpf; ++k) {
        const int64_t row = start + j * rpf + k;
        set(row, 0, t[size_t(j)]);
        set(row, 1, g.h[size_t(k)]);
        set(row, 2, g.w[size_t(k)]);
        videoRows.push_back(row);
      }
  }
  // _fill_audio_positions: channel-major, 2 channels x L latents.
  void audioBlock(int64_t start, int64_t latents, double origin, const std::vector<double> &widthAxis) {
    if (widthAxis.empty() && latents > 0)
      fail("layout", "an audio block needs a width grid (its video block has zero width)");
    for (int64_t ch = 0; ch < kPipelineAudioChannels; ++ch)
      for (int64_t l = 0; l < latents; ++l) {
        const int64_t row = start + ch * latents + l;
        set(row, 0, origin + double(l));
        set(row, 2, ch == 0 ? widthAxis.front() : widthAxis.back());
        audioRows.push_back(row);
      }
  }
  // Index tensors and tags: text rows first (their own tags), video rows 0, audio rows 2.
  PackedLayout finish(const std::vector<int64_t> &textTags, int64_t condVideo, int64_t condAudio) {
    out.conditionVideoRows = condVideo;
    out.conditionAudioRows = condAudio;
    out.videoIndices = videoRows;
    out.audioIndices = audioRows;
    for (size_t i = 0; i < textTags.size(); ++i) {
      out.textIndices.push_back(int64_t(i));
      out.tags[i] = textTags[i];
    }
    for (int64_t r : videoRows)
      out.tags[size_t(r)] = 0;
    for (int64_t r : audioRows)
      out.tags[size_t(r)] = 2;
    return out;
  }
};

int64_t rowsPerFrame(int64_t H, int64_t W, int64_t ph, int64_t pw) { return (H / ph) * (W / pw); }

void checkGeometry(const std::string &what, int64_t F, int64_t H, int64_t W, int64_t ph, int64_t pw) {
  if (F < 0 || H < 0 || W < 0)
    fail(what, "latent geometry must be non-negative, got {} x {} x {}", F, H, W);
  if ((H > 0 && H < ph) || (W > 0 && W < pw))
    fail(what, "a latent {} x {} is smaller than the patch {} x {}", H, W, ph, pw);
}

} // namespace

PackedLayout buildLayout(const h3::Config &c, const LayoutSpec &sp) {
  if (c.patch_size[0] != 1)
    fail("--layout", "the pipeline's layouts assume a temporal patch of 1, the config has {}", c.patch_size[0]);
  const int64_t ph = c.patch_size[1], pw = c.patch_size[2];
  const int64_t Nt = int64_t(sp.textTags.size());
  for (size_t i = 0; i < sp.textTags.size(); ++i)
    if (sp.textTags[i] != 0 && sp.textTags[i] != 1)
      fail("text tags", "row {}: a text row is tagged 1 (text) or 0 (vision block), got {}", i, sp.textTags[i]);
  checkGeometry("--latent", sp.latentFrames, sp.latentHeight, sp.latentWidth, ph, pw);
  if (sp.audioLatents < 0)
    fail("--audio-latents", "must be >= 0, got {}", sp.audioLatents);
  const int64_t rpf = rowsPerFrame(sp.latentHeight, sp.latentWidth, ph, pw);
  const int64_t targetVideo = sp.latentFrames * rpf, targetAudio = sp.audioLatents * kPipelineAudioChannels;
  const std::vector<double> targetWidth = frameGrid(sp.latentHeight, sp.latentWidth, ph, pw).widthAxis;

  if (sp.layout == "t2va" || sp.layout == "fl2va") {
    if (sp.layout == "t2va" && !sp.keyframes.empty())
      fail("--keyframes", "t2va has no keyframes (use --layout fl2va)");
    if (sp.layout == "fl2va" && sp.keyframes.empty())
      fail("--keyframes", "fl2va needs at least one keyframe (first, last)");
    if (!sp.references.empty())
      fail("--ref", "references belong to the ref2va layout");
    const int64_t cond = int64_t(sp.keyframes.size()) * rpf;
    const int64_t S = Nt + cond + targetAudio + targetVideo;
    Builder b(S);
    b.ph = ph;
    b.pw = pw;
    for (int64_t i = 0; i < Nt; ++i)
      b.set(i, 0, double(i));
    for (size_t k = 0; k < sp.keyframes.size(); ++k) {
      double anchor;
      if (sp.keyframes[k] == "first") {
        anchor = double(Nt);
      } else if (sp.keyframes[k] == "last") {
        std::vector<double> spans(static_cast<size_t>(sp.latentFrames));
        for (int64_t j = 0; j < sp.latentFrames; ++j)
          spans[size_t(j)] = frameSpan(j);
        anchor = (double(Nt) + numpyPairwiseSum(spans.data(), sp.latentFrames)) - kFrameRescale;
      } else {
        fail("--keyframes", "a keyframe anchor must be 'first' or 'last', got '{}'", sp.keyframes[k]);
      }
      b.videoBlock(Nt + int64_t(k) * rpf, 1, sp.latentHeight, sp.latentWidth, {anchor});
    }
    b.audioBlock(Nt + cond, sp.audioLatents, double(Nt), targetWidth);
    b.videoBlock(Nt + cond + targetAudio, sp.latentFrames, sp.latentHeight, sp.latentWidth,
                 temporalGrid(sp.latentFrames, double(Nt)));
    return b.finish(sp.textTags, cond, 0);
  }
  if (sp.layout != "ref2va")
    fail("--layout", "expected t2va, fl2va or ref2va, got '{}'", sp.layout);
  if (!sp.keyframes.empty())
    fail("--keyframes", "keyframes belong to the fl2va layout");
  if (sp.references.empty())
    fail("--ref", "ref2va needs at least one reference");
  int64_t refVideo = 0, refAudio = 0;
  for (const auto &r : sp.references) {
    if (r.kind != LayoutReference::Kind::Audio) {
      checkGeometry("--ref", r.frames, r.height, r.width, ph, pw);
      if (r.kind == LayoutReference::Kind::Image && r.frames != 1)
        fail("--ref", "an image reference is one latent frame, got {}", r.frames);
      refVideo += r.frames * rowsPerFrame(r.height, r.width, ph, pw);
    }
    if (r.audioLatents < 0 || (r.kind == LayoutReference::Kind::Audio && r.audioLatents == 0))
      fail("--ref", "an audio reference needs a positive latent count");
    if (r.kind == LayoutReference::Kind::Image && r.audioLatents != 0)
      fail("--ref", "an image reference has no soundtrack");
    refAudio += r.audioLatents * kPipelineAudioChannels;
  }
  const int64_t S = Nt + refVideo + refAudio + targetAudio + targetVideo;
  Builder b(S);
  b.ph = ph;
  b.pw = pw;
  for (int64_t i = 0; i < Nt; ++i)
    b.set(i, 0, double(i));
  int64_t cursor = Nt;
  double clock = double(Nt);
  for (const auto &r : sp.references) {
    switch (r.kind) {
    case LayoutReference::Kind::Image:
      b.videoBlock(cursor, 1, r.height, r.width, {clock});
      cursor += rowsPerFrame(r.height, r.width, ph, pw);
      clock += 1.0;  // one integer rotary slot
      break;
    case LayoutReference::Kind::Audio:
      b.audioBlock(cursor, r.audioLatents, clock, targetWidth);
      cursor += r.audioLatents * kPipelineAudioChannels;
      clock += double(r.audioLatents);
      break;
    case LayoutReference::Kind::Video: {
      const FrameGrid g = frameGrid(r.height, r.width, ph, pw);
      b.audioBlock(cursor, r.audioLatents, clock, g.widthAxis);
      cursor += r.audioLatents * kPipelineAudioChannels;
      b.videoBlock(cursor, r.frames, r.height, r.width, temporalGrid(r.frames, clock));
      cursor += r.frames * int64_t(g.h.size());
      clock += std::max(double(r.audioLatents), pythonSum(r.frames));
      break;
    }
    }
  }
  const int64_t refVideoRows = int64_t(b.videoRows.size()), refAudioRows = int64_t(b.audioRows.size());
  b.audioBlock(cursor, sp.audioLatents, clock, targetWidth);
  b.videoBlock(cursor + targetAudio, sp.latentFrames, sp.latentHeight, sp.latentWidth,
               temporalGrid(sp.latentFrames, clock));
  return b.finish(sp.textTags, refVideoRows, refAudioRows);
}

void pipelineLatentGeometry(int64_t numFrames, int64_t height, int64_t width, LayoutSpec &spec) {
  if (numFrames < 1)
    fail("--num-frames", "must be positive, got {}", numFrames);
  if (height <= 0 || width <= 0 || height % 32 || width % 32)
    fail("--height/--width", "must be positive multiples of 32 (the canvas multiple), got {} x {}", height, width);
  int64_t f = numFrames;
  while (f % 17 != 5)  // align_num_frames(num_frames, 17, 5)
    ++f;
  spec.latentFrames = (f - 5) / 17 * 5 + 2;
  spec.latentHeight = height / 16;
  spec.latentWidth = width / 16;
  // int(round(num_frames / 24 * 40)): Python's round is half-to-even, as nearbyint in the default rounding mode.
  spec.audioLatents = int64_t(std::nearbyint(double(f) / 24.0 * 40.0));
}

float conditionVideoTimestep(float tVideo) { return float(std::max(double(tVideo), kKeyframeNoiseAug)); }

RowTimesteps rowTimesteps(int64_t S, const std::vector<int64_t> &vi, const std::vector<int64_t> &ai, int64_t cv,
                          int64_t ca, float tVideo, float tAudio, float tConditionVideo, float tConditionAudio) {
  if (cv < 0 || cv > int64_t(vi.size()) || ca < 0 || ca > int64_t(ai.size()))
    fail("row timesteps", "conditioning rows ({} video, {} audio) exceed the rows ({} video, {} audio)", cv, ca,
         vi.size(), ai.size());
  std::vector<float> row(static_cast<size_t>(S), tVideo);
  auto put = [&](int64_t packed, float t) {
    if (packed < 0 || packed >= S)
      fail("row timesteps", "index {} outside [0, {})", packed, S);
    row[size_t(packed)] = t;
  };
  for (int64_t k = 0; k < cv; ++k)
    put(vi[size_t(k)], tConditionVideo);
  for (size_t k = size_t(ca); k < ai.size(); ++k)
    put(ai[k], tAudio);
  for (int64_t k = 0; k < ca; ++k)
    put(ai[size_t(k)], tConditionAudio);
  RowTimesteps r;
  r.timestep = row;
  std::sort(r.timestep.begin(), r.timestep.end());
  r.timestep.erase(std::unique(r.timestep.begin(), r.timestep.end()), r.timestep.end());
  r.index.resize(size_t(S));
  for (int64_t p = 0; p < S; ++p)
    r.index[size_t(p)] = std::lower_bound(r.timestep.begin(), r.timestep.end(), row[size_t(p)]) - r.timestep.begin();
  return r;
}

Request makeLayoutRequest(const h3::Config &c, const LayoutSpec &spec, int64_t batch, uint64_t seed, DType dt,
                          float tVideo, float tAudio) {
  if (batch < 1)
    fail("--batch", "must be >= 1, got {}", batch);
  const PackedLayout L = buildLayout(c, spec);
  const int64_t S = L.S(), Nv = int64_t(L.videoIndices.size()), Na = int64_t(L.audioIndices.size()),
                Nt = int64_t(L.textIndices.size());
  if (S < 1)
    fail("request make", "the layout has no rows");
  Request r;
  r.tensors["hidden_states"] = synthRequestFloats("hidden_states", seed, {batch, Nv, c.videoPatchDim()}, dt);
  r.tensors["audio_hidden_states"] =
      synthRequestFloats("audio_hidden_states", seed, {batch, Na, c.audio_in_channels}, dt);
  r.tensors["encoder_hidden_states"] = synthRequestFloats("encoder_hidden_states", seed, {batch, Nt, c.text_dim}, dt);
  const RowTimesteps ts = rowTimesteps(S, L.videoIndices, L.audioIndices, L.conditionVideoRows, L.conditionAudioRows,
                                       tVideo, tAudio, conditionVideoTimestep(tVideo), kReferenceAudioTimestep);
  r.tensors["timestep"] = Tensor::fromFloats(DType::F32, {int64_t(ts.timestep.size())}, ts.timestep.data());
  r.tensors["timestep_indices"] = Tensor::fromInts({S}, ts.index.data());
  r.tensors["token_tags"] = Tensor::fromInts({S}, L.tags.data());
  Tensor pos;
  pos.dtype = DType::F64;
  pos.shape = {S, 3};
  pos.bytes.resize(L.positions.size() * sizeof(double));
  std::memcpy(pos.bytes.data(), L.positions.data(), pos.bytes.size());  // little-endian host (as safetensors)
  r.tensors["position_ids"] = std::move(pos);
  r.tensors["video_indices"] = Tensor::fromInts({Nv}, L.videoIndices.data());
  r.tensors["audio_indices"] = Tensor::fromInts({Na}, L.audioIndices.data());
  r.tensors["text_indices"] = Tensor::fromInts({Nt}, L.textIndices.data());
  r.metadata["h3c_request_seed"] = std::to_string(seed);
  r.metadata["h3c_layout"] = spec.layout;
  r.metadata["h3c_condition_video_rows"] = std::to_string(L.conditionVideoRows);
  r.metadata["h3c_condition_audio_rows"] = std::to_string(L.conditionAudioRows);
  return r;
}

void conditionRows(const Request &r, int64_t &video, int64_t &audio, const std::string &where) {
  auto count = [&](const char *key, const char *tensor) -> int64_t {
    auto it = r.metadata.find(key);
    if (it == r.metadata.end())
      return 0;
    char *end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || v < 0)
      fail(where, "metadata {} must be a non-negative integer, got '{}'", key, it->second);
    auto t = r.tensors.find(tensor);
    if (t == r.tensors.end() || v > t->second.numel())
      fail(where, "metadata {} = {} exceeds the rows of {}", key, v, tensor);
    return v;
  };
  video = count("h3c_condition_video_rows", "video_indices");
  audio = count("h3c_condition_audio_rows", "audio_indices");
}

} // namespace h3c::rt
