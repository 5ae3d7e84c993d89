// The fused time embedding (time_embedder.linear_1, act, linear_2; docs/contract.md section 3) for T timestep rows,
// from the host-computed sinusoid, in two phases of one kernel: phase 0 (TE_ENTRY) h = silu(W1 s + b1) into the
// scratch h [T, TE_HID] F32, phase 1 (TE_ENTRY_P1) temb = W2 h + b2. Every dot is one thread's fma chain over k
// ascending from 0, then + bias (the F32 order of section 6), so each output has the CPU's bits.
// A CTA takes 32 weight rows (lane l of a computing warp: row n0 + l) and up to 8 input rows (warp w: row t0 + w),
// and streams the weight rows through shared memory in chunks of TE_KC columns: coalesced loads, rows padded by one
// float so the 32 rows a warp reads lie in 32 banks. Why: one thread per output reading its own weight row from
// memory (a warp instruction touching 32 rows) and every CTA recomputing all of h took 1.4 ms for the full config's
// 2 x 2,688 outputs over K = 5,376 on an H100 (bench/NOTES.md, 2026-12-07), where the 63 MB of weights take ~25 us.
// Defined by the emitter: TE_ENTRY TE_ENTRY_P1 H3C_PARAMS TE_K TE_HID TE_N. Parameters: sinusoid [T, K], temb [T, N],
// w1, w2, b1, b2, h (scratch), rows (T).
#define TE_KC 256

template <int K, bool SILU>
__device__ __forceinline__ void te_rows(const float *X, const float *W, const float *B, float *Y, int N, long long T) {
  __shared__ float sw[32][TE_KC + 1];
  __shared__ float sx[8][TE_KC];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n0 = blockIdx.x * 32;
  const long long t0 = (long long)blockIdx.y * 8, t = t0 + warp;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TE_KC) {
    const int kc = K - k0 < TE_KC ? K - k0 : TE_KC;
    __syncthreads();  // every warp is done with the chunk before
    for (int e = threadIdx.x; e < 32 * kc; e += 256) {
      const int r = e / kc, c = e - r * kc;
      sw[r][c] = n0 + r < N ? W[(long long)(n0 + r) * K + k0 + c] : 0.0f;
    }
    for (int e = threadIdx.x; e < 8 * kc; e += 256) {
      const int r = e / kc, c = e - r * kc;
      sx[r][c] = t0 + r < T ? X[(t0 + r) * K + k0 + c] : 0.0f;
    }
    __syncthreads();
    if (t < T)
      for (int c = 0; c < kc; ++c) acc = __fmaf_rn(sx[warp][c], sw[lane][c], acc);
  }
  const int n = n0 + lane;
  if (t < T && n < N) {
    const float y = __fadd_rn(acc, B[n]);
    Y[t * N + n] = SILU ? h3c::detmath::silu(y) : y;
  }
}

extern "C" __global__ void __launch_bounds__(256) TE_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  te_rows<TE_K, true>((const float *)sinusoid, (const float *)w1, (const float *)b1, (float *)h, TE_HID, rows);
}

extern "C" __global__ void __launch_bounds__(256) TE_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  te_rows<TE_HID, false>((const float *)h, (const float *)w2, (const float *)b2, (float *)temb, TE_N, rows);
}
