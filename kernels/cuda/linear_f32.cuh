// F32 linear on CUDA cores in the documented fixed order (docs/contract.md section 6): y[r,n] = (sum over k = 0..K-1
// ascending of fma(x[r,k], w[n,k], acc) from 0) + bias[n], one F32 add; the CPU reproduces it bit for bit. 64x64
// output tile per 256 threads (4x4 each), x/w k-tiles of 32 staged in shared memory; only k < K is ever added.
// FL_VEC (`--tune f32_vec=1`): the k-tiles staged k-major (xs[k][m], ws[k][n]) so each thread reads its 4 rows of
// x and 4 columns of w at one k as two 16-byte loads instead of eight 4-byte ones (eight loads a k held the loop at
// a third of the FMA rate: shared memory, not arithmetic, bounded it); the 16-byte groups are XOR-swizzled by k so
// both the transposing stores (4 rows x 8 k a warp) and the reads hit 32 banks. The same fma chain per output.
// Defined by the emitter: FL_ENTRY H3C_PARAMS FL_K FL_N FL_HAS_BIAS FL_XBF (x is bf16) FL_OUT_BF (bf16 output), FL_VEC
// (defined or not).
// Parameters: x, y, w, bias (FL_HAS_BIAS), rows.
extern "C" __global__ void __launch_bounds__(256) FL_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
#ifdef FL_VEC
  // Row (or column) group g's 16 bytes at k sit at group g ^ (k % 16) of the k-major row.
  __shared__ __align__(16) float xs[32][64];
  __shared__ __align__(16) float ws[32][64];
#else
  __shared__ float xs[64][33];
  __shared__ float ws[64][33];
#endif
  const long long M = rows;
  const long long m0 = (long long)blockIdx.x * 64;
  const int n0 = blockIdx.y * 64;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const float *W = (const float *)w;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < FL_K; k0 += 32) {
    for (int e = threadIdx.x; e < 64 * 32; e += 256) {
#ifdef FL_VEC
      // Element (r, k) of the 64 x 32 tiles: a warp takes 4 rows x 8 consecutive k (32 bytes of each row).
      const int r = (e >> 7) * 4 + (e & 3), k = (e >> 2) & 31;
#else
      const int r = e / 32, k = e % 32;
#endif
      float xv = 0.0f, wv = 0.0f;
      if (m0 + r < M && k0 + k < FL_K) {
#if FL_XBF
        xv = bf2f(((const h3bf *)x)[(m0 + r) * FL_K + k0 + k]);
#else
        xv = ((const float *)x)[(m0 + r) * FL_K + k0 + k];
#endif
      }
      if (n0 + r < FL_N && k0 + k < FL_K) wv = W[(long long)(n0 + r) * FL_K + k0 + k];
#ifdef FL_VEC
      const int at = (((r >> 2) ^ (k & 15)) << 2) | (r & 3);
      xs[k][at] = xv;
      ws[k][at] = wv;
#else
      xs[r][k] = xv;
      ws[r][k] = wv;
#endif
    }
    __syncthreads();
    const int kn = FL_K - k0 < 32 ? FL_K - k0 : 32;
    for (int k = 0; k < kn; ++k) {
#ifdef FL_VEC
      const float4 xv = *(const float4 *)&xs[k][(ty ^ (k & 15)) << 2];
      const float4 wv = *(const float4 *)&ws[k][(tx ^ (k & 15)) << 2];
      const float xa[4] = {xv.x, xv.y, xv.z, xv.w}, wa[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(xa[i], wa[j], acc[i][j]);
#else
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(xs[ty * 4 + i][k], ws[tx * 4 + j][k], acc[i][j]);
#endif
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    long long r = m0 + ty * 4 + i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int n = n0 + tx * 4 + j;
      if (n >= FL_N) continue;
      float v = acc[i][j];
#if FL_HAS_BIAS
      v = __fadd_rn(v, ((const float *)bias)[n]);
#endif
#if FL_OUT_BF
      ((h3bf *)y)[r * FL_N + n] = f2bf(v);
#else
      ((float *)y)[r * FL_N + n] = v;
#endif
    }
  }
}
