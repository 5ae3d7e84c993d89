// A request: diffusers' forward arguments as safetensors tensors (docs/contract.md section 1).
//
//   hidden_states          [B, Nv, in_channels*prod(patch)]  F32 | BF16
//   audio_hidden_states    [B, Na, audio_in_channels]        F32 | BF16
//   encoder_hidden_states  [B, Nt, text_dim]                 F32 | BF16
//   timestep               [T]   F32 | BF16, distinct values in [0, 1]
//   timestep_indices       [S]   I64 in [0, T)
//   token_tags             [S]   I64, 0 video / 1 text / 2 audio: video rows 0, audio rows 2, text rows 1 or 0 (the
//                                rows of a vision block in the prompt are tagged video, as the pipeline does)
//   position_ids           [S,3] F64 | F32 | I64 (t, h, w), any real values (the pipeline builds fractional float64
//                                coordinates); cast to F32 on reading, as the rotary module does first
//   video_indices [Nv], audio_indices [Na], text_indices [Nt]  I64, together a partition of [0, S)
//
// canonicalize() validates all of it (fail closed, naming the tensor and the element) and reorders the per-row
// metadata into canonical order: text rows, then video rows, then audio rows, each in the order of its tensor.
#pragma once

#include "h3c/models/config.h"
#include "h3c/plan/extent.h"
#include "h3c/runtime/tensor.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace h3c::rt {

// The tensor names of a request, in diffusers' forward-argument order.
const std::vector<std::string> &requestTensorNames();

struct Request {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads a request safetensors file (every name of requestTensorNames() required, no others).
Request loadRequest(const std::filesystem::path &path);
void writeRequest(const std::filesystem::path &path, const Request &r);

// The request in canonical row order, ready for pack. Floats are kept as float (BF16 inputs are exact in float).
struct CanonicalRequest {
  int64_t B = 1, Nt = 0, Nv = 0, Na = 0, S = 0, T = 0;
  DType videoDtype = DType::F32, audioDtype = DType::F32, textDtype = DType::F32;
  int64_t videoCols = 0, audioCols = 0, textCols = 0;  // channels (kept when a modality has no rows)
  // The three activations as floats (Activations::Copied), or empty with the request's own tensors borrowed below.
  std::vector<float> text;      // [B, Nt, text_dim]
  std::vector<float> video;     // [B, Nv, videoPatchDim]
  std::vector<float> audio;     // [B, Na, audio_in_channels]
  // Activations::Borrowed: the request's encoder_hidden_states / hidden_states / audio_hidden_states tensors, not
  // owned (valid while the Request given to canonicalize() lives). The engine borrows: a GPU executor uploads the
  // bytes as they are and a bound activation is never read, so the ~13 MB of floats at S = 8,349 are never made.
  const Tensor *textIn = nullptr, *videoIn = nullptr, *audioIn = nullptr;
  std::vector<float> timestep;  // [T]
  // Canonical per-row metadata, [S] (positions [S,3], F32: position_ids.to(float32), round to nearest even).
  std::vector<float> positions;
  std::vector<int64_t> tags, tsIndex;
  // packedRow[c] = position in the packed sequence of canonical row c (what unpack/diagnostics need).
  std::vector<int64_t> packedRow;
  // The row count of a symbolic domain: "S", "Nt", "Nv", "Na", "T", "T3", "1".
  int64_t rows(const std::string &domain) const;
  // The extents the plan's launch expressions are evaluated on.
  plan::Extents extents() const { return {B, S, Nt, Nv, Na, T, S}; }  // one rank: Sr = S
};

// Copied: text / video / audio hold the activations as floats (what a caller that keeps the CanonicalRequest apart
// from its Request needs). Borrowed: they stay empty and textIn / videoIn / audioIn point into `r`.
enum class Activations { Copied, Borrowed };
CanonicalRequest canonicalize(const Request &r, const h3::Config &c, const std::string &where = "request",
                              Activations activations = Activations::Copied);
// An activation of a canonical request as floats ("text", "video" or "audio"): the copy, or the borrowed tensor
// widened (BF16 is exact in float).
std::vector<float> activationFloats(const CanonicalRequest &q, const std::string &modality);

// The request's identity in the ledger header (`request.sha256`): sha256 over every tensor in name order of its
// name, dtype name, shape (int64 little-endian) and bytes (a fixed definition: ledgers of every build compare).
std::string requestSha256(const Request &r);

// What `h3c request make` builds without --layout: a valid request with synthetic values (synth_rng, keyed by `seed`
// and the tensor name). Video rows get integer (t, h, w) grid positions of a T x H x W token grid, text and audio
// rows 1-D positions along t (I64 position_ids); see request.cpp. The pipeline's own layouts: request_layout.h.
struct RequestShape {
  int64_t text = 0, audio = 0;
  int64_t videoT = 0, videoH = 0, videoW = 0;
  int64_t batch = 1;
  int64_t timesteps = 1;  // distinct timesteps; rows are assigned round-robin per modality (see request.cpp)
  bool shuffle = false;   // permute the packed rows (indices permuted to match)
  DType floatDtype = DType::F32;
};
Request makeRequest(const h3::Config &c, const RequestShape &shape, uint64_t seed);
// The synthetic float tensor `name` of a request: synth_rng normalish values (std 1) keyed by (seed, name).
Tensor synthRequestFloats(const std::string &name, uint64_t seed, std::vector<int64_t> shape, DType dt);

// The same request with its packed rows permuted by `perm` (new packed position of old row p is perm[p]); the
// indices, tags, timestep indices and positions move with their rows. For invariance tests and --shuffle.
Request permuteRequest(const Request &r, const std::vector<int64_t> &perm);
// Batch item `b` of a request, as a batch-1 request.
Request batchItem(const Request &r, int64_t b);

} // namespace h3c::rt
