// emitGradKernel: the backward's gradient ops (docs/contract.md section 14) on the kernels of grad.cuh, one template
// specialized per kind by its shape constants and its operands' dtypes. Every gradient is F32; the forward values an
// op reads keep the dtype the plan gives them (a bf16 value is widened exactly). Nothing depends on the row count,
// the batch or the row order: the row reductions walk each item's canonical rows in the contract's units.
#include "emit_parts.h"

#include <algorithm>
#include <cmath>

namespace h3c::kernels {

// 1,024 bytes of alignment for the 128-byte swizzle, the ring, its full and empty mbarriers.
int64_t sm90GradXSharedBytes(int stages, int bn) { return 1024 + int64_t(stages) * (128 * 64 * 2 + bn * 64 * 2 + 16); }
int64_t sm90GradWSharedBytes(int stages, bool narrow) {
  if (narrow)  // twice the stages of one 64 x 64 box each operand, the two hand-over mbarriers and their buffer
    return 1024 + 2 * int64_t(stages) * (2 * 64 * 64 * 2 + 16) + 16 + 32 * 128 * 4;
  return 1024 + int64_t(stages) * (2 * 128 * 64 * 2 + 16);
}

bool sm90GradWNarrowTiles(const EmitOptions &o, int64_t N, int64_t K) {
  const int64_t shortDim = std::min(N, K), longDim = std::max(N, K);
  if (shortDim > 64) return false;
  return o.sm90GradWNarrow == 1 || (o.sm90GradWNarrow == 2 && longDim <= 8192);
}

namespace emit_detail {

namespace {

int bf(const plan::Value &v) { return v.dtype == DType::BF16 ? 1 : 0; }

// The items of a row reduction over operand i: B items of the value's rows each (a batched value), else one item.
void itemScalars(Params &p, const OpView &v, size_t i) {
  p.scalar("items", v.in(i).batch ? Extent::parse("B", v.where) : Extent::constant(1));
  p.scalar("item_rows", Extent::rowsOf(v.in(i).rows, false));
}

plan::GridDim blocks(const Extent &units, int64_t perBlock) { return dim(units, perBlock); }

// The threads of a block that walks one row's n vectors (grad.cuh's row forms of rope and gate_residual): the fewest
// steps of at most 256 threads, then the fewest whole warps that take the row in those steps (5,376 / 8 = 672
// vectors: 224 threads, 3 steps each, where 256 leave a third of the last step idle).
int64_t rowThreads(int64_t n) {
  const int64_t steps = std::max<int64_t>(1, (n + 255) / 256);
  return std::max<int64_t>(32, ((n + steps - 1) / steps + 31) / 32 * 32);
}

// A gradient kernel's options for finish(): a programmatic dependent launch only with grad_pdl (EmitOptions::gradPdl).
EmitOptions gradLaunch(const EmitOptions &o) {
  EmitOptions g = o;
  g.gridDependency = o.gridDependency == 1 && o.gradPdl == 1 ? 1 : 0;
  return g;
}

// The rounding phase of the bf16 linears' gradients (grad_linear_round.cuh, a grid-stride loop) in one wave of
// 256-thread CTAs, 8 an SM, not rows x N / 2,048 CTAs (fc1's: 116,900, ~110 waves). Measured (H100, bench/NOTES.md
// 2026-12-06): fc1's Hopper dX took 6.06 ms whole with the phases' programmatic dependent launch, 3.83 without it,
// 0.47 + 3.67 by phase: the GEMM launched behind the many-wave rounding lost ~2.2 ms. In one wave: 4.34 ms (3.84
// without the dependent launch, which gradient kernels now go without by default: gradLaunch).
plan::GridDim roundingWave(const Extent &rows, int64_t n) {
  plan::GridDim g = blocks(rows.scaled(n / 8), 256);
  g.maxPerSm = 8;
  return g;
}

// attention_grad's operands in every form: q, k, v, o, dout (and lse) in, dq, dk, dv out, and the scratch of each
// (row, head)'s L and D.
void attentionGradOperands(Params &p, const Extent &rows, int64_t heads, bool lse) {
  const char *const ins[] = {"q", "k", "v", "o", "dout"}, *const outs[] = {"dq", "dk", "dv"};
  for (int64_t i = 0; i < 5; ++i) p.in(ins[i], i);
  if (lse) p.in("lse", 5);  // the forward's row statistics (h3-fuse-grad): phase 0 reads L, no statistics walk
  for (int64_t i = 0; i < 3; ++i) p.out(outs[i], i);
  p.scratch("stats", rows.scaled(heads * 8));
}

// A dX with the residual epilogue (h3-fuse-grad) reads `residual` (F32, dx's shape) and stores residual + dX, one
// __fadd_rn per element after dX's value (grad_add's sum: the same bits). Defines GR_RESIDUAL either way.
bool dxResidual(Params &p, Builder &b, const plan::OpAttrs &a) {
  const bool residual = a.epilogue == plan::Epilogue::Residual;
  if (residual) p.in("residual", 1);
  b.def("GR_RESIDUAL", residual ? 1 : 0);
  return residual;
}

// A LoRA down path's dX taken in (h3-fuse-grad, lora_k): the input lora_t (bf(dt), after g and the residual), defining
// `macro` as the path's width (0 without one). Returns lora_t's input index, or -1.
int64_t loraInput(Params &p, Builder &b, const OpView &v, const char *macro) {
  const plan::OpAttrs &a = v.a();
  b.def(macro, a.loraK);
  if (a.loraK == 0) return -1;
  if (a.loraK > 64 || a.loraK % 16 || v.op.weights.size() != 2)
    fail(v.where, "a dX's LoRA down path is 16 to 64 wide (got {}) over a second weight, the down slot", a.loraK);
  const int64_t t = plan::inputIndex(v.op.kind, a, "lora_t");
  if (!bf(v.in(size_t(t)))) fail(v.where, "a dX's LoRA down path reads bf(dt): lora_t must be bf16");
  p.in("lora_t", t);
  return t;
}

// The swiglu_grad of a dX taken in (h3-fuse-grad, epilogue swiglu): the input swiglu_x (x = [v | g], bf16, the op's
// last), GR_DX_SWIGLU; and GR_DX_BF (dx stored as bf16: the rounding of the grad_round that read it, or of the
// swiglu_grad taken in, folded in). Returns the name's suffix.
std::string swigluInput(Params &p, Builder &b, const OpView &v) {
  const bool sw = v.a().epilogue == plan::Epilogue::Swiglu;
  const bool outBf = bf(v.out(0));
  b.def("GR_DX_SWIGLU", sw ? 1 : 0);
  b.def("GR_DX_BF", outBf ? 1 : 0);
  if (!sw) return outBf ? "_bfout" : "";
  const int64_t x = plan::inputIndex(v.op.kind, v.a(), "swiglu_x");
  if (!bf(v.in(size_t(x))) || v.in(size_t(x)).cols != 2 * v.a().K || v.a().K % 8)
    fail(v.where, "a dX's swiglu_grad reads x = [v | g] as bf16 [rows, 2K] (K a multiple of 8)");
  p.in("swiglu_x", x);
  return outBf ? "_swiglu_bfout" : "_swiglu";
}

// Whether the op's g is a grad_round's bf16 bf(g) (h3-fuse-grad): its kernel is the GEMM alone, reading g where it
// reads the rounding phase's scratch otherwise. Such a g never comes with a bias gradient (dbias sums the F32 g).
bool roundedG(const OpView &v, int64_t biasAt) {
  const bool gb = bf(v.in(0));
  if (gb && biasAt >= 0) fail(v.where, "dbias sums the F32 g: a bf16 g has no bias gradient");
  return gb;
}

// The width of the Hopper dX's tile (grad_linear_sm90.cuh) for K output columns: 192 where K is an odd multiple of
// 256 and of 192 (K = 5,376: 28 column tiles fill whole waves of 132 SMs at 66 row tiles where 21 leave half a wave,
// as the forward's 192-wide tile), else the widest of 256, 192 and 128 that pads K least.
int64_t gradXTileWidth(int64_t K) {
  if (K % 256 == 0 && (K / 256) % 2 == 1 && K % 192 == 0) return 192;
  int64_t best = 256;
  for (int64_t bn : {192, 128})
    if ((K + bn - 1) / bn * bn < (K + best - 1) / best * best) best = bn;
  return best;
}

// The Hopper form of a bf16 linear's dX (grad_linear_sm90.cuh; the mma.sync form's bits): phase 0 rounds g into the
// scratch gb (grad_linear_round.cuh), phase 1 the persistent TMA + wgmma GEMM over gb (a tensor map over the scratch)
// and W (N-major boxes of 64 x 64).
plan::Kernel emitLinearGradXSm90(const OpView &v, const std::string &arch) {
  const plan::OpAttrs &a = v.a();
  const EmitOptions &o = v.options;
  // LoRA's dt (K = 64 output columns, grad_x_narrow): the 64-wide tile, whose 24 KiB stages take a 6-deep ring (as
  // lora_down's forward tile, which measured fastest at 6: bench/NOTES.md 2026-12-06 18:18).
  const bool narrow = a.K == 64;
  const int64_t bn = narrow ? 64 : o.sm90GradXBn == 0 ? gradXTileWidth(a.K) : o.sm90GradXBn;
  const int64_t stages = narrow ? 6 : o.sm90GradXStages;
  const int64_t cluster = o.sm90GradXCluster;
  if ((bn != 128 && bn != 192 && bn != 256 && !narrow) || stages < 2 || stages > (narrow ? 6 : 5) ||
      (o.sm90GradXInflight != 0 && o.sm90GradXInflight != 1) || (cluster != 1 && cluster != 2))
    fail(v.where, "Hopper dX tuning out of range (grad_x_bn 0/128/192/256, grad_x_stages 2-5, grad_x_inflight 0/1, "
                  "grad_x_cluster 1/2)");
  const int64_t smem = sm90GradXSharedBytes(int(stages), int(bn));
  if (smem > kMaxCtaSharedBytes)
    fail(v.where, "the Hopper dX with {} stages of the {}-wide tile needs {} bytes of shared memory (at most {})", stages,
         bn, smem, kMaxCtaSharedBytes);
  if (a.loraK > 0 && narrow) fail(v.where, "a dX of 64 columns takes in no LoRA down path");
  Builder b;
  Params p;
  const Extent rows = v.rowsOfIn(0);
  p.in("g", 0);
  const bool residual = dxResidual(p, b, a);
  const int64_t loraT = loraInput(p, b, v, "GX_LORA_K");
  const std::string swiglu = swigluInput(p, b, v);
  p.out("dx", 0);
  p.scalar("rows", rows);
  const bool gbIn = roundedG(v, -1);  // the GEMM's map over g, no rounding phase
  if (gbIn) {
    p.tensorMap("gb_map", OperandRole::In, 0, rows, a.N, 64, 128);
  } else {
    p.scratch("gb", rows.scaled(a.N * 2));
    p.scratchTensorMap("gb_map", "gb", rows, a.N, 64, 128);
  }
  p.tensorMap("w_map", OperandRole::Weight, 0, Extent::constant(a.N), a.K, 64, 64);
  if (loraT >= 0) {  // bf(dt) in boxes as gb's, the down slot's as W's
    p.tensorMap("t_map", OperandRole::In, loraT, rows, a.loraK, 64, 128);
    p.tensorMap("d_map", OperandRole::Weight, 1, Extent::constant(a.loraK), a.K, 64, 64);
  }
  b.def("GL_DW", 0);
  b.def("GR_N", a.N);
  b.def("GR_K", a.K);
  b.def("GR_BIAS", 0);
  b.def("GX_BN", bn);
  b.def("GX_STAGES", stages);
  b.def("GX_GROUP_M", 8);
  b.def("GX_INFLIGHT", o.sm90GradXInflight);
  b.def("GX_CLUSTER", cluster);
  const plan::Launch convert = launch(256, 0, roundingWave(rows, a.N));
  // >= the tile count (with pairs: twice the pairs), capped at the SMs; the runtime rounds it to whole clusters.
  const int64_t tilesN = (a.K + bn - 1) / bn;
  plan::GridDim g = cluster == 2 ? dim(rows.plus(255).scaled(2 * tilesN), 256) : dim(rows.plus(127).scaled(tilesN), 128);
  g.maxPerSm = 1;
  plan::Launch gemm = launch(384, smem, g);
  gemm.cluster = {cluster, 1, 1};
  const std::string name = fmt::format("linear_grad_x_mma_sm90_n{}_k{}{}{}{}{}", a.N, a.K, residual ? "_res" : "",
                                       gbIn ? "_gb" : "", a.loraK > 0 ? fmt::format("_lora{}", a.loraK) : "", swiglu);
  const std::string body = std::string(tmpl::hopper) + "\n" + tmpl::grad_common;
  if (gbIn) return finish(name, "GX_ENTRY_P1", b, p, body + tmpl::grad_linear_sm90, gemm, arch, gradLaunch(o));
  return finish(name, "GL_ENTRY", b, p, body + tmpl::grad_linear_round + tmpl::grad_linear_sm90, convert, arch,
                gradLaunch(o), {{"GX_ENTRY_P1", gemm}});
}

// The Hopper form of a bf16 linear's dW (grad_linear_w_sm90.cuh; the mma.sync form's bits): phase 0 rounds g into
// the scratch gb and sums dbias (grad_linear_round.cuh), phase 1 the persistent TMA + wgmma GEMM over 128 x 128 tiles
// of dW, both operands per item (3-D maps over gb and x: rows past an item's end read as zeros), walking each item's
// units of 128 rows.
plan::Kernel emitLinearGradWSm90(const OpView &v, const std::string &arch, int64_t dwAt, int64_t biasAt) {
  const plan::OpAttrs &a = v.a();
  const int64_t stages = v.options.sm90GradWStages;
  // grad_w_narrow: where N or K is at most 64 (LoRA's dA and dB), 64 x 64 tiles whose consumers take the units in
  // turn, with twice the stages of half the bytes (the same ring bytes).
  const bool narrow = sm90GradWNarrowTiles(v.options, a.N, a.K);
  const int64_t tile = narrow ? 64 : 128;
  const int64_t smem = sm90GradWSharedBytes(int(stages), narrow);
  if (stages < 2 || stages > 6 || smem > kMaxCtaSharedBytes)
    fail(v.where, "the Hopper dW's ring takes 2-6 stages, got {}", stages);
  Builder b;
  Params p;
  const Extent rows = v.rowsOfIn(0), itemRows = Extent::rowsOf(v.in(0).rows, false);
  const Extent items = v.in(0).batch ? Extent::parse("B", v.where) : Extent::constant(1);
  if (v.in(1).batch != v.in(0).batch || v.in(1).rows != v.in(0).rows)
    fail(v.where, "dW's g and x must have the same rows");
  p.in("g", 0);
  p.out("dw", dwAt);
  if (biasAt >= 0) p.out("dbias", biasAt);
  itemScalars(p, v, 0);
  const bool gbIn = roundedG(v, biasAt);  // the map over g, no rounding phase
  if (gbIn) {
    p.itemTensorMap("gb_map", OperandRole::In, 0, itemRows, a.N, 64, 64, &items);
  } else {
    p.scratch("gb", rows.scaled(a.N * 2));
    p.scratchTensorMap("gb_map", "gb", itemRows, a.N, 64, 64, &items);
  }
  p.itemTensorMap("x_map", OperandRole::In, 1, itemRows, a.K, 64, 64, &items);
  b.def("GL_DW", 1);
  b.def("GR_N", a.N);
  b.def("GR_K", a.K);
  b.def("GR_BIAS", biasAt >= 0 ? 1 : 0);
  b.def("GW_STAGES", narrow ? 2 * stages : stages);
  b.def("GW_GROUP_M", 8);
  b.def("GW_NARROW", narrow ? 1 : 0);
  const plan::Launch convert = launch(256, 0, roundingWave(rows, a.N), dim(Extent::constant(biasAt >= 0 ? 2 : 1)));
  plan::GridDim g = dim(Extent::constant(((a.N + tile - 1) / tile) * ((a.K + tile - 1) / tile)));  // the tiles, capped at the SMs
  g.maxPerSm = 1;
  const plan::Launch gemm = launch(384, smem, g);
  const std::string name =
      fmt::format("linear_grad_w_mma_sm90_n{}_k{}{}{}", a.N, a.K, gbIn ? "_gb" : "", narrow ? "_t64" : "");
  const std::string body = std::string(tmpl::hopper) + "\n" + tmpl::grad_common;
  if (gbIn) return finish(name, "GW_ENTRY_P1", b, p, body + tmpl::grad_linear_w_sm90, gemm, arch, gradLaunch(v.options));
  return finish(name, "GL_ENTRY", b, p, body + tmpl::grad_linear_round + tmpl::grad_linear_w_sm90, convert, arch,
                gradLaunch(v.options), {{"GW_ENTRY_P1", gemm}});
}

// The tensor-core forms of a bf16 linear's gradients (grad_linear_mma.cuh): phase 0 rounds g to bf16 into the
// scratch (and sums dbias), phase 1 is the GEMM in 128 x 128 tiles. dW: `dwAt` / `biasAt` the outputs of the weight's
// and bias's gradients (the bias's -1 when it is frozen or absent). On sm_90a with wgmma a dX of more than 64 output
// columns, LoRA's dt (64 columns, N a multiple of 128) and every dW take the Hopper forms (emitLinearGradXSm90,
// emitLinearGradWSm90; the same bits); any other skinny dX stays here.
plan::Kernel emitLinearGradMma(const OpView &v, const std::string &arch, bool dw, int64_t dwAt, int64_t biasAt) {
  const plan::OpAttrs &a = v.a();
  // LoRA's dt (K = 64) takes the Hopper form's 64-wide tile where N is a multiple of 128: there its chain's chunk
  // count, 2 ceil(N / 32), is the skinny form's, 8 ceil(N / 128) (its k-tiles of 128, zero-filled past N), so the
  // two give the same bits even where a chain's value is -0 (a zero chunk would make it +0).
  if (!dw && arch == "sm_90a" && v.options.wgmma && v.options.sm90GradX == 1 &&
      (a.K > 64 || (a.K == 64 && a.N % 128 == 0 && v.options.sm90GradXNarrow == 1)))
    return emitLinearGradXSm90(v, arch);
  if (dw && arch == "sm_90a" && v.options.wgmma && v.options.sm90GradW == 1) return emitLinearGradWSm90(v, arch, dwAt, biasAt);
  Builder b;
  Params p;
  std::string swiglu;  // (dX: swigluInput's suffix)
  const Extent rows = v.rowsOfIn(0);
  p.in("g", 0);
  if (dw) {
    p.in("x", 1);
    p.out("dw", dwAt);
    if (biasAt >= 0) p.out("dbias", biasAt);
    itemScalars(p, v, 0);
    b.def("GL_LORA_K", 0);
    b.def("GR_DX_SWIGLU", 0);
    b.def("GR_DX_BF", 0);
  } else {
    p.weight("w", 0);
    if (a.loraK > 0) p.weight("down", 1);
    dxResidual(p, b, a);
    loraInput(p, b, v, "GL_LORA_K");
    swiglu = swigluInput(p, b, v);
    p.out("dx", 0);
    p.scalar("rows", rows);
  }
  const bool gbIn = roundedG(v, biasAt);  // phase 1 alone, reading g
  if (!gbIn) p.scratch("gb", rows.scaled(a.N * 2));
  b.def("GL_G_BF16", gbIn ? 1 : 0);
  b.def("GL_DW", dw ? 1 : 0);
  b.def("GR_N", a.N);
  b.def("GR_K", a.K);
  b.def("GR_BIAS", biasAt >= 0 ? 1 : 0);
  // The tile: 128 x 128, 8 warps, k-tiles of 32, 3 stages; a skinny dX (K <= 64 output columns: LoRA's dt, whose chain
  // runs over all N) 32 x 64, 4 warps, k-tiles of 128, 4 stages (M / 32 CTAs, each chain step a deep ring).
  const bool skinny = !dw && a.K <= 64;
  const int64_t bm = skinny ? 32 : 128, bn = skinny ? 64 : 128, bk = skinny ? 128 : 32, stages = skinny ? 4 : 3;
  const int64_t wm = 2, wn = skinny ? 2 : 4;
  // A LoRA down path's chain walks k-tiles of 32 (its own op's chunks): not the skinny tile's 128.
  if (!dw && a.loraK > 0 && skinny) fail(v.where, "a dX of 64 columns or fewer takes in no LoRA down path");
  b.def("GL_BM", bm);
  b.def("GL_BN", bn);
  b.def("GL_BK", bk);
  b.def("GL_STAGES", stages);
  b.def("GL_WM", wm);
  b.def("GL_WN", wn);
  const int64_t aTile = dw ? bk * (bm + 8) : bm * (bk + 8), bTile = bk * (bn + 8);
  const int64_t smem = stages * (aTile + bTile) * 2;
  const plan::Launch convert = launch(256, 0, roundingWave(rows, a.N), dim(Extent::constant(biasAt >= 0 ? 2 : 1)));
  const plan::Launch gemm = launch(wm * wn * 32, smem, dw ? dim(Extent::constant(a.N), bm) : dim(rows, bm),
                                   dim(Extent::constant(a.K), bn));
  std::string name = fmt::format("{}_mma_n{}_k{}{}{}", plan::opKindName(v.op.kind), a.N, a.K,
                                 !dw && a.epilogue == plan::Epilogue::Residual ? "_res" : "", gbIn ? "_gb" : "");
  if (!dw && a.loraK > 0) name += fmt::format("_lora{}", a.loraK);
  name += swiglu;
  if (gbIn)
    return finish(name, "GL_ENTRY_P1", b, p, std::string(tmpl::grad_common) + tmpl::grad_linear_mma, gemm, arch,
                  gradLaunch(v.options));
  return finish(name, "GL_ENTRY", b, p, std::string(tmpl::grad_common) + tmpl::grad_linear_round + tmpl::grad_linear_mma, convert, arch,
                gradLaunch(v.options), {{"GL_ENTRY_P1", gemm}});
}

// The tensor-core form of attention's backward (grad_attention_mma.cuh): phase 0 per 64-query tile (statistics, bf(dO)
// into the scratch, dq), phase 1 per 64-key tile (dk, dv), each over (tile, head, item).
plan::Kernel emitAttentionGradMma(const OpView &v, const std::string &arch) {
  const plan::OpAttrs &a = v.a();
  const int64_t d = a.headDim;
  Builder b;
  Params p;
  const Extent rows = v.rowsOfIn(0), itemRows = Extent::rowsOf(v.in(0).rows, false);
  attentionGradOperands(p, rows, a.heads, a.lse);
  p.scratch("dob", rows.scaled(a.heads * d * 2));   // bf(dout)
  p.scalar("item_rows", itemRows);
  const plan::GridDim items = v.in(0).batch ? dim(Extent::parse("B", v.where)) : dim(Extent::constant(1));
  if (arch == "sm_90a" && v.options.wgmma && d == 128) {
    // The Hopper form (grad_attention_sm90.cuh, wgmma; the same bits): phase 0 per 128-query tile (bf(dO), D, L, the
    // dq counters), phase 1 per 128-key tile (two warpgroups of 64 keys: dv, dk and dq's ordered parts). Shared
    // memory: phase 0 D (512 bytes), and without lse 1,024 bytes of alignment for the 128-byte swizzle, Q (32 KiB)
    // and a ring of K blocks; phase 1 the alignment, K and V (32 KiB each), a ring of (Q, bf(dO)) steps of 64 rows
    // (32 KiB a stage), dS (16 KiB), the last tile's copy of dq's sum so far (36 KiB) and the ring's L and D.
    p.scratch("dqsem", rows.scaled(a.heads * 8));  // the counters of dq's ordered adds: two ints a (row, head)
    b.def("GB_HEADS", a.heads);
    b.def("GB_LSE", a.lse);
    b.def("GB_KVB", a.kvBlock);
    b.def("GB_C", floatLit(1.0 / std::sqrt(double(d)) * 1.4426950408889634074));
    b.def("GB_QK_SCALE", floatLit(1.0 / std::sqrt(double(d))));
    b.def("GB_O_BF", bf(v.in(3)));
    b.def("GR_DV_BF", bf(v.out(2)));  // dv stored bf16: the grad_round that read it folded in (h3-fuse-grad)
    // The load ring's stages (attn_grad_stages): a step's rows land while the step before runs (2), or the two
    // before (3).
    const int64_t stages = v.options.sm90AttnGradStages;
    b.def("GB_STAGES", stages);
    // attn_grad_sync: a third warpgroup whose first warp waits for dq's counts and counts the tile in.
    const bool syncWarp = v.options.sm90AttnGradSync == 1;
    b.def("GB_SYNC_WARP", syncWarp ? 1 : 0);
    const int64_t tile = d * 2;
    // The last tile's copy of dq's sum: 64 rows of 64 F32 channels a warpgroup, rows 72 floats apart (the accumulator
    // layout's float2 reads fall into distinct banks).
    const int64_t prevLd = 72;
    b.def("GB_PREV_LD", prevLd);
    // attn_grad_rows: the middle tiles' dq adds a whole row a warp instruction (staged in that copy's memory; 2: two
    // rows, 16 bytes a lane).
    b.def("GB_DQ_ROWS", std::clamp(v.options.sm90AttnGradRows, 0, 2));
    const int64_t smem0 = a.lse ? 512 : 512 + 1024 + 128 * tile + 3 * a.kvBlock * tile;  // GB_STAT_STAGES
    const int64_t smem1 = 1024 + 2 * 128 * tile + stages * 2 * 64 * tile + 64 * tile + 2 * 64 * prevLd * 4 +
                          stages * 64 * 2 * 4;
    const plan::Launch queries = launch(256, smem0, dim(itemRows, 128), dim(Extent::constant(a.heads)), items);
    const plan::Launch keys = launch(syncWarp ? 384 : 256, smem1, dim(itemRows, 128), dim(Extent::constant(a.heads)), items);
    std::string name = fmt::format("attention_grad_mma_sm90_h{}_d{}_kv{}{}{}", a.heads, d, a.kvBlock, a.lse ? "_lse" : "",
                                   bf(v.out(2)) ? "_dvbf" : "");
    return finish(name, "GB_ENTRY", b, p, std::string(tmpl::hopper) + "\n" + tmpl::grad_common + tmpl::grad_attention_sm90,
                  queries, arch, gradLaunch(v.options), {{"GB_ENTRY_P1", keys}});
  }
  b.def("GA_D", d);
  b.def("GA_HEADS", a.heads);
  b.def("GA_LSE", a.lse);
  b.def("GA_KVB", a.kvBlock);
  b.def("GA_C", floatLit(1.0 / std::sqrt(double(d)) * 1.4426950408889634074));
  b.def("GA_QK_SCALE", floatLit(1.0 / std::sqrt(double(d))));
  b.def("GA_O_BF", bf(v.in(3)));
  b.def("GR_DV_BF", bf(v.out(2)));
  const int64_t lds = d + 8, statRows = std::max<int64_t>(2 * a.kvBlock, 256);
  const int64_t smem0 = (128 + statRows) * lds * 2 + 64 * 4;
  const int64_t smem1 = (128 + 128) * lds * 2 + 4 * 32 * 4;
  const plan::Launch queries = launch(128, smem0, dim(itemRows, 64), dim(Extent::constant(a.heads)), items);
  const plan::Launch keys = launch(128, smem1, dim(itemRows, 64), dim(Extent::constant(a.heads)), items);
  std::string name = fmt::format("attention_grad_mma_h{}_d{}_kv{}{}{}", a.heads, d, a.kvBlock, a.lse ? "_lse" : "",
                                 bf(v.out(2)) ? "_dvbf" : "");
  return finish(name, "GA_ENTRY", b, p, std::string(tmpl::grad_common) + tmpl::grad_attention_mma, queries, arch,
                gradLaunch(v.options), {{"GA_ENTRY_P1", keys}});
}

} // namespace

plan::Kernel emitGradKernel(const OpView &v, const std::string &arch) {
  const plan::OpAttrs &a = v.a();
  // The weight gradients follow the activation outputs, one per op.grads entry (the trained tensors, section 14): the
  // output position of tensor t's gradient, or -1 when t is frozen.
  const int64_t fw = int64_t(plan::outputRoles(v.op.kind, a).size());
  auto gradAt = [&](const std::vector<std::string> &names) -> int64_t {
    if (names.empty()) return -1;
    auto it = std::find(v.op.grads.begin(), v.op.grads.end(), names[0]);
    return it == v.op.grads.end() ? -1 : fw + int64_t(it - v.op.grads.begin());
  };
  Builder b;
  Params p;
  const Extent rows = v.rowsOfIn(0);
  const Extent one = Extent::constant(1);
  plan::Launch l = launch(256, 0, blocks(rows, 256));
  std::vector<PhaseSpec> phases;
  const char *kind = nullptr;
  const bool mma = v.options.gradMma == 1;
  // GR_VEC (grad.cuh): the vector width of the memory-bound kinds' 16-byte loads and stores where their columns are a
  // multiple of it (every config's: H 24, 192, 5,376; F 32, 512, 14,336), 1 for the scalar loops.
  int64_t vec = 1, minBlocks = 1;  // minBlocks: GR_MIN_BLOCKS, phase 0's __launch_bounds__ blocks an SM
  std::string name = plan::opKindName(v.op.kind);
  auto weightBf = [&] { return a.wDtype == DType::BF16 ? 1 : 0; };
  switch (v.op.kind) {
  case OpKind::GradAdd:
    kind = "GR_ADD";
    p.in("a", 0);
    p.in("b", 1);
    p.out("c", 0);
    p.scalar("rows", rows);
    b.def("GR_COLS", v.out(0).cols);
    vec = v.out(0).cols % 4 == 0 ? 4 : 1;  // float4
    l = launch(256, 0, blocks(rows.scaled(v.out(0).cols / vec), 256));
    name += fmt::format("_c{}", v.out(0).cols);
    break;
  case OpKind::GradRound: {
    // bf(g) once for the linear gradients that read it (h3-fuse-grad): the tensor-core forms' rounding phase
    // (grad_linear_round.cuh) as an op of its own, one wave of 8 CTAs an SM.
    if (a.cols % 8) fail(v.where, "grad_round rounds rows of a multiple of 8 columns, got {}", a.cols);
    p.in("g", 0);
    p.out("gb", 0);
    p.scalar("rows", rows);
    b.def("GL_DW", 0);
    b.def("GR_N", a.cols);
    b.def("GR_BIAS", 0);
    return finish(fmt::format("grad_round_c{}", a.cols), "GL_ENTRY", b, p,
                  std::string(tmpl::grad_common) + tmpl::grad_linear_round, launch(256, 0, roundingWave(rows, a.cols)),
                  arch, gradLaunch(v.options));
  }
  case OpKind::LinearGradX: {
    if (mma && a.wDtype == DType::BF16 && a.N % 8 == 0 && a.K % 8 == 0) return emitLinearGradMma(v, arch, false, -1, -1);
    // (h3-fuse-grad takes a LoRA path's dX or a swiglu_grad into bf16 dXs only; this one-thread form has neither)
    if (a.loraK > 0 || a.epilogue == plan::Epilogue::Swiglu)
      fail(v.where, "a dX that took in a LoRA down path or a swiglu_grad runs on the tensor cores only (bf16 weight, N "
                    "and K multiples of 8, grad_mma=1)");
    kind = "GR_LINEAR_X";
    p.in("g", 0);
    p.weight("w", 0);
    const bool residual = dxResidual(p, b, a);
    p.out("dx", 0);
    p.scalar("rows", rows);
    b.def("GR_N", a.N);
    b.def("GR_K", a.K);
    b.def("GR_W_F32", a.wDtype == DType::F32 ? 1 : 0);
    b.def("GR_G_BF", bf(v.in(0)));  // a grad_round's bf(g) (bf16 weights only: the plan checks it)
    l = launch(256, 0, blocks(rows.scaled(a.K), 256));
    name += fmt::format("_n{}_k{}{}", a.N, a.K, residual ? "_res" : "");
    break;
  }
  case OpKind::LinearGradW: {
    const int64_t dwAt = gradAt(v.op.weights), biasAt = gradAt(v.op.biases);
    if (mma && dwAt >= 0 && a.wDtype == DType::BF16 && bf(v.in(1)) && a.N % 8 == 0 && a.K % 8 == 0)
      return emitLinearGradMma(v, arch, true, dwAt, biasAt);
    kind = "GR_LINEAR_W";
    p.in("g", 0);
    p.in("x", 1);
    if (dwAt >= 0) p.out("dw", dwAt);
    if (biasAt >= 0) p.out("dbias", biasAt);
    itemScalars(p, v, 0);
    b.def("GR_N", a.N);
    b.def("GR_K", a.K);
    b.def("GR_W_F32", a.wDtype == DType::F32 ? 1 : 0);
    b.def("GR_X_BF", bf(v.in(1)));
    b.def("GR_G_BF", bf(v.in(0)));  // a grad_round's bf(g): bf16 weight, no dbias (the plan checks it)
    b.def("GR_DW", dwAt >= 0 ? 1 : 0);
    b.def("GR_BIAS", biasAt >= 0 ? 1 : 0);
    l = launch(256, 0, blocks(Extent::constant(dwAt >= 0 ? a.N * a.K : a.N), 256), dim(Extent::constant(2)));
    name += fmt::format("_n{}_k{}", a.N, a.K);
    break;
  }
  case OpKind::SwigluGrad:
    kind = "GR_SWIGLU";
    p.in("dy", 0);
    p.in("x", 1);
    p.out("dx", 0);
    p.scalar("rows", rows);
    b.def("GR_F", a.F);
    b.def("GR_X_BF", bf(v.in(1)));
    vec = a.F % 8 == 0 ? 8 : 1;  // 8 f of a row per thread and step
    l = launch(256, 0, blocks(rows.scaled(a.F / vec), 256));
    name += fmt::format("_f{}", a.F);
    break;
  case OpKind::SiluGrad:
    kind = "GR_SILU";
    p.in("dy", 0);
    p.in("x", 1);
    p.out("dx", 0);
    p.scalar("rows", rows);
    b.def("GR_COLS", v.in(1).cols);
    b.def("GR_X_BF", bf(v.in(1)));
    l = launch(256, 0, blocks(rows.scaled(v.in(1).cols), 256));
    name += fmt::format("_c{}", v.in(1).cols);
    break;
  case OpKind::RopeGrad:
    kind = "GR_ROPE";
    if (v.in(1).cols != a.rotaryDim || v.in(2).cols != a.rotaryDim)
      fail(v.where, "the rope tables must have the rotary width {} as columns", a.rotaryDim);
    if (a.rotaryDim % 2 || a.rotaryDim > a.headDim) fail(v.where, "the rotary width must be even and at most d");
    p.in("dy", 0);
    p.in("cos_t", 1);
    p.in("sin_t", 2);
    p.out("dx", 0);
    p.scalar("rows", rows);
    p.scalar("item_rows", Extent::rowsOf(v.in(0).rows, false));
    b.def("GR_HEADS", a.heads);
    b.def("GR_D", a.headDim);
    b.def("GR_R", a.rotaryDim);
    vec = a.heads * a.headDim % 4 == 0 ? 4 : 1;  // a block per row, a float4 per thread and step
    l = vec == 4 ? launch(rowThreads(a.heads * a.headDim / 4), 0, blocks(rows, 1))
                 : launch(256, 0, blocks(rows.scaled(a.heads * a.headDim), 256));
    name += fmt::format("_h{}_d{}_r{}", a.heads, a.headDim, a.rotaryDim);
    break;
  case OpKind::RmsNormGrad: {
    kind = "GR_RMS_NORM";
    const bool w = !v.op.weights.empty();
    const int64_t dwAt = gradAt(v.op.weights);
    if (a.group <= 0 || a.cols % a.group) fail(v.where, "{} columns are no whole number of {}-channel groups", a.cols, a.group);
    const int64_t groups = a.cols / a.group;
    // rotary_dim (h3-fuse-grad): a qk_norm's, dy the rope's output gradient, rotated back as it is read.
    const bool rope = a.rotaryDim > 0;
    if (rope && (a.rotaryDim % 2 || a.rotaryDim > a.group || v.in(2).cols != a.rotaryDim || v.in(3).cols != a.rotaryDim))
      fail(v.where, "the folded rope's tables must have the rotary width {} (even, at most the group) as columns",
           a.rotaryDim);
    p.in("dy", 0);
    p.in("x", 1);
    if (rope) {
      p.in("cos_t", 2);
      p.in("sin_t", 3);
    }
    if (w) p.weight("w", 0);
    p.out("dx", 0);
    if (dwAt >= 0) p.out("dw", dwAt);
    p.scalar("rows", rows);
    itemScalars(p, v, 1);
    b.def("GR_DW", dwAt >= 0 ? 1 : 0);
    b.def("GR_ROPE_IN", rope ? 1 : 0);
    if (rope) b.def("GR_R", a.rotaryDim);
    b.def("GR_COLS", a.cols);
    b.def("GR_G", a.group);
    b.def("GR_EPS", floatLit(a.eps));
    b.def("GR_HAS_W", w ? 1 : 0);
    b.def("GR_W_BF", weightBf());
    b.def("GR_X_BF", bf(v.in(1)));
    const int64_t smem = dwAt >= 0 ? 128 * groups * 4 : 0;  // a unit's inverse RMS per (row, group)
    if (smem > 48 * 1024) fail(v.where, "{} groups per row need {} bytes of shared memory (at most 49152)", groups, smem);
    l = launch(256, smem, blocks(rows.scaled(groups), 8),
               dim(Extent::constant(dwAt >= 0 ? 1 + (a.group + 255) / 256 : 1)));
    name += fmt::format("_c{}_g{}{}", a.cols, a.group, rope ? fmt::format("_r{}", a.rotaryDim) : "");
    break;
  }
  case OpKind::NormModulateGrad:
  case OpKind::GateResidualGrad: {
    const bool modulate = v.op.kind == OpKind::NormModulateGrad;
    const bool w = modulate && !v.op.weights.empty();
    const int64_t dwAt = modulate ? gradAt(v.op.weights) : -1;
    const int rpt = plan::rowsPerTimestep(a.rowIndex);
    kind = modulate ? "GR_NORM_MODULATE" : "GR_GATE_RESIDUAL";
    // table_grad 0 (h3-backward: nothing reads the table's gradient): no output dtable, and gate_residual_grad reads
    // no y (dy = dz * gate needs none); phases 1 and 2 run only for the sums that remain (the norm's weight's).
    const bool tableGrad = a.tableGrad != 0, sums = tableGrad || dwAt >= 0;
    size_t at = 0;
    p.in(modulate ? "dy" : "dz", at++);
    if (modulate || tableGrad) p.in(modulate ? "x" : "y", at++);
    const size_t tableAt = at;
    p.in("table", at++);
    p.in("ts_index", at++);
    if (rpt == 3) p.in("tags", at++);
    // h3-fuse-grad's residual (norm_modulate_grad): dx = residual + dx as it is stored, grad_add's sum.
    const bool residual = modulate && a.epilogue == plan::Epilogue::Residual;
    if (residual) p.in("residual", at);
    if (w) p.weight("w", 0);
    p.out(modulate ? "dx" : "dy", 0);
    if (tableGrad) p.out("dtable", 1);
    b.def("GR_RESIDUAL", residual ? 1 : 0);
    b.def("GR_TABLE_GRAD", tableGrad ? 1 : 0);
    b.def("GR_SUMS", sums ? 1 : 0);
    if (residual) name += "_res";
    if (!tableGrad) name += "_notab";
    if (dwAt >= 0) p.out("dw", dwAt);
    p.scalar("rows", rows);
    itemScalars(p, v, 0);  // (dy / dz: the rows of x / y)
    p.scalar("meta_rows", v.rowsOfIn(tableAt + 1));
    p.scalar("table_rows", v.rowsOfIn(tableAt));
    if (v.in(tableAt).cols != a.numChunks * a.H) fail(v.where, "the table must have {} x {} columns", a.numChunks, a.H);
    b.def("GR_H", a.H);
    b.def("GR_NUMCH", a.numChunks);
    b.def("GR_RPT", rpt);
    b.def("GR_T_BF", bf(v.in(tableAt)));
    vec = a.H % 8 == 0 ? 8 : 1;  // norm_modulate's dx, gate_residual's dy: 8 channels per thread and step
    // The unit partials of the table's (and the weight's) sums, phases 1 and 2 (grad.cuh): [unit][table row][acc][H]
    // then [unit][H]; units <= (B * item_rows + 128 B) / 128, so the bytes are at most ceil(H / 32) x
    // (acc * (B item_rows T + 128 B T) + B item_rows + 128 B).
    const int acc = modulate ? 2 : 1;
    b.def("GR_ACC", acc);
    if (sums) {
      const int64_t h32 = (a.H + 31) / 32;
      const std::string B = v.in(1).batch ? "B*" : "", R = plan::domainName(v.in(1).rows),
                        T = plan::domainName(v.in(tableAt).rows);
      p.scratch("parts", Extent::parse(fmt::format("{}*{}{}*{} + {}*{}{} + {}*{}{} + {}{}", h32 * acc, B, R, T,
                                                   128 * h32 * acc, B, T, h32, B, R, 128 * h32,
                                                   v.in(1).batch ? "*B" : ""),
                                       v.where));
      const Extent itemRows = Extent::rowsOf(v.in(1).rows, false);
      const plan::GridDim itemsDim = v.in(1).batch ? dim(Extent::parse("B", v.where)) : dim(Extent::constant(1));
      phases = {{"GR_ENTRY_P1", launch(64, 0, dim(Extent::constant(a.H), 64), dim(itemRows, 128), itemsDim)},
                {"GR_ENTRY_P2", launch(256, 0, dim(Extent::constant(a.H), 256), dim(v.rowsOfIn(tableAt).plus(1)))}};
    }
    if (modulate) {
      if (sums) p.scratch("inv_rms", rows.scaled(4));  // each row's inverse RMS, for phase 1
      b.def("GR_EPS", floatLit(a.eps));
      b.def("GR_HAS_W", w ? 1 : 0);
      b.def("GR_DW", dwAt >= 0 ? 1 : 0);
      b.def("GR_W_BF", weightBf());
      b.def("GR_X_BF", bf(v.in(1)));
      b.def("GR_SCALE", a.scaleChunk);
      b.def("GR_SHIFT", a.shiftChunk);
      // A block per row (grad_nm_block, default): the row staged in shared memory (bf16 x and table; x and the F32
      // dn staged, 6 bytes a channel: at most 48 KiB of static shared memory); else a warp per row.
      const bool rowBlock = v.options.gradNormBlock == 1 && vec == 8 && bf(v.in(1)) && bf(v.in(2)) &&
                            a.H * 6 + 64 <= 48 * 1024;
      b.def("GR_NM_BLOCK", rowBlock ? 1 : 0);
      if (rowBlock) {
        l = launch(256, 0, blocks(rows, 1));
        // 6 rows an SM (their 32 KiB of staging each): 40 registers a thread, where ptxas spills nothing for H =
        // 5,376 on sm_90a and sm_100a (at 32, 7 rows, it spills; unbounded it takes 56, 4 rows an SM). Timing only:
        // the phase took 0.208 ms at 7 rows an SM against 0.212 for the form before at 5 (H100, bench/NOTES.md
        // 2026-12-06, session of 16:01).
        minBlocks = a.H * 6 + 64 <= 32 * 1024 + 64 ? 6 : 1;
      } else {
        l = launch(256, 0, blocks(rows, 8));  // a warp per row: dx, inv
        // On Hopper 8 blocks an SM (32 registers): 8,448 rows at once on 132 SMs, where 40 registers held 6 blocks and
        // 8,349 rows took 1.3 waves of these long warps (three passes over the row). ptxas spills nothing at 32
        // registers on sm_90a for H = 24, 192 and 5,376; on sm_100a it spills at H = 24 and 192, so it keeps its own.
        minBlocks = arch == "sm_90a" ? 8 : 1;
      }
    } else {
      b.def("GR_Y_BF", tableGrad ? bf(v.in(1)) : 0);
      b.def("GR_CHUNK", a.chunk);
      l = vec == 8 ? launch(rowThreads(a.H / 8), 0, blocks(rows, 1))  // dy: a block per row
                   : launch(256, 0, blocks(rows.scaled(a.H), 256));
    }
    name += fmt::format("_h{}_t{}", a.H, rpt);
    break;
  }
  case OpKind::AttentionGrad: {
    const int64_t d = a.headDim;
    if (a.kvBlock < 1) fail(v.where, "attention_grad needs the forward's kv_block");
    if (mma && d % 16 == 0 && d <= 128 && (a.kvBlock == 64 || a.kvBlock == 128) && bf(v.in(0)) && bf(v.in(1)) &&
        bf(v.in(2)))
      return emitAttentionGradMma(v, arch);
    kind = "GR_ATTENTION";
    attentionGradOperands(p, rows, a.heads, a.lse);
    p.scalar("rows", rows);
    p.scalar("item_rows", Extent::rowsOf(v.in(0).rows, false));
    b.def("GR_HEADS", a.heads);
    b.def("GR_D", d);
    b.def("GR_KVB", a.kvBlock);
    // The forward's pinned exp2 constant (section 4) and the scale of dS (in double, rounded once).
    b.def("GR_C", floatLit(1.0 / std::sqrt(double(d)) * 1.4426950408889634074));
    b.def("GR_QK_SCALE", floatLit(1.0 / std::sqrt(double(d))));
    b.def("GR_Q_BF", bf(v.in(0)));
    b.def("GR_DV_BF", bf(v.out(2)));
    b.def("GR_K_BF", bf(v.in(1)));
    b.def("GR_V_BF", bf(v.in(2)));
    b.def("GR_O_BF", bf(v.in(3)));
    b.def("GR_LSE", a.lse);
    l = launch(256, 0, blocks(rows.scaled(a.heads), 8));
    phases = {{"GR_ENTRY_P1", l}, {"GR_ENTRY_P2", l}};
    name += fmt::format("_h{}_d{}_kv{}{}{}", a.heads, d, a.kvBlock, a.lse ? "_lse" : "", bf(v.out(2)) ? "_dvbf" : "");
    break;
  }
  case OpKind::PackGrad:
    kind = "GR_PACK";
    p.in("dx", 0);
    p.out("dtext", 0);
    p.out("dvideo", 1);
    p.out("daudio", 2);
    p.scalar("rows", rows);
    p.scalar("nt", Extent::parse("Nt", v.where));
    p.scalar("nv", Extent::parse("Nv", v.where));
    p.scalar("na", Extent::parse("Na", v.where));
    b.def("GR_H", v.in(0).cols);
    l = launch(256, 0, blocks(rows.scaled(v.in(0).cols), 256));
    name += fmt::format("_c{}", v.in(0).cols);
    break;
  case OpKind::UnpackGrad: {
    kind = "GR_UNPACK";
    const Extent outRows = Extent::rowsOf(v.out(0).rows, v.out(0).batch);
    p.in("dsample", 0);
    p.in("daudio_sample", 1);
    p.out("dvideo", 0);
    p.out("daudio", 1);
    p.scalar("rows", outRows);
    p.scalar("nt", Extent::parse("Nt", v.where));
    p.scalar("nv", Extent::parse("Nv", v.where));
    p.scalar("na", Extent::parse("Na", v.where));
    b.def("GR_VCOLS", v.out(0).cols);
    b.def("GR_ACOLS", v.out(1).cols);
    l = launch(256, 0, blocks(outRows.scaled(std::max(v.out(0).cols, v.out(1).cols)), 256), dim(Extent::constant(2)));
    name += fmt::format("_v{}_a{}", v.out(0).cols, v.out(1).cols);
    break;
  }
  case OpKind::AdalnTableGrad: {
    kind = "GR_ADALN_TABLE";
    const int64_t dwAt = gradAt(v.op.weights), biasAt = gradAt(v.op.biases);
    if (a.wDtype != DType::BF16) fail(v.where, "the AdaLN table's weight must be bf16");
    p.in("dtable", 0);
    p.in("temb", 1);
    p.weight("w", 0);
    p.out("dtemb", 0);
    if (dwAt >= 0) p.out("dw", dwAt);
    if (biasAt >= 0) p.out("dbias", biasAt);
    p.scalar("ts", v.rowsOfIn(1));
    b.def("GR_N", a.N);
    b.def("GR_K", a.K);
    b.def("GR_DW", dwAt >= 0 ? 1 : 0);
    b.def("GR_BIAS", biasAt >= 0 ? 1 : 0);
    l = launch(256, 0, blocks(Extent::constant(a.N * a.K), 256), dim(Extent::constant(3)));
    name += fmt::format("_n{}_k{}", a.N, a.K);
    break;
  }
  default: fail(v.where, "no GPU kernel for op kind '{}'", plan::opKindName(v.op.kind));
  }
  (void)one;
  // h3-fuse-grad's fused rounding: swiglu_grad's and rms_norm_grad's dx, gate_residual_grad's dy stored as bf16
  // (gr_st); no other kind has a bf16 output (the plan's backward check).
  const bool outBf = !v.op.out.empty() && bf(v.out(0));
  if (outBf && v.op.kind != OpKind::SwigluGrad && v.op.kind != OpKind::RmsNormGrad &&
      v.op.kind != OpKind::GateResidualGrad && v.op.kind != OpKind::LinearGradX)
    fail(v.where, "a {}'s first output is F32 (bf16 only where h3-fuse-grad fused the rounding)", plan::opKindName(v.op.kind));
  b.def("GR_OUT_BF", outBf ? 1 : 0);
  if (outBf) name += "_bfout";
  b.def("GR_KIND", kind);
  b.def("GR_VEC", vec);
  b.def("GR_MIN_BLOCKS", minBlocks);
  return finish(name, "GR_ENTRY", b, p, std::string(tmpl::grad_common) + tmpl::grad, l, arch, gradLaunch(v.options),
                std::move(phases));
}

} // namespace emit_detail

} // namespace h3c::kernels
