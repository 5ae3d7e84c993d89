// The host side of the ledger's content hash (content_hash.h holds the formula, shared with the GPU kernel).
#include "h3c/support/content_hash.h"

#include <fmt/format.h>

#include <cstring>

namespace h3c {

void contentHashSums(const void *bytes, size_t n, unsigned long long &a, unsigned long long &b) {
  const auto *p = static_cast<const unsigned char *>(bytes);
  a = b = 0;
  const size_t full = n / 8;
  for (size_t i = 0; i < full; ++i) {
    unsigned long long w;
    std::memcpy(&w, p + 8 * i, 8);  // little-endian hosts only (x86-64, aarch64): the word's bytes in order
    chash::addWord(w, i, a, b);
  }
  if (n % 8) {
    unsigned long long w = 0;
    for (size_t j = 0; j < n % 8; ++j)
      w |= (unsigned long long)p[8 * full + j] << (8 * j);
    chash::addWord(w, full, a, b);
  }
}

std::string contentHashHex(unsigned long long a, unsigned long long b, size_t n) {
  return fmt::format("{:016x}{:016x}", chash::finishA(a, n), chash::finishB(b, n));
}

std::string contentHash(const void *bytes, size_t n) {
  unsigned long long a, b;
  contentHashSums(bytes, n, a, b);
  return contentHashHex(a, b, n);
}

} // namespace h3c
