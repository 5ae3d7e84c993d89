// The checkpoint load to the GPU (weight_upload.h): pinned staging rings, per-worker copy streams, and the call the
// GPU executor makes.
#include "h3c/runtime/cuda/weight_upload.h"

#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"
#include "h3c/support/progress_line.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace h3c::runtime::cuda {

PinnedStaging::PinnedStaging(int workers, int ring, uint64_t chunkBytes) {
  if (workers < 1 || ring < 1 || chunkBytes == 0)
    fail("cuda", "pinned staging: {} workers x {} buffers x {} bytes", workers, ring, chunkBytes);
  device();  // the primary context, current on this thread
  const DriverApi &d = driver();
  pinnedBytes_ = uint64_t(workers) * uint64_t(ring) * chunkBytes;
  try {
    check(d.cuMemHostAlloc(&pinned_, size_t(pinnedBytes_), 0),
          "pinning " + std::to_string(pinnedBytes_ >> 20) + " MiB of host staging for the checkpoint load");
    workers_.resize(size_t(workers));
    uint8_t *at = static_cast<uint8_t *>(pinned_);
    for (Worker &w : workers_) {
      check(d.cuStreamCreate(&w.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      w.slots.resize(size_t(ring));
      for (Slot &s : w.slots) {
        s.host = at;
        at += chunkBytes;
        check(d.cuEventCreate(&s.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

PinnedStaging::~PinnedStaging() { release(); }

void PinnedStaging::release() noexcept {
  if (!driverAvailable()) return;
  const DriverApi &d = driver();
  // Nothing may still read a staging buffer when it is freed: wait for every stream first (errors were reported
  // by finish(); here they only mean there is nothing left to wait for).
  for (Worker &w : workers_)
    if (w.stream) d.cuStreamSynchronize(w.stream);
  for (Worker &w : workers_) {
    for (Slot &s : w.slots)
      if (s.done) d.cuEventDestroy(s.done);
    if (w.stream) d.cuStreamDestroy(w.stream);
  }
  workers_.clear();
  if (pinned_) d.cuMemFreeHost(pinned_);
  pinned_ = nullptr;
}

void PinnedStaging::beginWorker(int) { device(); }

uint8_t *PinnedStaging::buffer(int worker) {
  Worker &w = workers_.at(size_t(worker));
  Slot &s = w.slots[w.next];
  if (s.pending) {
    check(driver().cuEventSynchronize(s.done), "checkpoint load: waiting for a staging buffer's copies");
    s.pending = false;
  }
  w.current = w.next;
  w.next = (w.next + 1) % w.slots.size();
  return s.host;
}

void PinnedStaging::copy(int worker, const std::vector<h3c::rt::StreamCopy> &copies) {
  Worker &w = workers_.at(size_t(worker));
  Slot &s = w.slots[w.current];
  const DriverApi &d = driver();
  for (const auto &c : copies)
    check(d.cuMemcpyHtoDAsync(CUdeviceptr(c.address), s.host + c.bufferOffset, size_t(c.length), w.stream),
          "checkpoint load: copy of " + std::to_string(c.length) + " bytes to the device");
  check(d.cuEventRecord(s.done, w.stream), "cuEventRecord");
  s.pending = true;
}

void PinnedStaging::finish() {
  const DriverApi &d = driver();
  CUresult first = CUDA_SUCCESS;
  for (Worker &w : workers_) {  // every stream, even after one failed
    CUresult r = w.stream ? d.cuStreamSynchronize(w.stream) : CUDA_SUCCESS;
    if (first == CUDA_SUCCESS) first = r;
    for (Slot &s : w.slots) s.pending = false;
  }
  check(first, "checkpoint load: finishing the copies");
}

namespace {

long envInt(const char *name, long dflt, long lo, long hi) {
  const char *e = std::getenv(name);
  if (!e || !*e) return dflt;
  char *end = nullptr;
  long v = std::strtol(e, &end, 10);
  if (*end || v < lo || v > hi) fail(name, "expected an integer in [{}, {}], got '{}'", lo, hi, e);
  return v;
}

} // namespace

h3c::rt::StreamOptions uploadOptions(int *ring) {
  h3c::rt::StreamOptions o;
  const long cores = long(hardwareThreads());
  o.workers = int(envInt("H3C_LOAD_THREADS", std::min(cores, 16L), 1, 256));
  o.chunkBytes = uint64_t(envInt("H3C_LOAD_CHUNK_MIB", 16, 1, 1024)) << 20;
  *ring = 2;  // one buffer being filled while the other's copy runs: filling is the slower side
  return o;
}

void uploadCheckpoint(h3c::rt::CheckpointWeights &w, const std::vector<h3c::rt::StreamTarget> &targets,
                      bool progress) {
  int ring = 0;
  h3c::rt::StreamOptions opt = uploadOptions(&ring);
  if (progress) opt.progress = ProgressLine("load");
  PinnedStaging staging(opt.workers, ring, opt.chunkBytes);
  const std::string summary = w.stream(targets, staging, opt, "to the GPU");
  std::fprintf(stderr, "%s\n", summary.c_str());
  std::fflush(stderr);
}

} // namespace h3c::runtime::cuda
