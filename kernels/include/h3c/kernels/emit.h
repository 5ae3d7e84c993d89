// CUDA C++ kernel emission for one plan op (docs/contract.md sections 3-6). Pure C++, no MLIR, used by the compiler
// only: `h3c compile` (through the MLIR translation and the plan emitter) asks it for the kernel of every op and
// writes the result into the plan. The runtime never links it: it JIT-compiles the plan's text.
#pragma once

#include "h3c/plan/plan.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace h3c::kernels {

// The values an op reads and writes, at the op's operand positions (plan::inputRoles / outputRoles): the emitter
// needs their row domains (launch grids, row-count arguments), dtypes and widths.
struct OperandValues {
  std::vector<plan::Value> in, out;
};

// Choices that change how an op is computed but never its bits (the contract fixes those).
struct EmitOptions {
  // sm_90a: the bf16 linears with one k_chunks unit and a bf16 input run on the Hopper kernel (TMA + wgmma,
  // gemm_sm90.cuh; the AdaLN table on adaln_sm90.cuh, below); false keeps the mma.sync kernel (gemm_bf16.cuh), which
  // gives the same bits (the GPU checks compare the two byte for byte).
  bool wgmma = true;
  // Tuning of the Hopper linear (none changes a bit: the chain per output is fixed): shared-memory stages (2-4),
  // row tiles per L2 group of the persistent walk, k-blocks kept in flight by each consumer (0 or 1; 2: half of one,
  // queued before the wait for the previous k-block, as cuBLAS's main loop does: the cooperative and 256-row kernels;
  // measured slower, so opt-in: to_out's 128 x 256 tile 1.51 M cycles against 1.32 M at 0, the 256-row tile no
  // faster, the forward 717-722 ms against 684-695, H100, bench/NOTES.md 2026-12-07 16:32).
  int sm90Stages = 3, sm90GroupM = 8, sm90Inflight = 0;  // qkv's best in the forward (bench/NOTES.md, 2026-12-04)
  // CTAs per cluster along the rows (1, or 2: a pair shares its B tile through TMA multicast).
  int sm90Cluster = 1;
  // Width of the cooperative kernel's tile: 256, or 192 (epilogues none, residual, gate_residual only), which fills
  // whole waves of 132 SMs at N = 5,376 (gemm_sm90.cuh); 192-wide stages are 40 KiB, so 2-5 of them. With
  // gemm_bm=256 the width of the 256-row tile: a multiple of 8 in [128, 192].
  int sm90Bn = 256;
  // Rows of the cooperative kernel's tile: 128 (gemm_sm90.cuh), or 256 (gemm_sm90_tall.cuh: two 64-row accumulator
  // sets per consumer warpgroup, 2-4 stages of 32 KiB + gemm_bn x 128 bytes; epilogues none, residual and
  // gate_residual; gemm_cluster=2 pairs column tiles sharing x; gemm_epi_smem 1 or 2 stages the epilogue one 64-row
  // block at a time, 3 stages beside it (no epilogue warps); gemm_half_tail does not apply).
  int sm90Bm = 128;
  // The 256-row tile's epilogue as 8-row buffers per consumer warp stored by bulk copies (1; gemm_sm90_tall.cuh
  // GT_EPI_BULK), instead of 4-byte register stores (0) or the staged walk (gemm_epi_smem). Byte-equal and measured
  // slower than the default (bench/NOTES.md, 2026-12-07): opt-in.
  int sm90EpiBulk = 0;
  // The cooperative and 256-row kernels' epilogues residual and gate_residual: gemm_res_prefetch k-blocks before a
  // tile's end (0: never) each consumer thread prefetches one of its rows' residual into L2 (cp.async.bulk.prefetch.L2,
  // gemm_epilogue.cuh's gm_prefetch_residual_row), so that the epilogue's residual loads, which every SM issues at
  // about the same time, hit L2 instead of HBM. Timing only: no value changes. Measured (H100, bench/NOTES.md
  // 2026-12-07 22:01): no gain on the plan's 128 x 256 form; 1-3 % on the 256 x 168 staged pair, within the noise.
  int sm90ResPrefetch = 0;
  // 1: the ping-pong schedule (gemm_sm90_pingpong.cuh: 128 x 128 tiles, one per consumer warpgroup in turns, so one
  // epilogue overlaps the other's main loop); stages may then be 2-6. gemm_cluster and gemm_epi_smem are the
  // cooperative kernel's: the ping-pong kernel ignores them.
  int sm90Pingpong = 0;
  // 1: the cooperative kernel stages each consumer's 64 x G9_BN block through shared memory (gemm_epilogue_smem.cuh:
  // bf16 bf(sum + bias) by stmatrix, then coalesced 16-byte loads of residual and gate and 16-byte stores of y; the
  // same bits) instead of finishing it in registers with 4-byte accesses. Every epilogue with bf16 outputs (qkv's
  // qk_norm_rope too: its norm and rope stay in registers, only the stores are staged; F32 outputs keep the register
  // epilogue); the staging areas take 48 KiB (gemm_bn=192) or 64 KiB, so 3 stages at most (4 at gemm_bn=192). The
  // ping-pong kernel has no staged form and ignores it. Default since 2026-12-04: the full forward 699-701 ms against
  // 713.5 (bench/NOTES.md, session of 14:36). 2: staged, and step 3 (residual / gate loads, swiglu, the coalesced
  // stores; qkv's qk_norm_rope: the copy of the outputs the consumers finished) runs in the producer warpgroup's three
  // other warps (gemm_sm90.cuh, G9_EPI_WARPS) while the consumers go on to the next tile's main loop: the tensor cores
  // idle only for the rounding into the staging area. 3: as 2 with one staging area that the two consumers take in
  // turns (gemm_sm90.cuh, G9_EPI_SHARED), so that 4 ring stages of 48 KiB fit beside it (gemm_stages=4): ncu counted a
  // third of to_out's consumer samples waiting for the ring's data at 3 stages with a k-block in flight
  // (bench/NOTES.md, 2026-12-07 10:46). Measured slower than 1 and 2 on every linear (the turns cost more than the
  // fourth stage gains, bench/NOTES.md 2026-12-07 13:24): a tuning axis, no plan default. The 256-row tile takes 2 and
  // 3 as 1.
  int sm90EpiSmem = 1;
  // 1: the cooperative kernel's staged 256-wide tiles of the epilogues none, residual and gate_residual run a last
  // partial wave that fills at most half the grid as 128-wide halves (gemm_sm90.cuh, G9_HALF_TAIL), and a walk of
  // fewer tiles than the grid as halves on twice the CTAs: to_out / fc2 with epilogue warps 6-7 % faster at M = 925
  // (0.161 / 0.291 ms against 0.173 / 0.310), but within noise at M = 8,349 (to_out 1.440 M cycles against 1.4445 M
  // under ncu; likely because a half tile's k-block, 512 tensor cycles, is too short for 3 stages to cover the ring's
  // refill latency; bench/NOTES.md, 2026-12-04, session of 20:05).
  int sm90HalfTail = 1;
  // sm_90a with wgmma: attention with head_dim 128 runs on the Hopper kernel (attention_sm90.cuh; same bits as the
  // mma.sync kernel). Tuning (no bit changes): K/V ring stages (2-5), and whether S of the next key block is issued
  // with P V of the previous one, before its softmax (1, FA3's order) or after its P V (0), and whether the two
  // consumer warpgroups take turns issuing (FA3's ping-pong; with overlap only), and whether a persistent grid of at
  // most one CTA per SM walks the (query tile, head, item) tiles (1) or each CTA runs one tile (0); planDefaults()
  // sets 1 for the attention ops (measured faster in the forward), a bare EmitOptions keeps 0.
  int sm90AttnStages = 3, sm90AttnOverlap = 1, sm90AttnPingpong = 1, sm90AttnPersistent = 0;
  // rms_norm / norm_modulate: rows per CTA (one warp each, 1-16; norm.cuh); the SM holds 16 rows either way.
  int normRows = 8;
  // qk_norm, rope, qk_norm_rope (headops.cuh): the (row, head) units a warp takes, their loads issued together (1-8).
  // Timing only: the training plan's qk_norm_rope at 8,349 rows x 56 heads on an H100 0.40 ms with 1, 0.35 with 2,
  // 0.31 with 4 and 8 (bench/NOTES.md 2026-12-06, session of 16:01).
  int headUnits = 4;
  // ... at head_dim 128 (rotary width a multiple of 4): the pairs form (headops.cuh, HO_PAIRS: bf16 pairs a lane, one
  // inverse RMS a lane for the warp's units) with headPairUnits units a warp (even, 2-32); headPairs = 0 keeps the
  // strided form above. Timing only.
  int headPairs = 1, headPairUnits = 16;
  // The F32 linears (linear_f32.cuh): 1 stages the k-tiles k-major and swizzled, read as 16-byte loads (FL_VEC);
  // 0 the k-tiles row-major, read a value at a time. The same fma chains. Timing only.
  int f32Vec = 0;
  // sm_90a with wgmma: the AdaLN table runs on the streaming kernel (adaln_sm90.cuh: bulk copies of the weight into a
  // shared-memory ring, mma.sync with the mma.sync kernel's operand roles; the same bits). Tuning (no bit changes):
  // the most ring stages (0: as many as fit, up to 16; always clamped to what fits), the K columns each stage holds (a
  // multiple of 16; at most K) and the CTAs per SM (1 or 2). A shape or tuning where two stages do not fit, or a K
  // that is not a multiple of 16, keeps the mma.sync kernel.
  // Two CTAs per SM: 0.170 ms at the full shape against 0.300 ms with one (bench/NOTES.md, 2026-12-04).
  int sm90AdalnStages = 0, sm90AdalnStageK = 256, sm90AdalnCtas = 2;
  // The streaming kernel's shape: consumer warps a CTA (1-8) and 8-row weight blocks each (2 or 4); a tile is 8 x
  // blocks x warps weight rows. sm90AdalnTiles = 1 (the default): each stage is one TMA box of a swizzled tensor map
  // of W (tile rows x 64 columns, the stage width fixed at 64, adaln_stage_k unused; at most 256 tile rows) instead of
  // one bulk copy per weight row (0). Measured on an H100 (bench/NOTES.md, 2026-12-07 09:00): 0.176 ms (2,950 GB/s)
  // at 4 x 2, two CTAs per SM, against 0.184 for the bulk default, and 0.177-0.184 at every other shape swept, where
  // the bulk form needs two CTAs per SM (one: 0.285).
  int sm90AdalnWarps = 4, sm90AdalnBlocks = 2, sm90AdalnTiles = 1;
  // 1: every kernel is launched as a programmatic dependent of the one before it (plan::Launch::gridDependency; the
  // kernels wait for their producers first thing, common.cuh), so a kernel's launch and first CTAs overlap the tail of
  // the previous one; 0: plain stream order. Timing only.
  int gridDependency = 1;
  // The backward's gradient kernels as programmatic dependents too (with gridDependency). 0 (default): plain stream
  // order for them. Measured on the 33B LoRA step (H100, bench/NOTES.md 2026-12-06): its gradient ops took 2,242.5 ms
  // without dependent launches against 2,327.2 with them (the Hopper dX's persistent GEMM behind its rounding phase
  // lost 0.1-0.5 ms an op), while the forward's ops gain 1-5 ms from them. Timing only.
  int gradPdl = 0;
  // The backward (docs/contract.md section 14): 1 runs linear_grad_x / linear_grad_w of bf16 weights and inputs and
  // attention_grad on the tensor cores (grad_linear_mma.cuh, grad_attention_mma.cuh: a chunk's 16 products summed by
  // the tensor core, the GPU's bits of the contract); 0 keeps grad.cuh's one-thread form, which computes the CPU
  // reference's model of the chunk sums (its bits: the GPU checks compare it with the CPU byte for byte, and the
  // tensor-core forms with it within a bound).
  int gradMma = 1;
  // sm_90a with wgmma: a bf16 linear's dX (linear_grad_x) of more than 64 output columns on the Hopper GEMM
  // (grad_linear_sm90.cuh: TMA, wgmma, persistent; the mma.sync form's bits, Kernels.LinearGradX compares them byte
  // for byte); 0 keeps the mma.sync form. Tuning (timing only): the ring's stages (2-5, refused where they do not fit),
  // the tile width (0: chosen by K; 128, 192 or 256), one k-block kept in flight per consumer (0 or 1) and CTAs per
  // cluster (1, or 2: pairs of row tiles sharing W's boxes through TMA multicast).
  // norm_modulate_grad's first phase (grad.cuh): 1 a block per row with the row staged in shared memory, 0 a warp per
  // row reading it from global memory in three passes. Timing only (the same bits).
  int gradNormBlock = 1;
  // sm_90a: attention_grad's Hopper form (grad_attention_sm90.cuh): its load ring's stages (2 or 3: a step's rows
  // land during the step before, or two before). Timing only.
  int sm90AttnGradStages = 2;
  // sm_90a: attention_grad's Hopper form with a sync warpgroup for dq's ordered adds (1: 12.8 ms at S = 8,349 x 56
  // heads on an H100, bench/NOTES.md 2026-12-06) or the compute warpgroups counting themselves (0: 14.7). Timing only.
  int sm90AttnGradSync = 1;
  // sm_90a: attention_grad's Hopper form with the middle key tiles' red.global.add of dq issued from a shared-memory
  // copy of the part, two 256-byte rows a warp instruction (2: red.global.add.v4.f32), a row an instruction (1:
  // .v2), or from the accumulator layout, eight rows' 32-byte pieces an instruction (0). Timing only (the same adds in
  // the same order, byte-equal to the mma.sync form on the GPU): at S = 8,349 x 56 heads on an H100 12.088 / 12.240 /
  // 12.859 ms (bench/NOTES.md 2026-12-06 20:35).
  int sm90AttnGradRows = 2;
  int sm90GradX = 1, sm90GradXStages = 4, sm90GradXBn = 0, sm90GradXInflight = 1, sm90GradXCluster = 1;
  // sm_90a: a dX of exactly 64 output columns (LoRA's dt = bf(g) up, the chain over all N) on the Hopper dX's 64-wide
  // tile with a 6-stage ring (grad_linear_sm90.cuh GX_BN 64; 0: the mma.sync form's 32 x 64 tiles); the same chains.
  // Timing only: at S = 8,349 on an H100 0.173 / 0.052 ms at N = 28,672 / 7,168 against mma.sync's 0.309 / 0.088
  // and cuBLASLt's 0.180 / 0.055 (bench/NOTES.md 2026-12-06 18:18).
  int sm90GradXNarrow = 1;
  // sm_90a with wgmma: a bf16 linear's dW (linear_grad_w with the weight trained) on the Hopper GEMM
  // (grad_linear_w_sm90.cuh: TMA, wgmma, persistent, 128 x 128 tiles; the mma.sync form's bits, Kernels.LinearGradW
  // compares them byte for byte); 0 keeps the mma.sync form. Its ring's stages (2-6; timing only).
  int sm90GradW = 1, sm90GradWStages = 5;
  // sm_90a: the Hopper dW of a weight with N or K at most 64 (LoRA's dA = dt^T x and dB = g^T t) on 64 x 64 tiles
  // whose two consumer warpgroups take the units in turn (grad_linear_w_sm90.cuh GW_NARROW): 1 for every such
  // weight, 2 where its other dimension is at most 8,192 (gradWNarrow), 0 never (the 128 x 128 tile). The same chains
  // and folds (timing only; byte-equal to the mma.sync form on the GPU). At S = 8,349 on an H200 (bench/NOTES.md
  // 2026-12-06 23:20), 64 x 64 / 128 x 128 / cuBLASLt: 0.038 / 0.065 / 0.035 ms at 5,376, 0.039 / 0.065 / 0.039 at
  // 7,168, but 0.073 / 0.070 / 0.067 at 14,336 and 0.143 / 0.140 / 0.124 at 28,672 (there the wide tile's 128 output
  // columns of the long dimension share each load of the short operand).
  int sm90GradWNarrow = 2;

  // Values for the ops of one profile name only (the op kind, and "+epilogue" for a linear or qkv_linear with one:
  // qkv_linear, qkv_linear+qk_norm_rope, linear+swiglu, linear+gate_residual, ...; the names `h3c run` profiles under), applied over the fields above by
  // forOp. In planDefaults() the gate_residual linears (to_out, fc2) and qkv with its qk_norm_rope epilogue run 2-CTA
  // clusters with one k-block in flight (with the staged epilogue the fastest of the variants measured; gate_residual
  // also the least energy per launch; the 256-row tile, `--tune linear+gate_residual:gemm_bm=256 --tune
  // linear+gate_residual:gemm_bn=168 --tune linear+gate_residual:gemm_stages=3 --tune
  // linear+gate_residual:gemm_inflight=0`, is 0.73-0.97x their time per kernel at M = 70 to 8,349 but measured 1-3 %
  // slower in the whole forward on one H100 machine: not the default until measured again, bench/NOTES.md 2026-12-05,
  // session of 08:51), and attention runs persistent (the full forward 5 ms faster; bench/NOTES.md,
  // 2026-12-04, session of 14:36); the swiglu linears (fc1) walk their staged epilogue in the epilogue warps
  // (gemm_epi_smem=2) in 2-CTA clusters with a k-block in flight (the full forward 688.7-691.4 ms against 701-706,
  // session of 17:42). On the H200 the full forward is power-capped: ping-pong for the swiglu / gate_residual linears
  // saved 8-13 ms per kind but lowered the SM clock so every other op slowed by as much. E.g.
  // `--tune linear+swiglu:gemm_pingpong=1 --tune linear+swiglu:gemm_stages=4`.
  struct PerOp {
    std::string op, name;
    int value;
  };
  std::vector<PerOp> perOp;
  // What `h3c compile` starts from (CompileOptions::tuning): these fields with the measured per-op defaults (above).
  // A bare EmitOptions has none, so a kernel test's variant applies to every op as written.
  static EmitOptions planDefaults();

  // Sets one tuning field by its command-line name (`h3c compile --tune NAME=VALUE`, one of tuningNames()), for every
  // op, or, as `OP:NAME`, for the ops of one profile name (see perOp). Setting a field for every op drops the per-op values of that field set before (the defaults too): the
  // last word wins. Throws h3c::Error naming `where` for an unknown name or a value out of the field's range.
  void set(const std::string &name, int value, const std::string &where);
  // The same from the command line's text `[OP:]NAME=INTEGER` (`h3c compile --tune`, `h3c_kernel_bench --variant`);
  // returns NAME as written (with its OP: prefix). Throws h3c::Error naming `where` for any other form.
  std::string set(const std::string &setting, const std::string &where);
  // The names set() takes, comma-separated in table order (the --tune help and the unknown-name error list them).
  static std::string tuningNames();
  // These options with the per-op values for `op` (or for the ops of one profile name) applied.
  EmitOptions forOp(const plan::Op &op) const;
  EmitOptions forOp(const std::string &profileName) const;
  // Throws h3c::Error naming `where` when the values some tuned op would get do not form a kernel (more than 4 stages
  // without ping-pong, a 192-wide ping-pong tile, stages and staging areas beyond the shared memory): `h3c compile`
  // checks before it emits, since an emitter's refusal would leave the op without a kernel.
  void check(const std::string &where) const;
};

// The most dynamic shared memory one CTA may use on sm_90a (227 KiB).
constexpr int64_t kMaxCtaSharedBytes = 232448;
// Dynamic shared memory of the cooperative Hopper linear (gemm_sm90.cuh): `stages` ring stages of (128 + bn) x 64
// bf16, the alignment slack and the ring's mbarriers; with the staged epilogue (gemm_epi_smem=1 or 2) the two
// consumers' staging areas (64 x bn bf16 each), with 2 their full / empty mbarriers, and for gate_residual the walking
// warps' table rows (8 warps x 32).
int64_t sm90LinearSharedBytes(int stages, int bn, int epiSmem, bool gateResidual);
// The same for the 256-row tile (gemm_sm90_tall.cuh): `stages` of (256 + bn) x 64 bf16, alignment and mbarriers;
// staged, the two 64-row staging areas (whole 64-column boxes) and gate_residual's table rows.
int64_t sm90TallLinearSharedBytes(int stages, int bn, bool staged, bool gateResidual, bool bulk = false);
// Dynamic shared memory of the Hopper dX (grad_linear_sm90.cuh): the alignment slack, `stages` ring stages of
// 128 x 64 bf16 of bf(g) and 64 x bn of W, the ring's mbarriers; and of the Hopper dW (grad_linear_w_sm90.cuh), whose
// stages hold 128 x 64 of each operand (narrow: twice the stages of 64 x 64, and the consumers' hand-over buffer).
int64_t sm90GradXSharedBytes(int stages, int bn);
int64_t sm90GradWSharedBytes(int stages, bool narrow = false);
// Whether the Hopper dW of an N x K weight takes the 64 x 64 tiles under these options (sm90GradWNarrow).
bool sm90GradWNarrowTiles(const EmitOptions &o, int64_t N, int64_t K);

// The name an op is tuned and profiled under: its kind, and "+epilogue" for a linear with a fused epilogue.
std::string opProfileName(const plan::Op &op);

// The kernel for a plan op: its complete NVRTC-compilable source (no includes), entry, NVRTC options, launch ABI and
// typed parameter list (plan::Kernel without `file`, which the plan writer assigns), or nullopt for ops the host
// computes (rope_table, timestep_sinusoid) and the layout ops the runtime performs (all_gather, split). `arch` is "sm_90a" or "sm_100a". Throws h3c::Error naming the op when no
// qualified fixed-order kernel exists for it (unsupported attrs, order or shapes).
std::optional<plan::Kernel> emitKernel(const plan::Op &op, const OperandValues &operands, const std::string &arch,
                                       const EmitOptions &options = {});

// The NVRTC options every h3c kernel is compiled with for `arch` (--fmad=false: the contract names every fma).
std::vector<std::string> nvrtcOptions(const std::string &arch);

} // namespace h3c::kernels
