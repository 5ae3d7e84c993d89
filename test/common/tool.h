// Runs the h3c binary under test (H3C_TOOL, the build's own) from a test: the one way tests drive the command line.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace h3c::testtool {

// `env` are assignments put before the command ("H3C_X=1"). Returns the exit code (-1 when the process did not
// exit normally); stdout and stderr, interleaved, in *out.
inline int runTool(const std::string &args, std::string *out = nullptr, const std::string &env = "") {
  std::string cmd = (env.empty() ? "" : env + " ") + std::string(H3C_TOOL) + " " + args + " 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p)
    return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    text.append(buf, n);
  int st = pclose(p);
  if (out)
    *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// True when this h3c was built with the MLIR compiler (`h3c compile` exists).
inline bool toolHasCompile() {
  std::string out;
  runTool("compile --help", &out);
  return out.find("--arch") != std::string::npos;
}

// A fresh folder per test (named after the process and the test), removed at the end; `t / "f"` is a path in it.
struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string &prefix = "h3c_test") {
    dir = std::filesystem::temp_directory_path() /
          (prefix + "_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string operator/(const std::string &f) const { return (dir / f).string(); }
};

} // namespace h3c::testtool
