// parallelForEach: every item exactly once whatever the thread count, the caller takes part, the error of the
// lowest failing item is the one rethrown; the pool's threads are reused, nested and concurrent calls finish, and a
// forked child runs its own calls.
#include "h3c/support/parallel.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using h3c::parallelForEach;

TEST(ParallelForEach, EveryItemExactlyOnce) {
  for (unsigned threads : {0u, 1u, 2u, 7u, 64u}) {
    for (size_t n : {size_t(0), size_t(1), size_t(5), size_t(1000)}) {
      std::vector<std::atomic<int>> seen(n);
      parallelForEach(n, threads, [&](size_t i) { seen[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i].load(), 1) << "item " << i << " of " << n << ", " << threads;
    }
  }
}

TEST(ParallelForEach, OneThreadIsTheCaller) {
  const auto caller = std::this_thread::get_id();
  std::set<std::thread::id> ids;
  std::mutex mu;
  parallelForEach(50, 1, [&](size_t) {
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids, std::set<std::thread::id>{caller});
}

TEST(ParallelForEach, TheLowestFailingItemsErrorAfterAllItemsRan) {
  for (unsigned threads : {1u, 4u}) {
    std::atomic<int> ran{0};
    try {
      parallelForEach(200, threads, [&](size_t i) {
        ++ran;
        if (i == 150 || i == 37 || i == 99) throw std::runtime_error("item " + std::to_string(i));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error &e) {
      EXPECT_EQ(std::string(e.what()), "item 37") << threads << " threads";
    }
    EXPECT_EQ(ran.load(), 200);
  }
}

// The pool's threads are started once and reused: after a first call has started them, every item of 50 further
// calls of the same width runs on the caller or on a thread that was already there (its kernel thread id is in
// /proc/self/task before them).
TEST(ParallelForEach, LaterCallsReuseThePoolsThreads) {
  auto call = [](std::set<std::string> &ran, std::mutex &mu) {
    parallelForEach(8, 4, [&](size_t) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ran.insert(std::to_string(gettid()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  };
  std::set<std::string> ran;
  std::mutex mu;
  call(ran, mu);
  std::set<std::string> before;
  for (const auto &e : std::filesystem::directory_iterator("/proc/self/task")) before.insert(e.path().filename());
  ran.clear();
  for (int i = 0; i < 50; ++i) call(ran, mu);
  for (const auto &tid : ran) EXPECT_TRUE(before.count(tid)) << "thread " << tid << " was started by a later call";
  EXPECT_GT(ran.size(), 1u) << "no pool thread took an item in 50 calls";
}

// Calls from several threads at once, each item itself a parallel call (the CPU executor's row ranges inside the
// checkpoint tools' items): every item exactly once, and none waits for a pool thread to become free.
TEST(ParallelForEach, NestedAndConcurrentCallsFinish) {
  std::vector<std::atomic<int>> seen(4 * 16 * 32);
  std::vector<std::thread> callers;
  for (size_t c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      parallelForEach(16, 3, [&](size_t i) {
        parallelForEach(32, 2, [&](size_t j) { seen[(c * 16 + i) * 32 + j].fetch_add(1); });
      });
    });
  for (auto &t : callers) t.join();
  for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k].load(), 1) << "item " << k;
}

// A child process after fork() has only the forking thread: its calls start their own threads and finish (the
// parent's pool, copied with its mutex and its count of idle threads, is not used there).
TEST(ParallelForEach, AForkedChildRunsItsOwnCalls) {
  parallelForEach(64, 4, [](size_t) { std::this_thread::sleep_for(std::chrono::microseconds(100)); });
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // a child that hangs is killed, and the parent sees the signal
    std::vector<std::atomic<int>> seen(1000);
    std::set<std::thread::id> ids;
    std::mutex mu;
    parallelForEach(seen.size(), 4, [&](size_t i) {
      seen[i].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      if (ids.size() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // room for helpers to join
    });
    for (auto &s : seen)
      if (s.load() != 1) _exit(1);
    _exit(ids.size() > 1 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: an item ran not exactly once, 2: no pool thread helped the child";
}
