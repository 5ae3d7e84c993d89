// The packed layouts diffusers' MiniMax-H3 pipeline builds (modular_pipelines/minimax_h3/before_denoise.py), row for
// row and bit for bit: `t2va` (text only), `fl2va` (first and/or last keyframe conditioning) and `ref2va` (image,
// audio and video references), and the per-step row timesteps of its denoising loop. `h3c request make --layout`
// writes them as requests; `h3c generate` uses rowTimesteps() for every step.
//
// Layout `[text | conditioning | target audio | target video]`, float64 position_ids (t, h, w):
//   text rows            (i, 0, 0), i = 0..Nt-1; tag 1, or 0 for the rows of a vision block in the prompt
//   spatial axes         per frame of a latent H x W grid with patch (ph, pw): sqrt_area = sqrt(H W) (double),
//                        ratio = dim / sqrt_area, left = (1 - ratio) / 2, grid = numpy.linspace(left, left + ratio,
//                        dim / patch, endpoint=False) * 32, i.e. fl(fl(i * step) + left) * 32 with
//                        step = fl(fl(fl(left + ratio) - left) / n); rows of a frame are (h, w) row-major
//   time axis            frame j of a block starting at `origin`: origin + cumsum of 5/3 * (1, 4, 4, 4, 4)[j % 5]
//                        (sequential float64 sum, as torch.cumsum on the CPU)
//   fl2va keyframe       one frame of rows: "first" at t = Nt, "last" at t = Nt + pairwise_sum(spans) - 5/3 (numpy's
//                        pairwise summation of the target's frame spans, as the pipeline does)
//   audio rows           channel-major (2 channels x L latents): t = origin + l, w = the first (channel 0) or last
//                        (channel 1) entry of the block's width grid, h = 0
//   ref2va references    in request order from a rotary clock starting at Nt: an image takes one slot (+1), an
//                        audio reference +L, a video reference (its soundtrack rows packed first) +max(L, frame span)
//   target               audio and video both start at the clock's final value (Nt for t2va / fl2va)
// Video rows are tagged 0, audio rows 2; video_indices list the conditioning rows first, audio_indices the reference
// rows first. The request's metadata records the layout and the conditioning row counts
// (h3c_condition_video_rows, h3c_condition_audio_rows) that `h3c generate` keeps fixed.
#pragma once

#include "h3c/models/config.h"
#include "h3c/runtime/request.h"

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::rt {

inline constexpr int64_t kPipelineAudioChannels = 2;     // MiniMax-H3 is stereo, packed channel-major
inline constexpr double kKeyframeNoiseAug = 0.999;       // the t a visual conditioning anchor is held at
inline constexpr float kReferenceAudioTimestep = 1.0f;   // reference soundtracks condition clean

struct LayoutReference {
  enum class Kind { Image, Audio, Video } kind = Kind::Image;
  int64_t frames = 1, height = 0, width = 0;  // latent geometry (image: one frame)
  int64_t audioLatents = 0;                   // audio reference, or a video reference's soundtrack (0: none)
};

struct LayoutSpec {
  std::string layout = "t2va";             // t2va | fl2va | ref2va
  std::vector<int64_t> textTags;           // one per text row: 1, or 0 in a vision block
  int64_t latentFrames = 0, latentHeight = 0, latentWidth = 0;  // the generated video latents
  int64_t audioLatents = 0;                // generated audio latents per channel
  std::vector<std::string> keyframes;      // fl2va: "first" / "last", in packed order
  std::vector<LayoutReference> references; // ref2va, in packed order
};

struct PackedLayout {
  std::vector<double> positions;  // [S, 3]
  std::vector<int64_t> tags, videoIndices, audioIndices, textIndices;
  int64_t conditionVideoRows = 0, conditionAudioRows = 0;
  int64_t S() const { return int64_t(tags.size()); }
};

// The pipeline's build_packed_sequence / build_ref2va_packed_sequence. Throws h3c::Error on an invalid spec.
PackedLayout buildLayout(const h3::Config &c, const LayoutSpec &spec);

// The pipeline's pixel-space geometry: num_frames snapped up to 17 n + 5, latent frames 5 n + 2, latent size
// height / 16 x width / 16, audio latents round(num_frames / 24 * 40) per channel.
void pipelineLatentGeometry(int64_t numFrames, int64_t height, int64_t width, LayoutSpec &spec);

// build_row_timesteps: every row's timestep (text rows and generated video rows tVideo, video conditioning rows
// tConditionVideo, reference audio rows tConditionAudio, generated audio rows tAudio, all float32) reduced to the
// sorted distinct values and each packed row's index into them (torch.unique(sorted=True, return_inverse=True)).
struct RowTimesteps {
  std::vector<float> timestep;
  std::vector<int64_t> index;  // [S], by packed position
};
RowTimesteps rowTimesteps(int64_t S, const std::vector<int64_t> &videoIndices, const std::vector<int64_t> &audioIndices,
                          int64_t conditionVideoRows, int64_t conditionAudioRows, float tVideo, float tAudio,
                          float tConditionVideo, float tConditionAudio);
// The video conditioning timestep of a step: float32(max(t_video, 0.999)).
float conditionVideoTimestep(float tVideo);

// A request with the layout's structure and synthetic values (synth_rng keyed by `seed` and the tensor name, as
// makeRequest), position_ids F64 as the pipeline passes them, row timesteps for (tVideo, tAudio).
Request makeLayoutRequest(const h3::Config &c, const LayoutSpec &spec, int64_t batch, uint64_t seed, DType floatDtype,
                          float tVideo, float tAudio);

// The conditioning row counts recorded in a request's metadata (0 when absent); checked against the request.
void conditionRows(const Request &r, int64_t &video, int64_t &audio, const std::string &where);

} // namespace h3c::rt
