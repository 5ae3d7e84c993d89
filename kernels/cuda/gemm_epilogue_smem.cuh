// The cooperative Hopper linear's epilogue staged through shared memory (gemm_sm90.cuh with G9_EPI_SMEM defined:
// `h3c compile --tune gemm_epi_smem=1`). gm_store_block (gemm_epilogue.cuh) finishes each thread's accumulator pairs
// in registers and stores them with 4-byte accesses (a quad of threads covers 16 bytes of a row: half of every
// 32-byte sector it writes is written again by another instruction); here each consumer warpgroup
//   1. rounds its 64 x G9_BN block to bf16 exactly where gm_store_block does first (bf(sum + bias); swiglu: bf(value
//      + bias) and bf(gate + bias); qk_norm_rope: its finished outputs) and writes it into its staging area with
//      stmatrix (qk_norm_rope: st.shared.b32),
//   2. syncs its own 128 threads (named barrier 1 + cw: the other warpgroup and the producer keep running),
//   3. walks the block row by row, 16 bytes (8 columns) per access: staged values, residual and gate read, y stored,
//      the lanes of a warp on consecutive 16-byte chunks of a row.
// Bits: every output element gets the operations of gm_final / gm_swiglu_f in the same order on the same values. The
// stage holds f2bf(v) where gm_final computes y = rbf(v) = bf2f(f2bf(v)), so reading it back gives that y. The
// final rounding and the pair packing are one pack_bf2 of the F32 results where gm_store2 / gm_swiglu2 apply
// pack_bf2(rbf(a), rbf(b)): equal, since f2bf is idempotent on its own results (a non-NaN bf16 value converts to
// itself; a NaN result (u >> 16) | 0x40 is quiet already, so the select gives it back) and pack_bf2 is f2bf per half
// (common.cuh). For the epilogue none the staged word is the output word itself.
// qk_norm_rope (qkv's fused epilogue) runs gm_qk_block in registers exactly as gm_store_block does (the same norm,
// reduction tree and rope on the same values) and only its final stores change: each packed output pair, the word
// gm_store_block would store, goes into the staging area (st.shared.b32), and step 3 is the epilogue none's copy
// (with G9_EPI_WARPS in the epilogue warps, gemm_sm90.cuh: the norm and rope stay in the consumers, only the copy
// moves; running the norm and rope in the three epilogue warps instead was measured 20 % slower in the forward,
// 184 against 154 ms, bench/NOTES.md 2026-12-04 session of 20:05).
// Served: bf16 outputs with GM_OUTN % 8 == 0 (a 16-byte chunk never straddles a row end or qkv's output split) of
// every epilogue; F32 outputs keep gm_store_block (the emitter does not define G9_EPI_SMEM for them). The output,
// residual and table buffers must be 16-byte aligned (the arena aligns every slot to 256 bytes; a misaligned one
// faults with a misaligned-address error, never a wrong value).
#if GM_OUT_F32 || GM_OUTN % 8 != 0
#error "the staged epilogue serves bf16 outputs with GM_OUTN % 8 == 0"
#endif

// One consumer warpgroup's staging area: its 64 x G9_BN block as bf16 (swiglu: 128 value + 128 gate columns) in
// G9_BN / 64 boxes of 64 rows x 64 columns (8 KiB each; a width that is no multiple of 64, the 256-row tile's 168,
// takes whole boxes: 3 for 168), a box's row 128 bytes, its 16-byte chunk q at q ^ (row % 8):
// TMA's 128-byte swizzle, so a bulk tensor store could read it as it is. stmatrix's eight 16-byte rows of one matrix
// and a quarter-warp's eight consecutive chunks of one row both land on distinct banks.
#define G9_OUT_BYTES (64 * ((G9_BN + 63) / 64 * 64) * 2)
// Byte offset of 16-byte chunk k (8 columns) of row `row` in the staging area.
__device__ __forceinline__ int g9_chunk_at(int row, int k) { return (k >> 3) * 8192 + row * 128 + (((k & 7) ^ (row & 7)) << 4); }

__device__ __forceinline__ void stsm_x4(h3u32 addr, h3u32 r0, h3u32 r1, h3u32 r2, h3u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void stsm_x2(h3u32 addr, h3u32 r0, h3u32 r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r0), "r"(r1) : "memory");
}
__device__ __forceinline__ void sts_u32(h3u32 addr, h3u32 v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// The 128 threads of consumer warpgroup cw (named barriers 1 and 2; 0 is __syncthreads). The non-aligned form: the
// walk's threads past the columns return early, so a warp need not arrive converged.
__device__ __forceinline__ void g9_wg_sync(int cw) { asm volatile("barrier.sync %0, 128;\n" ::"r"(1 + cw) : "memory"); }
// One 16-byte global store of four words (NVVM split `*(uint4 *)p = make_uint4(...)` of computed words into four
// 4-byte stores in the swiglu walk: a quarter of each 32-byte sector per instruction, four times the instructions).
// p is 16-byte aligned (the walk's chunks are).
__device__ __forceinline__ void stg_v4(void *p, h3u32 a, h3u32 b, h3u32 c, h3u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d));
}
// Word w (0-3) of a 16-byte chunk (w is a constant after unrolling).
__device__ __forceinline__ h3u32 g9_word(const uint4 &v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

// The weight rows w, w + 1 of the columns 2 t4, 2 t4 + 1 of fragment j (8 columns) of the block from c0, and whether
// they exist (swiglu: fragments 0-15 are the values of output columns c, 16-31 their gates, weight rows GM_OUTN + c;
// columns past the output are never stored). GM_OUTN % 8 == 0, so w + 1 exists where w does.
__device__ __forceinline__ bool g9_wrow(long long c0, int j, int t4, long long &w) {
#if GM_EPI == GM_EPI_SWIGLU
  const long long c = c0 + 8 * (j % 16) + 2 * t4;
  w = j < 16 ? c : GM_OUTN + c;
  return c < GM_OUTN;
#else
  w = c0 + 8 * j + 2 * t4;
  return w < GM_N;
#endif
}

#if GM_HAS_BIAS
// The biases of weight rows w and w + 1 (w even): one 4-byte load where the bias is 4-byte aligned (the weight
// buffers hold tensors back to back, so it may not be), else two 2-byte loads.
__device__ __forceinline__ void g9_bias2(const void *bias, long long w, bool aligned, float &b0, float &b1) {
  if (aligned) {
    const h3u32 b = *(const h3u32 *)((const h3bf *)bias + w);
    b0 = bf2_lo(b);
    b1 = bf2_hi(b);
  } else {
    b0 = bf2f(((const h3bf *)bias)[w]);
    b1 = bf2f(((const h3bf *)bias)[w + 1]);
  }
}
#endif

// Step 1: the accumulators (NF 8-column fragments in the wgmma layout of gm_store_block) plus their biases (gm_bias:
// one F32 add, none without a bias), rounded into the staging area at shared address `stage`. One stmatrix.x4 per
// two fragments: matrices (j, rows g), (j, rows g + 8), (j + 1, rows g), (j + 1, rows g + 8), each thread's register
// of a matrix the pair (row g, columns 2 t4, 2 t4 + 1) of the accumulator layout, lane L giving the address of row
// L % 8 of matrix L / 8; an odd NF's last fragment by one stmatrix.x2 (its two matrices, lanes 0-15's addresses). A
// fragment's bias pair serves both of its rows.
template <int NF>
__device__ __forceinline__ void g9_stage_block(h3u32 stage, const void *bias, const float *acc, long long c0, int warp,
                                               int lane) {
  const int t4 = lane & 3, m = lane >> 3, row = 16 * warp + (lane & 7) + 8 * (m & 1);
#if GM_HAS_BIAS
  const bool aligned = ((unsigned long long)bias & 3) == 0;
#endif
  // Fragment j's two packed rows (g, g + 8) with their biases.
  auto pack = [&](int j, h3u32 &lo, h3u32 &hi) {
    const float *a = acc + j * 4;  // (row g: columns 2 t4, 2 t4 + 1), (row g + 8: the same)
    float v0 = a[0], v1 = a[1], v2 = a[2], v3 = a[3];
#if GM_HAS_BIAS
    long long w;
    if (g9_wrow(c0, j, t4, w)) {
      float b0, b1;
      g9_bias2(bias, w, aligned, b0, b1);
      v0 = __fadd_rn(v0, b0);
      v1 = __fadd_rn(v1, b1);
      v2 = __fadd_rn(v2, b0);
      v3 = __fadd_rn(v3, b1);
    }
#else
    (void)c0, (void)t4;
#endif
    lo = pack_bf2(v0, v1);
    hi = pack_bf2(v2, v3);
  };
#pragma unroll
  for (int j = 0; j + 1 < NF; j += 2) {
    h3u32 p[4];
    pack(j, p[0], p[1]);
    pack(j + 1, p[2], p[3]);
    stsm_x4(stage + (h3u32)g9_chunk_at(row, j + (m >> 1)), p[0], p[1], p[2], p[3]);
  }
  if constexpr (NF % 2 == 1) {
    h3u32 lo, hi;
    pack(NF - 1, lo, hi);
    stsm_x2(stage + (h3u32)g9_chunk_at(row, NF - 1), lo, hi);
  }
}

#if GM_EPI == GM_EPI_QK_NORM_ROPE
// Step 1 of qk_norm_rope: gm_qk_block (gemm_epilogue.cuh) as the register epilogue runs it, each finished pair of a
// row < M written to the stage where gm_store_block would store it: fragment j of head b is chunk 16 b + j, the pair
// of thread t4 its word t4. One st.shared.b32 per pair: a warp's 32 stores of one fragment cover rows g = 0..7 (row %
// 8 = g) and words t4, at bank 4 ((k % 8) ^ g) + t4, all distinct. (stmatrix would need every lane of the warp, but the
// rows past M skip the rope and the store.)
template <int NF>
__device__ __forceinline__ void g9_stage_qk_block(const GmEpilogue &ep, h3u32 stage, const float *acc, long long r0,
                                                  long long c0, long long M, int warp, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  gm_qk_block<NF>(ep, acc, r0, c0, M, warp, g, t4, [&](int, long long, int row, int b, const float *x) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      sts_u32(stage + (h3u32)g9_chunk_at(row, 16 * b + j) + 4 * t4, pack_bf2(x[2 * j], x[2 * j + 1]));
  });
}
#endif

// The 16-byte chunk k of staged row `row` (generic pointer to the staging area).
__device__ __forceinline__ uint4 g9_staged_chunk(const unsigned char *stage, int row, int k) {
  return *(const uint4 *)(stage + g9_chunk_at(row, k));
}

// Step 3, by NW warps (the consumer warpgroup's 4, or the producer warpgroup's 3 epilogue warps with G9_EPI_WARPS),
// warp wi of them. Each thread keeps one 16-byte column chunk (its lane) and walks rows: a warp stores one row's 512
// bytes (swiglu: two rows' 256 bytes) per instruction, and the addresses of a thread's rows differ by a multiple of
// the row pitch only. Rows past M are skipped.
#define G9_WALK_BATCH 8  // the consumers' rows per batch (the epilogue warps: 4)
#if GM_EPI == GM_EPI_SWIGLU
// swiglu: 64 rows x 128 output columns from c0 (16 chunks a row); lanes 0-15 take row 2 wi + 2 NW i, lanes 16-31 the
// next one; chunk k's values are staged chunk k, its gates chunk 16 + k. Per element gm_swiglu_f's
// bf(value * bf(silu(gate))).
template <int NF, int NW, int BATCH>
__device__ __forceinline__ void g9_walk_block(const GmEpilogue &ep, const unsigned char *stage, long long *,
                                              long long r0, long long c0, long long M, int wi, int lane, int) {
  const int k = lane & 15;
  const long long c = c0 + 8 * k;
  if (c >= GM_OUTN) return;
  h3bf *y = (h3bf *)ep.y[0] + c;
#pragma unroll
  for (int i = 0; i < (64 + 2 * NW - 1) / (2 * NW); ++i) {
    const int row = 2 * NW * i + 2 * wi + (lane >> 4);
    const long long r = r0 + row;
    if (row >= 64 || r >= M) break;  // rows grow with i
    const uint4 vs = g9_staged_chunk(stage, row, k), gs = g9_staged_chunk(stage, row, 16 + k);
#if GM_SWIGLU_X
    // The linear's own output beside y (the swiglu's x for the backward): the staged bf(value + bias) and bf(gate +
    // bias) are the bytes the unfused linear stores at columns c and GM_OUTN + c.
    h3bf *x = (h3bf *)ep.y[1] + r * GM_N + c;
    stg_v4(x, vs.x, vs.y, vs.z, vs.w);
    stg_v4(x + GM_OUTN, gs.x, gs.y, gs.z, gs.w);
#endif
    h3u32 out[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const h3u32 v = g9_word(vs, w), g = g9_word(gs, w);
      out[w] = pack_bf2(gm_swiglu_mix(bf2_lo(v), bf2_lo(g)), gm_swiglu_mix(bf2_hi(v), bf2_hi(g)));
    }
    stg_v4(y + r * GM_OUTN, out[0], out[1], out[2], out[3]);
  }
}
#else
// none, residual, gate_residual and qk_norm_rope: 64 rows x NF chunks from column c0 (NF = 32, or 24 for the
// 192-wide tile: lanes 24-31 idle); warp wi takes rows wi + NW i, in batches of BATCH rows whose global loads
// (residual, gate) all issue before the batch's first store (the compiler cannot see that the stores alias neither,
// so it would not hoist the next row's loads above them). The consumers walk with 8 rows a batch: ptxas keeps the 128
// accumulator registers allocated through the epilogue (wgmma operands), and 16 rows of residual and gate (128
// registers) spilled at the consumers' 232; 8 spill nothing at the full and small shapes (NVRTC, ptxas -v); the
// epilogue warps, with 88 registers, walk 4 rows at a time (gate_residual: 2; 4 spilled 16 bytes). gate_residual's
// table rows: lane l of the warp computes its row l's (a 64-bit division each) into `trows` (this warp's 32 slots),
// once per row instead of once per chunk. Per element gm_final's operations: y = the staged bf(v); residual
// bf(x + y); gate_residual bf(fma(gate, y, x)); none and qk_norm_rope store the staged word. qkv's chunks pick their
// output each (gm_at): a 256-wide tile straddles q and k, or k and v, where GM_OUTN % 256 == 128.
template <int NF, int NW, int BATCH>
__device__ __forceinline__ void g9_walk_block(const GmEpilogue &ep, const unsigned char *stage, long long *trows,
                                              long long r0, long long c0, long long M, int wi, int lane, int live) {
  constexpr int kRows = (64 + NW - 1) / NW;  // the most rows of one warp (warp 0's)
  // This warp's rows wi + NW i that exist: i < n.
  const long long left = M - r0 - wi;
  const int mine = (64 - wi + NW - 1) / NW;
  const int n = left <= 0 ? 0 : left >= (long long)NW * mine ? mine : (int)((left + NW - 1) / NW);
#if GM_EPI == GM_EPI_GATE_RESIDUAL
  if (lane < n) trows[lane] = gm_trow(ep, r0 + wi + NW * lane);
  __syncwarp();
#else
  (void)trows;
#endif
  const long long c = c0 + 8 * lane;
  if (lane >= NF || lane >= live || c >= GM_N) return;
  int o;
  const long long cc = gm_at(ep, 0, c, o);  // the column in output o (qkv: one of three)
  h3bf *y = (h3bf *)gm_out(ep, o) + cc;
  // The consumers unroll their two batches; the epilogue warps keep one batch's loads in registers (unrolled, ptxas
  // hoists the next batches' loads and spills at 88 registers).
  constexpr int kUnroll = NW == 4 ? 2 : 1;
#pragma unroll kUnroll
  for (int i0 = 0; i0 < kRows; i0 += BATCH) {
#if GM_EPI == GM_EPI_RESIDUAL || GM_EPI == GM_EPI_GATE_RESIDUAL
    uint4 xs[BATCH];
#endif
#if GM_EPI == GM_EPI_GATE_RESIDUAL
    uint4 gs[BATCH];
#endif
#if GM_EPI == GM_EPI_RESIDUAL || GM_EPI == GM_EPI_GATE_RESIDUAL
#pragma unroll
    for (int i = 0; i < BATCH && i0 + i < n; ++i) {
      const int row = wi + NW * (i0 + i);
      xs[i] = *(const uint4 *)gm_residual_at(ep, r0 + row, cc);
#if GM_EPI == GM_EPI_GATE_RESIDUAL
      gs[i] = *(const uint4 *)gm_gate_at(ep, trows[i0 + i], cc);
#endif
    }
#endif
#pragma unroll
    for (int i = 0; i < BATCH && i0 + i < n; ++i) {
      const int row = wi + NW * (i0 + i);
      const uint4 s = g9_staged_chunk(stage, row, lane);
      h3bf *yr = y + (r0 + row) * GM_OUTN;
#if GM_EPI == GM_EPI_NONE || GM_EPI == GM_EPI_QK_NORM_ROPE
      stg_v4(yr, s.x, s.y, s.z, s.w);
#else
      h3u32 out[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const h3u32 v = g9_word(s, w), xr = g9_word(xs[i], w);
#if GM_EPI == GM_EPI_GATE_RESIDUAL
        const h3u32 g = g9_word(gs[i], w);
#else
        const h3u32 g = 0;
#endif
        out[w] = pack_bf2(gm_mix(bf2_lo(v), bf2_lo(xr), bf2_lo(g)), gm_mix(bf2_hi(v), bf2_hi(xr), bf2_hi(g)));
      }
      stg_v4(yr, out[0], out[1], out[2], out[3]);
#endif
    }
  }
}
#endif

// Steps 1 and 2 of consumer warpgroup cw's 64-row block (rows from r0, rows >= M skipped; columns from c0 as
// gm_store_block takes them) into its staging area at shared address `stage`.
template <int NF>
__device__ __forceinline__ void g9_stage_any_block(const GmEpilogue &ep, const void *bias, const float *acc,
                                                   h3u32 stage, long long r0, long long c0, long long M, int tid) {
  const int warp = tid / 32, lane = tid % 32;
#if GM_EPI == GM_EPI_QK_NORM_ROPE
  (void)bias;
  g9_stage_qk_block<NF>(ep, stage, acc, r0, c0, M, warp, lane);
#else
  (void)ep, (void)r0, (void)M;
  g9_stage_block<NF>(stage, bias, acc, c0, warp, lane);
#endif
}

// Steps 1 and 2 of the staged epilogue in consumer warpgroup cw (without G9_EPI_WARPS; step 3 is g9_walk_block with
// NW = 4 after it): `stage` is its staging area.
template <int NF>
__device__ __forceinline__ void g9_stage_block_synced(const GmEpilogue &ep, const void *bias, const float *acc,
                                                      h3u32 stage, long long r0, long long c0, long long M, int cw,
                                                      int tid) {
  g9_wg_sync(cw);  // every thread of the warpgroup has read the previous tile's stage
  g9_stage_any_block<NF>(ep, bias, acc, stage, r0, c0, M, tid);
  g9_wg_sync(cw);
}
