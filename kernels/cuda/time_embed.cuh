// The fused time embedding (time_embedder.linear_1, act, linear_2; docs/contract.md section 3) for T timestep rows,
// from the host-computed sinusoid: h = silu(W1 s + b1), temb = W2 h + b2, every dot in the F32 order of section 6
// (fma over k ascending from 0, then + bias). grid = (T, ceil(N / 256)): each CTA recomputes h for its row
// (identical bits in every CTA) and produces 256 outputs, one per thread.
// Defined by the emitter: TE_ENTRY H3C_PARAMS TE_K TE_HID TE_N. Parameters: sinusoid [T, K], temb [T, N], w1, w2,
// b1, b2.
extern "C" __global__ void __launch_bounds__(256) TE_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  __shared__ float sx[TE_K];
  __shared__ float sh[TE_HID];
  const long long t = blockIdx.x;
  const float *s = (const float *)sinusoid + t * TE_K;
  const float *W1 = (const float *)w1;
  const float *W2 = (const float *)w2;
  const float *B1 = (const float *)b1;
  const float *B2 = (const float *)b2;
  for (int k = threadIdx.x; k < TE_K; k += 256) sx[k] = s[k];
  __syncthreads();
  for (int j = threadIdx.x; j < TE_HID; j += 256) {
    float acc = 0.0f;
    for (int k = 0; k < TE_K; ++k) acc = __fmaf_rn(sx[k], W1[(long long)j * TE_K + k], acc);
    sh[j] = h3c::detmath::silu(__fadd_rn(acc, B1[j]));
  }
  __syncthreads();
  int n = blockIdx.y * 256 + threadIdx.x;
  if (n >= TE_N) return;
  float acc = 0.0f;
  for (int k = 0; k < TE_HID; ++k) acc = __fmaf_rn(sh[k], W2[(long long)n * TE_HID + k], acc);
  ((float *)temb)[t * TE_N + n] = __fadd_rn(acc, B2[n]);
}
