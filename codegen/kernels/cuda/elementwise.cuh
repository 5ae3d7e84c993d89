// Elementwise ops (docs/contract.md section 3), bitwise equal to the CPU reference: one thread per output element.
// EW_KIND: 1 swiglu, 2 silu, 3 residual, 4 gate_residual, 5 pack, 6 unpack.
// Defined by the emitter: EW_ENTRY EW_KIND EW_COLS (output columns) EW_F32 (silu dtype) EW_CHUNK EW_NUMCH EW_RPT
// EW_ACOLS (unpack: audio columns).
extern "C" __global__ void __launch_bounds__(256) EW_ENTRY(const H3cArgs a) {
  const long long rows = a.meta[H3C_META_ROWS];
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i >= rows * EW_COLS) return;
  const long long r = i / EW_COLS, c = i % EW_COLS;
#if EW_KIND == 1
  const h3bf *x = (const h3bf *)a.in[0];
  float v = bf2f(x[r * (2LL * EW_COLS) + c]);
  float g = bf2f(x[r * (2LL * EW_COLS) + EW_COLS + c]);
  ((h3bf *)a.out[0])[i] = f2bf(__fmul_rn(v, rbf(h3c::detmath::silu(g))));
#elif EW_KIND == 2
#if EW_F32
  ((float *)a.out[0])[i] = h3c::detmath::silu(((const float *)a.in[0])[i]);
#else
  ((h3bf *)a.out[0])[i] = f2bf(h3c::detmath::silu(bf2f(((const h3bf *)a.in[0])[i])));
#endif
#elif EW_KIND == 3
  ((h3bf *)a.out[0])[i] = f2bf(__fadd_rn(bf2f(((const h3bf *)a.in[0])[i]), bf2f(((const h3bf *)a.in[1])[i])));
#elif EW_KIND == 4
  long long trow = h3c_table_row(a, (const long long *)a.in[3], (const long long *)a.in[4], r, EW_RPT);
  float g = bf2f(((const h3bf *)a.in[2])[trow * (long long)(EW_NUMCH * EW_COLS) + EW_CHUNK * EW_COLS + c]);
  ((h3bf *)a.out[0])[i] =
      f2bf(__fmaf_rn(g, bf2f(((const h3bf *)a.in[1])[i]), bf2f(((const h3bf *)a.in[0])[i])));
#elif EW_KIND == 5
  // pack: rows are [B, S] with S = Nt + Nv + Na in canonical order (text, video, audio).
  const long long nt = a.meta[H3C_META_NT], nv = a.meta[H3C_META_NV], na = a.meta[H3C_META_NA];
  const long long S = nt + nv + na;
  const long long b = r / S, s = r % S;
  h3bf y;
  if (s < nt) y = ((const h3bf *)a.in[0])[(b * nt + s) * EW_COLS + c];
  else if (s < nt + nv) y = f2bf(((const float *)a.in[1])[(b * nv + (s - nt)) * EW_COLS + c]);
  else y = f2bf(((const float *)a.in[2])[(b * na + (s - nt - nv)) * EW_COLS + c]);
  ((h3bf *)a.out[0])[i] = y;
#elif EW_KIND == 6
  // unpack: rows index [B, Nv + Na] output rows; video rows first. y_video [B,S,EW_COLS], y_audio [B,S,EW_ACOLS].
  const long long nt = a.meta[H3C_META_NT], nv = a.meta[H3C_META_NV], na = a.meta[H3C_META_NA];
  const long long S = nt + nv + na;
  const long long b = r / (nv + na), k = r % (nv + na);
  if (k < nv) {
    ((float *)a.out[0])[(b * nv + k) * EW_COLS + c] = ((const float *)a.in[0])[(b * S + nt + k) * EW_COLS + c];
  } else if (c < EW_ACOLS) {
    long long ka = k - nv;
    ((float *)a.out[1])[(b * na + ka) * EW_ACOLS + c] = ((const float *)a.in[1])[(b * S + nt + nv + ka) * EW_ACOLS + c];
  }
#endif
}
