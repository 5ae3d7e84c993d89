// Loading a checkpoint folder to the GPU in one pass (checkpoint_stream.h): worker threads read the stored tensors
// from the page cache into a ring of pinned host staging buffers each, check and hash the bytes there, and copy
// them to the weights' final device addresses with async copies on a stream per worker; an event per staging
// buffer says when it may be filled again. No device memory besides the weights themselves is used: the staging is
// host memory (workers x ring x chunk bytes, pinned for the load's duration and freed after it).
#pragma once

#include "h3c/runtime/checkpoint_stream.h"
#include "h3c/runtime/cuda/driver.h"

#include <cstdint>
#include <vector>

namespace h3c::rt {
class CheckpointWeights;
}

namespace h3c::runtime::cuda {

// Pinned staging and the copies out of it: a StreamSink for the device of device().
class PinnedStaging final : public h3c::rt::StreamSink {
public:
  PinnedStaging(int workers, int ring, uint64_t chunkBytes);
  ~PinnedStaging() override;  // waits for outstanding copies, then frees the streams, events and pinned memory
  PinnedStaging(const PinnedStaging &) = delete;
  PinnedStaging &operator=(const PinnedStaging &) = delete;
  void beginWorker(int worker) override;
  uint8_t *buffer(int worker) override;
  void copy(int worker, const std::vector<h3c::rt::StreamCopy> &copies) override;
  void finish() override;
  uint64_t pinnedBytes() const { return pinnedBytes_; }

private:
  struct Slot {
    uint8_t *host = nullptr;
    CUevent done = nullptr;
    bool pending = false;  // copies out of it were issued and `done` recorded after them
  };
  struct Worker {
    CUstream stream = nullptr;
    std::vector<Slot> slots;
    size_t current = 0, next = 0;  // the slot buffer() gave last; the one it gives next
  };
  void release() noexcept;
  void *pinned_ = nullptr;
  uint64_t pinnedBytes_ = 0;
  std::vector<Worker> workers_;
};

// How the load runs: H3C_LOAD_THREADS (default: the cores, at most 16), H3C_LOAD_CHUNK_MIB (default 16), two
// staging buffers per worker.
h3c::rt::StreamOptions uploadOptions(int *ring);

// Streams every stored tensor of `w` into `targets` (the plan's weights at their device addresses), with a progress
// line on stderr when `progress` is set and, always, one line at the end saying what was loaded and checked.
// Throws (naming the tensor or file) on any failure, after every copy has finished; the targets then hold a partial
// upload that the caller must not use.
void uploadCheckpoint(h3c::rt::CheckpointWeights &w, const std::vector<h3c::rt::StreamTarget> &targets, bool progress);

} // namespace h3c::runtime::cuda
