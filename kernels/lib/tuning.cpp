// EmitOptions::set: the command-line names of the kernel tuning fields (one table, so `h3c compile --tune` and the
// error message list the same names).
#include "h3c/kernels/emit.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <string>
#include <vector>

namespace h3c::kernels {

namespace {

struct Field {
  const char *name;
  int EmitOptions::*field;
  int lo, hi;  // the ranges the emitters accept (checked here too: the plan emitter turns an emitter's refusal
               // into a kernel-less op, which a command-line typo must not cause)
};
const Field kFields[] = {{"gemm_stages", &EmitOptions::sm90Stages, 2, 6},  // 2-4 unless gemm_pingpong
                          {"gemm_group_m", &EmitOptions::sm90GroupM, 1, 64},
                          {"gemm_inflight", &EmitOptions::sm90Inflight, 0, 2},  // 2: half a k-block (not ping-pong)
                          {"gemm_cluster", &EmitOptions::sm90Cluster, 1, 2},
                          {"gemm_bn", &EmitOptions::sm90Bn, 64, 256},  // 192 or 256; 128-192 with gemm_bm=256; 64: lora_down
                          {"gemm_bm", &EmitOptions::sm90Bm, 128, 256},  // 128 or 256
                          {"gemm_pingpong", &EmitOptions::sm90Pingpong, 0, 1},
                          {"gemm_epi_smem", &EmitOptions::sm90EpiSmem, 0, 3},
                          {"gemm_half_tail", &EmitOptions::sm90HalfTail, 0, 1},
                          // the 256-row tile's epilogue by bulk copies of 8-row buffers (gemm_bm=256, epi_smem=0)
                          {"gemm_epi_bulk", &EmitOptions::sm90EpiBulk, 0, 1},
                          // the residual block's L2 prefetch over the tile's last k-blocks (0: none)
                          {"gemm_res_prefetch", &EmitOptions::sm90ResPrefetch, 0, 64},
                          // kv_block 128 (the compiler's pin): stages of 64 KiB, 3 at most beside the Q tile
                          {"attn_stages", &EmitOptions::sm90AttnStages, 2, 3},
                          {"attn_overlap", &EmitOptions::sm90AttnOverlap, 0, 1},
                          {"attn_pingpong", &EmitOptions::sm90AttnPingpong, 0, 1},
                          {"attn_persistent", &EmitOptions::sm90AttnPersistent, 0, 1},
                          {"norm_rows", &EmitOptions::normRows, 1, 16},
                          // qk_norm / rope / qk_norm_rope: (row, head) units a warp, loaded together
                          {"head_units", &EmitOptions::headUnits, 1, 8},
                          // ... at head_dim 128: the pairs form (0: the strided one) and its units a warp (even)
                          {"head_pairs", &EmitOptions::headPairs, 0, 1},
                          {"head_pair_units", &EmitOptions::headPairUnits, 2, 32},
                          // the F32 linears' k-tiles k-major, read 16 bytes at a time (0: row-major, 4 bytes)
                          {"f32_vec", &EmitOptions::f32Vec, 0, 1},
                          // the AdaLN table's ring: at most this many stages (0: as many as fit), a multiple of 16
                          // columns per stage (checked below), 1 or 2 CTAs per SM
                          {"adaln_stages", &EmitOptions::sm90AdalnStages, 0, 16},
                          {"adaln_stage_k", &EmitOptions::sm90AdalnStageK, 64, 512},
                          {"adaln_ctas", &EmitOptions::sm90AdalnCtas, 1, 2},
                          // consumer warps a CTA, 8-row weight blocks a warp (2 or 4, checked by the emitter),
                          // stages as TMA boxes of a swizzled tensor map (1) or bulk copies a row (0)
                          {"adaln_warps", &EmitOptions::sm90AdalnWarps, 1, 8},
                          {"adaln_blocks", &EmitOptions::sm90AdalnBlocks, 2, 4},
                          {"adaln_tiles", &EmitOptions::sm90AdalnTiles, 0, 1},
                          // programmatic dependent launch of every kernel (0: plain stream order)
                          {"launch_pdl", &EmitOptions::gridDependency, 0, 1},
                          // the gradient kernels as dependent launches too (with launch_pdl; 0: plain stream order)
                          {"grad_pdl", &EmitOptions::gradPdl, 0, 1},
                          // the backward's linear and attention gradients on the tensor cores (0: grad.cuh's form)
                          {"grad_mma", &EmitOptions::gradMma, 0, 1},
                          // norm_modulate_grad's first phase: a block per row, staged (0: a warp per row)
                          {"grad_nm_block", &EmitOptions::gradNormBlock, 0, 1},
                          // attention_grad's Hopper form: its load ring's stages
                          {"attn_grad_stages", &EmitOptions::sm90AttnGradStages, 2, 3},
                          // attention_grad's Hopper form: dq's counts by a sync warpgroup (0: by the compute ones)
                          {"attn_grad_sync", &EmitOptions::sm90AttnGradSync, 0, 1},
                          // attention_grad's Hopper form: the middle key tiles' dq adds a row a warp instruction (2: two rows)
                          {"attn_grad_rows", &EmitOptions::sm90AttnGradRows, 0, 2},
                          // the Hopper dX of the bf16 linears (grad_linear_sm90.cuh): on/off, ring stages, tile width
                          // (0: by K; 128, 192 or 256, checked by the emitter), a k-block in flight
                          {"grad_x_sm90", &EmitOptions::sm90GradX, 0, 1},
                          {"grad_x_stages", &EmitOptions::sm90GradXStages, 2, 5},
                          {"grad_x_bn", &EmitOptions::sm90GradXBn, 0, 256},
                          {"grad_x_inflight", &EmitOptions::sm90GradXInflight, 0, 1},
                          {"grad_x_cluster", &EmitOptions::sm90GradXCluster, 1, 2},
                          // LoRA's dt (a dX of 64 columns) on the Hopper dX's 64-wide tile (0: mma.sync's 32 x 64)
                          {"grad_x_narrow", &EmitOptions::sm90GradXNarrow, 0, 1},
                          // the Hopper dW of the bf16 linears (grad_linear_w_sm90.cuh): on/off, ring stages
                          {"grad_w_sm90", &EmitOptions::sm90GradW, 0, 1},
                          {"grad_w_stages", &EmitOptions::sm90GradWStages, 2, 6},
                          // ... with N or K at most 64 on 64 x 64 tiles (1: all, 2: where the other dimension is
                          // at most 8,192; 0: the 128 x 128 tile)
                          {"grad_w_narrow", &EmitOptions::sm90GradWNarrow, 0, 2}};

std::string names() {
  std::string n;
  for (const Field &f : kFields) n += n.empty() ? f.name : std::string(", ") + f.name;
  return n;
}

const Field &field(const std::string &name, int value, const std::string &where) {
  for (const Field &f : kFields)
    if (name == f.name) {
      if (value < f.lo || value > f.hi) fail(where, "{} must be in [{}, {}], got {}", name, f.lo, f.hi, value);
      return f;
    }
  fail(where, "unknown tuning name '{}' (known: {})", name, names());
}

// The profile names of the ops with a tunable kernel (the linears, qkv, attention, the norms); a per-op value for any
// other name would silently apply to nothing.
const char *const kTunedOps[] = {"qkv_linear",           "qkv_linear+qk_norm_rope", "linear",
                                 "linear+residual",      "linear+gate_residual",    "linear+swiglu",
                                 "attention",            "rms_norm",                "norm_modulate",
                                 "adaln_table",          "linear_grad_x",           "linear_grad_w",
                                 "attention_grad",       "lora_down"};

// The profile names whose kernel the staged epilogue applies to (every linear with a bf16 output: all of these).
const char *const kStagedOps[] = {"qkv_linear",           "qkv_linear+qk_norm_rope", "linear", "linear+residual",
                                  "linear+gate_residual", "linear+swiglu"};

} // namespace

void EmitOptions::set(const std::string &name, int value, const std::string &where) {
  const size_t colon = name.find(':');
  if (colon == std::string::npos) {
    this->*field(name, value, where).field = value;
    perOp.erase(std::remove_if(perOp.begin(), perOp.end(), [&](const PerOp &p) { return p.name == name; }),
                perOp.end());
    return;
  }
  const std::string op = name.substr(0, colon), f = name.substr(colon + 1);
  field(f, value, where);
  std::string known;
  for (const char *k : kTunedOps) {
    if (op == k) {
      perOp.push_back({op, f, value});
      return;
    }
    known += known.empty() ? k : std::string(", ") + k;
  }
  fail(where, "unknown op '{}' for a per-op tuning value (known: {})", op, known);
}

std::string EmitOptions::set(const std::string &setting, const std::string &where) {
  const size_t eq = setting.find('=');
  int value = 0;
  size_t used = 0;
  try {
    if (eq != std::string::npos) value = std::stoi(setting.substr(eq + 1), &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (eq == std::string::npos || eq + 1 + used != setting.size() || used == 0) fail(where, "expected NAME=INTEGER");
  std::string name = setting.substr(0, eq);
  set(name, value, where);
  return name;
}

std::string EmitOptions::tuningNames() { return names(); }

EmitOptions EmitOptions::planDefaults() {
  EmitOptions o;
  o.perOp = {{"linear+swiglu", "gemm_epi_smem", 2},
             {"linear+swiglu", "gemm_cluster", 2},
             {"linear+swiglu", "gemm_inflight", 1},
             {"linear+gate_residual", "gemm_cluster", 2},
             {"linear+gate_residual", "gemm_inflight", 1},
             // plain qkv (qk_norm_rope apart, the default): 2.78 ms sustained against 3.10 at one CTA (H100,
             // bench/NOTES.md 2026-12-07)
             {"qkv_linear", "gemm_cluster", 2},
             {"qkv_linear", "gemm_inflight", 1},
             {"qkv_linear+qk_norm_rope", "gemm_cluster", 2},
             {"qkv_linear+qk_norm_rope", "gemm_inflight", 1},
             {"attention", "attn_persistent", 1},
             // rank <= 64 on the 64-wide tile with a 6-stage ring (a wider rank: the 256-wide tile, emitGemmSm90)
             {"lora_down", "gemm_bn", 64},
             {"lora_down", "gemm_stages", 6}};
  return o;
}

EmitOptions EmitOptions::forOp(const plan::Op &op) const { return forOp(opProfileName(op)); }

EmitOptions EmitOptions::forOp(const std::string &name) const {
  EmitOptions o = *this;
  for (const PerOp &p : perOp)
    if (p.op == name) o.*field(p.name, p.value, "tuning of " + name).field = p.value;
  return o;
}

void EmitOptions::check(const std::string &where) const {
  for (const char *k : kTunedOps) {
    const EmitOptions o = forOp(std::string(k));
    if (o.sm90Bm != 128 && o.sm90Bm != 256) fail(where, "{}: gemm_bm must be 128 or 256, got {}", k, o.sm90Bm);
    if (o.sm90Bm == 256 && o.sm90Pingpong == 0) {
      // the 256-row tile (gemm_sm90_tall.cuh): its own widths and ring, and not the epilogues it lacks (the emitter
      // would refuse them, leaving the op without a kernel)
      const std::string op(k);
      if (op == "linear+swiglu" || op == "qkv_linear+qk_norm_rope")
        fail(where, "{}: gemm_bm=256 serves the epilogues none, residual and gate_residual; set it per op (e.g. "
                    "--tune linear+gate_residual:gemm_bm=256)", k);
      if (o.sm90Bn % 8 != 0 || o.sm90Bn < 128 || o.sm90Bn > 192)
        fail(where, "{}: gemm_bn={} with gemm_bm=256 must be a multiple of 8 in [128, 192]", k, o.sm90Bn);
      if (o.sm90EpiBulk == 1 && o.sm90EpiSmem != 0)
        fail(where, "{}: gemm_epi_bulk=1 replaces the staged epilogue: set gemm_epi_smem=0 with it", k);
      const int64_t bytes = sm90TallLinearSharedBytes(o.sm90Stages, o.sm90Bn, o.sm90EpiSmem >= 1,
                                                      op == "linear+gate_residual", o.sm90EpiBulk == 1);
      if (o.sm90Stages > 4 || bytes > kMaxCtaSharedBytes)
        fail(where, "{}: gemm_stages={} with gemm_bm=256, gemm_bn={}, gemm_epi_smem={} and gemm_epi_bulk={} needs {} "
                    "bytes of shared memory (at most {})", k, o.sm90Stages, o.sm90Bn, o.sm90EpiSmem, o.sm90EpiBulk,
             bytes, kMaxCtaSharedBytes);
      continue;
    }
    if (o.sm90EpiBulk == 1)
      fail(where, "{}: gemm_epi_bulk=1 is the 256-row tile's epilogue (gemm_bm=256)", k);
    // (lora_down of rank <= 64 also on the 64-wide tile: gemm_sm90.cuh; the emitter refuses it for a wider rank)
    const bool narrow = std::string(k) == "lora_down" && o.sm90Bn == 64;
    if (o.sm90Bn != 192 && o.sm90Bn != 256 && !narrow)
      fail(where, "{}: gemm_bn must be 192 or 256{}, got {}", k, std::string(k) == "lora_down" ? " (or 64)" : "",
           o.sm90Bn);
    if (o.sm90Pingpong == 0 && !narrow && o.sm90Stages > (o.sm90Bn == 192 ? 5 : 4))  // (narrow: gemm_stages' 2-6)
      fail(where, "{}: gemm_stages={} needs gemm_pingpong=1 (the cooperative kernel's stages fit 2-4 at 48 KiB, 2-5 "
                  "at 40 KiB with gemm_bn=192)", k, o.sm90Stages);
    if (o.sm90Pingpong == 1 && o.sm90Inflight == 2)
      fail(where, "{}: gemm_inflight=2 (half a k-block in flight) is the cooperative and 256-row kernels' (the "
                  "ping-pong kernel keeps 0 or 1 k-blocks in flight)", k);
    if (o.sm90Pingpong == 1 && o.sm90Bn != 256)
      fail(where, "{}: gemm_bn={} is a width of the cooperative kernel (the ping-pong kernel's tiles are 128 wide)", k,
           o.sm90Bn);
  }
  for (const char *k : kStagedOps) {
    const EmitOptions o = forOp(std::string(k));
    // the ping-pong kernel and the 256-row tile have no staged epilogue
    if (o.sm90EpiSmem == 0 || o.sm90Pingpong == 1 || o.sm90Bm == 256) continue;
    const int64_t bytes =
        sm90LinearSharedBytes(o.sm90Stages, o.sm90Bn, o.sm90EpiSmem, std::string(k) == "linear+gate_residual");
    if (bytes > kMaxCtaSharedBytes)
      fail(where, "{}: gemm_epi_smem={} with gemm_stages={} and gemm_bn={} needs {} bytes of shared memory (at most "
                  "{}): use gemm_stages={} or fewer, {}:gemm_epi_smem=3 (one staging area in turns: 4 stages fit), or "
                  "{}:gemm_epi_smem=0", k, o.sm90EpiSmem, o.sm90Stages, o.sm90Bn, bytes, kMaxCtaSharedBytes,
           o.sm90Bn == 192 ? 4 : 3, k, k);
  }
  // The Hopper gradient GEMMs' rings (a tile width chosen by K, grad_x_bn=0, is checked at its widest, 256).
  const EmitOptions gx = forOp(std::string("linear_grad_x")), gw = forOp(std::string("linear_grad_w"));
  if (gx.sm90GradXBn != 0 && gx.sm90GradXBn != 128 && gx.sm90GradXBn != 192 && gx.sm90GradXBn != 256)
    fail(where, "linear_grad_x: grad_x_bn must be 0 (by K), 128, 192 or 256, got {}", gx.sm90GradXBn);
  const int64_t gxBytes = sm90GradXSharedBytes(gx.sm90GradXStages, gx.sm90GradXBn == 0 ? 256 : gx.sm90GradXBn);
  if (gxBytes > kMaxCtaSharedBytes)
    fail(where, "linear_grad_x: grad_x_stages={} of the {}-wide tile need {} bytes of shared memory (at most {})",
         gx.sm90GradXStages, gx.sm90GradXBn == 0 ? 256 : gx.sm90GradXBn, gxBytes, kMaxCtaSharedBytes);
  if (sm90GradWSharedBytes(gw.sm90GradWStages) > kMaxCtaSharedBytes)
    fail(where, "linear_grad_w: grad_w_stages={} need {} bytes of shared memory (at most {})", gw.sm90GradWStages,
         sm90GradWSharedBytes(gw.sm90GradWStages), kMaxCtaSharedBytes);
  const EmitOptions a = forOp(std::string("adaln_table"));
  if (a.sm90AdalnStageK % 16 != 0)
    fail(where, "adaln_table: adaln_stage_k={} is not a multiple of 16 (a stage holds whole k chunks)",
         a.sm90AdalnStageK);
  if (headPairUnits % 2 != 0) fail(where, "head_pair_units={} is not even (two units a pass)", headPairUnits);
  if (a.sm90AdalnBlocks % 2 != 0)
    fail(where, "adaln_table: adaln_blocks={} is not even (a warp's ldmatrix.x4 reads two 8-row blocks)",
         a.sm90AdalnBlocks);
  if (a.sm90AdalnTiles && 8 * a.sm90AdalnBlocks * a.sm90AdalnWarps > 256)
    fail(where, "adaln_table: adaln_tiles=1 with adaln_warps={} x adaln_blocks={} makes tiles of {} rows; a TMA box "
                "holds at most 256", a.sm90AdalnWarps, a.sm90AdalnBlocks, 8 * a.sm90AdalnBlocks * a.sm90AdalnWarps);
}

std::string opProfileName(const plan::Op &op) {
  std::string key = plan::opKindName(op.kind);
  if ((op.kind == plan::OpKind::Linear || op.kind == plan::OpKind::QkvLinear) &&
      op.attrs.epilogue != plan::Epilogue::None)
    key += std::string("+") + plan::epilogueName(op.attrs.epilogue);
  return key;
}

} // namespace h3c::kernels
