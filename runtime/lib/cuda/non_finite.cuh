// The non-finite scan of float32 outputs on the device (non_finite.h; the runtime's own kernel, not a plan kernel):
// grid row y scans tensor y (p0 of n0 words, p1 of n1; n = 0 scans nothing) by bit pattern, as the host's
// Tensor::nonFinite does (all exponent bits set: NaN with a mantissa bit, else Inf), and adds into its three
// unsigned 64-bit slots at out + 3 y: the NaN count, the Inf count, and the lowest key (index << 2 | kind, kind 0 NaN,
// 1 +Inf, 2 -Inf), so one atomicMin keeps the first element and its value together. The counts start at 0 and the
// key at ~0 (set by the caller). Counts and a minimum: the grid's order cannot change them.
extern "C" __global__ void __launch_bounds__(256) h3c_non_finite(const unsigned *p0, const long long n0,
                                                                 const unsigned *p1, const long long n1,
                                                                 unsigned long long *out) {
  const unsigned *p = blockIdx.y ? p1 : p0;
  const unsigned long long n = (unsigned long long)(blockIdx.y ? n1 : n0);
  unsigned long long *slots = out + 3 * blockIdx.y;
  unsigned long long nan = 0, inf = 0, key = ~0ull;
  for (unsigned long long i = (unsigned long long)blockIdx.x * 256 + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * 256) {
    const unsigned w = p[i];
    if ((w & 0x7F800000u) != 0x7F800000u) continue;
    const bool isNan = (w & 0x007FFFFFu) != 0;
    nan += isNan;
    inf += !isNan;
    const unsigned long long k = (i << 2) | (isNan ? 0ull : (w >> 31) ? 2ull : 1ull);
    key = k < key ? k : key;
  }
  for (int o = 16; o > 0; o >>= 1) {
    nan += __shfl_down_sync(0xffffffffu, nan, o);
    inf += __shfl_down_sync(0xffffffffu, inf, o);
    const unsigned long long other = __shfl_down_sync(0xffffffffu, key, o);
    key = other < key ? other : key;
  }
  if ((threadIdx.x & 31) == 0 && (nan | inf) != 0) {
    atomicAdd(slots, nan);
    atomicAdd(slots + 1, inf);
    atomicMin(slots + 2, key);
  }
}
