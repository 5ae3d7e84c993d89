// Errors in h3c: one exception type that carries where the problem is (a file, a JSON pointer, a tensor name, a node
// id) and what was expected. Tools catch it at the top, print "h3c: error: <where>: <what>" and exit non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace h3c {

class Error : public std::runtime_error {
public:
  Error(std::string where, std::string what)
      : std::runtime_error(where.empty() ? what : where + ": " + what), where_(std::move(where)),
        what_(std::move(what)) {}
  const std::string &where() const { return where_; }
  const std::string &message() const { return what_; }

private:
  std::string where_;
  std::string what_;
};

// fail("file.json#/nodes/3", "expected an integer, got {}", x)
template <typename... Args>
[[noreturn]] void fail(const std::string &where, fmt::format_string<Args...> f, Args &&...args) {
  throw Error(where, fmt::format(f, std::forward<Args>(args)...));
}

// Exit codes shared by every h3c command.
enum ExitCode : int {
  kExitOk = 0,
  kExitMismatch = 1,  // a check ran and found a difference (checkpoint check, ledger verify, trajectory drift)
  kExitError = 2,     // bad input, bad options, I/O failure
};

} // namespace h3c
