// The ledger's content hash of a node output (`h3c run --hash-nodes`; docs/contract.md section 9), "h3c-sum128-v1":
// a 128-bit hash of a value's bytes (its dtype, row-major, as the executors store it) that the GPU computes in
// parallel, in any order, with the same bits as the CPU:
//
//   w_i      = the i-th little-endian 8-byte word of the bytes (the last one zero-padded), i = 0, 1, ...
//   k_i      = mix(i)
//   a        = sum_i mix(w_i ^ k_i)                          (mod 2^64)
//   b        = sum_i mix(w_i ^ rotl32(k_i) ^ 0xD6E8FEB86659FD93)   (mod 2^64)
//   hash     = hex16(mix(a ^ mix(n))) hex16(mix(b ^ mix(~n)))  with n the byte count
//   mix(x)   = the splitmix64 step: x += 0x9E3779B97F4A7C15, then the two xor-shift-multiply rounds
//
// The sums are integer sums, so the order in which threads add the terms cannot change them; the word index in every
// term makes the hash depend on where each byte is. It detects changes (the chance that a different tensor gets the
// same hash is about 2^-64 per lane), not forgery: the ledger's seal and signature cover tampering.
//
// This header is also compiled by NVRTC (the GPU executor's hash kernel, with synth_rng.h's text before it, which
// defines H3C_HD and splitmix64): no standard library headers in that part.
#pragma once

#if !defined(__CUDACC_RTC__)
#include "h3c/support/synth_rng.h"
#endif

namespace h3c {
namespace chash {

typedef unsigned long long u64;

H3C_HD inline u64 mix(u64 x) { return synth::splitmix64(x); }  // one definition of the splitmix64 step

// Adds word i's terms to the two lane sums.
H3C_HD inline void addWord(u64 w, u64 i, u64 &a, u64 &b) {
  const u64 k = mix(i);
  a += mix(w ^ k);
  b += mix(w ^ ((k << 32) | (k >> 32)) ^ 0xD6E8FEB86659FD93ull);
}

// The two finished 64-bit halves from the lane sums and the byte count.
H3C_HD inline u64 finishA(u64 a, u64 n) { return mix(a ^ mix(n)); }
H3C_HD inline u64 finishB(u64 b, u64 n) { return mix(b ^ mix(~n)); }

} // namespace chash
} // namespace h3c

#if !defined(__CUDACC_RTC__)
#include <cstddef>
#include <string>

namespace h3c {

inline constexpr const char *kContentHashName = "h3c-sum128-v1";

// The lane sums of `n` bytes (a GPU computes the same sums in parallel; contentHashHex finishes them).
void contentHashSums(const void *bytes, size_t n, unsigned long long &a, unsigned long long &b);
// "<32 hex digits>" from the lane sums and the byte count.
std::string contentHashHex(unsigned long long a, unsigned long long b, size_t n);
// Both steps.
std::string contentHash(const void *bytes, size_t n);

} // namespace h3c
#endif
