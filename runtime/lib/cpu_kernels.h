// Internal numeric kernels of the CPU reference (docs/contract.md section 4). Each follows one reduction order
// exactly; the Fp64 variants are the unordered `reference` implementations used by --bind reference and audit mode.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace h3c::rt::cpu {

// k_chunks: y[m][n] = the F32 accumulator from 0 after adding K's 16-wide chunks in ascending order (the last one
// zero-padded), each chunk summed in double and rounded to F32. x is [M][K] (row stride K), w is [N][K]. Output F32,
// no bias.
void gemmKChunks(const float *x, int64_t M, int64_t K, const float *w, int64_t N, float *y, int threads);
// F32-weight linears (docs/contract.md section 6): acc = fma(x[k], w[n,k], acc) for k ascending from 0; no bias.
void gemmSeqFma(const float *x, int64_t M, int64_t K, const float *w, int64_t N, float *y, int threads);
// Plain double dot products (unordered reference), rounded to F32 after adding `bias` (may be null) in double.
void gemmFp64(const float *x, int64_t M, int64_t K, const float *w, int64_t N, const float *bias, float *y,
              int threads);

// The rms norm's 1/sqrtf(ss/n + eps), ss by lane_tree (ordered), or in double (exact: the fp64 reference).
float invRms(const float *x, int64_t n, double eps, bool exact);
// y = bf(bf(x*inv) * w) (no weight: bf(x*inv)) with the row's inv given, and with invRms's (rmsRow).
void normRow(const float *x, int64_t n, const float *w, float inv, float *y);
void rmsRow(const float *x, int64_t n, const float *w, double eps, bool exact, float *y);

// The flash order's exp2 scale c = fl(d^-0.5 * log2 e) (docs/contract.md section 4: in double, rounded once, the GPU
// kernels' literal).
float flashExp2Scale(int64_t d);

// lane_tree sum of squares of x[0..n) (32 lanes, fma accumulation, shuffle-down tree).
float laneTreeSumSquares(const float *x, int64_t n);
// lane_tree sum of the products a[j] * b[j] (the same lanes and tree; laneTreeSumSquares is laneTreeDot(x, x)).
float laneTreeDot(const float *a, const float *b, int64_t n);

// Flash attention for one (query row, head): q [d], keys/values rows `kv` apart (stride `ld`), n keys; out [d] F32
// before the final bf16 rounding (o / l). Ordered: keys in blocks of kBlock (the order's kv_block), k_chunks dot products, P = bf(exp2(fma(s, c, -fl(m c))))
// with c = fl(d^-0.5 log2 e) (docs/contract.md section 4; the GPU's exp2 is MUFU.EX2, so agreement is within a bound).
// With `stats`, also the row's final statistics: stats[0] = fl(m * c) (m the running max after the last block),
// stats[1] = l (the row's sum of P after the last block's rescale), what the backward's P recomputation reads.
void flashRow(const float *q, const float *k, const float *v, int64_t ld, int64_t n, int64_t d, float c,
              int64_t kBlock, float *out, float *stats = nullptr);
// Reference: double softmax and weighted sum.
void attentionRowFp64(const float *q, const float *k, const float *v, int64_t ld, int64_t n, int64_t d,
                      double scale, float *out);

// The k_chunks chain of a[0..n) * b[0..n): F32 accumulator from 0 adding 16-wide chunks ascending, each summed in
// double (the last zero-padded).
float chainDot(const float *a, const float *b, int64_t n);

// silu through h3c::detmath::expf, bitwise equal to the GPU kernels.
float siluF(float x);

} // namespace h3c::rt::cpu
