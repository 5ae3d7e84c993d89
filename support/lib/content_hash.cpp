// The host side of the ledger's content hash (content_hash.h holds the formula, shared with the GPU kernel).
#include "h3c/support/content_hash.h"

#include "h3c/support/parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace h3c {

namespace {

// The lane sums' terms of bytes [8 * first, 8 * first + n) of a value (words first, first + 1, ...), added to a, b.
void addSums(const unsigned char *p, size_t n, size_t first, unsigned long long &a, unsigned long long &b) {
  const size_t full = n / 8;
  for (size_t i = 0; i < full; ++i) {
    unsigned long long w;
    std::memcpy(&w, p + 8 * i, 8);  // little-endian hosts only (x86-64, aarch64): the word's bytes in order
    chash::addWord(w, first + i, a, b);
  }
  if (n % 8) {
    unsigned long long w = 0;
    for (size_t j = 0; j < n % 8; ++j)
      w |= (unsigned long long)p[8 * full + j] << (8 * j);
    chash::addWord(w, first + full, a, b);
  }
}

// Values above this size are hashed in pieces of this size on the machine's threads (a 33B model's weights, a
// trainer's state dict): the sums are integer sums, so the pieces' order cannot change them.
constexpr size_t kPiece = size_t(8) << 20;

} // namespace

void contentHashSums(const void *bytes, size_t n, unsigned long long &a, unsigned long long &b) {
  const auto *p = static_cast<const unsigned char *>(bytes);
  a = b = 0;
  if (n <= 2 * kPiece) {
    addSums(p, n, 0, a, b);
    return;
  }
  const size_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<unsigned long long> pa(pieces, 0), pb(pieces, 0);
  parallelForEach(pieces, 0, [&](size_t k) {
    addSums(p + k * kPiece, std::min(kPiece, n - k * kPiece), k * (kPiece / 8), pa[k], pb[k]);
  });
  for (size_t k = 0; k < pieces; ++k) {
    a += pa[k];
    b += pb[k];
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
