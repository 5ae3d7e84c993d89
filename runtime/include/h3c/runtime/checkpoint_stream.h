// Streaming a checkpoint's stored tensors once, in parallel, through a consumer's staging buffers: the load of a
// checkpoint to the GPU (cuda/weight_upload.h) and its content check in one pass. Each stored tensor is read by one
// worker, in chunks, from the page cache into a staging buffer (pread: one copy, no page-table work for 66 GB, and
// a file truncated under the load is an error naming it instead of a SIGBUS); the bytes in that buffer are checked
// for NaN / Inf and hashed (sha256 per stored tensor: the snapshot's hash, so the folder's content_sha256 comes out
// of the load, exactly `h3c checkpoint snapshot`'s), then handed to the consumer with the copies that place them
// in the diffusers tensors they belong to. The check runs on the very bytes that are uploaded. A native folder's
// tensors are placed by the mapper's byte ranges (q/k/v rows of qkv_proj, the halves of fc1), so the layout is the
// one Checkpoint::read assembles. A diffusers folder saved in float32 stores F32 where the plan places BF16
// (h3::castsToBf16): such a tensor is hashed as stored, then each chunk is rounded to BF16 in place in its staging
// buffer (the first half of the buffer holds the BF16 bytes), checked for NaN / Inf after the rounding (an F32 value
// beyond BF16's range is Inf now), and copied out from there: the bytes placed are the ones
// CheckpointWeights::load returns.
#pragma once

#include "h3c/models/checkpoint.h"
#include "h3c/support/dtype.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace h3c::rt {

// A diffusers tensor to fill, at `address` in the consumer's address space (a device pointer, a host pointer).
struct StreamTarget {
  std::string name;
  uint64_t address = 0;
  uint64_t bytes = 0;
};

// Bytes [offset, offset + length) of a stored tensor as placed (its stored bytes, or the BF16 bytes a cast tensor
// is rounded to: half its stored bytes) are bytes [targetOffset, ...) of target `target`.
struct StreamPiece {
  uint64_t offset = 0, length = 0;
  size_t target = 0;
  uint64_t targetOffset = 0;
};

struct StoredTensor {
  std::string name;  // as stored
  DType dtype = DType::F32;  // as stored
  size_t file = 0;          // index into StreamPlan::files
  uint64_t fileOffset = 0;  // where its bytes start in that file
  uint64_t bytes = 0;       // as stored: read and hashed
  // Stored F32, placed as BF16 rounded to nearest even (a float32 diffusers folder): each chunk is rounded in its
  // staging buffer before the NaN / Inf check and the copies.
  bool castToBf16 = false;
  uint64_t placedBytes() const { return castToBf16 ? bytes / 2 : bytes; }
  DType placedDtype() const { return castToBf16 ? DType::BF16 : dtype; }
  // By offset in the placed bytes; none for a tensor no target needs (rope.inv_freq): hashed only.
  std::vector<StreamPiece> pieces;
};

struct StreamPlan {
  std::filesystem::path dir;
  std::vector<std::filesystem::path> files;
  std::vector<StoredTensor> tensors;  // the folder's storage-name order (the snapshot's)
  std::vector<StreamTarget> targets;
  uint64_t totalBytes = 0;  // of the stored tensors
};

// The plan of streaming `ck` into `targets` (diffusers names; each must be a tensor of the checkpoint with exactly
// its bytes as placed, at most once). `castToBf16`: the tensors stored F32 that are placed as BF16 (diffusers
// folders only: CheckpointWeights::castToBf16()); a target of one holds half its stored bytes. Throws naming the
// target otherwise.
StreamPlan planStream(const h3::Checkpoint &ck, std::vector<StreamTarget> targets,
                      const std::set<std::string> &castToBf16 = {});

// Bytes [offset, offset + length) of stored tensor `tensor` (stored bytes): one staging buffer's worth.
struct StreamChunk {
  size_t tensor = 0;
  uint64_t offset = 0, length = 0;
};
// A tensor's chunks: chunkBytes each (a multiple of 8, so no element straddles two), the last one shorter.
std::vector<StreamChunk> chunksOf(const StoredTensor &t, size_t tensor, uint64_t chunkBytes);
// Bytes [bufferOffset, bufferOffset + length) of the staging buffer holding a chunk go to `address` (offsets in the
// chunk's placed bytes: after a cast the buffer's first half holds them).
struct StreamCopy {
  uint64_t bufferOffset = 0, length = 0;
  uint64_t address = 0;
};
std::vector<StreamCopy> copiesOf(const StreamPlan &plan, const StreamChunk &chunk);

// The consumer: a ring of staging buffers per worker and the copies out of them. Worker calls come from the
// worker's own thread; finish() from the thread that called streamCheckpoint, after every worker stopped, also
// when the stream failed (nothing may still read a staging buffer when it returns).
class StreamSink {
public:
  virtual ~StreamSink() = default;
  virtual void beginWorker(int /*worker*/) {}
  // A staging buffer of at least chunkBytes that no earlier copy still reads (may wait for one).
  virtual uint8_t *buffer(int worker) = 0;
  // Issues the copies out of the buffer buffer() returned last to this worker (they may run later; the buffer is
  // not written again before they are done).
  virtual void copy(int worker, const std::vector<StreamCopy> &copies) = 0;
  virtual void finish() = 0;
};

struct StreamOptions {
  int workers = 8;
  uint64_t chunkBytes = uint64_t(16) << 20;
  // true: a stored tensor holding NaN / Inf fails the stream, naming it; false: it is recorded in the result.
  bool strictFinite = true;
  // Called on the calling thread about every 200 ms and once at the end: stored tensors done, of all, bytes done.
  std::function<void(size_t done, size_t total, uint64_t bytes)> progress;
};

struct StreamResult {
  std::vector<std::string> sha256;              // per stored tensor, in plan order
  std::map<std::string, std::string> nonFinite;  // stored name -> "1 NaN, 0 Inf (first: element 5, NaN)"
  std::string contentSha256;                     // the snapshot's content_sha256 (h3::contentSha256)
  uint64_t bytes = 0;                            // read, checked and hashed (as stored)
  uint64_t copied = 0;                           // handed to the consumer (the targets' bytes, as placed)
  double seconds = 0;
};

// Streams every stored tensor of `ck` (planned by planStream) through `sink`. Any failure (a short read, a strict
// non-finite tensor, a sink error) stops the workers at their next chunk, waits for the sink (finish) and throws the
// error, naming the tensor and the file.
StreamResult streamCheckpoint(const h3::Checkpoint &ck, const StreamPlan &plan, StreamSink &sink,
                              const StreamOptions &opt);

// The line a load ends with: what was loaded, how fast, and what was checked on the way.
// "checkpoint /m (diffusers): 638 tensors, 61.73 GiB to the GPU in 8.10 s (8.18 GB/s); checked while loading:
// sha256 of every stored tensor -> content_sha256 1a2b3c4d5e6f7a8b..., all values finite, names/dtypes/shapes as
// the plan's 638 tensors". `against`: what the content hash was compared with (empty: nothing). A plan with cast
// tensors adds how many were rounded from F32 to BF16 and the bytes placed.
std::string streamSummary(const std::string &dir, const std::string &format, const StreamPlan &plan,
                          const StreamResult &r, const std::string &destination, const std::string &against);

} // namespace h3c::rt
