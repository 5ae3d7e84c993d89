// The runtime's own kernels around the vendor GEMMs of the `native` binding (native_ops.h; not plan kernels): what an
// op's contract says besides its reductions, with the op's rounding points (docs/contract.md section 3, as
// runtime/lib/cpu_ops.cpp computes them). support/detmath.h is embedded before this text (silu). bf16 is raw bits
// with h3c's rounding (support/dtype.h: RNE, NaN kept quiet). Every kernel is grid-stride over its elements.

__device__ __forceinline__ float h3n_bf2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short h3n_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float h3n_rbf(float f) { return h3n_bf2f(h3n_f2bf(f)); }
__device__ __forceinline__ float h3n_load(const void *p, int bf16, long long i) {
  return bf16 ? h3n_bf2f(((const unsigned short *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void h3n_store(void *p, int bf16, long long i, float v) {
  if (bf16) ((unsigned short *)p)[i] = h3n_f2bf(v);
  else ((float *)p)[i] = v;
}

// The GEMM's input in the weight dtype: x [rows, cols] (F32 or BF16) converted (BF16: rounded), after silu for the
// AdaLN tables (a = bf(silu(temb))), into xa with row stride ld >= cols.
extern "C" __global__ void __launch_bounds__(256) h3c_native_prologue(const void *x, void *xa, const long long rows,
                                                                      const long long cols, const long long ld,
                                                                      const int xBf16, const int silu,
                                                                      const int toBf16) {
  const long long n = rows * cols;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
    float v = h3n_load(x, xBf16, i);
    if (silu) v = h3c::detmath::silu(v);
    h3n_store(xa, toBf16, (i / cols) * ld + i % cols, v);
  }
}

#define H3N_EPI_NONE 0
#define H3N_EPI_RESIDUAL 1
#define H3N_EPI_GATE_RESIDUAL 2
#define H3N_EPI_SWIGLU 3
#define H3N_EPI_QKV 4

// The linear's own output from its F32 sum: acc + bias (one F32 add, none without a bias), rounded to bf16 when the
// weight is bf16 (the node's dtype).
__device__ __forceinline__ float h3n_linear(const float *acc, long long ldAcc, const void *bias, int biasBf16,
                                            int roundLinear, long long r, long long j) {
  float v = acc[r * ldAcc + j];
  if (bias) v = __fadd_rn(v, h3n_load(bias, biasBf16, j));
  return roundLinear ? h3n_rbf(v) : v;
}

// The op's outputs from the GEMM's F32 sums acc [rows, nAll] (row stride ldAcc): nAll = the weight rows (swiglu:
// value then gate halves; qkv: Wq, Wk, Wv). none: y0 = out(linear); qkv: y_o = bf(linear) of the o-th third;
// swiglu: bf(value * bf(silu(gate))); residual: bf(residual + linear); gate_residual: bf(fma(gate, linear,
// residual)), gate = the table row's chunk (row = ts * 3 + tag, or ts when perTag is 0; metadata shared by the batch
// items, metaRows rows). Residual and table are bf16.
extern "C" __global__ void __launch_bounds__(256) h3c_native_linear_epilogue(
    const float *acc, const long long rows, const long long nAll, const long long ldAcc, const int epi,
    const void *bias, const int biasBf16, const int roundLinear, void *y0, void *y1, void *y2, const int outBf16,
    const unsigned short *residual, const unsigned short *table, const long long *ts, const long long *tags,
    const long long metaRows, const int perTag, const long long tableWidth, const long long chunk) {
  const long long outN = epi == H3N_EPI_SWIGLU ? nAll / 2 : nAll;
  const long long n = rows * outN;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
    const long long r = i / outN, c = i % outN;
    if (epi == H3N_EPI_SWIGLU) {
      const float v = h3n_linear(acc, ldAcc, bias, biasBf16, roundLinear, r, c);
      const float g = h3n_linear(acc, ldAcc, bias, biasBf16, roundLinear, r, outN + c);
      ((unsigned short *)y0)[i] = h3n_f2bf(__fmul_rn(v, h3n_rbf(h3c::detmath::silu(g))));
      continue;
    }
    const float y = h3n_linear(acc, ldAcc, bias, biasBf16, roundLinear, r, c);
    if (epi == H3N_EPI_QKV) {
      const long long third = nAll / 3, o = c / third;
      void *dst = o == 0 ? y0 : o == 1 ? y1 : y2;
      ((unsigned short *)dst)[r * third + c % third] = h3n_f2bf(y);
    } else if (epi == H3N_EPI_RESIDUAL) {
      ((unsigned short *)y0)[i] = h3n_f2bf(__fadd_rn(h3n_bf2f(residual[i]), y));
    } else if (epi == H3N_EPI_GATE_RESIDUAL) {
      const long long m = r % metaRows;
      const long long trow = perTag ? ts[m] * 3 + tags[m] : ts[m];
      const float gate = h3n_bf2f(table[trow * tableWidth + chunk * outN + c]);
      ((unsigned short *)y0)[i] = h3n_f2bf(__fmaf_rn(gate, y, h3n_bf2f(residual[i])));
    } else {
      h3n_store(y0, outBf16, i, y);
    }
  }
}

// Block-wide reductions of one value per thread (256 threads); every thread gets the result.
__device__ __forceinline__ float h3n_block_reduce(float v, bool isMax, float *shared /* [8] */) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = isMax ? fmaxf(v, w) : __fadd_rn(v, w);
  }
  __syncthreads();  // the previous reduction's readers are done with `shared`
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  v = shared[0];
  for (int w = 1; w < 8; ++w) v = isMax ? fmaxf(v, shared[w]) : __fadd_rn(v, shared[w]);
  return v;
}

// Softmax of each row of raw scores s [rows, nk] (row stride ld): p = bf(e / l) with e = exp((s - max) * scale) and
// l = the sum of e (normalized before the rounding, as an unfused softmax-then-matmul computes it), into p (bf16,
// stride ld). One block per row.
extern "C" __global__ void __launch_bounds__(256) h3c_native_softmax(const float *s, unsigned short *p,
                                                                     const long long rows, const long long nk,
                                                                     const long long ld, const float scale) {
  __shared__ float red[8];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *sr = s + row * ld;
    unsigned short *pr = p + row * ld;
    float m = __int_as_float(0xff800000);  // -inf
    for (long long j = threadIdx.x; j < nk; j += 256) m = fmaxf(m, sr[j]);
    m = h3n_block_reduce(m, true, red);
    float l = 0.0f;
    for (long long j = threadIdx.x; j < nk; j += 256) l = __fadd_rn(l, expf(__fmul_rn(__fsub_rn(sr[j], m), scale)));
    l = h3n_block_reduce(l, false, red);
    for (long long j = threadIdx.x; j < nk; j += 256)
      pr[j] = h3n_f2bf(__fdiv_rn(expf(__fmul_rn(__fsub_rn(sr[j], m), scale)), l));
  }
}

// Attention outputs of one chunk: o [heads][rows][d] F32 (the P V sums of heads h0.. of query rows r0..) rounded
// into out [items, n, ld] bf16 at batch item b: out[b][r0 + r][(h0 + h) * d + c].
extern "C" __global__ void __launch_bounds__(256) h3c_native_attention_out(const float *o, unsigned short *out,
                                                                           const long long heads,
                                                                           const long long rows, const long long d,
                                                                           const long long ld, const long long h0,
                                                                           const long long rowBase) {
  const long long n = heads * rows * d;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
    const long long h = i / (rows * d), r = (i / d) % rows, c = i % d;
    out[(rowBase + r) * ld + (h0 + h) * d + c] = h3n_f2bf(o[i]);
  }
}
