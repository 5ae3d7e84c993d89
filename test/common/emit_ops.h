// Plan ops as the kernel emitter sees them, built by the kernel tests (NVRTC compiles in CI, the GPU checks): the
// op (kind, typed attrs, order, weights) and the values at its operand positions, with the domains a compiled plan
// gives them (activations batched over S, row metadata and rope tables shared by the batch, AdaLN tables T3, the
// time embedding T).
#pragma once

#include "h3c/kernels/emit.h"
#include "h3c/plan/plan.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace h3c::testops {

namespace hk = h3c::kernels;
using plan::OpKind;

inline plan::Order kchunks(int units) {
  plan::Order o;
  o.kind = plan::OrderKind::KChunks;
  o.kStep = 16;
  o.units = units;
  return o;
}
inline plan::Order laneTree() {
  plan::Order o;
  o.kind = plan::OrderKind::LaneTree;
  o.lanes = 32;
  return o;
}
inline plan::Order flash() {
  plan::Order o;
  o.kind = plan::OrderKind::Flash;
  o.kvBlock = 128;
  o.kStep = 16;
  return o;
}

// An op as the emitter sees it: the plan op and the values at its operand positions. Operands get the domains a
// plan gives them (activations batched over S, row metadata and rope tables batch-shared, tables T3, temb T).
struct EmitOp {
  plan::Op op;
  hk::OperandValues vals;
};

inline plan::Value operand(const std::string &role, const std::string &name) {
  plan::Value v;
  v.name = name;
  v.rows = plan::Domain::S;
  v.batch = true;
  v.cols = 1;
  if (role == "ts_index" || role == "tags" || role == "cos" || role == "sin") v.batch = false;
  if (role == "table") v.rows = plan::Domain::T3, v.batch = false;
  if (role == "temb" || role == "sinusoid") v.rows = plan::Domain::T, v.batch = false;
  return v;
}

inline EmitOp op(OpKind kind, const std::string &node, plan::OpAttrs attrs, plan::Order order = {}, int nw = 0, int nb = 0) {
  EmitOp e;
  e.op.kind = kind;
  e.op.nodes = {node};
  e.op.attrs = attrs;
  e.op.order = order;
  e.op.where = node;
  for (int i = 0; i < nw; ++i) e.op.weights.push_back(node + ".w" + std::to_string(i));
  for (int i = 0; i < nb; ++i) e.op.biases.push_back(node + ".b" + std::to_string(i));
  for (const auto &r : plan::inputRoles(kind, attrs)) {
    e.op.in.push_back(node + ":" + r);
    e.vals.in.push_back(operand(r, e.op.in.back()));
  }
  for (const auto &r : plan::outputRoles(kind, attrs)) {
    e.op.out.push_back(node + ":out:" + r);
    e.vals.out.push_back(operand(r, e.op.out.back()));
  }
  return e;
}

// The Hopper linear's kernel families for one fused form, by name: the plan's defaults (per op kind), the register
// epilogue, the epilogue staged by the consumers, the ping-pong kernel (each without the per-op defaults).
inline std::vector<std::pair<std::string, hk::EmitOptions>> sm90LinearFamilies() {
  hk::EmitOptions registers = hk::EmitOptions::planDefaults(), consumers = registers, pingpong = registers;
  registers.perOp.clear();
  registers.sm90EpiSmem = 0;
  consumers.perOp.clear();
  pingpong.perOp.clear();
  pingpong.sm90Pingpong = 1;
  return {{"plan defaults", hk::EmitOptions::planDefaults()},
          {"register epilogue", registers},
          {"consumer-staged", consumers},
          {"ping-pong", pingpong}};
}

inline std::optional<plan::Kernel> emit(const EmitOp &e, const std::string &arch = "sm_90a",
                                        const hk::EmitOptions &options = {}) {
  return hk::emitKernel(e.op, e.vals, arch, options);
}

inline plan::OpAttrs attrs(std::initializer_list<std::pair<const char *, double>> kv) {
  plan::OpAttrs a;
  for (auto [k, v] : kv) {
    std::string key = k;
    int64_t i = int64_t(v);
    if (key == "K") a.K = i;
    else if (key == "N") a.N = i;
    else if (key == "H") a.H = i;
    else if (key == "F") a.F = i;
    else if (key == "cols") a.cols = i;
    else if (key == "heads") a.heads = i;
    else if (key == "head_dim") a.headDim = i;
    else if (key == "rotary_dim") a.rotaryDim = i;
    else if (key == "eps") a.eps = v;
    else if (key == "chunk") a.chunk = i;
    else if (key == "num_chunks") a.numChunks = i;
    else if (key == "shift_chunk") a.shiftChunk = i;
    else if (key == "scale_chunk") a.scaleChunk = i;
    else if (key == "rows_per_timestep") a.rowsPerTimestep = i;
    else if (key == "freq_dim") a.freqDim = i;
    else if (key == "hidden") a.hidden = i;
    else if (key == "out_dim") a.outDim = i;
    else if (key == "video_cols") a.videoCols = i;
    else if (key == "audio_cols") a.audioCols = i;
    else throw std::runtime_error("unknown test attr " + key);
  }
  return a;
}

inline plan::OpAttrs with(plan::OpAttrs a, h3c::DType w, h3c::DType x, h3c::DType out, plan::Epilogue e = plan::Epilogue::None,
                   plan::RowIndex r = plan::RowIndex::Adaln) {
  a.wDtype = w;
  a.xDtype = x;
  a.outDtype = out;
  a.epilogue = e;
  a.rowIndex = r;
  return a;
}

// qkv_linear with the qk_norm_rope epilogue (the Hopper fusion of h3-fuse): x [S, K] -> q, k, v [S, heads * d],
// weights [Wq, Wk, Wv, norm_q, norm_k], inputs [x(, cos, sin)] (R = 0: the refiner's norm-only form).
inline EmitOp qkvNormRope(const std::string &node, int64_t K, int64_t heads, int64_t d, double eps, int64_t R) {
  plan::OpAttrs a = with(attrs({{"K", double(K)}, {"N", double(heads * d)}, {"heads", double(heads)},
                                {"head_dim", double(d)}, {"eps", eps}, {"rotary_dim", double(R)}}),
                         h3c::DType::BF16, h3c::DType::BF16, h3c::DType::BF16, plan::Epilogue::QkNormRope);
  return op(OpKind::QkvLinear, node, a, kchunks(1), 5);
}

// linear_grad_x of a bf16 linear (docs/contract.md section 14) as a `--backward` plan has it: g F32 [S, N] (the
// output's gradient, batched) -> dx F32 [S, K], the weight bf16 [N, K]; k_chunks over N.
// With `gBf16`, g is a grad_round's bf(g) (bf16, h3-fuse-grad): the forms without their rounding phase.
// With `loraK` (h3-fuse-grad: a LoRA down path's dX taken in) the op reads lora_t bf16 [S, loraK] last and the down
// slot [loraK, K] as its second weight.
// swiglu (h3-fuse-grad's swiglu_grad taken in, epilogue swiglu; no residual): 1 dx F32, 2 dx bf16; swiglu_x is
// bf16 [S, 2K] (the op's last input) and dx [S, 2K].
inline EmitOp linearGradX(int64_t N, int64_t K, bool residual = false, bool gBf16 = false, int64_t loraK = 0,
                          int swiglu = 0) {
  plan::OpAttrs a = attrs({{"K", double(K)}, {"N", double(N)}});
  a.wDtype = h3c::DType::BF16;
  if (residual) a.epilogue = plan::Epilogue::Residual;  // h3-fuse-grad: dx = residual + dX, residual F32 [S, K]
  if (swiglu) a.epilogue = plan::Epilogue::Swiglu;
  a.loraK = loraK;
  EmitOp e = op(OpKind::LinearGradX, "transformer_blocks.0.linear_grad_x", a, kchunks(1), loraK > 0 ? 2 : 1);
  e.vals.in[0].cols = N;
  e.vals.in[0].dtype = gBf16 ? h3c::DType::BF16 : h3c::DType::F32;
  if (residual) {
    e.vals.in[1].cols = K;
    e.vals.in[1].dtype = h3c::DType::F32;
  }
  if (loraK > 0) {  // lora_t, after g and the residual
    e.vals.in[residual ? 2 : 1].cols = loraK;
    e.vals.in[residual ? 2 : 1].dtype = h3c::DType::BF16;
  }
  if (swiglu) {
    e.vals.in.back().cols = 2 * K;
    e.vals.in.back().dtype = h3c::DType::BF16;
  }
  e.vals.out[0].cols = swiglu ? 2 * K : K;
  e.vals.out[0].dtype = swiglu == 2 ? h3c::DType::BF16 : h3c::DType::F32;
  return e;
}

// swiglu_grad over x = [v | g] bf16 [S, 2F], dy F32 [S, F]: dx [S, 2F], F32 or (outBf, h3-fuse-grad's rounding) bf16.
inline EmitOp swigluGrad(int64_t F, bool outBf = false) {
  EmitOp e = op(OpKind::SwigluGrad, "transformer_blocks.0.ff.swiglu_grad", attrs({{"F", double(F)}}));
  e.vals.in[0].cols = F;
  e.vals.in[0].dtype = h3c::DType::F32;
  e.vals.in[1].cols = 2 * F;
  e.vals.in[1].dtype = h3c::DType::BF16;
  e.vals.out[0].cols = 2 * F;
  e.vals.out[0].dtype = outBf ? h3c::DType::BF16 : h3c::DType::F32;
  return e;
}

// The op trains its (first) weight: grads names it, and its gradient, an F32 value of `numel` columns and rows "1",
// is the op's next output (after the activation gradients, as a `--backward` plan lists them).
inline void trainWeight(EmitOp &e, int64_t numel) {
  e.op.grads = {e.op.weights.at(0)};
  plan::Value dw;
  dw.name = "grad:" + e.op.weights[0];
  dw.rows = plan::Domain::One;
  dw.batch = false;
  dw.cols = numel;
  dw.dtype = h3c::DType::F32;
  e.op.out.push_back(dw.name);
  e.vals.out.push_back(dw);
}

// A qk_norm's rms_norm_grad over `heads` groups of d channels (a bf16 norm weight), as a `--backward` plan has it:
// dy F32 and x bf16 [S, heads * d]; with R > 0 the rope_grad before it folded in (h3-fuse-grad: cos, sin F32 [S, R]
// follow); frozen weight: dx bf16 (the LoRA plans' rounding), trained: dx F32 and dw F32 [d] (output 1).
inline EmitOp qkNormGrad(int64_t heads, int64_t d, int64_t R, bool trained) {
  plan::OpAttrs a = attrs({{"cols", double(heads * d)}, {"eps", 1e-6}});
  a.rotaryDim = R;
  a.group = d;
  a.wDtype = h3c::DType::BF16;
  plan::Order order;
  order.kind = plan::OrderKind::RowUnits;
  EmitOp e = op(OpKind::RmsNormGrad, "transformer_blocks.0.attn.norm_q", a, order, 1);
  e.vals.in[0].cols = heads * d;
  e.vals.in[0].dtype = h3c::DType::F32;
  e.vals.in[1].cols = heads * d;
  e.vals.in[1].dtype = h3c::DType::BF16;
  for (size_t i = 2; i < e.vals.in.size(); ++i) e.vals.in[i].cols = R, e.vals.in[i].dtype = h3c::DType::F32;
  e.vals.out[0].cols = heads * d;
  e.vals.out[0].dtype = trained ? h3c::DType::F32 : h3c::DType::BF16;
  if (trained) trainWeight(e, d);
  return e;
}

// linear_grad_w of a bf16 linear with its weight trained (and its bias, with `bias`), as a `--backward` plan has it:
// g F32 [S, N] and x bf16 [S, K] (batched) -> dW F32 [N, K] (and dbias F32 [N]), the gradients at output positions 0
// (and 1); row_units. With `gBf16` (no bias then) g is a grad_round's bf(g), bf16.
inline EmitOp linearGradW(int64_t N, int64_t K, bool bias, bool gBf16 = false) {
  plan::OpAttrs a = attrs({{"K", double(K)}, {"N", double(N)}});
  a.wDtype = h3c::DType::BF16;
  plan::Order order;
  order.kind = plan::OrderKind::RowUnits;
  order.unit = 128;
  order.kStep = 16;
  EmitOp e = op(OpKind::LinearGradW, "transformer_blocks.0.linear_grad_w", a, order, 1, bias ? 1 : 0);
  e.op.grads = e.op.weights;
  if (bias) e.op.grads.push_back(e.op.biases[0]);
  e.vals.in[0].cols = N;
  e.vals.in[0].dtype = gBf16 ? h3c::DType::BF16 : h3c::DType::F32;
  e.vals.in[1].cols = K;
  e.vals.in[1].dtype = h3c::DType::BF16;
  for (size_t i = 0; i < e.op.grads.size(); ++i) {
    plan::Value v;
    v.name = "grad:" + e.op.grads[i];
    v.rows = plan::Domain::One;
    v.batch = false;
    v.cols = i == 0 ? N * K : N;
    v.dtype = h3c::DType::F32;
    e.op.out.push_back(v.name);
    e.vals.out.push_back(v);
  }
  return e;
}

// attention_grad (docs/contract.md section 14) as a `--backward` plan has it: q, k, v bf16, o bf16 (or F32), dout and
// the three gradients F32 [S, heads * d], batched; kv_block the forward's.
// attention (flash order, kv_block kv) on q, k, v bf16 [S, heads * d] -> o bf16, with `lse` also the row statistics
// the backward reads (F32 [S, heads], h3-fuse-grad).
inline EmitOp attentionForward(int64_t heads, int64_t d, int64_t kv, bool lse) {
  plan::OpAttrs a = with(attrs({{"heads", double(heads)}, {"head_dim", double(d)}}), h3c::DType::BF16, h3c::DType::BF16,
                         h3c::DType::BF16);
  a.lse = lse ? 1 : 0;
  plan::Order order = flash();
  order.kvBlock = kv;
  EmitOp e = op(OpKind::Attention, "transformer_blocks.0.attn.attention", a, order);
  for (auto &v : e.vals.in) v.cols = heads * d, v.dtype = h3c::DType::BF16;
  e.vals.out[0].cols = heads * d;
  e.vals.out[0].dtype = h3c::DType::BF16;
  if (lse) {
    e.vals.out[1].cols = heads;
    e.vals.out[1].dtype = h3c::DType::F32;
  }
  return e;
}

// With `lse`, the forward's row statistics as input 5 (F32 [S, heads], h3-fuse-grad).
inline EmitOp attentionGrad(int64_t heads, int64_t d, int64_t kvBlock, bool oBf = true, bool lse = false) {
  plan::OpAttrs a = attrs({{"heads", double(heads)}, {"head_dim", double(d)}});
  a.kvBlock = kvBlock;
  a.lse = lse ? 1 : 0;
  plan::Order order;
  order.kind = plan::OrderKind::RowUnits;
  EmitOp e = op(OpKind::AttentionGrad, "transformer_blocks.0.attn.attention_grad", a, order);
  for (size_t i = 0; i < e.vals.in.size(); ++i) {
    e.vals.in[i].cols = i == 5 ? heads : heads * d;
    e.vals.in[i].dtype = i < 3 || (i == 3 && oBf) ? h3c::DType::BF16 : h3c::DType::F32;
  }
  for (plan::Value &v : e.vals.out) v.cols = heads * d, v.dtype = h3c::DType::F32;
  return e;
}

// The Hopper GEMM's schedule variants, each for every linear kind (the options' per-op defaults cleared): the
// cooperative kernel, the 2-CTA cluster (B multicast to a pair of row tiles; an odd row-tile count leaves a phantom
// tile) and the ping-pong schedule (128 x 128 tiles per consumer warpgroup, in turns, with a k-block in flight;
// 5 stages, the default being 4).
// wide192: whether the op's epilogue allows the 192-wide cooperative tile and the 256-row tile (not swiglu, not
// qk_norm_rope).
inline std::vector<std::pair<const char *, hk::EmitOptions>> hopperGemmVariants(bool wide192 = false) {
  hk::EmitOptions coop, pair, pp, w192, w192pair, staged, stagedPair, staged192;
  coop.perOp.clear();
  pair.perOp.clear();
  pp.perOp.clear();
  coop.sm90EpiSmem = 0;  // the register epilogue (the staged one is the default since 2026-12-04)
  pair.sm90EpiSmem = 0;
  pair.sm90Cluster = 2;
  pp.sm90Pingpong = 1;
  pp.sm90Stages = 5;
  pp.sm90Inflight = 1;
  // The epilogue staged through shared memory (gemm_epi_smem=1; qkv's fused qk_norm_rope too: its norm and rope in
  // registers, its stores staged).
  staged.perOp.clear();
  staged.sm90EpiSmem = 1;
  stagedPair = staged;
  stagedPair.sm90Cluster = 2;
  stagedPair.sm90Inflight = 1;
  // Step 3 of the staged epilogue in the producer warpgroup's epilogue warps (gemm_epi_smem=2), 1-CTA and 2-CTA.
  hk::EmitOptions warps = staged, warpsPair = stagedPair;
  warps.sm90EpiSmem = 2;
  warpsPair.sm90EpiSmem = 2;
  // Every variant above runs a last partial wave of at most half the grid as half tiles (gemm_half_tail=1, the
  // default, where the epilogue allows it); this one keeps whole tiles.
  hk::EmitOptions wholeTiles = stagedPair;
  wholeTiles.sm90HalfTail = 0;
  // One staging area that the two consumers take in turns (gemm_epi_smem=3), beside 4 stages of 48 KiB.
  hk::EmitOptions sharedPair = warpsPair;
  sharedPair.sm90EpiSmem = 3;
  sharedPair.sm90Stages = 4;
  std::vector<std::pair<const char *, hk::EmitOptions>> v = {
      {"cooperative", coop},
      {"2-CTA cluster", pair},
      {"ping-pong", pp},
      {"staged epilogue", staged},
      {"staged epilogue 2-CTA cluster (in flight)", stagedPair},
      {"staged epilogue in epilogue warps", warps},
      {"staged epilogue in epilogue warps 2-CTA cluster (in flight)", warpsPair},
      {"staged epilogue 2-CTA cluster (in flight), whole tiles only", wholeTiles},
      {"staged epilogue in epilogue warps, one area in turns, 2-CTA cluster (4 stages, in flight)", sharedPair}};
  // Half a k-block queued before the wait for the previous one (gemm_inflight=2, cuBLAS's order): staged alone (with
  // its half tails) and in 2-CTA clusters, and with the epilogue warps in clusters.
  hk::EmitOptions halfStaged = staged, halfPair = stagedPair, halfWarps = warpsPair;
  halfStaged.sm90Inflight = 2;
  halfPair.sm90Inflight = 2;
  halfWarps.sm90Inflight = 2;
  v.push_back({"staged epilogue (half k-block in flight)", halfStaged});
  v.push_back({"staged epilogue 2-CTA cluster (half k-block in flight)", halfPair});
  v.push_back({"staged epilogue in epilogue warps 2-CTA cluster (half k-block in flight)", halfWarps});
  if (wide192) {
    w192.perOp.clear();
    w192.sm90EpiSmem = 0;
    w192.sm90Bn = 192;
    w192pair = w192;
    w192pair.sm90Cluster = 2;
    w192pair.sm90Stages = 5;
    w192pair.sm90Inflight = 1;
    staged192 = w192;
    staged192.sm90EpiSmem = 1;
    staged192.sm90Stages = 4;
    v.push_back({"192-wide", w192});
    v.push_back({"192-wide 2-CTA cluster (5 stages, in flight)", w192pair});
    v.push_back({"192-wide staged epilogue (4 stages)", staged192});
    hk::EmitOptions warps192 = staged192;
    warps192.sm90EpiSmem = 2;
    warps192.sm90Cluster = 2;
    warps192.sm90Inflight = 1;
    v.push_back({"192-wide staged epilogue in epilogue warps 2-CTA cluster (4 stages, in flight)", warps192});
    // The 256-row tile (gemm_bm=256, gemm_sm90_tall.cuh): 168 wide with 4 stages, a k-block in flight and the
    // register epilogue; staged (3 stages) alone and in 2-CTA clusters sharing x; 192 wide staged in clusters.
    hk::EmitOptions tall;
    tall.perOp.clear();
    tall.sm90Bm = 256;
    tall.sm90Bn = 168;
    tall.sm90Stages = 4;
    tall.sm90Inflight = 1;
    tall.sm90EpiSmem = 0;
    hk::EmitOptions tallStaged = tall;
    tallStaged.sm90Stages = 3;
    tallStaged.sm90EpiSmem = 1;
    hk::EmitOptions tallPair = tallStaged, tall192 = tallStaged;
    tallPair.sm90Cluster = 2;
    tallPair.sm90Inflight = 0;  // the fastest form per kernel for to_out / fc2 (bench/NOTES.md, 2026-12-05)
    tall192.sm90Cluster = 2;
    tall192.sm90Bn = 192;
    tall192.sm90Inflight = 0;
    v.push_back({"256-row 168-wide (4 stages, in flight)", tall});
    v.push_back({"256-row 168-wide staged (3 stages, in flight)", tallStaged});
    v.push_back({"256-row 168-wide staged 2-CTA cluster (3 stages)", tallPair});
    v.push_back({"256-row 192-wide staged 2-CTA cluster (3 stages)", tall192});
    // Half a k-block in flight on the 192-wide tile (4 stages, staged) and the 256-row tile (4 stages, 2-CTA, register
    // epilogue; a staged 3-stage form in clusters).
    hk::EmitOptions half192 = staged192, tallHalf = tall, tallHalfStaged = tallPair;
    half192.sm90Inflight = 2;
    tallHalf.sm90Inflight = 2;
    tallHalf.sm90Cluster = 2;
    tallHalfStaged.sm90Inflight = 2;
    v.push_back({"192-wide staged epilogue (4 stages, half k-block in flight)", half192});
    v.push_back({"256-row 168-wide 2-CTA cluster (4 stages, half k-block in flight)", tallHalf});
    v.push_back({"256-row 168-wide staged 2-CTA cluster (3 stages, half k-block in flight)", tallHalfStaged});
    // The bulk-row epilogue (gemm_epi_bulk=1): 152 wide with 4 stages in 2-CTA clusters (cuBLAS's tile for N =
    // 5,376), 168 wide with 3; every bf16 output whose rows are whole 16-byte chunks.
    hk::EmitOptions bulk152 = tall, bulk168 = tall;
    bulk152.sm90Bn = 152;
    bulk152.sm90Cluster = 2;
    bulk152.sm90Inflight = 0;
    bulk152.sm90EpiBulk = 1;
    bulk168 = bulk152;
    bulk168.sm90Bn = 168;
    bulk168.sm90Stages = 3;
    v.push_back({"256-row 152-wide bulk-row epilogue 2-CTA cluster (4 stages)", bulk152});
    v.push_back({"256-row 168-wide bulk-row epilogue 2-CTA cluster (3 stages)", bulk168});
    // The residual block's L2 prefetch by the consumers (gemm_res_prefetch: residual and gate_residual only; the other
    // epilogues' kernels are those of the variants above): the plan's gate_residual form (staged, 2-CTA, in flight,
    // half tails) over the last 8 k-blocks, the 1-CTA staged form over every k-block of the tile (64 > the tests'
    // k-blocks), and the 256-row tile staged in 2-CTA clusters.
    hk::EmitOptions pfPair = stagedPair, pfWhole = staged, pfTall = tallPair;
    pfPair.sm90ResPrefetch = 8;
    pfWhole.sm90ResPrefetch = 64;
    pfTall.sm90ResPrefetch = 8;
    v.push_back({"residual prefetch 8, staged epilogue 2-CTA cluster (in flight)", pfPair});
    v.push_back({"residual prefetch 64, staged epilogue", pfWhole});
    v.push_back({"residual prefetch 8, 256-row 168-wide staged 2-CTA cluster (3 stages)", pfTall});
  }
  // H3C_GPU_VARIANTS=TEXT keeps the variants whose label contains TEXT (a device call checking one new kernel).
  if (const char *only = std::getenv("H3C_GPU_VARIANTS"))
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto &e) { return std::string(e.first).find(only) == std::string::npos; }),
            v.end());
  return v;
}

} // namespace h3c::testops
