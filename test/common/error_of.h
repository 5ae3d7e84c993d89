// The message of the h3c::Error a statement throws, for tests that check what an error says.
#pragma once

#include "h3c/support/error.h"

#include <functional>
#include <string>

namespace h3c::testtool {

// e.what() of the h3c::Error `f` throws; "(no error)" when it returns (any other exception passes through).
inline std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace h3c::testtool
