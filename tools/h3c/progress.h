// `--progress` for the commands that write checkpoints: on a terminal one line redrawn in place, elsewhere (a log, a
// CI job) a line at most every two seconds and at the end, so a long write is visible without flooding a log.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace h3c::tool {

class WriteProgressLine {
public:
  explicit WriteProgressLine(const char *what) : what_(what), tty_(isatty(fileno(stderr)) != 0) {}
  void operator()(size_t done, size_t total, uint64_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t0_).count();
    if (!tty_ && done != total && std::chrono::duration<double>(now - last_).count() < 2.0) return;
    last_ = now;
    std::fprintf(stderr, "%s%s: %zu/%zu tensors, %.2f GiB, %.1f s (%.2f GB/s)%s", tty_ ? "\r" : "", what_, done,
                 total, double(bytes) / 1073741824.0, s, s > 0 ? double(bytes) / 1e9 / s : 0.0,
                 tty_ && done != total ? "" : "\n");
    std::fflush(stderr);
  }

private:
  const char *what_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), last_{};
};

} // namespace h3c::tool
