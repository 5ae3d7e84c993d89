// The element types h3c moves around, and the one bf16 rounding every component shares (round to nearest even, NaN
// kept quiet). The CPU reference and the GPU kernels must round identically, so this is the only definition.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace h3c {

enum class DType { F32, BF16, F16, F64, I64, I32, U8, I8, I16, U16, U32, U64, BOOL };

size_t dtypeSize(DType t);
// safetensors spelling: "F32", "BF16", "I64", ...
std::string_view dtypeName(DType t);
// Returns false when `name` is not a safetensors dtype.
bool parseDType(std::string_view name, DType &out);
// A shape as the error messages write it: "[2, 32, 96]".
std::string shapeText(const std::vector<int64_t> &shape);

inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x0040u);  // NaN: keep sign and payload top, force quiet
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}

inline float bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float roundBf16(float f) { return bf16ToFloat(floatToBf16(f)); }

// `count` F32 values at `src` rounded to BF16 (floatToBf16) at `dst`. May run in place: dst may be src or lie before
// it (each value is read before anything at or after it is written), the BF16 values then fill the first half.
void roundF32ToBf16(const void *src, void *dst, size_t count);

} // namespace h3c
