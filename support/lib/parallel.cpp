// parallelForEach (parallel.h) on one pool of worker threads per process.
#include "h3c/support/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace h3c {
namespace {

// One call's items: taken in order from `next` by the caller and the pool threads that join it.
struct Job {
  Job(size_t n, const std::function<void(size_t)> &fn) : n(n), fn(fn) {}
  const size_t n;
  const std::function<void(size_t)> &fn;
  std::atomic<size_t> next{0};
  std::mutex mu;  // guards errorAt and error
  size_t errorAt = SIZE_MAX;
  std::exception_ptr error;
  // Guarded by the pool's mutex:
  unsigned seats = 0;   // pool threads that may still join (threads - 1, less those that joined)
  unsigned working = 0; // pool threads working on it now

  void work() {
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
  }
};

// The worker threads, started when a call wants more helpers than are idle and kept for every later call: the CPU
// executor makes one call per op and row range, and starting and joining threads per call cost the test suite
// seconds (much more under AddressSanitizer, which sets up every new thread's state). A call never waits for a
// thread to become free: the caller works on its own items, so nested calls and calls from several threads at once
// finish whatever the pool is doing (they only get fewer helpers).
class Pool {
public:
  static Pool &get() {
    // Never destroyed: idle workers wait on its condition variable until the process ends. A child process after
    // fork() has none of the parent's workers (only the forking thread), and its copy of the mutex may be held by a
    // worker that no longer exists: it starts a fresh pool (the old one stays reachable, for the leak checker).
    static std::once_flag once;
    std::call_once(once, [] {
      instance_ = new Pool;
      pthread_atfork(nullptr, nullptr, [] {
        Pool *fresh = new Pool;
        fresh->beforeFork_ = instance_;
        instance_ = fresh;
      });
    });
    return *instance_;
  }

  void run(Job &job, unsigned helpers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job.seats = helpers;
      open_.push_back(&job);
      openSeats_ += helpers;
      // Nothing may throw past this point while the job is open; a thread that cannot start (a process or memory
      // limit) is no error: the caller and the other threads take its items.
      while (idle_ < openSeats_) {
        try {
          std::thread(&Pool::workerLoop, this).detach();
        } catch (...) {  // std::system_error from the start, std::bad_alloc for the thread's state
          break;
        }
        ++idle_;
        ++started_;
      }
    }
    wake_.notify_all();
    job.work();
    // Every item is taken: close the job to threads that have not joined yet, and wait for those working on it.
    std::unique_lock<std::mutex> lock(mu_);
    if (job.seats) {
      open_.erase(std::find(open_.begin(), open_.end(), &job));
      openSeats_ -= job.seats;
      job.seats = 0;
    }
    left_.wait(lock, [&] { return job.working == 0; });
  }

  size_t started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

private:
  Pool() = default;
  static inline Pool *instance_ = nullptr;
  Pool *beforeFork_ = nullptr;  // the parent's pool, in a forked child

  std::mutex mu_;
  std::condition_variable wake_;  // a job was opened
  std::condition_variable left_;  // a thread left a job
  std::deque<Job *> open_;        // jobs with seats, oldest first
  unsigned openSeats_ = 0;        // their seats, together
  unsigned idle_ = 0;             // threads waiting for a job
  size_t started_ = 0;            // threads started, all alive until the process ends

  void workerLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return !open_.empty(); });
      Job &job = *open_.front();
      --idle_;
      --openSeats_;
      ++job.working;
      if (--job.seats == 0) open_.pop_front();
      lock.unlock();
      job.work();
      lock.lock();
      ++idle_;
      if (--job.working == 0) left_.notify_all();
    }
  }
};

} // namespace

unsigned hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

size_t poolThreads() { return Pool::get().started(); }

void parallelForEach(size_t n, unsigned threads, const std::function<void(size_t)> &fn) {
  if (n == 0) return;
  if (threads == 0) threads = hardwareThreads();
  threads = unsigned(std::min<size_t>(threads, n));
  Job job(n, fn);
  if (threads == 1) job.work();  // the caller alone: no pool
  else Pool::get().run(job, threads - 1);
  if (job.error) std::rethrow_exception(job.error);
}

} // namespace h3c
