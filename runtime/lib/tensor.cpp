#include "h3c/runtime/tensor.h"

#include "h3c/support/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace h3c::rt {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(size_t(t.numel()) * dtypeSize(dtype), 0);
  return t;
}

Tensor Tensor::fromFloats(DType dtype, std::vector<int64_t> shape, const float *v) {
  Tensor t = zeros(dtype, std::move(shape));
  int64_t n = t.numel();
  if (n == 0)  // empty modalities: `v` may be null (an empty vector's data())
    return t;
  if (dtype == DType::F32) {
    std::memcpy(t.bytes.data(), v, size_t(n) * 4);
  } else if (dtype == DType::BF16) {
    auto *p = reinterpret_cast<uint16_t *>(t.bytes.data());
    for (int64_t i = 0; i < n; ++i)
      p[i] = floatToBf16(v[i]);
  } else if (dtype == DType::F64) {
    auto *p = reinterpret_cast<double *>(t.bytes.data());
    for (int64_t i = 0; i < n; ++i)
      p[i] = v[i];
  } else {
    fail("tensor", "fromFloats: {} is not a float dtype", dtypeName(dtype));
  }
  return t;
}

Tensor Tensor::fromInts(std::vector<int64_t> shape, const int64_t *v) {
  Tensor t = zeros(DType::I64, std::move(shape));
  if (!t.bytes.empty())
    std::memcpy(t.bytes.data(), v, t.bytes.size());
  return t;
}

float Tensor::getFloat(int64_t i) const {
  switch (dtype) {
  case DType::F32: {
    float f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  case DType::BF16: {
    uint16_t b;
    std::memcpy(&b, bytes.data() + i * 2, 2);
    return bf16ToFloat(b);
  }
  case DType::F64: {
    double d;
    std::memcpy(&d, bytes.data() + i * 8, 8);
    return float(d);
  }
  default:
    fail("tensor", "getFloat: {} is not a float dtype", dtypeName(dtype));
  }
}

int64_t Tensor::getInt(int64_t i) const {
  switch (dtype) {
  case DType::I64: {
    int64_t v;
    std::memcpy(&v, bytes.data() + i * 8, 8);
    return v;
  }
  case DType::I32: {
    int32_t v;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    return v;
  }
  default:
    fail("tensor", "getInt: {} is not an integer dtype", dtypeName(dtype));
  }
}

std::vector<float> Tensor::toFloats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (out.empty())
    return out;
  if (dtype == DType::F32) {
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  if (dtype == DType::BF16) {
    const uint8_t *p = bytes.data();
    for (size_t i = 0; i < out.size(); ++i) {
      uint32_t u = uint32_t(p[2 * i]) << 16 | uint32_t(p[2 * i + 1]) << 24;  // little-endian bf16 -> f32 bits
      std::memcpy(&out[i], &u, 4);
    }
    return out;
  }
  for (int64_t i = 0; i < numel(); ++i)
    out[size_t(i)] = getFloat(i);
  return out;
}

std::vector<int64_t> Tensor::toInts() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i)
    out[size_t(i)] = getInt(i);
  return out;
}

std::string Tensor::shapeString() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

} // namespace h3c::rt

namespace h3c::rt {

namespace {

// Elements of type W whose exponent bits are all set (NaN when a mantissa bit is set too, else Inf). A first pass
// without branches (the compiler vectorizes it) finds whether a block holds any at all: the weights of a checkpoint
// stream through here at load time, and almost every block holds none.
template <typename W>
void scanWords(const uint8_t *bytes, size_t n, int64_t firstIndex, W expMask, W mantMask, Tensor::NonFinite &r) {
  constexpr size_t kBlock = 4096;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    unsigned any = 0;
    for (size_t i = b; i < e; ++i) {
      W w;
      std::memcpy(&w, bytes + i * sizeof(W), sizeof(W));
      any |= unsigned((w & expMask) == expMask);
    }
    if (!any)
      continue;
    for (size_t i = b; i < e; ++i) {
      W w;
      std::memcpy(&w, bytes + i * sizeof(W), sizeof(W));
      if ((w & expMask) != expMask)
        continue;
      const bool nan = (w & mantMask) != 0;
      (nan ? r.nan : r.inf) += 1;
      if (r.first < 0) {
        r.first = firstIndex + int64_t(i);
        const bool negative = (w >> (8 * sizeof(W) - 1)) != 0;
        r.firstValue = nan ? std::numeric_limits<float>::quiet_NaN()
                           : negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      }
    }
  }
}

} // namespace

// By bit pattern (all exponent bits set), so the check costs one pass over the bytes and no conversion.
void Tensor::scanNonFinite(DType dtype, const uint8_t *bytes, size_t size, int64_t firstIndex, NonFinite &acc) {
  if (dtype == DType::F32)
    scanWords(bytes, size / 4, firstIndex, uint32_t(0x7F800000u), uint32_t(0x007FFFFFu), acc);
  else if (dtype == DType::BF16)
    scanWords(bytes, size / 2, firstIndex, uint16_t(0x7F80u), uint16_t(0x007Fu), acc);
  else if (dtype == DType::F16)
    scanWords(bytes, size / 2, firstIndex, uint16_t(0x7C00u), uint16_t(0x03FFu), acc);
  else if (dtype == DType::F64)
    scanWords(bytes, size / 8, firstIndex, uint64_t(0x7FF0000000000000ull), uint64_t(0x000FFFFFFFFFFFFFull), acc);
}

Tensor::NonFinite Tensor::nonFinite() const {
  NonFinite r;
  scanNonFinite(dtype, bytes.data(), bytes.size(), 0, r);
  return r;
}

std::string Tensor::NonFinite::text() const {
  if (first < 0)
    return {};
  const char *value = std::isnan(firstValue) ? "NaN" : std::signbit(firstValue) ? "-Inf" : "+Inf";
  return fmt::format("{} NaN, {} Inf (first: element {}, {})", nan, inf, first, value);
}

} // namespace h3c::rt
