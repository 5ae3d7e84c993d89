// A hot weight update (issue 21): tensors a trainer hands over by diffusers or native name, in BF16 or F32, from
// host or device memory, checked against the plan before anything changes and turned into byte writes into the
// plan's (diffusers) weight tensors. The engine (engine.h) applies the writes: into its host overlay on the CPU,
// into the device weight buffers on the GPU (Executor::writeWeights).
//
// The checks, all before the first write (a refused update changes nothing): every name is a weight tensor of the
// plan (diffusers naming) or a native tensor that maps onto such tensors (models/h3 checkpoint.h: `attn.qkv_proj`
// = to_q/to_k/to_v rows in the given q/k/v layout, `mlp.fc1` = the swapped halves of ff.net.0.proj); no tensor is
// named twice, directly or through a native name; the shape is the tensor's; the dtype is BF16 or F32. F32 values
// for a BF16 tensor are rounded to nearest even (support/dtype.h floatToBf16, what torch's `.to(torch.bfloat16)`
// does); BF16 values for an F32 tensor widen exactly. Host values are then scanned for NaN / Inf after the cast (an
// F32 value beyond BF16's range becomes Inf and is refused). Device values must already hold the pinned dtype: the
// caller (the Python package) casts with torch on the device and scans them there (`deviceChecked`).
#pragma once

#include "h3c/models/checkpoint.h"
#include "h3c/plan/plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::rt {

// One tensor of an update, as the caller has it: contiguous row-major bytes at `host`, or at device address
// `device` (GPU engines only).
struct WeightInput {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  const void *host = nullptr;
  uint64_t device = 0;
};

// Bytes [offset, offset + bytes) of plan weight tensor `tensor` (the pinned dtype) get the bytes at `host` or at
// device address `device`.
struct WeightWrite {
  std::string tensor;
  uint64_t offset = 0, bytes = 0;
  const uint8_t *host = nullptr;
  uint64_t device = 0;
};

struct PreparedUpdate {
  std::vector<WeightWrite> writes;    // in input order, then piece order
  std::vector<std::string> tensors;   // the plan tensors written, sorted
  // For each of `tensors`: whether the writes cover all of it (a native name always covers whole tensors; kept so a
  // caller can rely on it, not assume it).
  std::vector<bool> whole;
  std::vector<std::vector<uint8_t>> owned;  // the cast host values the writes point into (when a cast happened)
};

// Checks `inputs` against the plan and prepares the writes (see the header comment). `layout`: the q/k/v order of
// native `attn.qkv_proj` tensors. `deviceChecked`: device inputs were scanned for NaN / Inf by the caller (device
// inputs are refused without it). Errors name the input ("update:<name>: ...").
PreparedUpdate prepareWeightUpdate(const plan::Plan &p, const std::vector<WeightInput> &inputs, h3::QkvLayout layout,
                                   bool deviceChecked = false);

} // namespace h3c::rt

#include "h3c/support/safetensors.h"

#include <filesystem>
#include <memory>

namespace h3c::rt {

// An update kept in files (`h3c run|generate --update PATH`): one .safetensors file, or a folder of them as
// `h3c checkpoint` and diffusers' save_pretrained write (single file or sharded with an index), holding any subset of
// the weights by diffusers or native name, BF16 or F32. A folder's config.json, when it has one, must describe the
// plan's model (compared key by key, as a checkpoint's) and its `_h3c_qkv_layout` gives native q/k/v's order
// (default: interleaved, the raw release's). The tensors stay memory-mapped: `inputs` point into the maps.
struct UpdateFiles {
  std::filesystem::path path;
  std::unique_ptr<st::File> file;      // PATH is a file
  std::unique_ptr<st::Folder> folder;  // PATH is a folder
  h3::QkvLayout layout = h3::QkvLayout::Interleaved;
  std::vector<WeightInput> inputs;     // in stored-name order
};
UpdateFiles openUpdateFiles(const std::filesystem::path &path, const h3::Config &c);

} // namespace h3c::rt
