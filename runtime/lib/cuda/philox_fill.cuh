// The sampler's noise on the device (the runtime's own kernel, not a plan kernel): element i of the stream
// (seed, modality, draw) starting at element `first` is h3c::philox::normal (support/philox.h, embedded before this
// text), the same bits the host's philoxNormals writes. One thread per element, grid-stride.
extern "C" __global__ void __launch_bounds__(256) h3c_philox_fill(float *dst, const long long n,
                                                                  const unsigned long long first,
                                                                  const unsigned long long seed,
                                                                  const unsigned int modality,
                                                                  const unsigned int draw) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
    dst[i] = h3c::philox::normal(seed, modality, draw, first + (unsigned long long)i);
}
