// parallelForEach (parallel.h).
#include "h3c/support/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace h3c {

unsigned hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void parallelForEach(size_t n, unsigned threads, const std::function<void(size_t)> &fn) {
  if (n == 0) return;
  if (threads == 0) threads = hardwareThreads();
  threads = unsigned(std::min<size_t>(threads, n));
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t errorAt = n;
  std::exception_ptr error;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < errorAt) {
          errorAt = i;
          error = std::current_exception();
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);  // no reallocation while threads run
  // Nothing may leave this loop while started threads are joinable (std::terminate).
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (...) {  // std::system_error from the start, std::bad_alloc for the thread's state
      break;
    }
  }
  work();
  for (auto &t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

} // namespace h3c
