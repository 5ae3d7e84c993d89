// The host LoRA merge (lora.h; docs/contract.md section 12). Per output element: w = float(W), then per term in order
// acc = the fma chain over k ascending of up[i][k] * down[k][j] from 0, w = w + s * acc (a rounded multiply, then a
// rounded add), and one rounding to W's dtype at the end. The device merge (cuda/lora_merge.h) computes the same
// sequence. The project compiles with -ffp-contract=off (CMakeLists.txt), and the multiply and the add are also
// separate loops here, so `w + s * acc` is never fused whatever the flags.
#include "h3c/runtime/lora.h"

#include "h3c/support/dtype.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace h3c::rt {

namespace {

constexpr int64_t kRowsPerItem = 16;  // the work unit of the thread pool (the results do not depend on it)

// acc[j] = fma(a, d[j], acc[j]) for j in [0, n). std::fma is exactly rounded, so the vector form (FMA instructions,
// on machines that have them) gives the same bits as the scalar library call.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define H3C_LORA_FMA_CLONES 1
__attribute__((target("avx2,fma"))) void fmaRowVector(float a, const float *d, float *acc, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    acc[j] = __builtin_fmaf(a, d[j], acc[j]);
}
bool haveVectorFma() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}
#endif

void fmaRow(float a, const float *d, float *acc, int64_t n) {
#ifdef H3C_LORA_FMA_CLONES
  if (haveVectorFma())
    return fmaRowVector(a, d, acc, n);
#endif
  for (int64_t j = 0; j < n; ++j)
    acc[j] = std::fma(a, d[j], acc[j]);
}

} // namespace

void checkLoraTerms(DType dtype, const std::vector<int64_t> &shape, const LoraTerms &terms) {
  if ((dtype != DType::BF16 && dtype != DType::F32) || shape.size() != 2)
    fail("LoRA merge", "the weight must be a BF16 or F32 matrix; it is {} {}", dtypeName(dtype), shapeText(shape));
  for (const auto &[m, scale] : terms) {
    if (!m)
      fail("LoRA merge", "a null module");
    if (m->target != terms[0].first->target)
      fail("LoRA merge " + m->target, "merged into the same weight as {}", terms[0].first->target);
    const std::vector<int64_t> down = {m->rank, shape[1]}, up = {shape[0], m->rank};
    if (m->rank < 1 || m->down.dtype != DType::F32 || m->up.dtype != DType::F32 || m->down.shape != down ||
        m->up.shape != up || m->down.bytes.size() != size_t(4 * m->rank * shape[1]) ||
        m->up.bytes.size() != size_t(4 * m->rank * shape[0]))
      fail("LoRA merge " + m->target, "factors {} {} / {} {} do not fit the weight {} at rank {} (F32 [rank, in] / "
           "[out, rank])", dtypeName(m->down.dtype), shapeText(m->down.shape), dtypeName(m->up.dtype),
           shapeText(m->up.shape), shapeText(shape), m->rank);
  }
}

float loraTermScale(const LoraModule &m, double scale) {
  const float s = float(scale * m.alpha / double(m.rank));
  if (!std::isfinite(scale) || !std::isfinite(s) || m.rank < 1)
    fail("LoRA merge " + m.target, "the term's scale {} * alpha {} / rank {} is not a finite float", scale, m.alpha,
         m.rank);
  return s;
}

Tensor mergeLora(const Tensor &w, const LoraTerms &terms, int threads) {
  checkLoraTerms(w.dtype, w.shape, terms);
  if (w.bytes.size() != size_t(w.numel()) * dtypeSize(w.dtype))
    fail("LoRA merge", "the weight's bytes ({}) do not match its shape {}", w.bytes.size(), shapeText(w.shape));
  if (terms.empty())
    return w;
  std::vector<float> scales;
  for (const auto &[m, scale] : terms)
    scales.push_back(loraTermScale(*m, scale));
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const bool bf16 = w.dtype == DType::BF16;
  Tensor out = Tensor::zeros(w.dtype, w.shape);
  const size_t items = size_t((rows + kRowsPerItem - 1) / kRowsPerItem);
  // Per item: the first non-finite element (flat index) and its value; the lowest over items is the error.
  std::vector<int64_t> firstBad(items, -1);
  std::vector<float> badValue(items, 0);
  parallelForEach(items, threads < 0 ? 1u : unsigned(threads), [&](size_t item) {
    std::vector<float> acc(static_cast<size_t>(cols)), row(static_cast<size_t>(cols));
    const int64_t r0 = int64_t(item) * kRowsPerItem, r1 = std::min(rows, r0 + kRowsPerItem);
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        if (bf16) {
          uint16_t b;
          std::memcpy(&b, w.bytes.data() + 2 * (i * cols + j), 2);
          row[size_t(j)] = bf16ToFloat(b);
        } else {
          std::memcpy(&row[size_t(j)], w.bytes.data() + 4 * (i * cols + j), 4);
        }
      }
      for (size_t t = 0; t < terms.size(); ++t) {
        const LoraModule &m = *terms[t].first;
        const float *up = reinterpret_cast<const float *>(m.up.bytes.data()) + i * m.rank;
        const float *down = reinterpret_cast<const float *>(m.down.bytes.data());
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k = 0; k < m.rank; ++k)
          fmaRow(up[k], down + k * cols, acc.data(), cols);
        const float s = scales[t];
        for (int64_t j = 0; j < cols; ++j)
          acc[size_t(j)] = s * acc[size_t(j)];
        for (int64_t j = 0; j < cols; ++j)
          row[size_t(j)] = row[size_t(j)] + acc[size_t(j)];
      }
      for (int64_t j = 0; j < cols; ++j) {
        const float v = bf16 ? roundBf16(row[size_t(j)]) : row[size_t(j)];
        if (!std::isfinite(v) && firstBad[item] < 0) {
          firstBad[item] = i * cols + j;
          badValue[item] = v;
        }
        if (bf16) {
          const uint16_t b = floatToBf16(row[size_t(j)]);
          std::memcpy(out.bytes.data() + 2 * (i * cols + j), &b, 2);
        } else {
          std::memcpy(out.bytes.data() + 4 * (i * cols + j), &v, 4);
        }
      }
    }
  });
  for (size_t item = 0; item < items; ++item)
    if (firstBad[item] >= 0)
      fail("LoRA merge " + terms[0].first->target, "merged element [{}, {}] is {} (strict: merged weights must be "
           "finite)", firstBad[item] / cols, firstBad[item] % cols, badValue[item]);
  return out;
}

} // namespace h3c::rt
