// Float32 checkpoint folders for the tests of the F32 -> BF16 cast (checkpoint_weights.h), and the expectation they
// are checked against: an F32 -> BF16 rounding computed another way than support/dtype.h's bit trick (scaling to
// the BF16 quantum in double arithmetic and rounding with nearbyint, ties to even), so a wrong rounding in the
// library (truncation, ties away from zero, a missed overflow) cannot agree with it.
#pragma once

#include "h3c/models/checkpoint.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace h3c::testf32 {

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// torch's .to(torch.bfloat16) of a value that is not NaN (c10 rounds to nearest, ties to even, and overflows to
// Inf: IEEE round-to-nearest-even into 8 significant bits, exponents as F32's, subnormals below 2^-126).
inline uint16_t referenceBf16(float x) {
  const double d = std::fabs(double(x));
  const double largest = std::ldexp(255.0, 120);  // 0x7F7F: (2 - 2^-7) * 2^127
  double r;
  if (d >= largest + std::ldexp(1.0, 119))  // from half a quantum above the largest (a tie: 0x7F7F is odd) up
    r = INFINITY;
  else if (d == 0)
    r = 0;
  else {
    int e;
    std::frexp(d, &e);                         // d in [2^(e-1), 2^e)
    const int q = std::max(e - 1, -126) - 7;   // the BF16 quantum there: 2^q
    r = std::ldexp(std::nearbyint(std::ldexp(d, -q)), q);  // exact in double: F32 has 24 bits
  }
  return uint16_t(bitsOf(std::copysign(float(r), x)) >> 16);
}

// The F32 bits a BF16-stored value `bf16` is widened to for element `i`: the BF16 value in the top half, the low
// half chosen to exercise the rounding (exact values, exact ties to both sides, just below and above a tie, the
// smallest and largest remainders, and scattered ones).
inline uint32_t widened(uint16_t bf16, uint64_t i) {
  static const uint16_t kLow[] = {0x0000, 0x8000, 0x7FFF, 0x8001, 0x0001, 0xFFFF, 0x4000, 0xC000};
  const uint16_t low = i % 11 < 8 ? kLow[i % 11] : uint16_t((i * 0x9E3779B1ull) >> 7);
  return (uint32_t(bf16) << 16) | low;
}

// Values at the edges of the rounding, as F32 bits, and what torch gives for each (written out by hand from the
// BF16 format, independent of both roundings above). The last three are not finite in BF16.
struct Special {
  uint32_t f32;
  uint16_t bf16;
};
inline const std::vector<Special> &specials() {
  static const std::vector<Special> v = {
      {0x3F808000, 0x3F80},  // 1 + 2^-8: a tie, to the even 1.0
      {0x3F818000, 0x3F82},  // 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
      {0xBF818000, 0xBF82},  // negative ties round the magnitude the same way
      {0x3F7FFFFF, 0x3F80},  // just below 1: up into the next binade
      {0x00008000, 0x0000},  // the smallest BF16 subnormal's half: a tie, to the even zero
      {0x00018000, 0x0002},  // 1.5 BF16 subnormal quanta: a tie, to the even 2
      {0x80008001, 0x8001},  // just above half a quantum, negative: -smallest subnormal
      {0x00000001, 0x0000},  // the smallest F32 subnormal: to zero
      {0x807F8000, 0x8080},  // -(1 - 2^-8) * 2^-126: a tie, to -2^-126 (the smallest normal)
      {0x80000000, 0x8000},  // -0 stays -0
      {0x7F7F7FFF, 0x7F7F},  // just below the overflow tie: the largest BF16
      {0x7F7F8000, 0x7F80},  // the overflow tie: to the even Inf
      {0xFF7FFFFF, 0xFF80},  // -FLT_MAX: -Inf
      {0x7F800000, 0x7F80},  // Inf stays Inf
  };
  return v;
}
inline size_t firstNonFiniteSpecial() { return specials().size() - 3; }

struct Written {
  std::map<std::string, std::vector<uint8_t>> expected;  // name -> the BF16 (or stored) bytes a load must give
  std::set<std::string> cast;                            // written as F32 where the config implies BF16
};

// config.json as diffusers' save_pretrained writes it (ConfigMixin.to_json_string: every __init__ argument, plus
// _class_name, _diffusers_version and, after from_pretrained, _name_or_path; keys sorted, indent 2).
inline std::string savePretrainedConfig(const h3::Config &c) {
  nlohmann::json j = h3::configToJson(c);
  j["_class_name"] = h3::kClassName;
  j["_diffusers_version"] = "0.37.0.dev0";
  j["_name_or_path"] = "/checkpoints/h3-trainer/step-1200";
  return j.dump(2) + "\n";  // nlohmann's object keeps keys sorted
}

// Writes `dst` from the diffusers folder `src` (h3c checkpoint synth): every BF16 tensor accepted by `castIt` is
// stored as F32 (widened()), the others as they are (mixed folders; F32 tensors of the config stay F32); `special`:
// a BF16 tensor whose first elements are specials()[0, specialCount) (when it is cast). `bf16Out` (optional): also
// writes the BF16 folder holding the expected (rounded) values, which a run must not tell from `dst`.
template <class CastIt>
Written writeF32Folder(const std::filesystem::path &src, const std::filesystem::path &dst, const h3::Config &c,
                       CastIt castIt, const std::string &special = "", size_t specialCount = 0,
                       const std::filesystem::path &bf16Out = {}, uint64_t shardSize = 20000) {
  Written w;
  st::Folder f(src);
  std::vector<st::TensorDecl> decls, bf16Decls;
  std::map<std::string, std::vector<uint8_t>> stored;
  for (const auto &n : f.names()) {
    const auto &e = f.at(n);
    const uint8_t *p = f.data(e);
    const bool cast = e.info->dtype == DType::BF16 && castIt(n);
    decls.push_back({n, cast ? DType::F32 : e.info->dtype, e.info->shape});
    bf16Decls.push_back({n, e.info->dtype, e.info->shape});
    if (!cast) {
      stored[n].assign(p, p + e.info->nbytes());
      w.expected[n] = stored[n];
      continue;
    }
    w.cast.insert(n);
    const size_t count = size_t(e.info->numel());
    std::vector<uint8_t> &s = stored[n], &x = w.expected[n];
    s.resize(count * 4);
    x.resize(count * 2);
    for (size_t i = 0; i < count; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      uint32_t u = n == special && i < specialCount ? specials().at(i).f32 : widened(b, i);
      const uint16_t r = referenceBf16(floatOf(u));
      std::memcpy(s.data() + 4 * i, &u, 4);
      std::memcpy(x.data() + 2 * i, &r, 2);
    }
  }
  auto write = [&](const std::filesystem::path &dir, const std::vector<st::TensorDecl> &d,
                   const std::map<std::string, std::vector<uint8_t>> &bytes) {
    std::filesystem::create_directories(dir);
    writeFileAtomic(dir / "config.json", savePretrainedConfig(c));
    st::writeFolder(dir, st::kDiffusersPrefix, d, shardSize, {{"format", "pt"}},
                    [&](const st::TensorInfo &info, st::Writer &wr) {
                      const auto &b = bytes.at(info.name);
                      wr.append(b.data(), b.size());
                    });
  };
  write(dst, decls, stored);
  if (!bf16Out.empty())
    write(bf16Out, bf16Decls, w.expected);
  return w;
}

} // namespace h3c::testf32
