#include "h3c/support/dtype.h"

namespace h3c {

namespace {
struct Entry {
  DType t;
  std::string_view name;
  size_t size;
};
constexpr Entry kTable[] = {
    {DType::F32, "F32", 4},  {DType::BF16, "BF16", 2}, {DType::F16, "F16", 2}, {DType::F64, "F64", 8},
    {DType::I64, "I64", 8},  {DType::I32, "I32", 4},   {DType::U8, "U8", 1},   {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},  {DType::U16, "U16", 2},   {DType::U32, "U32", 4}, {DType::U64, "U64", 8},
    {DType::BOOL, "BOOL", 1},
};
} // namespace

size_t dtypeSize(DType t) {
  for (const auto &e : kTable)
    if (e.t == t)
      return e.size;
  return 0;
}

std::string_view dtypeName(DType t) {
  for (const auto &e : kTable)
    if (e.t == t)
      return e.name;
  return "?";
}

bool parseDType(std::string_view name, DType &out) {
  for (const auto &e : kTable)
    if (e.name == name) {
      out = e.t;
      return true;
    }
  return false;
}

void roundF32ToBf16(const void *src, void *dst, size_t count) {
  const uint8_t *in = static_cast<const uint8_t *>(src);
  uint8_t *out = static_cast<uint8_t *>(dst);
  for (size_t i = 0; i < count; ++i) {
    float f;
    std::memcpy(&f, in + 4 * i, 4);  // value i is read before BF16 value i (at or before it) is written
    const uint16_t b = floatToBf16(f);
    std::memcpy(out + 2 * i, &b, 2);
  }
}

std::string shapeText(const std::vector<int64_t> &s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i)
    t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

} // namespace h3c
