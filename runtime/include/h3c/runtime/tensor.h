// A host tensor: dtype, shape and the raw little-endian bytes, as safetensors stores them. Requests, outputs and
// materialized weights travel in this form; the CPU executor converts to float for compute (every BF16 value is
// exact in float), the GPU executor uploads the bytes as they are.
#pragma once

#include "h3c/support/dtype.h"

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::rt {

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // Rounds to the dtype (bf16 RNE for BF16). Only float dtypes (F32, BF16, F64).
  static Tensor fromFloats(DType dtype, std::vector<int64_t> shape, const float *values);
  static Tensor fromInts(std::vector<int64_t> shape, const int64_t *values);  // I64

  int64_t numel() const;
  bool isFloat() const { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F64; }
  float getFloat(int64_t i) const;   // F32, BF16, F64 (rounded to float)
  int64_t getInt(int64_t i) const;   // I64, I32
  std::vector<float> toFloats() const;
  std::vector<int64_t> toInts() const;
  std::string shapeString() const;  // "[2, 32, 96]"
  // Non-finite elements of a float tensor (none for integer dtypes): counts, the first one's index and value, and a
  // description for messages and ledgers ("3 NaN, 1 Inf (first: element 17, -Inf)"), empty when all are finite.
  // The GPU executor fills one on the device for outputs that stay there (runtime/cuda/non_finite.h).
  struct NonFinite {
    int64_t nan = 0, inf = 0, first = -1;
    float firstValue = 0;  // NaN, +Inf or -Inf (the element at `first`)
    std::string text() const;
  };
  NonFinite nonFinite() const;
  // The same over raw bytes of `dtype` whose first element is element `firstIndex` of a larger tensor, added to
  // `acc` (a tensor checked piece by piece as it streams, pieces in order: `first` stays the lowest index).
  static void scanNonFinite(DType dtype, const uint8_t *bytes, size_t size, int64_t firstIndex, NonFinite &acc);
};

} // namespace h3c::rt
