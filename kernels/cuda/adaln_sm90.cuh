// The AdaLN table on sm_90a (adaln_table, docs/contract.md section 3: a = bf(silu(temb)) for the T rows of temb
// [T, K] F32, y = bf(a W^T + bias) [T, N] with W [N, K] bf16): a memory-bound streaming kernel. At the full shape W is
// 520 MB read once against T = 1-3 rows, so the op is the weight stream; this kernel keeps it flowing from DRAM with
// bulk copies into a deep shared-memory ring, where the mma.sync kernel's 16 x 64 tiles (gemm_bf16.cuh,
// kTileFewRows) reach about half the bandwidth.
//
// Bits: the same as the mma.sync kernel, by the same argument as every Hopper kernel (../shared/HOPPER-KERNELS.md
// section 1): each output's F32 accumulator starts at 0 and adds K's 16-wide chunks in ascending order, each chunk by
// the same instruction with the same operand roles (mma.sync m16n8k16: A = 16 rows of a, the rows past the pass's
// row count zero; B = 8 weight rows), then the same epilogue (gemm_epilogue.cuh gm_store2: bias, rounding). Only where
// an output sits (tile, warp, fragment position, SM) differs, which changes no bit. The operand roles are kept on
// purpose rather than swapped (weight rows as the MMA's M side): the 16-row A tile wastes up to 15 of its rows, but the
// tensor core does 2 x 10^6 such MMAs (8 GFLOP at T <= 8) in ~15 us against ~130 us of weight streaming, and keeping
// the roles means equality rests on the measured invariance alone, with no assumption that the chunk function is
// symmetric in its two operands. The GPU checks compare this kernel with the mma.sync kernel byte for byte.
//
// Shape: AL_WARPS consumer warps + 1 producer warp. The grid is persistent: grid.x CTAs (at most AL_CTAS per SM) split
// the weight's 8-row blocks into contiguous, even ranges (no tile quantization: each CTA's share differs by at most one
// block); grid.y = ceil(T / 8) passes of 8 rows of a each (T <= 8 is one pass; more rows stream W once per pass: the
// row count of a request has no bound, so this stays correct for every T and only slower past 8). A CTA walks its
// range in tiles of AL_BN = 8 x AL_NBW x AL_WARPS weight rows; each tile is streamed as K segments of AL_KS columns,
// one ring stage per segment (AL_BN rows x AL_KS columns; each row's segment is one contiguous bulk copy of up to
// 2 x AL_KS bytes). The producer runs ahead across tile boundaries (the ring never drains between tiles) and marks the
// weight evict-first in L2 (it is read once). Each consumer warp owns AL_NBW 8-row blocks of every tile, so its
// AL_NBW accumulator chains are independent (the MMA latency is hidden across them and the warps); it converts its
// share of a = bf(silu(temb)) into shared memory once per CTA, exactly as gemm_bf16.cuh (GM_X_SILU_F32) does per tile.
//
// AL_TILES (`--tune adaln_tiles=1`) streams each stage as one TMA box of the weight instead: a tensor map of W [N, K]
// with the 128-byte swizzle, AL_BN rows x 64 columns a box (AL_KS = 64), one request a stage where the bulk form issues
// one copy of 2 x AL_KS bytes per weight row (64 of 512 bytes a stage at the default). Why: with 4 consumer warps and
// one CTA per SM the bulk form took 0.300 ms against 0.170 with two (bench/NOTES.md, 2026-12-04), ~270 cycles per
// 16-wide chunk of a warp, far more than its ldmatrix and mma need, which points at the issue of the small copies, not
// at the consumers or the DRAM; a box needs one instruction per stage. Swizzled rows of 128 bytes: row r's 16-byte
// piece c sits at piece c ^ (r % 8), so the 8 rows an ldmatrix phase reads fall in 8 different bank groups (the bulk
// form pads its rows for the same reason). The last tile of a CTA's range, when shorter than AL_BN rows, loads as 8-row
// boxes (w8_map), so no CTA reads another's rows. The ring comes first in shared memory (a box's destination is 1,024-
// byte aligned for the swizzle). The same instructions on the same operands: the same bits.
//
// Defined by the emitter: AL_ENTRY H3C_PARAMS AL_KS AL_STAGES AL_WARPS AL_NBW AL_CTAS (AL_TILES defined or not), and the epilogue's defines
// (gemm_epilogue.cuh: GM_K GM_N GM_HAS_BIAS ...; no fused epilogue, bf16 out). Parameters (H3C_PARAMS, in this order,
// those of the mma.sync kernel): x (temb [T, K] F32), y0 ([T, N] bf16), w ([N, K] bf16), bias (when GM_HAS_BIAS),
// rows (T); with AL_TILES w's place holds w_map and w8_map (tensor maps of W, boxes of 64 columns x AL_BN and x 8 rows).
#define AL_ROWS 8                          // rows of a per pass: A fragment rows 0-7 (rows 8-15 are zero registers)
#define AL_BN (8 * AL_NBW * AL_WARPS)      // weight rows per tile
#define AL_THREADS (32 * (AL_WARPS + 1))
// Bytes per weight row of a stage and per row of a in shared memory: odd multiples of 16 bytes, so the 8 rows one
// ldmatrix phase reads start in 8 different 16-byte bank groups (no bank conflicts).
// (AL_TILES: rows of 128 bytes, swizzled instead of padded.)
#ifdef AL_TILES
#define AL_ROWB 128
#else
#define AL_ROWB (AL_KS * 2 + 16)
#endif
#define AL_XROWB (GM_K * 2 + 16)
#define AL_STAGE_BYTES (AL_BN * AL_ROWB)
#define AL_KSEG ((GM_K + AL_KS - 1) / AL_KS)

#if GM_K % 16 || AL_KS % 16 || AL_NBW % 2 || AL_BN * AL_KS * 2 >= (1 << 20)
#error "adaln_sm90 needs K and the stage width in whole 16-wide chunks, pairs of 8-row blocks, stages < 1 MiB"
#endif
#if defined(AL_TILES) && (AL_KS != 64 || AL_BN > 256)
#error "adaln_sm90's boxes are 64 columns (the 128-byte swizzle) by at most 256 rows"
#endif
#if GM_EPI != GM_EPI_NONE || GM_OUT_F32 || GM_NOUT != 1
#error "adaln_sm90 computes the AdaLN table: no fused epilogue, one bf16 output"
#endif

__device__ __forceinline__ void al_ldsm_x2(h3u32 &r0, h3u32 &r1, h3u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void al_ldsm_x4(h3u32 &r0, h3u32 &r1, h3u32 &r2, h3u32 &r3, h3u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
// An L2 policy that evicts these lines first: the weight is read once per forward, the rest of L2 is worth more.
__device__ __forceinline__ unsigned long long al_evict_first() {
  unsigned long long p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// One contiguous bulk copy (global -> shared, 16-byte aligned, a multiple of 16 bytes) completing `bytes` on bar.
__device__ __forceinline__ void al_bulk_load(h3u32 dst, const void *src, h3u32 bytes, h3u32 bar,
                                             unsigned long long policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
               "%4;\n" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}

#ifdef AL_TILES
// One box of the weight (64 columns from k0, rows from n0) with the evict-first policy.
__device__ __forceinline__ void al_box_load(h3u32 dst, const H3cTensorMap *map, int k0, int n0, h3u32 bar,
                                            unsigned long long policy) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint "
               "[%0], [%1, {%2, %3}], [%4], %5;\n"
               ::"r"(dst), "l"((unsigned long long)map), "r"(k0), "r"(n0), "r"(bar), "l"(policy) : "memory");
}
#endif

// One 16-wide chunk c of a stage added to this warp's accumulators: a's rows 0-7 (A rows 8-15 zero) at shared address
// xa, two 8-row weight blocks per ldmatrix.x4 at wa (the mma.sync kernel's fragments, gemm_bf16.cuh gm_compute). wa is
// this lane's weight row in the stage; its 16-byte piece is 2 c + half (half: (lane >> 3) & 1), swizzled by the row's
// r % 8 = sw with AL_TILES, and the row padded otherwise.
__device__ __forceinline__ void al_chunk(float (&acc)[AL_NBW][4], h3u32 xa, h3u32 wa, int c, int half, int sw) {
  h3u32 a[4];
  al_ldsm_x2(a[0], a[2], xa);
  a[1] = 0u;
  a[3] = 0u;
#ifdef AL_TILES
  const h3u32 piece = (h3u32)(((2 * c + half) ^ sw) * 16);
#else
  const h3u32 piece = (h3u32)((2 * c + half) * 16);
  (void)sw;
#endif
#pragma unroll
  for (int p = 0; p < AL_NBW / 2; ++p) {
    h3u32 b0, b1, b2, b3;
    al_ldsm_x4(b0, b1, b2, b3, wa + p * 16 * AL_ROWB + piece);
    mma16816(acc[2 * p], a, b0, b1);
    mma16816(acc[2 * p + 1], a, b2, b3);
  }
}

extern "C" __global__ void __launch_bounds__(AL_THREADS, AL_CTAS) AL_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ __align__(128) unsigned char al_raw[];
#ifdef AL_TILES
  // The ring first (1,024-byte aligned boxes for the swizzle), then a, then the barriers.
  const h3u32 raw = smem_u32(al_raw), base = (raw + 1023u) & ~1023u;
  const h3u32 sW = base, sX = base + AL_STAGES * AL_STAGE_BYTES;
  const h3u32 full = sX + AL_ROWS * AL_XROWB, empty = full + 8 * AL_STAGES;
#else
  const h3u32 raw = smem_u32(al_raw), base = (raw + 127u) & ~127u;
  const h3u32 sX = base, sW = base + AL_ROWS * AL_XROWB;
  const h3u32 full = sW + AL_STAGES * AL_STAGE_BYTES, empty = full + 8 * AL_STAGES;
#endif
  unsigned char *xs = al_raw + (sX - raw);  // a: AL_ROWS rows of AL_XROWB bytes
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long T = rows, r0 = (long long)blockIdx.y * AL_ROWS;
  const int xrows = (int)min((long long)AL_ROWS, T - r0);
  // This CTA's weight rows [nBegin, nEnd): a contiguous range of whole 8-row blocks, the blocks split evenly.
  const long long nblk = (GM_N + 7) / 8;
  const long long nBegin = nblk * blockIdx.x / gridDim.x * 8;
  const long long nEnd = min((long long)GM_N, nblk * (blockIdx.x + 1) / gridDim.x * 8);

  if (threadIdx.x == 0) {
    for (int s = 0; s < AL_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);          // the producer's expect_tx; the copies' bytes complete the phase
      mbar_init(empty + 8 * s, AL_WARPS);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == AL_WARPS) {
    // Producer: every stage of every tile of the range, in the consumers' order.
    const unsigned long long policy = al_evict_first();
    int s = 0;
    h3u32 ph = 0;
#ifdef AL_TILES
    if (lane == 0) {
      tma_prefetch_map(&w_map);
      tma_prefetch_map(&w8_map);
      for (long long n0 = nBegin; n0 < nEnd; n0 += AL_BN) {
        const int nrows = (int)min((long long)AL_BN, nEnd - n0);  // a multiple of 8
        for (int j = 0; j < AL_KSEG; ++j) {
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          // Whole boxes: the columns past K arrive as zeros and count (no chunk reads them).
          mbar_expect_tx(full + 8 * s, (h3u32)(nrows * 128));
          if (nrows == AL_BN) {
            al_box_load(sW + s * AL_STAGE_BYTES, &w_map, j * 64, (int)n0, full + 8 * s, policy);
          } else {
            for (int b = 0; b < nrows / 8; ++b)
              al_box_load(sW + s * AL_STAGE_BYTES + b * 1024, &w8_map, j * 64, (int)n0 + 8 * b, full + 8 * s, policy);
          }
          if (++s == AL_STAGES) { s = 0; ph ^= 1; }
        }
      }
    }
#else
    const h3bf *W = (const h3bf *)w;
    for (long long n0 = nBegin; n0 < nEnd; n0 += AL_BN) {
      const int nrows = (int)min((long long)AL_BN, nEnd - n0);
      for (int j = 0; j < AL_KSEG; ++j) {
        const int k0 = j * AL_KS, bytes = min(AL_KS, GM_K - k0) * 2;
        if (lane == 0) {
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          mbar_expect_tx(full + 8 * s, (h3u32)(nrows * bytes));
        }
        __syncwarp();
        for (int r = lane; r < nrows; r += 32)
          al_bulk_load(sW + s * AL_STAGE_BYTES + r * AL_ROWB, W + (n0 + r) * GM_K + k0, (h3u32)bytes, full + 8 * s,
                       policy);
        if (++s == AL_STAGES) { s = 0; ph ^= 1; }
      }
    }
#endif
  } else {
    // Consumers. First a = bf(silu(temb)) of this pass's rows (rows past T zero), as gemm_bf16.cuh converts it.
    const float *X = (const float *)x;
    for (int i = threadIdx.x; i < AL_ROWS * (GM_K / 8); i += AL_WARPS * 32) {
      const int r = i / (GM_K / 8), c = (i % (GM_K / 8)) * 8;
      h3u32 pk[4] = {0u, 0u, 0u, 0u};
      if (r < xrows) {
        const float *src = X + (r0 + r) * GM_K + c;
#pragma unroll
        for (int e = 0; e < 8; e += 2) pk[e / 2] = pack_bf2(h3c::detmath::silu(src[e]), h3c::detmath::silu(src[e + 1]));
      }
      uint4 q;
      q.x = pk[0]; q.y = pk[1]; q.z = pk[2]; q.w = pk[3];
      *(uint4 *)(xs + r * AL_XROWB + c * 2) = q;
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(AL_WARPS * 32) : "memory");  // the consumers only

    const int g = lane >> 2, t4 = lane & 3;
    const void *B = GM_BIAS_PARAM;
    const GmEpilogue ep = GM_EPILOGUE_PARAMS;
    // ldmatrix addresses (gemm_bf16.cuh gm_compute's): a's rows 0-7 at k and k + 8 (lanes 0-15 of the .x2); this
    // warp's weight rows, two 8-row blocks per .x4 (lanes 0-7 / 16-23 the first / second block at k, 8-15 / 24-31 at
    // k + 8).
    const h3u32 xAddr = sX + (lane & 7) * AL_XROWB + ((lane >> 3) & 1) * 16;
    const h3u32 wOff = (warp * 8 * AL_NBW + (lane >> 4) * 8 + (lane & 7)) * AL_ROWB;
    const int half = (lane >> 3) & 1, sw = lane & 7;  // (the row's r % 8: blocks start at multiples of 8)
    int s = 0;
    h3u32 ph = 0;
    for (long long n0 = nBegin; n0 < nEnd; n0 += AL_BN) {
      float acc[AL_NBW][4];
#pragma unroll
      for (int b = 0; b < AL_NBW; ++b)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[b][e] = 0.0f;
      for (int j = 0; j < AL_KSEG; ++j) {
        mbar_wait(full + 8 * s, ph);
        const int nch = min(AL_KS, GM_K - j * AL_KS) / 16;  // whole chunks (GM_K % 16 == 0)
        const h3u32 st = sW + s * AL_STAGE_BYTES + wOff;
        const h3u32 xk = xAddr + j * AL_KS * 2;
        // The stage's chunks in ascending k: unrolled for a whole stage (the loads of later chunks can then be issued
        // ahead of the MMAs they feed), a loop for the last segment of a K that is not whole stages.
        if (nch == AL_KS / 16) {
#pragma unroll
          for (int c = 0; c < AL_KS / 16; ++c) al_chunk(acc, xk + c * 32, st, c, half, sw);
        } else {
          for (int c = 0; c < nch; ++c) al_chunk(acc, xk + c * 32, st, c, half, sw);
        }
        __syncwarp();  // every lane's reads of the stage are done before it is released
        if (lane == 0) mbar_arrive(empty + 8 * s);
        if (++s == AL_STAGES) { s = 0; ph ^= 1; }
      }
      // Epilogue (gemm_epilogue.cuh): lane (g, t4) holds row r0 + g, weight rows (output columns) n and n + 1 of
      // each block in accumulators 0 and 1; accumulators 2 and 3 are the zero rows 8-15 of A.
      if (g < xrows) {
#pragma unroll
        for (int b = 0; b < AL_NBW; ++b) {
          const long long n = n0 + warp * 8 * AL_NBW + b * 8 + 2 * t4;
          if (n < nEnd) gm_store2(ep, B, r0 + g, 0, n, acc[b][0], acc[b][1]);
        }
      }
    }
  }
}
