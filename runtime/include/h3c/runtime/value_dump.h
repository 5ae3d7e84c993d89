// H3C_DUMP_VALUES=DIR: both executors write every op's outputs to DIR as they are computed, one file per value,
// `<op index>_<value name>.<f32|i64>.bin` (float values as F32, bf16 ones widened exactly), so that a CPU run and a
// GPU run of the same plan and request can be compared op by op to find the first value whose bits part
// (scripts/compare-dumps.py). A diagnosis aid: it changes no result and costs a device-to-host copy per value.
#pragma once

#include "h3c/support/dtype.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace h3c::rt {

class ValueDump {
public:
  // The dump folder named by $H3C_DUMP_VALUES (created), or nullopt when it is not set.
  static std::optional<ValueDump> fromEnv();
  // `data` holds `count` values of `dtype` (F32, BF16 bits or I64) in the value's row-major layout.
  void write(int64_t opIndex, const std::string &value, DType dtype, const void *data, size_t count) const;

private:
  explicit ValueDump(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
};

} // namespace h3c::rt
