// Synthetic weights on the GPU (see h3c::kernels::synthFillKernel): element i of a tensor is
// normalish(key, i, scale) (support/synth_rng.h), or 1 / 0 for Ones / Zeros tensors, rounded to the storage dtype.
extern "C" __global__ void __launch_bounds__(256) h3c_synth_fill(const H3cArgs a) {
  const unsigned long long n = (unsigned long long)a.meta[0];
  const unsigned long long key = (unsigned long long)a.meta[1];
  const double scale = __longlong_as_double(a.meta[2]);
  const bool bf = a.meta[3] != 0;
  const int init = (int)a.meta[4];
  for (unsigned long long i = (unsigned long long)blockIdx.x * 256 + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * 256) {
    float v = init == 1 ? 1.0f : init == 2 ? 0.0f : h3c::synth::normalish(key, i, scale);
    if (bf) ((h3bf *)a.out[0])[i] = f2bf(v);
    else ((float *)a.out[0])[i] = v;
  }
}
