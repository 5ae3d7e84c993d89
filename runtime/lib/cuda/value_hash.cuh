// The content hash of a device value (`--hash-nodes`; the runtime's own kernel, not a plan kernel): the lane sums of
// support/content_hash.h (embedded before this text) over the value's bytes, added into out[0], out[1] (zeroed by
// the caller). Integer sums: the grid's order of additions cannot change them, so the host finishes the same hash
// the CPU executor computes. p is read as 8-byte words where it is 8-byte aligned, byte by byte otherwise and in the
// tail.
extern "C" __global__ void __launch_bounds__(256) h3c_value_hash(const unsigned char *p, const long long nbytes,
                                                                 const int aligned8, unsigned long long *out) {
  const unsigned long long n = (unsigned long long)nbytes, words = (n + 7) / 8, full = n / 8;
  unsigned long long a = 0, b = 0;
  for (unsigned long long i = (unsigned long long)blockIdx.x * 256 + threadIdx.x; i < words;
       i += (unsigned long long)gridDim.x * 256) {
    unsigned long long w = 0;
    if (i < full && aligned8) {
      w = ((const unsigned long long *)p)[i];
    } else {
      for (unsigned long long j = 0; j < 8 && 8 * i + j < n; ++j) w |= (unsigned long long)p[8 * i + j] << (8 * j);
    }
    h3c::chash::addWord(w, i, a, b);
  }
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(out, a);
    atomicAdd(out + 1, b);
  }
}
