// Flash attention on Hopper (sm_90a: TMA + mbarrier ring + wgmma, warp-specialized) in the contract's `flash` order
// (docs/contract.md section 4), operation for operation the order of attention.cuh, so both kernels give the same
// bits (the GPU checks compare them byte for byte): keys in canonical order in blocks of A9_KV (the order's kv_block,
// 64 or 128), ascending; per block
// s = q k^T (16-wide chunks of d, ascending, from 0), running max m of the raw scores and sum l, with
// c = fl(d^-0.5 * log2 e) and mc = fl(m_new * c): P = bf(ex2(fma(s, c, -mc))), o = o * ex2(fma(m_old, c, -mc)) + P v
// (16-key chunks, ascending), finally o / l. wgmma's chunk function equals
// mma.sync's (../shared/HOPPER-KERNELS.md section 1), and a wgmma accumulator fragment has the mma.sync layout per
// warp (row 16 * warp + g (+ 8), column 8 * j + 2 * t4 (+ 1)), so every thread sums l over the same keys in the same
// order as there.
//
// Shape: 384 threads per (128-query tile, head, batch item). Warpgroup 0 is the producer (one thread issues the TMA
// loads: the Q tile once, then K and V blocks of A9_KV keys into an A9_STAGES-deep ring); warpgroups 1 and 2 each
// own 64 query rows. S = Q K^T is an m64n(A9_KV) wgmma chain over d with both operands in shared memory; P V takes P from
// registers (the A fragment of mma.sync) and V from shared memory as an N-major operand (wgmma's transposed B), so V
// is never transposed by hand. A9_OVERLAP = 1 issues S of block kb with P V of block kb - 1 and runs the softmax of kb
// while both compute (FA3's intra-warpgroup overlap): it changes when the tensor core works, not what any output sums.
// Keys past the item's end read as zeros through the 3-D tensor maps (per item) and are masked to -inf before the
// max, as in attention.cuh.
//
// A9_PERSISTENT = 1: a 1-D grid of at most one CTA per SM walks the tiles t = blockIdx.x, + gridDim.x, ..., q tiles
// fastest (t = (item * heads + head) * q_tiles + q tile: the CTAs running at once share the K and V of one (head,
// item) in L2). Barriers are initialized once and the K/V ring's stage and phase run on across tiles, so the producer
// fetches the next tile's first blocks while the consumers finish the last ones; Q has one buffer, refilled when both
// consumers' last S of the tile completed (qEmpty), which overlaps the load with the last softmax, P V and the store.
// Every tile's arithmetic is the one-tile kernel's (o, m, l start afresh), so the bits are the same; the ping-pong
// turns balance within each tile, so they simply repeat. Timing only. The producer loads a tile's Q after its first
// K/V block, so it assumes Lk >= 1 (true whenever there is a tile: Lk >= Lq).
//
// Defined by the emitter: A9_ENTRY H3C_PARAMS A9_HEADS A9_C (c, a float literal) A9_KV (64 or 128) A9_STAGES A9_OVERLAP
// A9_PINGPONG (with A9_OVERLAP only) A9_PERSISTENT A9_LSE. Parameters
// (H3C_PARAMS, in this order): q_map (q [B, Lq, heads * 128], boxes of 64 columns x 128 rows), k_map, v_map (k, v
// [B, Lk, heads * 128], boxes of 64 columns x A9_KV rows), out (o [B, Lq, heads * 128]), with A9_LSE lse ([B, Lq,
// heads] F32: each row's L = mc + lg2(l), attention_grad's statistics), item_rows = Lq, kv_rows = Lk,
// and with A9_PERSISTENT items = B (grid.x: at most the tile count; without it grid.x: 128-query tiles, y: heads, z:
// items). Lq < Lk under sequence parallelism.
#define A9_D 128
// S's wgmma: one m64n(A9_KV)k16 instruction per 16-wide chunk of d.
#if A9_KV == 64
#define a9_wgmma_s wgmma_64
#elif A9_KV == 128
#define a9_wgmma_s wgmma_128
#else
#error "A9_KV must be 64 or 128"
#endif
#define A9_THREADS 384
#define A9_Q_BOX (128 * 128)              // bytes of one 64-column Q box (128 rows x 128 bytes)
#define A9_KV_BOX (A9_KV * 128)           // bytes of one 64-column K or V box (A9_KV keys x 128 bytes)
#define A9_SN (A9_KV / 8)                 // 8-key column groups of an S fragment (4 values each per thread)
#define A9_Q_BYTES (2 * A9_Q_BOX)         // the 128 x 128 Q tile
#define A9_KV_BYTES (2 * A9_KV_BOX)       // one A9_KV x 128 K (or V) block

// P is packed with common.cuh's bf2_rn (one cvt for the pair): pack_bf2's bits for every non-NaN input (P is in
// [0, 1] unless the scores were NaN).

// The softmax step of one key block on this thread's S fragment (sc[j * 4 + e]: row 16 * warp + g + 8 * (e >> 1),
// key k0 + 8 * j + 2 * t4 + (e & 1)), exactly attention.cuh's: mask (in the block that crosses Lk only), running
// max over the quad, rescale of l, P = bf(ex2(fma(s, c, -mc))) (left in sc) summed into l in (j, e) order. Returns
// the rows' rescale factors for o in alpha; a9_rescale_pack applies them and packs P (neither o nor the packed P of
// the previous block is touched here, so its P V may still run).
__device__ __forceinline__ void a9_softmax(float *sc, long long k0, long long Lk, int t4, float *m, float *l,
                                           float *alpha) {
  const float kNegInf = __int_as_float(0xff800000);
  if (k0 + A9_KV > Lk) {
#pragma unroll
    for (int j = 0; j < A9_SN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (k0 + j * 8 + t4 * 2 + (e & 1) >= Lk) sc[j * 4 + e] = kNegInf;
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = kNegInf;
#pragma unroll
    for (int j = 0; j < A9_SN; ++j) mx = fmaxf(mx, fmaxf(sc[j * 4 + hh * 2], sc[j * 4 + hh * 2 + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m[hh], mx), mc = __fmul_rn(mnew, A9_C);
    alpha[hh] = h3c_ex2(__fmaf_rn(m[hh], A9_C, -mc));  // 0 on the first block (m = -inf)
    m[hh] = mnew;
    l[hh] = __fmul_rn(l[hh], alpha[hh]);
#pragma unroll
    for (int j = 0; j < A9_SN; ++j) {
      const h3u32 pr = bf2_rn(h3c_ex2(__fmaf_rn(sc[j * 4 + hh * 2], A9_C, -mc)),
                                  h3c_ex2(__fmaf_rn(sc[j * 4 + hh * 2 + 1], A9_C, -mc)));
      sc[j * 4 + hh * 2] = __uint_as_float(pr << 16);
      sc[j * 4 + hh * 2 + 1] = __uint_as_float(pr & 0xffff0000u);
      l[hh] = __fadd_rn(l[hh], sc[j * 4 + hh * 2]);
      l[hh] = __fadd_rn(l[hh], sc[j * 4 + hh * 2 + 1]);
    }
  }
}

// o = o * alpha (per row), then P (already bf16 values) packed as the A fragments of the block's 16-key chunks.
__device__ __forceinline__ void a9_rescale_pack(const float *sc, const float *alpha, float *o, h3u32 (*pa)[4]) {
#pragma unroll
  for (int j = 0; j < A9_D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j * 4 + e] = __fmul_rn(o[j * 4 + e], alpha[e >> 1]);
#pragma unroll
  for (int kc = 0; kc < A9_KV / 16; ++kc) {
    pa[kc][0] = bf2_rn(sc[(2 * kc) * 4 + 0], sc[(2 * kc) * 4 + 1]);
    pa[kc][1] = bf2_rn(sc[(2 * kc) * 4 + 2], sc[(2 * kc) * 4 + 3]);
    pa[kc][2] = bf2_rn(sc[(2 * kc + 1) * 4 + 0], sc[(2 * kc + 1) * 4 + 1]);
    pa[kc][3] = bf2_rn(sc[(2 * kc + 1) * 4 + 2], sc[(2 * kc + 1) * 4 + 3]);
  }
}

// FA3's warpgroup ping-pong (A9_PINGPONG): the two consumers take turns issuing their wgmmas (named barriers 1 and 2,
// 256 threads: one consumer waits, the other arrives), so one's softmax runs while the other's GEMMs occupy the
// tensor core. Timing only: no value depends on it.
__device__ __forceinline__ void a9_turn_wait(int cw) {
#if A9_PINGPONG
  asm volatile("bar.sync %0, 256;\n" ::"r"(1 + cw) : "memory");
#endif
}
__device__ __forceinline__ void a9_turn_pass(int cw) {
#if A9_PINGPONG
  asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - cw) : "memory");
#endif
}

// S = Q K^T of the key block in stage `stage`: eight chained m64n(A9_KV)k16 wgmmas over d (box kc / 4, 32-byte step kc % 4
// inside the swizzled rows), the first with scale_d = 0. Issued and committed, not waited for.
__device__ __forceinline__ void a9_issue_s(float *sc, unsigned long long dq, h3u32 sK, int stage) {
  const unsigned long long dk = wgmma_desc_sw128(sK + stage * A9_KV_BYTES);
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < 8; ++kc)
    a9_wgmma_s(sc, dq + (kc >> 2) * (A9_Q_BOX >> 4) + 2 * (kc & 3), dk + (kc >> 2) * (A9_KV_BOX >> 4) + 2 * (kc & 3),
             kc != 0);
  wgmma_commit();
}

// o += P V of the key block in stage `stage`: A9_KV / 16 chained m64n128k16 wgmmas over its 16-key chunks, P from registers,
// V N-major (16 keys x 128 columns: two 64-column atoms A9_KV_BOX bytes apart, 2,048 bytes per chunk).
__device__ __forceinline__ void a9_issue_pv(float *o, h3u32 (*pa)[4], h3u32 sV, int stage) {
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < A9_KV / 16; ++kc)
    wgmma_128_rs_nmajor(o, pa[kc], wgmma_desc_sw128_nmajor(sV + stage * A9_KV_BYTES + kc * 2048, A9_KV_BOX), 1);
  wgmma_commit();
}

// The CTA's n-th tile (n = 0, 1, ...): its first query row, head and item; false past its last tile. Without
// A9_PERSISTENT one tile per CTA, set from the grid's x, y and z before the walk (q0, head and item stay as they are);
// otherwise tile blockIdx.x + n * gridDim.x of the `tiles` tiles, q tiles fastest (nq per (head, item)).
__device__ __forceinline__ bool a9_tile(int n, int nq, int tiles, int &q0, int &head, int &item) {
#if A9_PERSISTENT
  const int t = blockIdx.x + n * gridDim.x;
  if (t >= tiles) return false;
  q0 = (t % nq) * 128;
  head = (t / nq) % A9_HEADS;
  item = t / nq / A9_HEADS;
  return true;
#else
  return n == 0;
#endif
}

// The producer's Q tile load (two 64-column boxes), completing on qFull.
__device__ __forceinline__ void a9_load_q(h3u32 sQ, const H3cTensorMap *q_map, int head, int q0, int item,
                                          h3u32 qFull) {
  mbar_expect_tx(qFull, A9_Q_BYTES);
  tma_load_3d(sQ, q_map, head * A9_D, q0, item, qFull);
  tma_load_3d(sQ + A9_Q_BOX, q_map, head * A9_D + 64, q0, item, qFull);
}

// A consumer warp is done reading the Q tile (its last S of the tile completed): with A9_PERSISTENT the producer may
// load the next tile's Q over it once all 8 consumer warps arrived.
__device__ __forceinline__ void a9_release_q(h3u32 qEmpty, int lane) {
#if A9_PERSISTENT
  if (lane == 0) mbar_arrive(qEmpty);
#endif
}

extern "C" __global__ void __launch_bounds__(A9_THREADS, 1) A9_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ unsigned char a9_raw[];
  const h3u32 base = (smem_u32(a9_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sQ = base, sK = sQ + A9_Q_BYTES, sV = sK + A9_STAGES * A9_KV_BYTES;
  const h3u32 qFull = sV + A9_STAGES * A9_KV_BYTES, kFull = qFull + 8, vFull = kFull + 8 * A9_STAGES,
              empty = vFull + 8 * A9_STAGES, qEmpty = empty + 8 * A9_STAGES;  // qEmpty: A9_PERSISTENT only
  const int wg = warpgroup_index(), tid = threadIdx.x % 128;
  const long long L = item_rows, Lk = kv_rows;
#if A9_PERSISTENT
  int head = 0, item = 0, q0 = 0;  // the tile's (a9_tile)
  const int nq = (int)((L + 127) / 128), tiles = nq * A9_HEADS * (int)items;
#else
  int head = blockIdx.y, item = blockIdx.z, q0 = blockIdx.x * 128;
  const int nq = 1, tiles = 1;  // unused: one tile per CTA
#endif
  const int nkv = (int)((Lk + A9_KV - 1) / A9_KV);
  if (threadIdx.x == 0) {
    mbar_init(qFull, 1);
#if A9_PERSISTENT
    mbar_init(qEmpty, 8);  // one arrival per consumer warp
#endif
    for (int s = 0; s < A9_STAGES; ++s) {
      mbar_init(kFull + 8 * s, 1);  // the producer's expect_tx; the TMA bytes complete the phase
      mbar_init(vFull + 8 * s, 1);
      mbar_init(empty + 8 * s, 8);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    regs_dealloc<24>();
    if (tid == 0) {
      tma_prefetch_map(&q_map);
      tma_prefetch_map(&k_map);
      tma_prefetch_map(&v_map);
      int s = 0;  // the ring's stage and phase run on across tiles
      h3u32 ph = 0;
      for (int n = 0; a9_tile(n, nq, tiles, q0, head, item); ++n) {
#if !A9_PERSISTENT
        a9_load_q(sQ, &q_map, head, q0, item, qFull);
#endif
        for (int kb = 0; kb < nkv; ++kb) {
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          mbar_expect_tx(kFull + 8 * s, A9_KV_BYTES);
          tma_load_3d(sK + s * A9_KV_BYTES, &k_map, head * A9_D, kb * A9_KV, item, kFull + 8 * s);
          tma_load_3d(sK + s * A9_KV_BYTES + A9_KV_BOX, &k_map, head * A9_D + 64, kb * A9_KV, item, kFull + 8 * s);
          mbar_expect_tx(vFull + 8 * s, A9_KV_BYTES);
          tma_load_3d(sV + s * A9_KV_BYTES, &v_map, head * A9_D, kb * A9_KV, item, vFull + 8 * s);
          tma_load_3d(sV + s * A9_KV_BYTES + A9_KV_BOX, &v_map, head * A9_D + 64, kb * A9_KV, item, vFull + 8 * s);
          if (++s == A9_STAGES) { s = 0; ph ^= 1; }
#if A9_PERSISTENT
          // Q after the tile's first K/V block: that stage frees while the consumers still run the previous tile,
          // Q only once both consumers' last S of it completed (a fresh qEmpty counts as released for tile 0).
          if (kb == 0) {
            mbar_wait(qEmpty, ((h3u32)n & 1u) ^ 1u);
            a9_load_q(sQ, &q_map, head, q0, item, qFull);
          }
#endif
        }
      }
    }
  } else {
    // Consumers (the roles are the two branches of one if/else, so ptxas applies setmaxnreg).
    regs_alloc<240>();
    const int cw = wg - 1;  // this consumer's 64 query rows of the tile
    const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t4 = lane & 3;
    const float kNegInf = __int_as_float(0xff800000);
#if A9_OVERLAP
    int r0 = 0;  // the ring position of the tile's first key block, modulo 2 * A9_STAGES (stage and phase)
#else
    int s = 0;
    h3u32 ph = 0;
#endif
    for (int n = 0; a9_tile(n, nq, tiles, q0, head, item); ++n) {
      float o[A9_D / 2];  // o[j * 4 + e]: row 16 * warp + g + 8 * (e >> 1), column 8 * j + 2 * t4 + (e & 1)
#pragma unroll
      for (int i = 0; i < A9_D / 2; ++i) o[i] = 0.0f;
      float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
      h3u32 pa[A9_KV / 16][4];
      const unsigned long long dq = wgmma_desc_sw128(sQ + cw * 64 * 128);
      mbar_wait(qFull, (h3u32)n & 1u);
      float sc[A9_KV / 2], alpha[2];
#if A9_OVERLAP
      // FA3's order of issue: S of block kb and P V of block kb - 1 run on the tensor core while the softmax of kb
      // runs on the FP32 pipes; o is rescaled and P handed over only after P V of kb - 1 completed. o still sees
      // ((o * alpha_{kb-1} + P_{kb-1} V_{kb-1}) * alpha_kb + P_kb V_kb), the contract's sequence.
      if (cw == 1) a9_turn_pass(1);  // consumer 0 issues first (in every tile: each tile's turns balance)
      mbar_wait(kFull + 8 * (r0 % A9_STAGES), (h3u32)(r0 / A9_STAGES) & 1u);
      a9_turn_wait(cw);
      a9_issue_s(sc, dq, sK, r0 % A9_STAGES);
      a9_turn_pass(cw);
      wgmma_wait<0>();
      if (nkv == 1) a9_release_q(qEmpty, lane);
      a9_softmax(sc, 0, Lk, t4, m, l, alpha);
      a9_rescale_pack(sc, alpha, o, pa);
      for (int kb = 1; kb < nkv; ++kb) {
        const int s = (r0 + kb) % A9_STAGES, sp = (r0 + kb - 1) % A9_STAGES;
        mbar_wait(kFull + 8 * s, (h3u32)((r0 + kb) / A9_STAGES) & 1u);
        mbar_wait(vFull + 8 * sp, (h3u32)((r0 + kb - 1) / A9_STAGES) & 1u);
        a9_turn_wait(cw);
        a9_issue_s(sc, dq, sK, s);
        a9_issue_pv(o, pa, sV, sp);
        a9_turn_pass(cw);
        wgmma_wait<1>();  // S of kb is complete (groups complete in order)
        if (kb == nkv - 1) a9_release_q(qEmpty, lane);
        a9_softmax(sc, (long long)kb * A9_KV, Lk, t4, m, l, alpha);
        wgmma_wait<0>();  // P V of kb - 1 is complete: its K and V stage is free
        if (lane == 0) mbar_arrive(empty + 8 * sp);
        a9_rescale_pack(sc, alpha, o, pa);
      }
      {
        const int sp = (r0 + nkv - 1) % A9_STAGES;
        mbar_wait(vFull + 8 * sp, (h3u32)((r0 + nkv - 1) / A9_STAGES) & 1u);
        a9_turn_wait(cw);
        a9_issue_pv(o, pa, sV, sp);
        if (cw == 0) a9_turn_pass(0);  // consumer 1's last turn; consumer 0 has none left to receive
        wgmma_wait<0>();
#if A9_PERSISTENT
        if (lane == 0) mbar_arrive(empty + 8 * sp);  // the one-tile kernel never refills it
        r0 = (r0 + nkv) % (2 * A9_STAGES);
#endif
      }
#else
      for (int kb = 0; kb < nkv; ++kb) {
        mbar_wait(kFull + 8 * s, ph);
        a9_issue_s(sc, dq, sK, s);
        wgmma_wait<0>();
        if (kb == nkv - 1) a9_release_q(qEmpty, lane);
        a9_softmax(sc, (long long)kb * A9_KV, Lk, t4, m, l, alpha);
        a9_rescale_pack(sc, alpha, o, pa);
        mbar_wait(vFull + 8 * s, ph);
        a9_issue_pv(o, pa, sV, s);
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(empty + 8 * s);
        if (++s == A9_STAGES) { s = 0; ph ^= 1; }
      }
#endif
      const long long ld = (long long)A9_HEADS * A9_D;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float lt = __fadd_rn(l[hh], __shfl_xor_sync(0xffffffffu, l[hh], 1));
        lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
        const long long q = (long long)q0 + cw * 64 + warp * 16 + g + hh * 8;
        if (q >= L) continue;
#if A9_LSE  // the row statistics for the backward: L = mc + lg2(l) of the walk's final m and l
        if (t4 == 0) ((float *)lse)[((long long)item * L + q) * A9_HEADS + head] = __fadd_rn(__fmul_rn(m[hh], A9_C), h3c_lg2(lt));
#endif
        h3bf *orow = (h3bf *)out + ((long long)item * L + q) * ld + (long long)head * A9_D;
#pragma unroll
        for (int j = 0; j < A9_D / 8; ++j)
          *(h3u32 *)(orow + j * 8 + t4 * 2) = (h3u32)f2bf(__fdiv_rn(o[j * 4 + hh * 2], lt)) |
                                              ((h3u32)f2bf(__fdiv_rn(o[j * 4 + hh * 2 + 1], lt)) << 16);
      }
    }
  }
}
