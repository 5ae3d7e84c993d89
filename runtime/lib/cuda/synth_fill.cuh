// Synthetic weights on the GPU (the runtime's own kernel, not a plan kernel): element i of a tensor is
// normalish(key, i, scale) (support/synth_rng.h, embedded before this text), or 1 / 0 for Ones / Zeros tensors,
// rounded to the storage dtype with the contract's bf16 rounding (support/dtype.h: RNE, NaN kept quiet), so the
// values are bit-identical to the host's h3::synthValue.
__device__ __forceinline__ unsigned short h3c_synth_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

extern "C" __global__ void __launch_bounds__(256) h3c_synth_fill(void *dst, const long long n, const long long key,
                                                                 const double scale, const int bf16, const int init) {
  for (unsigned long long i = (unsigned long long)blockIdx.x * 256 + threadIdx.x; i < (unsigned long long)n;
       i += (unsigned long long)gridDim.x * 256) {
    float v = init == 1 ? 1.0f : init == 2 ? 0.0f : h3c::synth::normalish((unsigned long long)key, i, scale);
    if (bf16) ((unsigned short *)dst)[i] = h3c_synth_bf16(v);
    else ((float *)dst)[i] = v;
  }
}
