// ValueDump (value_dump.h): per-op value files for comparing executors.
#include "h3c/runtime/value_dump.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace h3c::rt {

std::optional<ValueDump> ValueDump::fromEnv() {
  const char *d = std::getenv("H3C_DUMP_VALUES");
  if (!d || !*d) return std::nullopt;
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) fail(std::string("H3C_DUMP_VALUES=") + d, "cannot create the folder: {}", ec.message());
  return ValueDump(d);
}

void ValueDump::write(int64_t opIndex, const std::string &value, DType dtype, const void *data, size_t count) const {
  std::string name = value;
  for (char &c : name)
    if (c == '/' || c == ':' || c == '@') c = '_';
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%04lld_", (long long)opIndex);
  std::string bytes;
  if (dtype == DType::I64) {
    bytes.assign(static_cast<const char *>(data), count * 8);
  } else if (dtype == DType::BF16) {
    std::vector<float> f(count);
    const uint16_t *b = static_cast<const uint16_t *>(data);
    for (size_t i = 0; i < count; ++i) f[i] = bf16ToFloat(b[i]);
    bytes.assign(reinterpret_cast<const char *>(f.data()), count * 4);
  } else {
    bytes.assign(static_cast<const char *>(data), count * 4);
  }
  writeFileAtomic(dir_ / (prefix + name + (dtype == DType::I64 ? ".i64.bin" : ".f32.bin")), bytes);
}

} // namespace h3c::rt
