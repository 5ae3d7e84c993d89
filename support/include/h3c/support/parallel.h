// One thread pool pattern for the whole project (checkpoint hashing and synthesis, the CPU executor's row ranges,
// the NVRTC compile pool): a fixed number of items, taken in order from a shared counter by up to `threads` threads,
// the calling thread one of them. The other threads come from one pool per process, started when a call wants more
// than are idle and reused by every later call (nested calls and calls from several threads at once included: a
// caller never waits for a pool thread to become free, it works on its own items). A thread that cannot start (a
// process or memory limit) is no error: the others, and the caller, take its items, so results never depend on how
// many threads ran, only the wall time does.
#pragma once

#include <cstddef>
#include <functional>

namespace h3c {

// The machine's hardware threads (at least 1).
unsigned hardwareThreads();

// fn(i) for every i in [0, n), on min(threads, n) threads (0: hardwareThreads()). Every item runs exactly once, even
// after another item threw; when items throw, the exception of the lowest such index is rethrown after all threads
// joined (so the error a caller sees does not depend on thread timing).
void parallelForEach(size_t n, unsigned threads, const std::function<void(size_t)> &fn);

// The threads the pool has started so far in this process (each alive until the process ends): for tests that count
// the process's threads to show that nothing else is left running.
size_t poolThreads();

} // namespace h3c
