// emitKernel: picks the kernel template for a plan op, checks the op's reduction order against what the template
// implements (docs/contract.md section 4), and specializes the template with #defines, its typed parameter list and
// its launch geometry. All shapes except the row counts are compile-time constants; nothing depends on M (rows), the
// batch or the row order.
#include "h3c/kernels/emit.h"
#include "emit_parts.h"

#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace h3c::kernels {


namespace {

using namespace emit_detail;

// The tensor-core GEMM template's specialization (gemm_bf16.cuh).
enum class XMode { Bf16, F32, SiluF32 };
struct GemmDesc {
  int64_t K = 0, N = 0;  // N: all weight rows (swiglu: value + gate halves; qkv: 3 outputs)
  XMode x = XMode::Bf16;
  Epilogue epi = Epilogue::None;
  bool outF32 = false, bias = false;
  int nout = 1;
  int64_t chunk = 0, numChunks = 1, rowsPerTs = 1;
  double qkEps = 0;   // qk_norm_rope: the norm's eps
  int64_t qkR = 0;    // qk_norm_rope: the rotary width (0: norm only)
  int64_t loraK = 0;  // an unmerged LoRA path: the chain goes on over lora_t's loraK columns (contract section 13)
  bool swigluX = false;  // swiglu: the linear's own output [v | g] stored beside y as output 1 (h3-fuse training=true)
};

// The defines of the shared epilogue (gemm_epilogue.cuh).
void defineEpilogue(Builder &b, const GemmDesc &d) {
  static const char *epiName[] = {"GM_EPI_NONE", "GM_EPI_RESIDUAL", "GM_EPI_GATE_RESIDUAL", "GM_EPI_SWIGLU",
                                  "GM_EPI_QK_NORM_ROPE"};
  b.def("GM_K", d.K); b.def("GM_N", d.N); b.def("GM_EPI", epiName[int(d.epi)]);
  b.def("GM_OUT_F32", d.outF32 ? 1 : 0); b.def("GM_HAS_BIAS", d.bias ? 1 : 0); b.def("GM_NOUT", d.nout);
  b.def("GM_CHUNK", d.chunk); b.def("GM_NUM_CHUNKS", d.numChunks); b.def("GM_RPT", d.rowsPerTs);
  b.def("GM_LORA_K", d.loraK);
  b.def("GM_SWIGLU_X", d.swigluX ? 1 : 0);
  if (d.epi == Epilogue::QkNormRope) {
    b.def("GM_QK_EPS", floatLit(d.qkEps));
    b.def("GM_QK_R", d.qkR);
  }
}

// The Hopper kernels' L2 prefetch of each tile's residual block (gemm_res_prefetch k-blocks before the tile's end,
// gemm_epilogue.cuh's gm_prefetch_residual_row): for the epilogues that read a residual, whose rows are whole 16-byte
// chunks. Other epilogues have nothing to prefetch and ignore the option (as the ping-pong kernel does).
void defineResPrefetch(Builder &b, const GemmDesc &d, const EmitOptions &o) {
  const bool reads = d.epi == Epilogue::Residual || d.epi == Epilogue::GateResidual;
  if (o.sm90ResPrefetch > 0 && reads && (d.N / d.nout) % 8 == 0) b.def("G9_RES_PREFETCH", o.sm90ResPrefetch);
}

// The parameter list of both GEMM templates; x and w are buffers (mma.sync) or tensor maps (Hopper: x_map, w_map,
// whose W box has wBoxRows rows and x's xBoxRows).
Params gemmParams(const OpView &v, const GemmDesc &d, bool maps, int64_t wBoxRows = 128, int64_t xBoxRows = 128) {
  Params p;
  if (maps) p.tensorMap("x_map", OperandRole::In, 0, v.rowsOfIn(0), d.K, 64, xBoxRows);
  else p.in("x", 0);
  if (d.epi == Epilogue::Residual || d.epi == Epilogue::GateResidual) p.in("residual", 1);
  if (d.epi == Epilogue::GateResidual) {
    p.in("table", 2);
    p.in("ts_index", 3);
    p.in("tags", 4);
  }
  for (int o = 0; o < d.nout; ++o) p.out("y" + std::to_string(o), o);
  if (d.swigluX) p.out("y1", 1);  // (gemm_epilogue.cuh: GM_Y_PARAMS' second output)
  if (maps)
    p.tensorMap("w_map", OperandRole::Weight, 0, Extent::constant(d.N), d.K, 64, wBoxRows, d.nout == 3 ? 3 : 1);
  else p.weight("w", 0, d.nout == 3 ? 3 : 1);
  if (d.loraK > 0) {  // the LoRA input (the op's last) and up slot (its last weight), read like x and W
    // (an op without its lora_t would have the kernel read another input as t)
    const std::vector<std::string> roles = plan::inputRoles(v.op.kind, v.a());
    if (roles.empty() || roles.back() != "lora_t" || v.op.in.size() != roles.size() || v.vals.in.size() != roles.size())
      fail(v.where, "an op with lora_k = {} reads {} inputs, the last its lora_t; got {}", d.loraK, roles.size(),
           v.op.in.size());
    const int64_t tIn = int64_t(v.op.in.size()) - 1, upW = int64_t(v.op.weights.size()) - 1;
    if (maps) {
      p.tensorMap("t_map", OperandRole::In, tIn, v.rowsOfIn(size_t(tIn)), d.loraK, 64, xBoxRows);
      p.tensorMap("u_map", OperandRole::Weight, upW, Extent::constant(d.N), d.loraK, 64, wBoxRows);
    } else {
      p.in("lora_t", tIn);
      p.weight("lora_up", upW);
    }
  }
  if (d.bias) p.bias("bias", 0);
  if (d.epi == Epilogue::QkNormRope) {  // weights [Wq, Wk, Wv, norm_q, norm_k]; inputs [x(, cos, sin)]
    p.weight("qk_w0", 3);
    p.weight("qk_w1", 4);
    if (d.qkR > 0) {
      p.in("rope_cos", 1);
      p.in("rope_sin", 2);
    }
  }
  p.scalar("rows", v.rowsOfIn(0));
  if (d.epi == Epilogue::GateResidual) p.scalar("meta_rows", v.rowsOfIn(3));
  if (d.epi == Epilogue::QkNormRope && d.qkR > 0) p.scalar("meta_rows", v.rowsOfIn(1));
  return p;
}

std::string gemmName(const OpView &v, const GemmDesc &d, const std::string &impl) {
  static const char *epiSuffix[] = {"", "_res", "_gres", "_swiglu", "_qknr"};
  std::string xs = d.x == XMode::Bf16 ? "" : "_xf32";
  std::string lora = d.loraK > 0 ? fmt::format("_lora{}", d.loraK) : "";
  return fmt::format("{}_{}_k{}_n{}{}{}{}{}", plan::opKindName(v.op.kind), impl, d.K, d.N, epiSuffix[int(d.epi)],
                     d.swigluX ? "x" : "", xs, lora);
}

// The ping-pong Hopper kernel (gemm_sm90_pingpong.cuh): 128 x 128 tiles (swiglu: 64 output columns), each owned by
// one consumer warpgroup, the two taking turns; stages of 32 KiB (2-6), a persistent grid of one CTA per SM.
plan::Kernel emitGemmSm90Pingpong(const OpView &v, const GemmDesc &d, const std::string &arch) {
  const EmitOptions &o = v.options;
  const int stages = o.sm90Stages, groupM = o.sm90GroupM;
  if (stages < 2 || stages > 6 || groupM < 1 || groupM > 64 || (o.sm90Inflight != 0 && o.sm90Inflight != 1))
    // (gemm_cluster and gemm_epi_smem are the cooperative kernel's: ignored here)
    fail(v.where, "Hopper ping-pong linear tuning out of range (stages 2-6, group 1-64, in flight 0/1)");
  Builder b;
  defineEpilogue(b, d);
  b.def("G9_STAGES", stages);
  b.def("G9_GROUP_M", groupM);
  b.def("G9_INFLIGHT", o.sm90Inflight);
  const bool swiglu = d.epi == Epilogue::Swiglu;
  Params p = gemmParams(v, d, /*maps=*/true, swiglu ? 64 : 128);
  const int64_t tilesN = swiglu ? (d.N / 2 + 63) / 64 : (d.N + 127) / 128;
  plan::GridDim g = dim(v.rowsOfIn(0).plus(127).scaled(tilesN), 128);  // >= the tile count, capped at the SMs
  g.maxPerSm = 1;
  const int64_t smem = int64_t(stages) * (128 + 128) * 64 * 2 + 1024 + 16 * stages + 16;  // + alignment, ring and turn mbarriers
  plan::Launch l = launch(384, smem, g);
  std::string body = std::string(tmpl::hopper) + "\n" + tmpl::gemm_epilogue + "\n" + tmpl::gemm_sm90_pingpong;
  return finish(gemmName(v, d, "sm90pp"), "G9_ENTRY", b, p, body, l, arch, v.options);
}

// The m64nNk16 bf16 wgmma with F32 accumulators for the 256-row tile's width N, as two functions named `name` (D =
// A B^T + scale_d D) and `name`_first (D = A B^T, the accumulators written only: hopper.cuh's wgmma_256_first says
// why): generated, since wgmma's register list is spelled out per N.
std::string wgmmaFunctions(int n, const std::string &name) {
  std::string regs;
  for (int i = 0; i < n / 2; ++i) regs += fmt::format("{}%{}", i ? ", " : "", i);
  auto operands = [&](const char *constraint) {
    std::string o;
    for (int i = 0; i < n / 2; ++i) o += fmt::format("{}\"{}\"(d[{}])", i ? ", " : "", constraint, i);
    return o;
  };
  const int a = n / 2, b = n / 2 + 1, sc = n / 2 + 2;
  const std::string op = fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.bf16.bf16 {{{}}}, %{}, %{}, p, 1, 1, 0, 0;", n,
                                     regs, a, b);
  std::ostringstream o;
  o << "__device__ __forceinline__ void " << name
    << "(float *d, unsigned long long da, unsigned long long db, int scale_d) {\n"
    << "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << sc << ", 0;\\n\"\n               \"" << op
    << "\\n}\\n\"\n               : " << operands("+f") << "\n               : \"l\"(da), \"l\"(db), \"r\"(scale_d));\n}\n";
  o << "__device__ __forceinline__ void " << name << "_first(float *d, unsigned long long da, unsigned long long db) {\n"
    << "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 0, 0;\\n\"\n               \"" << op
    << "\\n}\\n\"\n               : " << operands("=f") << "\n               : \"l\"(da), \"l\"(db));\n}\n";
  return o.str();
}

// The Hopper kernel with 256-row tiles (gemm_sm90_tall.cuh, gemm_bm=256): 256 x gemm_bn tiles, stages of 32 KiB +
// gemm_bn x 128 bytes, alone or in 2-CTA clusters sharing x, the epilogue in registers or staged (gemm_epi_smem 1 or
// 2: the 256-row tile has no epilogue warps), a persistent grid of at most one CTA per SM.
plan::Kernel emitGemmSm90Tall(const OpView &v, const GemmDesc &d, const std::string &arch) {
  const EmitOptions &o = v.options;
  const int bn = o.sm90Bn, stages = o.sm90Stages, groupM = o.sm90GroupM, cluster = o.sm90Cluster;
  if (d.epi == Epilogue::Swiglu || d.epi == Epilogue::QkNormRope)
    fail(v.where, "the 256-row Hopper tile (gemm_bm=256) serves the epilogues none, residual and gate_residual, not {}",
         plan::epilogueName(d.epi));
  if (bn % 8 != 0 || bn < 128 || bn > 192 || stages < 2 || stages > 4 || groupM < 1 || groupM > 64 ||
      o.sm90Inflight < 0 || o.sm90Inflight > 2 || (cluster != 1 && cluster != 2) || o.sm90EpiBulk < 0 ||
      o.sm90EpiBulk > 1)
    fail(v.where, "Hopper 256-row linear tuning out of range (tile width a multiple of 8 in 128-192, stages 2-4, group "
                  "1-64, in flight 0-2, cluster 1/2, bulk-row epilogue 0/1)");
  const int64_t outN = d.N / d.nout;
  const bool staged = o.sm90EpiSmem >= 1 && !d.outF32 && outN % 8 == 0;
  if (o.sm90EpiBulk == 1 && o.sm90EpiSmem >= 1)
    fail(v.where, "the 256-row tile's bulk-row epilogue (gemm_epi_bulk=1) replaces the staged one: set "
                  "gemm_epi_smem=0 with it");
  // Like the staged epilogue, bf16 outputs whose rows are whole 16-byte chunks only (an F32 output, or rows of an odd
  // length, keep the register epilogue: the same bits).
  const bool bulk = o.sm90EpiBulk == 1 && !d.outF32 && outN % 8 == 0;
  const bool gateTable = d.epi == Epilogue::GateResidual;
  const int64_t smem = sm90TallLinearSharedBytes(stages, bn, staged, gateTable, bulk);
  if (smem > kMaxCtaSharedBytes)
    fail(v.where, "{} stages of the 256 x {} Hopper tile{} need {} bytes of shared memory (at most {})", stages, bn,
         staged ? " beside the staged epilogue" : bulk ? " beside the bulk-row epilogue's buffers" : "", smem,
         kMaxCtaSharedBytes);
  Builder b;
  defineEpilogue(b, d);
  b.def("GT_BN", bn);
  b.def("G9_BN", bn);
  b.def("G9_STAGES", stages);
  b.def("G9_GROUP_M", groupM);
  b.def("G9_INFLIGHT", o.sm90Inflight);
  b.def("G9_CLUSTER", cluster);
  if (staged) b.def("G9_EPI_SMEM", 1);
  if (bulk) b.def("GT_EPI_BULK", 1);
  defineResPrefetch(b, d, o);
  Params p = gemmParams(v, d, /*maps=*/true, bn, 128);
  const int64_t tilesN = (d.N + bn - 1) / bn, pairsN = (tilesN + cluster - 1) / cluster;
  // >= the CTAs of the tiles (with pairs: two per pair of column tiles), capped at the SMs; the runtime rounds the
  // grid to whole clusters.
  plan::GridDim g = dim(v.rowsOfIn(0).plus(255).scaled(cluster * pairsN), 256);
  g.maxPerSm = 1;
  plan::Launch l = launch(384, smem, g);
  l.cluster = {cluster, 1, 1};
  std::string body = std::string(tmpl::hopper) + "\n" + wgmmaFunctions(bn, "gt_wgmma") + tmpl::gemm_epilogue + "\n" +
                     (staged ? std::string(tmpl::gemm_epilogue_smem) + "\n" : std::string()) + tmpl::gemm_sm90_tall;
  return finish(gemmName(v, d, fmt::format("sm90m256n{}", bn)), "G9_ENTRY", b, p, body, l, arch, v.options);
}

// The Hopper kernel (gemm_sm90.cuh): 128 x 256 tiles (or 128 x 192), stages of 48 KiB (40 KiB; 3 by default), a persistent grid of at most
// one CTA per SM. The weight's row count and K are constants of the plan; the row count of x is the request's.
plan::Kernel emitGemmSm90(const OpView &v, const GemmDesc &d, const std::string &arch) {
  const EmitOptions &o = v.options;
  if (o.sm90Bm == 256 && o.sm90Pingpong == 0) return emitGemmSm90Tall(v, d, arch);
  // The ping-pong kernel has no LoRA path: a LoRA op takes this kernel (the same bits) with as many of the options'
  // stages as it holds (ping-pong's 5-6 stages of 32 KiB, or 4 beside a staged epilogue, would be refused below and
  // leave a tuned plan's LoRA op without a kernel).
  const bool pingpongLora = o.sm90Pingpong == 1 && d.loraK > 0;
  if (o.sm90Pingpong == 1 && !pingpongLora) return emitGemmSm90Pingpong(v, d, arch);
  // The 64-wide tile (gemm_bn=64, lora_down's plan default): a GEMM of at most 64 outputs without epilogue or LoRA
  // path of its own (lora_down of rank <= 64), its stages of 24 KiB up to 6 (gemm_stages' range). On the 256-wide
  // tile three quarters of such a GEMM's wgmma work and B's stages are zeros past N (1.7-1.9x cuBLASLt's time; the
  // 64-wide tile at 6 stages 0.91-0.97x, bench/NOTES.md 2026-12-06 18:18). A lora_down of a wider rank (the inference
  // plans' 192) takes the 256-wide tile instead, with as many of the stages as it holds beside its epilogue: the
  // option names the narrow tile for the ranks it serves.
  const bool wideLoraDown = o.sm90Bn == 64 && v.op.kind == OpKind::LoraDown && d.N > 64;
  const int bn = wideLoraDown ? 256 : o.sm90Bn, groupM = o.sm90GroupM;
  const bool narrow = bn == 64;
  if (narrow && (d.N > 64 || d.epi != Epilogue::None || d.loraK != 0 || d.nout != 1))
    fail(v.where, "the 64-wide Hopper tile (gemm_bn=64) serves GEMMs of at most 64 outputs without epilogue or LoRA "
                  "path (lora_down), got N = {}, epilogue {}", d.N, plan::epilogueName(d.epi));
  const int maxStages = narrow ? 6 : bn == 192 ? 5 : 4;
  int stages = pingpongLora || wideLoraDown ? std::min(o.sm90Stages, maxStages) : o.sm90Stages;
  if ((bn != 256 && bn != 192 && !narrow) || stages < 2 || stages > maxStages || groupM < 1 || groupM > 64 ||
      o.sm90Inflight < 0 || o.sm90Inflight > 2 || (o.sm90Cluster != 1 && o.sm90Cluster != 2) ||
      o.sm90EpiSmem < 0 || o.sm90EpiSmem > 3 || (o.sm90HalfTail != 0 && o.sm90HalfTail != 1))
    fail(v.where, "Hopper linear tuning out of range (tile width 64/192/256, stages 2-4 (2-5 at width 192, 2-6 at "
                  "64), group 1-64, in flight 0-2, cluster 1/2, staged epilogue 0-3, half tail 0/1)");
  if (bn != 256 && (d.epi == Epilogue::Swiglu || d.epi == Epilogue::QkNormRope))
    fail(v.where, "the {} epilogue needs the 256-wide Hopper tile (gemm_bn=256), got {}",
         plan::epilogueName(d.epi), bn);
  const int cluster = o.sm90Cluster;
  // The staged epilogue (gemm_epilogue_smem.cuh) serves bf16 outputs whose rows split into 16-byte chunks, of every
  // epilogue (qk_norm_rope included: its heads of 128 always do); the others keep the register epilogue under the same
  // option.
  const int64_t outN = d.epi == Epilogue::Swiglu ? d.N / 2 : d.N / d.nout;
  const bool staged = o.sm90EpiSmem >= 1 && !d.outF32 && outN % 8 == 0;
  const bool epiWarps = staged && o.sm90EpiSmem >= 2, epiShared = staged && o.sm90EpiSmem == 3;
  const bool gateTable = d.epi == Epilogue::GateResidual;
  while ((pingpongLora || wideLoraDown) && stages > 2 &&
         sm90LinearSharedBytes(stages, bn, staged ? o.sm90EpiSmem : 0, gateTable) > kMaxCtaSharedBytes)
    --stages;
  const int64_t smem = sm90LinearSharedBytes(stages, bn, staged ? o.sm90EpiSmem : 0, gateTable);
  if (smem > kMaxCtaSharedBytes)
    fail(v.where, "the staged epilogue (gemm_epi_smem={}) with {} stages of the {}-wide Hopper tile needs {} bytes of "
                  "shared memory (at most {}): use gemm_stages={} or fewer, or gemm_epi_smem=0", o.sm90EpiSmem, stages, bn, smem,
         kMaxCtaSharedBytes, bn == 192 ? 4 : 3);
  Builder b;
  defineEpilogue(b, d);
  b.def("G9_BN", bn);
  b.def("G9_STAGES", stages);
  b.def("G9_GROUP_M", groupM);
  b.def("G9_INFLIGHT", o.sm90Inflight);
  b.def("G9_CLUSTER", cluster);
  if (staged) b.def("G9_EPI_SMEM", 1);
  if (epiWarps) b.def("G9_EPI_WARPS", 1);
  if (epiShared) b.def("G9_EPI_SHARED", 1);
  // The last partial wave as half tiles (gemm_sm90.cuh): the staged 256-wide tiles of the epilogues that finish a
  // 128-column block on its own (swiglu pairs value and gate columns 128 apart; qk_norm_rope's tile holds two heads).
  // (not with a LoRA path: its producer's choice of maps spilled in the 24 registers the half tiles leave it)
  const bool halfTail = o.sm90HalfTail == 1 && staged && bn == 256 && d.epi != Epilogue::Swiglu &&
                        d.epi != Epilogue::QkNormRope && d.loraK == 0;
  if (halfTail) b.def("G9_HALF_TAIL", 1);
  defineResPrefetch(b, d, o);
  Params p = gemmParams(v, d, /*maps=*/true, bn / 2);
  const int64_t outCols = d.epi == Epilogue::Swiglu ? d.N / 2 : d.N;
  const int64_t tilesN = d.epi == Epilogue::Swiglu ? (outCols + 127) / 128 : (d.N + bn - 1) / bn;
  // >= the tile count (with pairs: twice the pair count, (rows + 255) / 256 pairs per column tile; with half tiles
  // twice that, for a walk of fewer tiles than the grid, which runs as halves), capped at the SMs; the runtime rounds
  // the grid to whole clusters.
  const int64_t perTile = halfTail ? 2 : 1;
  plan::GridDim g = cluster == 2 ? dim(v.rowsOfIn(0).plus(255).scaled(2 * perTile * tilesN), 256)
                                 : dim(v.rowsOfIn(0).plus(127).scaled(perTile * tilesN), 128);
  g.maxPerSm = 1;
  plan::Launch l = launch(384, smem, g);
  l.cluster = {cluster, 1, 1};
  std::string body = std::string(tmpl::hopper) + "\n" + tmpl::gemm_epilogue + "\n" +
                     (staged ? std::string(tmpl::gemm_epilogue_smem) + "\n" : std::string()) + tmpl::gemm_sm90;
  return finish(gemmName(v, d, narrow ? "sm90n64" : "sm90"), "G9_ENTRY", b, p, body, l, arch, v.options);
}

// Tiles of the mma.sync kernel: 128 x 128 (warp tile 64 x 32) for row counts that grow with the request, and 16 x 64
// (warp tile 16 x 16, BK 64, 4 stages) for the few-row tables (adaln_table: T * 3 rows), which stream their weight
// once and need many CTAs with deep loads in flight to reach the memory bandwidth. The tile is chosen by the op's
// row domain, never by M, and no tile changes a bit (each output's chain is fixed).
struct MmaTile {
  int BM, BN, WM, WN, BK, stages;
  const char *name;
};
constexpr MmaTile kTileLarge{128, 128, 2, 4, 32, 3, "bf16"}, kTileFewRows{16, 64, 1, 4, 64, 4, "bf16m16"};

plan::Kernel emitGemmBf16(const OpView &v, const GemmDesc &d, const std::string &arch,
                          const MmaTile &tile = kTileLarge) {
  const int64_t K = d.K, N = d.N;
  if (K % 8 != 0) fail(v.where, "bf16 linear needs K % 8 == 0 (16-byte rows), got K = {}", K);
  if (d.loraK % 64 != 0 || d.loraK < 0 || (d.loraK > 0 && d.x != XMode::Bf16))
    fail(v.where, "an unmerged LoRA path needs a bf16 x and lora_k a multiple of 64, got {}", d.loraK);
  if (d.epi == Epilogue::Swiglu && N % 2 != 0)
    fail(v.where, "swiglu epilogue needs an even N (value and gate halves), got {}", N);
  if (arch == "sm_90a" && v.options.wgmma && d.x == XMode::Bf16) return emitGemmSm90(v, d, arch);
  Builder b;
  const int BM = tile.BM, BN = tile.BN, WM = tile.WM, WN = tile.WN, BK = tile.BK, stages = tile.stages;
  static const char *xName[] = {"GM_X_BF16", "GM_X_F32", "GM_X_SILU_F32"};
  defineEpilogue(b, d);
  b.def("GM_BM", BM); b.def("GM_BN", BN); b.def("GM_BK", BK); b.def("GM_WM", WM); b.def("GM_WN", WN);
  b.def("GM_STAGES", stages); b.def("GM_XMODE", xName[int(d.x)]);

  Params p = gemmParams(v, d, /*maps=*/false);
  const int64_t outCols = d.epi == Epilogue::Swiglu ? N / 2 : N;
  const int64_t bno = d.epi == Epilogue::Swiglu ? BN / 2 : BN;
  plan::Launch l = launch(WM * WN * 32, int64_t(stages) * (BM + BN) * (BK + 8) * 2, dim(v.rowsOfIn(0), BM),
                          dim(Extent::constant((outCols + bno - 1) / bno)));
  std::string body = std::string(tmpl::gemm_epilogue) + "\n" + tmpl::gemm_bf16;
  return finish(gemmName(v, d, tile.name), "GM_ENTRY", b, p, body, l, arch, v.options);
}

// Every GEMM reduces K in one chain (k_chunks, one unit).
void checkKChunks(const OpView &v) {
  v.requireOrder(plan::OrderKind::KChunks);
  if (v.op.order.kStep != 16) fail(v.where, "order.k_step must be 16");
  if (v.op.order.units != 1) fail(v.where, "order.units must be 1 (docs/contract.md section 4), got {}", v.op.order.units);
}

plan::Kernel emitLinear(const OpView &v, const std::string &arch) {
  const plan::OpAttrs &a = v.a();
  checkKChunks(v);
  if (v.op.kind == OpKind::LoraDown &&
      (a.loraK != 0 || !v.op.biases.empty() || a.epilogue != Epilogue::None || a.wDtype != DType::BF16 ||
       a.xDtype != DType::BF16 || a.outDtype != DType::BF16))
    fail(v.where, "lora_down is a bf16 GEMM (x, down slot and t bf16) without bias, epilogue or LoRA path of its own "
                  "(docs/contract.md section 13)");
  const size_t lora = a.loraK > 0 ? 1 : 0;  // the up slot after W (contract section 13)
  if (v.op.weights.size() != 1 + lora)
    fail(v.where, "a linear op needs exactly one weight tensor{}", lora ? " and the LoRA up slot" : "");
  if (v.op.biases.size() > 1) fail(v.where, "a linear op has at most one bias tensor");
  const bool bias = !v.op.biases.empty();
  if (a.wDtype == DType::F32) {
    if (a.epilogue != Epilogue::None || lora)
      fail(v.where, "F32 linears take no epilogue and no LoRA path (got \"{}\")", plan::epilogueName(a.epilogue));
    Builder b;
    b.def("FL_K", a.K); b.def("FL_N", a.N); b.def("FL_HAS_BIAS", bias ? 1 : 0);
    b.def("FL_XBF", a.xDtype == DType::F32 ? 0 : 1); b.def("FL_OUT_BF", a.outDtype == DType::F32 ? 0 : 1);
    if (v.options.f32Vec) b.def("FL_VEC", 1);
    Params p;
    p.in("x", 0);
    p.out("y", 0);
    p.weight("w", 0);
    if (bias) p.bias("bias", 0);
    p.scalar("rows", v.rowsOfIn(0));
    plan::Launch l = launch(256, 0, dim(v.rowsOfIn(0), 64), dim(Extent::constant((a.N + 63) / 64)));
    return finish(fmt::format("linear_f32_k{}_n{}", a.K, a.N), "FL_ENTRY", b, p, tmpl::linear_f32, l, arch, v.options);
  }
  if (a.epilogue != Epilogue::None && a.outDtype == DType::F32)
    fail(v.where, "epilogue \"{}\" produces BF16; out_dtype F32 is not allowed", plan::epilogueName(a.epilogue));
  if (a.swigluX && (a.epilogue != Epilogue::Swiglu || v.op.out.size() != 2 || v.vals.out.size() != 2 ||
                    v.out(1).dtype != DType::BF16 || v.out(1).cols != a.N))
    fail(v.where, "swiglu_x: a linear with the swiglu epilogue stores its own bf16 [rows, N = {}] output second", a.N);
  GemmDesc d;
  d.K = a.K;
  d.N = a.N;
  d.x = a.xDtype == DType::F32 ? XMode::F32 : XMode::Bf16;
  d.epi = a.epilogue;
  d.outF32 = a.outDtype == DType::F32;
  d.bias = bias;
  d.loraK = a.loraK;
  d.swigluX = a.swigluX != 0;
  if (a.epilogue == Epilogue::GateResidual) {
    d.chunk = a.chunk;
    d.numChunks = a.numChunks;
    d.rowsPerTs = plan::rowsPerTimestep(a.rowIndex);
  }
  return emitGemmBf16(v, d, arch);
}

plan::Kernel emitQkv(const OpView &v, const std::string &arch) {
  GemmDesc d;
  d.K = v.a().K;
  d.N = 3 * v.a().N;
  checkKChunks(v);
  d.nout = 3;
  d.loraK = v.a().loraK;
  const size_t lora = d.loraK > 0 ? 1 : 0;  // the up slot last, lora_t the last input (contract section 13)
  if (!v.op.biases.empty()) fail(v.where, "qkv_linear takes no bias (H3's to_q/to_k/to_v have none)");
  if (v.a().outDtype != DType::BF16) fail(v.where, "qkv_linear outputs BF16");
  if (v.a().epilogue == Epilogue::None) {
    if (v.op.weights.size() != 3 + lora)
      fail(v.where, "qkv_linear needs three weight tensors [Wq, Wk, Wv]{}", lora ? " and the LoRA up slot" : "");
    return emitGemmBf16(v, d, arch);
  }
  // The qk_norm_rope epilogue (gemm_epilogue.cuh, gm_qk_block): the Hopper kernels only, heads of 128 channels (one
  // quad of the accumulator layout), a rotary width that keeps rotation partners in one thread, whole q and k.
  const plan::OpAttrs &a = v.a();
  if (a.epilogue != Epilogue::QkNormRope)
    fail(v.where, "qkv_linear's epilogue is none or qk_norm_rope, got {}", plan::epilogueName(a.epilogue));
  if (v.op.weights.size() != 5 + lora)
    fail(v.where, "qkv_linear with qk_norm_rope needs five weight tensors [Wq, Wk, Wv, norm_q, norm_k]{}",
         lora ? " and the LoRA up slot" : "");
  if (arch != "sm_90a" || !v.options.wgmma || a.xDtype != DType::BF16)
    fail(v.where, "the qk_norm_rope epilogue runs on the Hopper GEMM only (sm_90a with wgmma, bf16 x); compile for "
                  "{} without it (h3-fuse keeps qkv_linear and qk_norm_rope apart there)", arch);
  if (a.headDim != 128 || a.heads * 128 != a.N)
    fail(v.where, "the qk_norm_rope epilogue needs head_dim 128 and N = heads x 128, got {} x {} for N = {}", a.heads,
         a.headDim, a.N);
  if (a.rotaryDim < 0 || a.rotaryDim % 16 || a.rotaryDim > 128)
    fail(v.where, "the qk_norm_rope epilogue needs a rotary width that is a multiple of 16 and <= 128, got {}",
         a.rotaryDim);
  if (a.shard.kind == plan::ShardKind::Column) fail(v.where, "the qk_norm_rope epilogue is not split over tp ranks");
  if (v.op.in.size() != (a.rotaryDim > 0 ? 3u : 1u) + lora) fail(v.where, "expected inputs [x(, cos, sin)(, lora_t)]");
  d.epi = Epilogue::QkNormRope;
  d.qkEps = a.eps;
  d.qkR = a.rotaryDim;
  return emitGemmBf16(v, d, arch);
}

std::optional<plan::Kernel> emitAdalnSm90(const OpView &v, const GemmDesc &d, const std::string &arch);

plan::Kernel emitAdaln(const OpView &v, const std::string &arch) {
  GemmDesc d;
  d.K = v.a().K;
  d.N = v.a().N;
  checkKChunks(v);
  d.x = XMode::SiluF32;
  d.bias = !v.op.biases.empty();
  // sm_90a: the streaming kernel (same bits) where its ring fits; everywhere else the few-row mma.sync tile.
  if (arch == "sm_90a" && v.options.wgmma)
    if (auto k = emitAdalnSm90(v, d, arch)) return *k;
  return emitGemmBf16(v, d, arch, kTileFewRows);
}

plan::Kernel emitTimeEmbed(const OpView &v, const std::string &arch) {
  const plan::OpAttrs &a = v.a();
  const int64_t K = a.freqDim, H = a.hidden, N = a.outDim;
  checkKChunks(v);
  if (v.op.weights.size() != 2 || v.op.biases.size() != 2)
    fail(v.where, "time_embed reads [linear_1, linear_2] weights and biases");
  Builder b;
  b.def("TE_K", K); b.def("TE_HID", H); b.def("TE_N", N);
  Params p;
  p.in("sinusoid", 0);
  p.out("temb", 0);
  p.weight("w1", 0);
  p.weight("w2", 1);
  p.bias("b1", 0);
  p.bias("b2", 1);
  p.scratch("h", v.rowsOfIn(0).scaled(H * 4));  // phase 0's silu(W1 s + b1), phase 1's input
  p.scalar("rows", v.rowsOfIn(0));
  // 32 weight rows x 8 input rows a CTA (time_embed.cuh); phase 0 over the hidden rows, phase 1 over the outputs.
  plan::Launch l0 = launch(256, 0, dim(Extent::constant((H + 31) / 32)), dim(v.rowsOfIn(0), 8));
  plan::Launch l1 = launch(256, 0, dim(Extent::constant((N + 31) / 32)), dim(v.rowsOfIn(0), 8));
  return finish(fmt::format("time_embed_k{}_h{}_n{}", K, H, N), "TE_ENTRY", b, p, tmpl::time_embed, l0, arch, v.options,
                {{"TE_ENTRY_P1", l1}});
}

void checkLaneTree(const OpView &v) {
  v.requireOrder(plan::OrderKind::LaneTree);
  if (v.op.order.lanes != 32) fail(v.where, "order.lanes must be 32");
}

plan::Kernel emitNorm(const OpView &v, bool modulate, const std::string &arch) {
  checkLaneTree(v);
  const plan::OpAttrs &a = v.a();
  const bool hasW = !v.op.weights.empty();
  Builder b;
  b.def("RN_H", a.H); b.def("RN_EPS", floatLit(a.eps)); b.def("RN_HAS_W", hasW ? 1 : 0);
  b.def("RN_XF32", a.xDtype == DType::F32 ? 1 : 0); b.def("RN_OUT_F32", a.outDtype == DType::F32 ? 1 : 0);
  b.def("RN_MOD", modulate ? 1 : 0);
  Params p;
  p.in("x", 0);
  if (modulate) {
    b.def("RN_SHIFT", a.shiftChunk); b.def("RN_SCALE", a.scaleChunk); b.def("RN_NUMCH", a.numChunks);
    b.def("RN_RPT", plan::rowsPerTimestep(a.rowIndex));
    p.in("table", 1);
    p.in("ts_index", 2);
    if (a.rowIndex == plan::RowIndex::Adaln) p.in("tags", 3);
  } else {
    b.def("RN_SHIFT", 0); b.def("RN_SCALE", 0); b.def("RN_NUMCH", 1); b.def("RN_RPT", 1);
  }
  p.out("y", 0);
  if (hasW) p.weight("w", 0);
  p.scalar("rows", v.rowsOfIn(0));
  if (modulate) p.scalar("meta_rows", v.rowsOfIn(2));
  // The vector path needs 16-byte aligned rows, tables and weights: bf16 with H % 256 == 0 (8 elements per lane).
  const bool vec = a.xDtype != DType::F32 && a.outDtype != DType::F32 && a.H % 256 == 0;
  const int64_t chunks = a.H / 256;  // 16-byte chunks per lane
  // The row in registers (4 per chunk) up to 22 chunks: ptxas fits them in the 128 registers of 16 warps per SM
  // without spilling (H = 5376 is 21); longer rows read x twice.
  const int64_t xreg = vec && chunks <= 22 ? 1 : 0;
  int64_t stage = 1;  // pieces the lane_tree stages at once: the largest divisor of the chunk count up to 4
  for (int64_t s = 2; vec && s <= 4; ++s)
    if (chunks % s == 0) stage = s;
  const int64_t rowsPerCta = v.options.normRows;
  b.def("RN_VEC", vec ? 1 : 0); b.def("RN_ROWS", rowsPerCta); b.def("RN_STAGE", stage); b.def("RN_XREG", xreg);
  plan::Launch l = launch(32 * rowsPerCta, 0, dim(v.rowsOfIn(0), rowsPerCta));
  return finish(fmt::format("{}_h{}", plan::opKindName(v.op.kind), a.H), "RN_ENTRY", b, p, tmpl::norm, l, arch, v.options);
}

plan::Kernel emitHeadOp(const OpView &v, bool norm, bool rope, const std::string &arch) {
  if (norm) checkLaneTree(v);
  const plan::OpAttrs &a = v.a();
  const int64_t heads = a.heads, d = a.headDim, R = rope ? a.rotaryDim : 0;
  if (d > 1024) fail(v.where, "head_dim {} too large", d);
  if (R < 0 || R > d || R % 2 != 0) fail(v.where, "attrs.rotary_dim must be even and in [0, head_dim], got {}", R);
  const int nt = int(v.op.out.size());
  if (nt != 1 && nt != 2) fail(v.where, "expected 1 or 2 outputs, got {}", nt);
  Builder b;
  b.def("HO_HEADS", heads); b.def("HO_D", d); b.def("HO_NORM", norm ? 1 : 0);
  b.def("HO_EPS", norm ? floatLit(a.eps) : std::string("0.0f")); b.def("HO_R", R); b.def("HO_NT", nt);
  // (row, head) units a warp, their loads in flight together; head_dim 128 with a rotary width in whole pairs of pairs
  // takes the pairs form (headops.cuh) unless head_pairs=0
  const bool pairs = d == 128 && R % 4 == 0 && v.options.headPairs != 0;
  const int units = pairs ? v.options.headPairUnits : v.options.headUnits;
  if (pairs && (units % 2 != 0 || units < 2 || units > 32))
    fail(v.where, "head_pair_units must be even and in [2, 32], got {}", units);
  b.def("HO_G", units);
  b.def("HO_PAIRS", pairs ? 1 : 0);
  Params p;
  for (int t = 0; t < nt; ++t) p.in("x" + std::to_string(t), t);
  if (R > 0) {
    p.in("rope_cos", nt);
    p.in("rope_sin", nt + 1);
  }
  for (int t = 0; t < nt; ++t) p.out("y" + std::to_string(t), t);
  if (norm)
    for (int t = 0; t < nt; ++t) p.weight("w" + std::to_string(t), t);
  p.scalar("rows", v.rowsOfIn(0));
  if (R > 0) p.scalar("meta_rows", v.rowsOfIn(size_t(nt)));
  plan::Launch l = launch(256, 0, dim(v.rowsOfIn(0).scaled(heads), 8 * units), dim(Extent::constant(nt)));
  return finish(fmt::format("{}_h{}_d{}_r{}_t{}", plan::opKindName(v.op.kind), heads, d, R, nt), "HO_ENTRY", b, p,
                tmpl::headops, l, arch, v.options);
}

// The flash order's exponent scale c = fl(d^-0.5 * log2 e) (docs/contract.md section 4), computed in double and
// rounded once to F32 by floatLit; the CPU reference derives the same value.
double flashExp2Scale(int64_t d) { return 1.0 / std::sqrt((double)d) * 1.4426950408889634074; }

// The Hopper attention (attention_sm90.cuh): 128-query tiles of one (head, item), K/V blocks of kv_block keys in a
// ring of sm90AttnStages stages (kv_block x 512 bytes each); the same bits as attention.cuh. sm90AttnPersistent: a
// persistent 1-D grid walking the tiles instead of one CTA per tile.
plan::Kernel emitAttentionSm90(const OpView &v, int64_t heads, const std::string &arch) {
  const EmitOptions &o = v.options;
  if (o.sm90AttnStages < 2 || o.sm90AttnStages > 5 || (o.sm90AttnOverlap != 0 && o.sm90AttnOverlap != 1) ||
      (o.sm90AttnPingpong != 0 && o.sm90AttnPingpong != 1) ||
      (o.sm90AttnPersistent != 0 && o.sm90AttnPersistent != 1))
    fail(v.where, "Hopper attention tuning out of range (stages 2-5, overlap 0/1, ping-pong 0/1, persistent 0/1)");
  const bool persistent = o.sm90AttnPersistent == 1;
  const int64_t d = 128, ld = heads * d, kv = v.op.order.kvBlock;
  // Q tile 32 KiB + stages x (K + V block) + barriers (qFull, the ring's three per stage, the persistent kernel's
  // qEmpty) must fit the 227 KiB an sm_90 CTA can opt into.
  const int64_t smem = 1024 + 128 * d * 2 + int64_t(o.sm90AttnStages) * 2 * kv * d * 2 +
                       8 * (1 + 3 * o.sm90AttnStages + (persistent ? 1 : 0));
  if (smem > kMaxCtaSharedBytes)
    fail(v.where, "Hopper attention with kv_block {} and {} stages needs {} bytes of shared memory (at most {}): "
         "use fewer stages", kv, o.sm90AttnStages, smem, kMaxCtaSharedBytes);
  Builder b;
  b.def("A9_HEADS", heads);
  b.def("A9_KV", kv);
  b.def("A9_C", floatLit(flashExp2Scale(d)));
  b.def("A9_STAGES", o.sm90AttnStages);
  b.def("A9_OVERLAP", o.sm90AttnOverlap);
  b.def("A9_PINGPONG", o.sm90AttnOverlap ? o.sm90AttnPingpong : 0);
  b.def("A9_PERSISTENT", o.sm90AttnPersistent);
  b.def("A9_LSE", v.a().lse);
  Params p;
  Extent itemRows = Extent::rowsOf(v.in(0).rows, false), kvRows = Extent::rowsOf(v.in(1).rows, false);
  p.itemTensorMap("q_map", OperandRole::In, 0, itemRows, ld, 64, 128);
  p.itemTensorMap("k_map", OperandRole::In, 1, kvRows, ld, 64, kv);
  p.itemTensorMap("v_map", OperandRole::In, 2, kvRows, ld, 64, kv);
  p.out("out", 0);
  if (v.a().lse) p.out("lse", 1);  // the row statistics for the backward (h3-fuse-grad)
  p.scalar("item_rows", itemRows);
  p.scalar("kv_rows", kvRows);
  plan::Launch l = launch(384, smem, dim(itemRows, 128), dim(Extent::constant(heads)), dim(Extent::parse("B", v.where)));
  if (persistent) {
    p.scalar("items", Extent::parse("B", v.where));
    // heads * B * ceil(Lq / 128) tiles <= ceil(heads * B * (Lq + 127) / 128) CTAs (the extents have no ceiling
    // division), capped at one per SM; the extra CTAs of a short grid find no tile.
    plan::GridDim g = dim(Extent::parse(fmt::format("{}*B*{} + {}*B", heads, itemRows.text(), 127 * heads), v.where),
                          128);
    g.maxPerSm = 1;
    l = launch(384, smem, g);
  }
  std::string body = std::string(tmpl::hopper) + "\n" + tmpl::attention_sm90;
  return finish(fmt::format("attention_sm90_h{}_d{}{}{}", heads, d, kv == 64 ? "" : "_kv" + std::to_string(kv),
                            v.a().lse ? "_lse" : ""),
                "A9_ENTRY", b, p, body, l, arch, v.options);
}

plan::Kernel emitAttention(const OpView &v, const std::string &arch) {
  v.requireOrder(plan::OrderKind::Flash);
  const plan::Order &o = v.op.order;
  if (o.kvBlock != 64 && o.kvBlock != 128) fail(v.where, "order.kv_block must be 64 or 128, got {}", o.kvBlock);
  if (o.kStep != 16) fail(v.where, "order.k_step must be 16");
  const int64_t heads = v.a().heads, d = v.a().headDim;
  if (d % 16 != 0 || d > 192) fail(v.where, "attention needs head_dim % 16 == 0 and <= 192, got {}", d);
  if (!v.in(0).batch) fail(v.where, "attention runs per batch item: q must carry the batch axis");
  if (v.in(1).rows != v.in(2).rows || (v.in(1).rows != v.in(0).rows && v.in(0).rows != Domain::Sr))
    fail(v.where, "k and v share a row domain, which is q's unless q is a rank's rows Sr");
  if (arch == "sm_90a" && v.options.wgmma && d == 128) return emitAttentionSm90(v, heads, arch);
  Builder b;
  b.def("AT_D", d); b.def("AT_HEADS", heads); b.def("AT_C", floatLit(flashExp2Scale(d))); b.def("AT_KV", o.kvBlock);
  b.def("AT_LSE", v.a().lse);
  Params p;
  p.in("q", 0);
  p.in("k", 1);
  p.in("v", 2);
  p.out("out", 0);
  if (v.a().lse) p.out("lse", 1);  // the row statistics for the backward (h3-fuse-grad)
  Extent itemRows = Extent::rowsOf(v.in(0).rows, false);
  p.scalar("item_rows", itemRows);
  p.scalar("kv_rows", Extent::rowsOf(v.in(1).rows, false));
  // The 64-query Q block and double-buffered K and V blocks of kv_block rows, d + 8 columns each.
  const int64_t smem = (64 + 4 * o.kvBlock) * (d + 8) * 2;
  if (smem > kMaxCtaSharedBytes)
    fail(v.where, "attention with head_dim {} and kv_block {} needs {} bytes of shared memory (at most {})", d,
         o.kvBlock, smem, kMaxCtaSharedBytes);
  plan::Launch l = launch(128, smem, dim(itemRows, 64), dim(Extent::constant(heads)),
                          dim(Extent::parse("B", v.where)));
  return finish(fmt::format("attention_h{}_d{}{}{}", heads, d, o.kvBlock == 64 ? "" : "_kv" + std::to_string(o.kvBlock),
                            v.a().lse ? "_lse" : ""),
                "AT_ENTRY", b, p, tmpl::attention, l, arch, v.options);
}

plan::Kernel emitElementwise(const OpView &v, const std::string &arch) {
  const plan::OpAttrs &a = v.a();
  Builder b;
  Params p;
  const char *kind;
  int64_t cols, acols = 0;
  Extent rows = v.rowsOfIn(0);
  switch (v.op.kind) {
  case OpKind::Swiglu:
    kind = "EW_SWIGLU";
    cols = a.F;
    p.in("x", 0);
    p.out("y", 0);
    break;
  case OpKind::Silu:
    kind = "EW_SILU";
    cols = a.cols;
    p.in("x", 0);
    p.out("y", 0);
    break;
  case OpKind::Residual:
    kind = "EW_RESIDUAL";
    cols = a.cols;
    p.in("x", 0);
    p.in("y", 1);
    p.out("z", 0);
    break;
  case OpKind::GateResidual:
    kind = "EW_GATE_RESIDUAL";
    cols = a.H;
    p.in("x", 0);
    p.in("y", 1);
    p.in("table", 2);
    p.in("ts_index", 3);
    p.in("tags", 4);
    p.out("z", 0);
    break;
  case OpKind::Pack:
    kind = "EW_PACK";
    cols = a.H;
    p.in("text", 0);
    p.in("video", 1);
    p.in("audio", 2);
    p.out("x", 0);
    rows = Extent::rowsOf(v.out(0).rows, v.out(0).batch);
    break;
  default:  // unpack
    kind = "EW_UNPACK";
    cols = a.videoCols;
    acols = a.audioCols;
    if (acols > cols) fail(v.where, "unpack expects audio_cols <= video_cols");
    p.in("y_video", 0);
    p.in("y_audio", 1);
    p.out("sample", 0);
    p.out("audio_sample", 1);
    rows = Extent::parse("B*Nv + B*Na", v.where);
    break;
  }
  p.scalar("rows", rows);
  if (v.op.kind == OpKind::GateResidual) p.scalar("meta_rows", v.rowsOfIn(3));
  if (v.op.kind == OpKind::Pack || v.op.kind == OpKind::Unpack) {
    p.scalar("nt", Extent::parse("Nt", v.where));
    p.scalar("nv", Extent::parse("Nv", v.where));
    p.scalar("na", Extent::parse("Na", v.where));
  }
  b.def("EW_KIND", kind); b.def("EW_COLS", cols);
  b.def("EW_F32", v.op.kind == OpKind::Silu && a.dtype == DType::F32 ? 1 : 0);
  if (v.op.kind == OpKind::GateResidual) {
    b.def("EW_CHUNK", a.chunk); b.def("EW_NUMCH", a.numChunks); b.def("EW_RPT", plan::rowsPerTimestep(a.rowIndex));
  } else {
    b.def("EW_CHUNK", 0); b.def("EW_NUMCH", 1); b.def("EW_RPT", 1);
  }
  b.def("EW_ACOLS", acols);
  // 16-byte vectors of 8 bf16 outputs where every row holds whole ones (elementwise.cuh: the same bits).
  const bool vec = cols % 8 == 0 && (v.op.kind == OpKind::Swiglu || v.op.kind == OpKind::Residual ||
                                     v.op.kind == OpKind::GateResidual);
  b.def("EW_VEC", vec ? 8 : 1);
  Extent units = rows.scaled(vec ? cols / 8 : cols);
  plan::Launch l = launch(256, 0, dim(units, 256));
  return finish(fmt::format("{}_c{}", plan::opKindName(v.op.kind), cols), "EW_ENTRY", b, p, tmpl::elementwise, l, arch, v.options);
}

// The AdaLN table's streaming kernel (adaln_sm90.cuh; sm_90a): sm90AdalnWarps consumer warps of sm90AdalnBlocks 8-row
// weight blocks each (64-row tiles at the defaults) + 1 producer warp, a ring of stages of one tile's weight rows x
// sm90AdalnStageK columns filled by bulk copies (or, with sm90AdalnTiles, x 64 columns filled by one TMA box of a
// swizzled tensor map of W), a persistent grid of sm90AdalnCtas CTAs per SM splitting the weight rows evenly, grid.y =
// one pass per 8 rows of temb (T is not bounded by the plan: every T runs, T > 8 reads the weight once per pass). The
// bulk form's parameters are the mma.sync kernel's (plain buffers); the tiles form has two tensor maps of W in w's
// place. Nothing here depends on T. Returns nullopt where the kernel does not apply: K not in whole 16-wide chunks (the
// chunk tail would need zero-filled stage columns), or the shape's a rows plus two stages over the shared memory of
// sm90AdalnCtas CTAs per SM (K past ~10,000 at the defaults); the mma.sync kernel then computes the same bits.
std::optional<plan::Kernel> emitAdalnSm90(const OpView &v, const GemmDesc &d, const std::string &arch) {
  const EmitOptions &o = v.options;
  constexpr int64_t kRowsPerPass = 8;
  const int64_t warps = o.sm90AdalnWarps, blocksPerWarp = o.sm90AdalnBlocks, tileRows = 8 * blocksPerWarp * warps;
  const bool tiles = o.sm90AdalnTiles != 0;
  // 228 KiB of shared memory per SM, of which each resident CTA reserves 1 KiB (sm_90).
  constexpr int64_t kSmSharedBytes = 233472, kCtaReservedBytes = 1024;
  int64_t ks = tiles ? 64 : o.sm90AdalnStageK;  // a box is one swizzled 128-byte row wide
  const int64_t ctas = o.sm90AdalnCtas;
  if (ks < 16 || ks % 16 != 0 || ctas < 1 || ctas > 2 || o.sm90AdalnStages < 0 || warps < 1 || warps > 8 ||
      blocksPerWarp % 2 != 0 || blocksPerWarp < 2 || blocksPerWarp > 4 || (tiles && tileRows > 256))
    fail(v.where, "AdaLN table tuning out of range (adaln_stage_k a multiple of 16, adaln_ctas 1 or 2, "
                  "adaln_stages >= 0, adaln_warps 1-8, adaln_blocks 2 or 4, adaln_tiles with at most 256 tile rows: "
                  "got {} x {} x 8)", warps, blocksPerWarp);
  if (d.K % 16 != 0) return std::nullopt;
  if (!tiles) ks = std::min(ks, d.K);  // a stage never holds more columns than a row has (the small and tiny configs)
  const int64_t limit = std::min(kMaxCtaSharedBytes, kSmSharedBytes / ctas - kCtaReservedBytes);
  // alignment slack (1,024 bytes for the swizzled boxes) + the rows of a; per stage the weight rows + the full / empty
  // mbarriers
  const int64_t fixed = (tiles ? 1024 : 128) + kRowsPerPass * (d.K * 2 + 16);
  const int64_t perStage = tileRows * (tiles ? 128 : ks * 2 + 16) + 16;
  // As many stages as fit, at most kMaxStages (beyond that the ring only holds more than the memory latency needs)
  // or the tuned count.
  constexpr int64_t kMaxStages = 16;
  const int64_t stages =
      std::min((limit - fixed) / perStage, o.sm90AdalnStages > 0 ? int64_t(o.sm90AdalnStages) : kMaxStages);
  if (stages < 2) return std::nullopt;
  Builder b;
  defineEpilogue(b, d);
  b.def("AL_KS", ks);
  b.def("AL_STAGES", stages);
  b.def("AL_WARPS", warps);
  b.def("AL_NBW", blocksPerWarp);
  b.def("AL_CTAS", ctas);
  Params p;
  if (tiles) {
    b.def("AL_TILES", 1);
    // gemmParams' list with W as two tensor maps: boxes of a whole tile and of one 8-row block (a range's last tile)
    p.in("x", 0);
    p.out("y0", 0);
    p.tensorMap("w_map", OperandRole::Weight, 0, Extent::constant(d.N), d.K, 64, tileRows);
    p.tensorMap("w8_map", OperandRole::Weight, 0, Extent::constant(d.N), d.K, 64, 8);
    if (d.bias) p.bias("bias", 0);
    p.scalar("rows", v.rowsOfIn(0));
  } else {
    p = gemmParams(v, d, /*maps=*/false);
  }
  plan::GridDim gx = dim(Extent::constant((d.N + 7) / 8));  // >= 1 block per CTA, capped at ctas per SM
  gx.maxPerSm = ctas;
  plan::Launch l = launch(32 * (warps + 1), fixed + stages * perStage, gx, dim(v.rowsOfIn(0), kRowsPerPass));
  std::string body = std::string(tmpl::hopper) + "\n" + tmpl::gemm_epilogue + "\n" + tmpl::adaln_sm90;
  return finish(gemmName(v, d, "sm90"), "AL_ENTRY", b, p, body, l, arch, v.options);
}

} // namespace

int64_t sm90TallLinearSharedBytes(int stages, int bn, bool staged, bool gateResidual, bool bulk) {
  int64_t bytes = int64_t(stages) * (256 + bn) * 64 * 2 + 1024 + 16 * stages;  // + alignment + mbarriers
  // the two staging areas (64 rows of whole 64-column boxes each), gate_residual's table rows (8 warps x 32)
  if (staged) bytes += 2 * 64 * ((int64_t(bn) + 63) / 64 * 64) * 2 + (gateResidual ? 8 * 32 * 8 : 0);
  if (bulk) bytes += 8 * 8 * int64_t(bn) * 2;  // the 8 consumer warps' 8-row buffers
  return bytes;
}

int64_t sm90LinearSharedBytes(int stages, int bn, int epiSmem, bool gateResidual) {
  int64_t bytes = int64_t(stages) * (128 + bn) * 64 * 2 + 1024 + 16 * stages;  // + alignment + mbarriers
  // the staging areas (two, or with epiSmem 3 one shared by the consumers in turns), their full / empty barriers
  // (epilogue warps), gate_residual's table rows (32 for each warp that walks: 8 consumer warps, or with epiSmem 3
  // the 3 epilogue warps, so that 4 stages of the 256-wide tile fit beside the shared area)
  if (epiSmem >= 1)
    bytes += (epiSmem == 3 ? 1 : 2) * 64 * int64_t(bn) * 2 + (epiSmem >= 2 ? 32 : 0) +
             (gateResidual ? (epiSmem == 3 ? 3 : 8) * 32 * 8 : 0);
  return bytes;
}

std::vector<std::string> nvrtcOptions(const std::string &arch) {
  if (arch != "sm_90a" && arch != "sm_100a") fail("emitKernel", "arch must be sm_90a or sm_100a, got \"{}\"", arch);
  // The 'a' targets keep the arch-specific instructions; --fmad=false forbids any contraction the kernels do not
  // spell out (the contract's numerics name every fma).
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false", "--extra-device-vectorization",
          "-DH3C_NVRTC=1"};
}

std::optional<plan::Kernel> emitKernel(const plan::Op &op, const OperandValues &operands, const std::string &arch,
                                       const EmitOptions &options) {
  nvrtcOptions(arch);  // validates arch
  OpView v{op, operands, fmt::format("op '{}' (node {})", plan::opKindName(op.kind), op.firstNode()),
           options.forOp(op)};
  if (operands.in.size() != op.in.size() || operands.out.size() != op.out.size())
    fail(v.where, "operand values do not match the op's operands");
  // The kernels are the same C++ for both archs (mma.sync exists on sm_90a and sm_100a) except the Hopper linear
  // (sm_90a only); the arch selects the NVRTC target and is part of the JIT cache key.
  switch (op.kind) {
  case OpKind::RopeTable:
  case OpKind::TimestepSinusoid:
  case OpKind::AllGather:  // layout ops: copies the runtime performs
  case OpKind::Split: return std::nullopt;
  case OpKind::Linear:
  case OpKind::LoraDown: return emitLinear(v, arch);  // lora_down: a plain bf16 linear over the down slot
  case OpKind::QkvLinear: return emitQkv(v, arch);
  case OpKind::AdalnTable: return emitAdaln(v, arch);
  case OpKind::TimeEmbed: return emitTimeEmbed(v, arch);
  case OpKind::RmsNorm: return emitNorm(v, false, arch);
  case OpKind::NormModulate: return emitNorm(v, true, arch);
  case OpKind::QkNorm: return emitHeadOp(v, true, false, arch);
  case OpKind::Rope: return emitHeadOp(v, false, true, arch);
  case OpKind::QkNormRope: return emitHeadOp(v, true, op.attrs.rotaryDim > 0, arch);
  case OpKind::Attention: return emitAttention(v, arch);
  case OpKind::Swiglu:
  case OpKind::Silu:
  case OpKind::Residual:
  case OpKind::GateResidual:
  case OpKind::Pack:
  case OpKind::Unpack: return emitElementwise(v, arch);
  default: break;
  }
  // The backward's gradient ops (docs/contract.md section 14): emit_grad.cpp.
  if (plan::isGradOp(op.kind)) return emitGradKernel(v, arch);
  fail(v.where, "no GPU kernel for op kind '{}'", plan::opKindName(op.kind));
}

} // namespace h3c::kernels
