// The CPU reference of the backward's numerics (docs/contract.md section 14): each gradient element by its one fixed
// sequence of F32 operations, as the GPU's backward kernels will compute it, for every node kind h3-backward
// differentiates: dX by k_chunks over the weight's output features, dW, dbias, norm weights and table rows by
// row_units over the canonical rows of each batch item, items folded in batch order. Inputs are F32 arrays (bf16
// values held as floats), row-major. Recomputed forward values (a norm's inv, attention's row statistics) come from
// the forward's own CPU kernels, so they are the forward's bits.
#pragma once

#include <cstdint>
#include <vector>

namespace h3c::rt::grad {

// row_units' unit: 128 canonical rows of one item.
constexpr int64_t kRowUnit = 128;
// attention_grad's dq: the keys in blocks of 128, each block's chain a partial, the partials folded in block order.
constexpr int64_t kDqKeyBlock = 128;
// The F32 addition of dq's fold: round to nearest even with subnormal inputs and result flushed to zero of their
// sign (PTX add.rn.ftz.f32; the GPU's global reductions red.add.f32 add so). docs/contract.md section 14.
float addFtz(float a, float b);

// A batch's token rows in canonical order: item b holds rows [begin[b], begin[b + 1]); begin[0] = 0 and the last
// entry is the row count. (One item: {0, M}.)
using ItemRows = std::vector<int64_t>;

// The bf16 linear (section 3's `linear` with a BF16 weight). g [M][N] the output's gradient, w [N][K].
// dX [M][K] = bf(g) W: per element the F32 chain over N's 16-wide chunks ascending (each chunk summed in double).
std::vector<float> linearDx(const float *g, int64_t M, int64_t N, const float *w, int64_t K, int threads);
// dW [N][K] = row_units over the rows of bf(g[r][n]) * bf(x[r][k]) (x: the linear's input; its bf16 value is what the
// GEMM read). Each unit's partial is the chain over its 16-row chunks ascending.
std::vector<float> linearDw(const float *g, const float *x, const ItemRows &items, int64_t N, int64_t K,
                            int threads);
// dbias [N] = row_units over the rows of g[r][n], each unit's partial the sequential F32 sum over its rows
// ascending from 0 (for the bf16 and the F32 linears alike).
std::vector<float> biasGrad(const float *g, const ItemRows &items, int64_t N);

// The F32 linear (sequential fma chains, no tensor core): dX[m][k] = the chain acc = fma(g[m][n], w[n][k], acc) over
// n ascending from 0; dW[n][k] = row_units whose unit partial is the chain acc = fma(g[r][n], x[r][k], acc) over the
// unit's rows ascending from 0.
std::vector<float> linearDxF32(const float *g, int64_t M, int64_t N, const float *w, int64_t K, int threads);
std::vector<float> linearDwF32(const float *g, const float *x, const ItemRows &items, int64_t N, int64_t K,
                               int threads);


// Which AdaLN table row each token row reads (timestep index * 3 + tag; norm_out: the timestep index), and how many
// rows the table has. The table gradients gather the rows of each table row (row_units, the others left out).
struct TableRows {
  std::vector<int64_t> row;
  int64_t count = 0;
};

// gate_residual `z = bf(fma(gate, y, x))` (x's gradient is dz): dy [M][C] = dz * gate; dgate [count][C] = row_units of
// dz * y (fma chains) over each table row's token rows. gate [count][C] is the table chunk (bf16 values). y null:
// dgate is not computed (nothing reads the table's gradient) and stays empty.
struct GateResidualGrad {
  std::vector<float> dy, dgate;
};
GateResidualGrad gateResidualGrad(const float *dz, const float *y, const float *gate, const TableRows &rows,
                                  const ItemRows &items, int64_t C);

// swiglu `y = bf(v * bf(silu(g)))` over x = [v | g] [M][2F]: dx [M][2F].
std::vector<float> swigluGrad(const float *dy, const float *x, int64_t M, int64_t F);

// rms_norm over groups of d channels of each row of x [M][C] (rms_norm: d = C; qk_norm: d = head_dim) with the
// weight w [d] (null: no weight): dx [M][C] and dw [d] (row_units over (row, group) pairs; empty without a weight,
// or with `wantW` false: a frozen weight, docs/contract.md section 14).
struct NormGrad {
  std::vector<float> dx, dw;
};
NormGrad rmsNormGrad(const float *dy, const float *x, const float *w, const ItemRows &items, int64_t C, int64_t d,
                     double eps, bool wantW = true);

// norm_modulate `y = bf(fma(n, bf(1 + scale), shift))`, n the rms_norm of x [M][H] with the weight w [H] (null: none);
// scale, shift [count][H] the table chunks (bf16 values): dx [M][H], dw [H] (empty without a weight), dscale and
// dshift [count][H]. `wantW` false: dw is not computed (a frozen weight) and stays empty; `wantTable` false: dscale
// and dshift are not computed (nothing reads the table's gradient) and stay empty.
struct NormModulateGrad {
  std::vector<float> dx, dw, dscale, dshift;
};
NormModulateGrad normModulateGrad(const float *dy, const float *x, const float *w, const float *scale,
                                  const TableRows &rows, const ItemRows &items, int64_t H, double eps,
                                  bool wantW = true, bool wantTable = true);

// rope on the first R channels of each d-channel head of x [M][heads * d], cos / sin [M][R] (F32; rounded to bf16
// here, as the forward uses them): dx [M][heads * d].
std::vector<float> ropeGrad(const float *dy, const float *cos, const float *sin, int64_t M, int64_t heads, int64_t d,
                            int64_t R);


// attention (section 4's flash order) over each item's rows of q, k, v [M][heads * d] (bf16 values), o the forward's
// output, dO its gradient: dq, dk, dv [M][heads * d]. P is recomputed from the forward's row statistics
// (P = ex2(fma(s, c, -(mc + lg2(l))))), dP = bf(dO) v^T by k_chunks over d, D = the fma chain of dO * o over d,
// dS = P * (dP - D); dq = scale * (the fold from +0, over blocks of kDqKeyBlock keys ascending, of each block's
// chain of bf(dS) k), dk = scale * (one chain over the query rows of bf(dS) q), dv = one chain over the query rows
// of bf(P) bf(dO); scale = fl(d^-0.5).
struct AttentionGrad {
  std::vector<float> dq, dk, dv;
};
// With `lse` ([M][heads], the forward's L = mc + log2(l) per row and head, h3-fuse-grad) L is read, not rerun.
AttentionGrad attentionGrad(const float *q, const float *k, const float *v, const float *o, const float *dO,
                            const ItemRows &items, int64_t heads, int64_t d, int64_t kvBlock,
                            const float *lse = nullptr);


// silu (the time embedder's, F32): dx = dy * s * (1 + x * (1 - s)), s = 1 / (1 + expf(-x)), n elements.
std::vector<float> siluGrad(const float *dy, const float *x, int64_t n);

// The AdaLN table `table = linear(bf(silu(temb)))` with the weight w [N][E] (bf16 values) and a bias: g the table's
// gradient read as [T][N] (its [T * rows][cols] view), temb [T][E]. dW [N][E] and dbias [N] by row_units over the T
// rows (one item), dtemb [T][E] = (bf(g) W by k_chunks over N) * silu'(temb). `wantW` / `wantBias` false: that
// gradient is not computed (a frozen tensor, docs/contract.md section 14) and stays empty.
struct AdalnTableGrad {
  std::vector<float> dw, dbias, dtemb;
};
AdalnTableGrad adalnTableGrad(const float *g, const float *temb, const float *w, int64_t T, int64_t N, int64_t E,
                              int threads, bool wantW = true, bool wantBias = true);

} // namespace h3c::rt::grad
