#include "h3c/support/error.h"
// Error is header-only; this file keeps the library non-empty and the vtable in one place.
namespace h3c {} // namespace h3c
