// The LoRA merge on the device (lora_merge.h; the runtime's own kernel, not a plan kernel), the same bits as the host
// merge (runtime/lib/lora_merge.cpp; docs/contract.md section 12): out[i][j] = round(w + s_1 acc_1 + ... ) with each
// term's acc the fma chain over k ascending from 0 and w = w + s * acc a rounded multiply then a rounded add (every
// operation named: __fmaf_rn, __fmul_rn, __fadd_rn; compiled with --fmad=false besides). One thread computes one
// column j of H3L_ROWS consecutive rows (each down[k][j] read once for them; up[i][k] is the same address across a
// warp), so no result depends on the grid. bf16 is raw bits with h3c's rounding (support/dtype.h: RNE, NaN quiet).
// A non-finite rounded element lowers *firstBad (its flat index; the caller resets it to ~0) and is written as is.

#define H3L_ROWS 4

// One term, as lora_merge.cpp's DeviceTerm lays it out (32 bytes): factors F32, down [rank, cols], up [rows, rank].
struct h3l_term {
  const float *down;
  const float *up;
  long long rank;
  float scale;  // s_t = float(scale * alpha / rank), computed on the host
  float unused;
};

__device__ __forceinline__ float h3l_bf2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short h3l_f2bf(float f) {
  const unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

extern "C" __global__ void __launch_bounds__(256) h3c_lora_merge(const void *w, void *out, const long long rows,
                                                                 const long long cols, const int bf16,
                                                                 const h3l_term *terms, const int nterms,
                                                                 unsigned long long *firstBad) {
  const long long j = (long long)blockIdx.x * 256 + threadIdx.x;
  if (j >= cols) return;
  for (long long i0 = (long long)blockIdx.y * H3L_ROWS; i0 < rows; i0 += (long long)gridDim.y * H3L_ROWS) {
    const int n = rows - i0 < H3L_ROWS ? (int)(rows - i0) : H3L_ROWS;
    float v[H3L_ROWS];
#pragma unroll
    for (int r = 0; r < H3L_ROWS; ++r) {
      const long long e = (i0 + (r < n ? r : 0)) * cols + j;
      v[r] = bf16 ? h3l_bf2f(((const unsigned short *)w)[e]) : ((const float *)w)[e];
    }
    for (int t = 0; t < nterms; ++t) {
      const h3l_term T = terms[t];
      float acc[H3L_ROWS];
#pragma unroll
      for (int r = 0; r < H3L_ROWS; ++r) acc[r] = 0.0f;
      for (long long k = 0; k < T.rank; ++k) {
        const float d = T.down[k * cols + j];
#pragma unroll
        for (int r = 0; r < H3L_ROWS; ++r) acc[r] = __fmaf_rn(T.up[(i0 + (r < n ? r : 0)) * T.rank + k], d, acc[r]);
      }
#pragma unroll
      for (int r = 0; r < H3L_ROWS; ++r) v[r] = __fadd_rn(v[r], __fmul_rn(T.scale, acc[r]));
    }
#pragma unroll
    for (int r = 0; r < H3L_ROWS; ++r) {
      if (r >= n) break;
      const long long e = (i0 + r) * cols + j;
      float rounded = v[r];
      if (bf16) {
        const unsigned short b = h3l_f2bf(v[r]);
        ((unsigned short *)out)[e] = b;
        rounded = h3l_bf2f(b);
      } else {
        ((float *)out)[e] = v[r];
      }
      if ((__float_as_uint(rounded) & 0x7f800000u) == 0x7f800000u) atomicMin(firstBad, (unsigned long long)e);
    }
  }
}

// out[i] = in[i] for n 16-bit words (the checked merge result back over the weight).
extern "C" __global__ void __launch_bounds__(256) h3c_lora_copy(const unsigned short *in, unsigned short *out,
                                                                const long long n) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) out[i] = in[i];
}
