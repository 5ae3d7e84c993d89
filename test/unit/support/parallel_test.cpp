// parallelForEach: every item exactly once whatever the thread count, the caller takes part, and the error of the
// lowest failing item is the one rethrown.
#include "h3c/support/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
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
