// The ledger's content hash (support/content_hash.h) against an independent implementation of the documented formula
// in Python (test/lit/Inputs/content_hash.py: big integers, int.from_bytes), and the properties the ledger relies on.
#include "h3c/support/content_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

std::vector<unsigned char> chashBytes(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  unsigned x = seed * 2654435761u + 1;
  for (auto &c : v) {
    x = x * 1103515245u + 12345u;
    c = static_cast<unsigned char>(x >> 16);
  }
  return v;
}

} // namespace

TEST(ContentHash, MatchesAnIndependentPythonImplementation) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("h3c_chash_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const size_t sizes[] = {0, 1, 7, 8, 9, 15, 16, 17, 1000, 4099};
  std::string args;
  std::vector<std::string> ours;
  for (size_t k = 0; k < std::size(sizes); ++k) {
    const auto b = chashBytes(sizes[k], unsigned(k));
    const fs::path p = dir / ("b" + std::to_string(k));
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
    args += " " + p.string();
    ours.push_back(h3c::contentHash(b.data(), b.size()));
  }
  // test/lit/Inputs/content_hash.py: the formula as docs/contract.md section 9 writes it, in Python.
  const std::string script = std::string(H3C_SOURCE_DIR) + "/test/lit/Inputs/content_hash.py";
  FILE *f = popen((std::string(H3C_PYTHON) + " " + script + args).c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::vector<std::string> theirs;
  char line[128];
  while (std::fgets(line, sizeof line, f)) theirs.emplace_back(std::string(line).substr(0, 32));
  const int rc = pclose(f);
  fs::remove_all(dir);
  if (rc != 0 && theirs.empty()) GTEST_SKIP() << "no python3 on this machine";
  ASSERT_EQ(theirs.size(), ours.size());
  for (size_t k = 0; k < ours.size(); ++k) EXPECT_EQ(ours[k], theirs[k]) << sizes[k] << " bytes";
}

TEST(ContentHash, EveryByteAndItsPlaceCount) {
  auto b = chashBytes(4096 + 5, 3);
  const std::string h0 = h3c::contentHash(b.data(), b.size());
  EXPECT_EQ(h0.size(), 32u);
  EXPECT_EQ(h0, h3c::contentHash(b.data(), b.size()));
  for (size_t at : {size_t(0), size_t(7), size_t(2048), b.size() - 1}) {  // one bit anywhere, the tail included
    b[at] ^= 1;
    EXPECT_NE(h3c::contentHash(b.data(), b.size()), h0) << at;
    b[at] ^= 1;
  }
  // Two words swapped: the same multiset of words, another hash.
  std::swap_ranges(b.begin(), b.begin() + 8, b.begin() + 64);
  EXPECT_NE(h3c::contentHash(b.data(), b.size()), h0);
  std::swap_ranges(b.begin(), b.begin() + 8, b.begin() + 64);
  // A zero byte appended (the padded tail word alone would be equal): the length counts.
  auto c = b;
  c.push_back(0);
  EXPECT_NE(h3c::contentHash(c.data(), c.size()), h0);
  // The sums do not depend on the order the words are added in (what lets the GPU add them in any order).
  unsigned long long a = 0, s = 0;
  for (size_t i = b.size() / 8; i-- > 0;) {
    unsigned long long w;
    std::memcpy(&w, b.data() + 8 * i, 8);
    h3c::chash::addWord(w, i, a, s);
  }
  unsigned long long w = 0;
  for (size_t j = 0; j < b.size() % 8; ++j) w |= (unsigned long long)b[8 * (b.size() / 8) + j] << (8 * j);
  h3c::chash::addWord(w, b.size() / 8, a, s);
  EXPECT_EQ(h3c::contentHashHex(a, s, b.size()), h0);
}

// Large values are hashed in pieces on several threads: the same hash as the formula's one pass over the words
// (written out here with the header's addWord / finish), the tail word included.
TEST(ContentHash, PiecesOnThreadsGiveTheOnePassHash) {
  const auto b = chashBytes((size_t(40) << 20) + 3, 9);
  unsigned long long a = 0, s = 0;
  const size_t words = (b.size() + 7) / 8;
  for (size_t i = 0; i < words; ++i) {
    unsigned long long w = 0;
    for (size_t j = 0; j < 8 && 8 * i + j < b.size(); ++j) w |= (unsigned long long)b[8 * i + j] << (8 * j);
    h3c::chash::addWord(w, i, a, s);
  }
  EXPECT_EQ(h3c::contentHash(b.data(), b.size()), h3c::contentHashHex(a, s, b.size()));
}
