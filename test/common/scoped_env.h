// Sets an environment variable for one scope, restoring what was there (the loaders' overrides in tests).
#pragma once

#include <cstdlib>
#include <string>

namespace h3c::testtool {

class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name_;
  std::string old_;
  bool had_ = false;
};

} // namespace h3c::testtool
