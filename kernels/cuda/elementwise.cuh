// Elementwise ops (docs/contract.md section 3), bitwise equal to the CPU reference: one thread per output element,
// or (EW_VEC = 8) per 8 consecutive outputs of a row, loaded and stored as 16-byte vectors, each element by the same
// F32 operations as the scalar form. Why: the scalar form moved 2 bytes an instruction and ran the training plan's
// unfused swiglu at ~1.3 TB/s (0.55 ms an op at 8,349 x 14,336, H100, bench/NOTES.md 2026-12-06).
// Defined by the emitter: EW_ENTRY H3C_PARAMS EW_KIND (one of EW_*) EW_COLS (output columns) EW_F32 (silu dtype)
// EW_CHUNK EW_NUMCH EW_RPT EW_ACOLS (unpack: audio columns) EW_VEC (1 or 8: swiglu, residual and gate_residual with
// EW_COLS a multiple of 8). Parameters by kind:
//   swiglu, silu: x, y, rows            residual: x, y, z, rows      gate_residual: x, y, table, ts_index, tags, z,
//   rows, meta_rows                     pack: text, video, audio, x, rows, nt, nv, na
//   unpack: y_video, y_audio, sample, audio_sample, rows, nt, nv, na
#define EW_SWIGLU 1
#define EW_SILU 2
#define EW_RESIDUAL 3
#define EW_GATE_RESIDUAL 4
#define EW_PACK 5
#define EW_UNPACK 6

#if EW_VEC == 8
// Eight bf16 outputs of one row from eight pairs of inputs, lo half first: f(a, b) per element.
template <class F> __device__ __forceinline__ uint4 ew_map8(uint4 a, uint4 b, F f) {
  const h3u32 *pa = (const h3u32 *)&a, *pb = (const h3u32 *)&b;
  uint4 out;
  h3u32 *po = (h3u32 *)&out;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    po[k] = (h3u32)f2bf(f(bf2_lo(pa[k]), bf2_lo(pb[k]), 2 * k)) | ((h3u32)f2bf(f(bf2_hi(pa[k]), bf2_hi(pb[k]), 2 * k + 1)) << 16);
  return out;
}

extern "C" __global__ void __launch_bounds__(256) EW_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;  // the group of 8 outputs
  if (i >= rows * (EW_COLS / 8)) return;
  const long long r = i / (EW_COLS / 8);
  const long long c = (i - r * (EW_COLS / 8)) * 8, o = r * EW_COLS + c;
#if EW_KIND == EW_SWIGLU
  const h3bf *xb = (const h3bf *)x + r * (2LL * EW_COLS) + c;
  *(uint4 *)((h3bf *)y + o) = ew_map8(*(const uint4 *)xb, *(const uint4 *)(xb + EW_COLS),
                                      [](float v, float g, int) { return __fmul_rn(v, rbf(h3c::detmath::silu(g))); });
#elif EW_KIND == EW_RESIDUAL
  *(uint4 *)((h3bf *)z + o) = ew_map8(*(const uint4 *)((const h3bf *)x + o), *(const uint4 *)((const h3bf *)y + o),
                                      [](float a, float b, int) { return __fadd_rn(a, b); });
#elif EW_KIND == EW_GATE_RESIDUAL
  const long long trow = h3c_table_row((const long long *)ts_index, (const long long *)tags, meta_rows, r, EW_RPT);
  const uint4 gv = *(const uint4 *)((const h3bf *)table + trow * (long long)(EW_NUMCH * EW_COLS) + EW_CHUNK * EW_COLS + c);
  const h3u32 *pg = (const h3u32 *)&gv;
  *(uint4 *)((h3bf *)z + o) = ew_map8(*(const uint4 *)((const h3bf *)y + o), *(const uint4 *)((const h3bf *)x + o),
                                      [pg](float yv, float xv, int k) {
                                        const float g = (k & 1) ? bf2_hi(pg[k >> 1]) : bf2_lo(pg[k >> 1]);
                                        return __fmaf_rn(g, yv, xv);
                                      });
#else
#error "EW_VEC = 8 serves swiglu, residual and gate_residual"
#endif
}
#else
extern "C" __global__ void __launch_bounds__(256) EW_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i >= rows * EW_COLS) return;
  const long long r = i / EW_COLS, c = i % EW_COLS;
#if EW_KIND == EW_SWIGLU
  const h3bf *xb = (const h3bf *)x;
  float v = bf2f(xb[r * (2LL * EW_COLS) + c]);
  float g = bf2f(xb[r * (2LL * EW_COLS) + EW_COLS + c]);
  ((h3bf *)y)[i] = f2bf(__fmul_rn(v, rbf(h3c::detmath::silu(g))));
#elif EW_KIND == EW_SILU
#if EW_F32
  ((float *)y)[i] = h3c::detmath::silu(((const float *)x)[i]);
#else
  ((h3bf *)y)[i] = f2bf(h3c::detmath::silu(bf2f(((const h3bf *)x)[i])));
#endif
#elif EW_KIND == EW_RESIDUAL
  ((h3bf *)z)[i] = f2bf(__fadd_rn(bf2f(((const h3bf *)x)[i]), bf2f(((const h3bf *)y)[i])));
#elif EW_KIND == EW_GATE_RESIDUAL
  long long trow = h3c_table_row((const long long *)ts_index, (const long long *)tags, meta_rows, r, EW_RPT);
  float g = bf2f(((const h3bf *)table)[trow * (long long)(EW_NUMCH * EW_COLS) + EW_CHUNK * EW_COLS + c]);
  ((h3bf *)z)[i] = f2bf(__fmaf_rn(g, bf2f(((const h3bf *)y)[i]), bf2f(((const h3bf *)x)[i])));
#elif EW_KIND == EW_PACK
  // pack: rows are [B, S] with S = Nt + Nv + Na in canonical order (text, video, audio).
  const long long S = nt + nv + na;
  const long long b = r / S, s = r % S;
  h3bf out;
  if (s < nt) out = ((const h3bf *)text)[(b * nt + s) * EW_COLS + c];
  else if (s < nt + nv) out = f2bf(((const float *)video)[(b * nv + (s - nt)) * EW_COLS + c]);
  else out = f2bf(((const float *)audio)[(b * na + (s - nt - nv)) * EW_COLS + c]);
  ((h3bf *)x)[i] = out;
#elif EW_KIND == EW_UNPACK
  // unpack: rows index [B, Nv + Na] output rows; video rows first. y_video [B,S,EW_COLS], y_audio [B,S,EW_ACOLS].
  const long long S = nt + nv + na;
  const long long b = r / (nv + na), k = r % (nv + na);
  if (k < nv) {
    ((float *)sample)[(b * nv + k) * EW_COLS + c] = ((const float *)y_video)[(b * S + nt + k) * EW_COLS + c];
  } else if (c < EW_ACOLS) {
    long long ka = k - nv;
    ((float *)audio_sample)[(b * na + ka) * EW_ACOLS + c] =
        ((const float *)y_audio)[(b * S + nt + nv + ka) * EW_ACOLS + c];
  }
#endif
}
#endif
