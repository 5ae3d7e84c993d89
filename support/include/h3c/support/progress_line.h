// `--progress` of the commands that move a whole checkpoint (`checkpoint synth|map`, a checkpoint load to the GPU):
// on a terminal one line redrawn in place, elsewhere (a log, a CI job) a line at most every two seconds and at the
// end, so a long copy is visible without flooding a log.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace h3c {

// "load: 120/638 tensors, 12.50 GiB, 2.1 s (6.39 GB/s)": GiB of the bytes, GB/s (10^9) of the rate.
inline std::string progressLineText(const char *what, size_t done, size_t total, uint64_t bytes, double seconds) {
  char line[256];
  std::snprintf(line, sizeof line, "%s: %zu/%zu tensors, %.2f GiB, %.1f s (%.2f GB/s)", what, done, total,
                double(bytes) / 1073741824.0, seconds, seconds > 0 ? double(bytes) / 1e9 / seconds : 0.0);
  return line;
}

class ProgressLine {
public:
  explicit ProgressLine(const char *what) : what_(what), tty_(isatty(fileno(stderr)) != 0) {}
  void operator()(size_t done, size_t total, uint64_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t0_).count();
    if (!tty_ && done != total && std::chrono::duration<double>(now - last_).count() < 2.0) return;
    last_ = now;
    std::fprintf(stderr, "%s%s%s", tty_ ? "\r" : "", progressLineText(what_, done, total, bytes, s).c_str(),
                 tty_ && done != total ? "" : "\n");
    std::fflush(stderr);
  }

private:
  const char *what_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), last_{};
};

} // namespace h3c
