// Kernel emission and NVRTC compilation (no GPU needed): every kernel kind of the H3 forward, at the shapes of the
// full and tiny configs, is emitted and compiled for sm_90a and sm_100a; the JIT cache hits, detects a corrupt entry
// and rebuilds it; compile errors name the kernel; the emitter rejects ops it cannot run in the contract's order.
#include "emit_ops.h"
#include "tool.h"
#include "h3c/kernels/emit.h"
#include "h3c/models/config.h"
#include "h3c/plan/io.h"
#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#ifdef H3C_HAVE_CUDA
#include "h3c/runtime/cuda/native_ops.h"
#include "h3c/runtime/cuda/noise.h"
#include "h3c/runtime/cuda/non_finite.h"
#include "h3c/runtime/cuda/value_hash.h"
#include "h3c/runtime/cuda/nvrtc_jit.h"
#endif

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

using nlohmann::json;
namespace hk = h3c::kernels;
namespace plan = h3c::plan;
using plan::OpKind;
using h3c::DType;
using namespace h3c::testops;

namespace {

// One op of every kernel kind the H3 forward runs (fused and unfused forms), at the shapes of config `c`.
std::vector<EmitOp> h3Ops(const h3c::h3::Config &c) {
  using plan::Epilogue;
  const DType F32 = DType::F32, BF = DType::BF16;
  const long long H = c.hidden_size, I = c.innerDim(), F = c.ffn_dim, E = c.time_embed_dim;
  const double heads = c.num_attention_heads, d = c.attention_head_dim;
  std::vector<EmitOp> v;
  v.push_back(op(OpKind::Linear, "proj_in", with(attrs({{"K", c.videoPatchDim()}, {"N", H}}), F32, F32, F32),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::Linear, "audio_proj_in",
                 with(attrs({{"K", c.audio_in_channels}, {"N", H}}), F32, F32, F32), kchunks(1), 1, 1));
  v.push_back(op(OpKind::Linear, "context_embedder", with(attrs({{"K", c.text_dim}, {"N", H}}), BF, F32, BF),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::RmsNorm, "token_refiner.refiner_blocks.0.norm1",
                 with(attrs({{"H", H}, {"eps", c.norm_eps}}), BF, BF, BF), laneTree(), 1));
  v.push_back(op(OpKind::QkvLinear, "refiner.qkv", with(attrs({{"K", H}, {"N", I}}), BF, BF, BF), kchunks(1), 3));
  v.push_back(op(OpKind::QkNormRope, "refiner.qk_norm",
                 with(attrs({{"heads", heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}, {"rotary_dim", 0}}), BF, BF,
                      BF),
                 laneTree(), 2));
  v.push_back(op(OpKind::Attention, "refiner.attention", with(attrs({{"heads", heads}, {"head_dim", d}}), BF, BF, BF),
                 flash()));
  v.push_back(op(OpKind::Linear, "refiner.to_out", with(attrs({{"K", I}, {"N", H}}), BF, BF, BF, Epilogue::Residual),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::Linear, "refiner.fc1", with(attrs({{"K", H}, {"N", 2 * F}}), BF, BF, BF, Epilogue::Swiglu),
                 kchunks(1), 1));
  v.push_back(op(OpKind::Linear, "refiner.fc2", with(attrs({{"K", F}, {"N", H}}), BF, BF, BF, Epilogue::Residual),
                 kchunks(1), 1));
  v.push_back(op(OpKind::Pack, "pack", with(attrs({{"H", H}}), BF, BF, BF)));
  v.push_back(op(OpKind::TimeEmbed, "time_embed",
                 with(attrs({{"K", c.freq_dim}, {"N", E}, {"freq_dim", c.freq_dim}, {"hidden", c.time_embed_hidden_dim},
                             {"out_dim", E}}),
                      F32, F32, F32),
                 kchunks(1), 2, 2));
  v.push_back(op(OpKind::AdalnTable, "transformer_blocks.0.adaln_proj",
                 with(attrs({{"K", E}, {"N", 18 * H}, {"num_chunks", 6}, {"rows_per_timestep", 3}}), BF, F32, BF),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::NormModulate, "transformer_blocks.0.norm1",
                 with(attrs({{"H", H}, {"eps", c.norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6}}),
                      BF, BF, BF),
                 laneTree(), 1));
  v.push_back(op(OpKind::QkNormRope, "transformer_blocks.0.attn.qk",
                 with(attrs({{"heads", heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}, {"rotary_dim", c.rotaryDim()}}),
                      BF, BF, BF),
                 laneTree(), 2));
  v.push_back(op(OpKind::Linear, "transformer_blocks.0.attn.to_out.0",
                 with(attrs({{"K", I}, {"N", H}, {"chunk", 2}, {"num_chunks", 6}}), BF, BF, BF, Epilogue::GateResidual),
                 kchunks(1), 1));
  v.push_back(op(OpKind::Linear, "transformer_blocks.0.ff.net.2",
                 with(attrs({{"K", F}, {"N", H}, {"chunk", 5}, {"num_chunks", 6}}), BF, BF, BF, Epilogue::GateResidual),
                 kchunks(1), 1));
  v.push_back(op(OpKind::AdalnTable, "norm_out.linear",
                 with(attrs({{"K", E}, {"N", 2 * H}, {"num_chunks", 2}, {"rows_per_timestep", 1}}), BF, F32, BF),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::NormModulate, "norm_out.norm",
                 with(attrs({{"H", H}, {"eps", c.final_norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1},
                             {"num_chunks", 2}}),
                      BF, BF, F32, Epilogue::None, plan::RowIndex::Timestep),
                 laneTree(), 1));
  v.push_back(op(OpKind::Linear, "proj_out", with(attrs({{"K", H}, {"N", c.videoPatchDim()}}), F32, F32, F32),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::Linear, "audio_proj_out", with(attrs({{"K", H}, {"N", c.audio_in_channels}}), F32, F32, F32),
                 kchunks(1), 1, 1));
  v.push_back(op(OpKind::Unpack, "unpack",
                 with(attrs({{"video_cols", c.videoPatchDim()}, {"audio_cols", c.audio_in_channels}}), F32, F32, F32)));
  // Unfused forms (plans compiled without h3-fuse).
  v.push_back(op(OpKind::Linear, "to_q", with(attrs({{"K", H}, {"N", I}}), BF, BF, BF), kchunks(1), 1));
  v.push_back(op(OpKind::QkNorm, "norm_q", with(attrs({{"heads", heads}, {"head_dim", d}, {"eps", c.qk_norm_eps}}), BF,
                                                BF, BF),
                 laneTree(), 1));
  v.push_back(op(OpKind::Rope, "rope_q",
                 with(attrs({{"heads", heads}, {"head_dim", d}, {"rotary_dim", c.rotaryDim()}}), BF, BF, BF)));
  v.push_back(op(OpKind::Swiglu, "ff.swiglu", with(attrs({{"F", F}, {"cols", F}}), BF, BF, BF)));
  plan::OpAttrs silu = with(attrs({{"cols", c.time_embed_hidden_dim}}), F32, F32, F32);
  silu.dtype = F32;
  v.push_back(op(OpKind::Silu, "time_embedder.act", silu));
  v.push_back(op(OpKind::Residual, "residual_ff", with(attrs({{"cols", H}}), BF, BF, BF)));
  v.push_back(op(OpKind::GateResidual, "gate_residual_ff",
                 with(attrs({{"H", H}, {"chunk", 5}, {"num_chunks", 6}}), BF, BF, BF)));
  v.push_back(op(OpKind::Linear, "time_embedder.linear_1",
                 with(attrs({{"K", c.freq_dim}, {"N", c.time_embed_hidden_dim}}), F32, F32, F32), kchunks(1), 1, 1));
  return v;
}

// The Hopper linears' ops among h3Ops(c): linear and qkv_linear with bf16 weights and inputs.
std::vector<EmitOp> bf16Linears(const h3c::h3::Config &c) {
  std::vector<EmitOp> v;
  for (const EmitOp &o : h3Ops(c))
    if ((o.op.kind == OpKind::Linear || o.op.kind == OpKind::QkvLinear) && o.op.attrs.wDtype == DType::BF16 &&
        o.op.attrs.xDtype == DType::BF16)
      v.push_back(o);
  return v;
}

// The options of the GPU test's Hopper variant whose label contains `text` (hopperGemmVariants, test/common/emit_ops.h),
// so that a compile check here covers the very form the GPU compares byte for byte.
hk::EmitOptions gpuVariant(const std::string &text) {
  for (const auto &[label, opts] : hopperGemmVariants(true))
    if (std::string(label).find(text) != std::string::npos) return opts;
  ADD_FAILURE() << "no Hopper variant labelled '" << text << "'";
  return {};
}

// Expects the emitter to refuse `o` under `options` for `arch`, its error naming `why`.
void expectEmitRefused(const EmitOp &o, const hk::EmitOptions &options, const std::string &why,
                       const char *arch = "sm_90a") {
  try {
    emit(o, arch, options);
    ADD_FAILURE() << o.op.where << " (" << arch << "): not refused, expected '" << why << "'";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << o.op.where << ": " << e.what();
  }
}

// The full config's attention op (head_dim 128: the Hopper kernel on sm_90a).
EmitOp fullAttention() {
  for (const EmitOp &o : h3Ops(h3c::h3::namedConfig("full")))
    if (o.op.kind == OpKind::Attention) return o;
  throw std::runtime_error("the full config has no attention op");
}

// The forms that exist on sm_90a with wgmma only, at config c's shapes: qkv_linear with the qk_norm_rope epilogue
// (transformer block with rope, refiner without), when the heads have 128 channels (else h3-fuse keeps them apart).
std::vector<EmitOp> hopperOnlyOps(const h3c::h3::Config &c) {
  if (c.attention_head_dim != 128) return {};
  const int64_t H = c.hidden_size, heads = c.num_attention_heads;
  return {qkvNormRope("transformer_blocks.0.attn.qkv+qk_norm_rope", H, heads, 128, c.qk_norm_eps, c.rotaryDim()),
          qkvNormRope("refiner.qkv+qk_norm", H, heads, 128, c.qk_norm_eps, 0)};
}

// ---- emitter (pure C++) ----

TEST(KernelEmit, EveryOpKindEmitsForFullAndTiny) {
  for (const char *cfg : {"full", "small", "tiny"}) {
    auto ops = h3Ops(h3c::h3::namedConfig(cfg));
    for (const auto &o : ops) {
      auto k = emit(o);
      ASSERT_TRUE(k.has_value()) << o.op.where;
      EXPECT_NE(k->source.find("extern \"C\" __global__"), std::string::npos);
      EXPECT_NE(k->source.find("#define H3C_PARAMS "), std::string::npos);
      EXPECT_EQ(k->source.find("#include"), std::string::npos) << "kernels must not include headers";
      EXPECT_EQ(k->entry, "h3c_" + k->id);
      EXPECT_EQ(k->file, "kernels/" + k->id + ".cu");
      EXPECT_EQ(k->arch, "sm_90a");
      EXPECT_EQ(k->nvrtcOptions, hk::nvrtcOptions("sm_90a"));
      EXPECT_GT(k->launch.block[0], 0);
      EXPECT_LE(k->launch.smemBytes, 227 * 1024);
      // Every parameter is declared in the signature, in order, under its name.
      size_t at = k->source.find("#define H3C_PARAMS ");
      std::string sig = k->source.substr(at, k->source.find('\n', at) - at);
      size_t pos = 0;
      for (const auto &p : k->params) {
        size_t f = sig.find(" " + p.name, pos);
        ASSERT_NE(f, std::string::npos) << k->id << " lacks " << p.name << " in " << sig;
        pos = f + 1;
      }
    }
  }
}

// qkv_linear's qk_norm_rope epilogue: the Hopper GEMM (cooperative or ping-pong) with the norm weights and the rope
// tables as parameters; refused wherever its layout argument does not hold (mma.sync, other head sizes, rotary widths
// that split a rotation pair over threads, tensor-parallel shards).
TEST(KernelEmit, QkvNormRopeEpilogueOnHopperOnly) {
  auto c = h3c::h3::namedConfig("full");
  auto ops = hopperOnlyOps(c);
  ASSERT_EQ(ops.size(), 2u);
  auto k = emit(ops[0]);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->id.rfind("qkv_linear_sm90_k5376_n21504_qknr_", 0), 0u) << k->id;
  EXPECT_NE(k->source.find("#define GM_EPI GM_EPI_QK_NORM_ROPE\n"), std::string::npos);
  EXPECT_NE(k->source.find("#define GM_QK_R 96\n"), std::string::npos);
  EXPECT_NE(k->source.find("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"), std::string::npos);
  std::vector<std::string> names;
  for (const auto &p : k->params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x_map", "y0", "y1", "y2", "w_map", "qk_w0", "qk_w1", "rope_cos",
                                             "rope_sin", "rows", "meta_rows"}));
  EXPECT_EQ(k->params[4].span, 3);  // [Wq; Wk; Wv] as one matrix; the norm weights are operands 3 and 4
  EXPECT_EQ(k->params[5].role, plan::OperandRole::Weight);
  EXPECT_EQ(k->params[5].index, 3);
  EXPECT_EQ(k->params[6].index, 4);
  EXPECT_EQ(k->params[7].role, plan::OperandRole::In);
  EXPECT_EQ(k->params[7].index, 1);
  EXPECT_EQ(k->params[10].value.text(), "S");  // the rope tables' rows (no batch axis)
  // The plain qkv kernel is another kernel (the epilogue is in its id and text).
  EmitOp plain = op(OpKind::QkvLinear, "qkv", with(attrs({{"K", 5376}, {"N", 7168}}), h3c::DType::BF16,
                                                   h3c::DType::BF16, h3c::DType::BF16), kchunks(1), 3);
  EXPECT_NE(emit(plain)->id, k->id);
  // Refiner: no tables, no meta_rows.
  auto r = emit(ops[1]);
  ASSERT_TRUE(r);
  EXPECT_NE(r->source.find("#define GM_QK_R 0\n"), std::string::npos);
  EXPECT_EQ(r->params.back().name, "rows");
  // The ping-pong kernel carries it too (128-column tiles: one head each).
  hk::EmitOptions pp;
  pp.sm90Pingpong = 1;
  auto kp = emit(ops[0], "sm_90a", pp);
  ASSERT_TRUE(kp);
  EXPECT_EQ(kp->id.rfind("qkv_linear_sm90pp_", 0), 0u) << kp->id;
  hk::EmitOptions cl;
  cl.sm90Cluster = 2;
  EXPECT_TRUE(emit(ops[0], "sm_90a", cl));
  // Refused: mma.sync (sm_100a, --no-wgmma), head_dim 16, rotary 24, a column shard, five weights missing.
  EXPECT_THROW(emit(ops[0], "sm_100a"), h3c::Error);
  hk::EmitOptions mma;
  mma.wgmma = false;
  EXPECT_THROW(emit(ops[0], "sm_90a", mma), h3c::Error);
  EXPECT_THROW(emit(qkvNormRope("q", 24, 2, 16, 1e-5, 12)), h3c::Error);
  EXPECT_THROW(emit(qkvNormRope("q", 5376, 56, 128, 1e-5, 24)), h3c::Error);
  EmitOp shard = ops[0];
  shard.op.attrs.shard.kind = plan::ShardKind::Column;
  shard.op.attrs.shard.tp = 2;
  EXPECT_THROW(emit(shard), h3c::Error);
  EmitOp three = ops[0];
  three.op.weights.resize(3);
  EXPECT_THROW(emit(three), h3c::Error);
  // The small config's shape (2 heads: N = 256, one 256-column tile per tensor) emits as well.
  EXPECT_EQ(hopperOnlyOps(h3c::h3::namedConfig("small")).size(), 2u);
  EXPECT_TRUE(emit(hopperOnlyOps(h3c::h3::namedConfig("small"))[0]));
  EXPECT_TRUE(hopperOnlyOps(h3c::h3::namedConfig("tiny")).empty());
}

// The AdaLN table ops (transformer block, norm_out) of config `cfg`.
std::vector<EmitOp> adalnOps(const char *cfg) {
  std::vector<EmitOp> v;
  for (const auto &o : h3Ops(h3c::h3::namedConfig(cfg)))
    if (o.op.kind == OpKind::AdalnTable) v.push_back(o);
  return v;
}

// The bulk form's tunings (adaln_tiles=0).
hk::EmitOptions adalnTuning(int stages, int stageK, int ctas) {
  hk::EmitOptions o;
  o.sm90AdalnTiles = 0;
  o.sm90AdalnStages = stages;
  o.sm90AdalnStageK = stageK;
  o.sm90AdalnCtas = ctas;
  return o;
}

// The AdaLN table on sm_90a: the streaming kernel (adaln_sm90.cuh) with the mma.sync kernel's parameters (plain
// buffers), a persistent grid over the weight's 8-row blocks and one pass per 8 rows of temb (any T); the ring takes
// as many stages as fit, tunings clamp to what fits; sm_100a, --no-wgmma, a K that is not whole 16-wide chunks and a
// shape whose ring cannot fit keep the mma.sync kernel (the same bits).
TEST(KernelEmit, AdalnTableStreamsOnHopper) {
  const auto full = adalnOps("full");
  ASSERT_EQ(full.size(), 2u);
  const EmitOp &blk = full[0];
  ASSERT_EQ(blk.op.attrs.N, 18 * 5376);
  // The default is the tiles form (KernelEmit.AdalnTableTilesForm): 64-row boxes, 8 stages at two CTAs per SM.
  auto dflt = emit(blk);
  ASSERT_TRUE(dflt);
  EXPECT_EQ(dflt->id.rfind("adaln_table_sm90_k2688_n96768_xf32_", 0), 0u) << dflt->id;
  EXPECT_NE(dflt->source.find("#define AL_KS 64\n#define AL_STAGES 8\n#define AL_WARPS 4\n#define AL_NBW 2\n"
                              "#define AL_CTAS 2\n#define AL_TILES 1\n"),
            std::string::npos);
  EXPECT_EQ(dflt->launch.grid[0].maxPerSm, 2);
  // The bulk form at its tuning of 2026-12-04: 256 columns per stage at two CTAs per SM (2 stages each in half the SM).
  auto k = emit(blk, "sm_90a", adalnTuning(0, 256, 2));
  ASSERT_TRUE(k);
  EXPECT_EQ(k->id.rfind("adaln_table_sm90_k2688_n96768_xf32_", 0), 0u) << k->id;
  EXPECT_NE(k->source.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"), std::string::npos);
  EXPECT_NE(k->source.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
  EXPECT_NE(k->source.find("#define AL_KS 256\n#define AL_STAGES 2\n"), std::string::npos);
  EXPECT_NE(k->source.find("#define AL_CTAS 2\n"), std::string::npos);
  EXPECT_EQ(k->launch.block[0], 160);
  EXPECT_LE(2 * (k->launch.smemBytes + 1024), 233472);
  EXPECT_EQ(k->launch.grid[0].extent.eval({}), 96768 / 8);
  EXPECT_EQ(k->launch.grid[0].maxPerSm, 2);
  // One CTA per SM: (227 KiB - 8 rows of a) / (64 x 528 bytes + barriers) = 5 stages.
  auto one = emit(blk, "sm_90a", adalnTuning(0, 256, 1));
  EXPECT_NE(one->source.find("#define AL_KS 256\n#define AL_STAGES 5\n"), std::string::npos);
  EXPECT_EQ(one->launch.grid[0].maxPerSm, 1);
  EXPECT_LE(one->launch.smemBytes, 232448);
  EXPECT_EQ(k->launch.grid[1].extent.text(), "T");
  EXPECT_EQ(k->launch.grid[1].div, 8);
  // The mma.sync kernel of the same op (sm_100a, and sm_90a without the Hopper kernels) and its parameter list,
  // which the streaming kernel shares.
  auto m100 = emit(blk, "sm_100a");
  hk::EmitOptions mma;
  mma.wgmma = false;
  auto m90 = emit(blk, "sm_90a", mma);
  ASSERT_TRUE(m100 && m90);
  EXPECT_EQ(m100->id.rfind("adaln_table_bf16m16_k2688_n96768_xf32_", 0), 0u) << m100->id;
  EXPECT_EQ(m90->id.rfind("adaln_table_bf16m16_", 0), 0u) << m90->id;
  EXPECT_EQ(m90->source.find("cp.async.bulk"), std::string::npos);
  ASSERT_EQ(k->params.size(), m90->params.size());
  for (size_t i = 0; i < k->params.size(); ++i) {
    EXPECT_EQ(k->params[i].name, m90->params[i].name);
    EXPECT_EQ(k->params[i].kind, m90->params[i].kind);
    EXPECT_EQ(k->params[i].role, m90->params[i].role);
    EXPECT_EQ(k->params[i].index, m90->params[i].index);
  }
  EXPECT_EQ(k->params.back().value.text(), "T");
  // Tunings: fewer stages; more than fit clamps; two CTAs per SM (2 stages in half the SM); wide stages; the id
  // follows the text.
  auto st3 = emit(blk, "sm_90a", adalnTuning(3, 256, 1));
  EXPECT_NE(st3->source.find("#define AL_STAGES 3\n"), std::string::npos);
  EXPECT_NE(st3->id, one->id);
  EXPECT_NE(emit(blk, "sm_90a", adalnTuning(16, 256, 1))->source.find("#define AL_STAGES 5\n"), std::string::npos);
  auto two = emit(blk, "sm_90a", adalnTuning(0, 256, 2));
  EXPECT_NE(two->source.find("#define AL_STAGES 2\n"), std::string::npos);
  EXPECT_NE(two->source.find("#define AL_CTAS 2\n"), std::string::npos);
  EXPECT_EQ(two->launch.grid[0].maxPerSm, 2);
  EXPECT_LE(2 * (two->launch.smemBytes + 1024), 233472);
  EXPECT_NE(emit(blk, "sm_90a", adalnTuning(0, 512, 1))->source.find("#define AL_STAGES 2\n"), std::string::npos);
  EXPECT_THROW(emit(blk, "sm_90a", adalnTuning(0, 100, 1)), h3c::Error);
  // Where two stages do not fit, the mma.sync kernel: 512-column stages at two CTAs per SM, a K of 16,384.
  EXPECT_EQ(emit(blk, "sm_90a", adalnTuning(0, 512, 2))->id.rfind("adaln_table_bf16m16_", 0), 0u);
  EmitOp wide = blk;
  wide.op.attrs.K = 16384;
  EXPECT_EQ(emit(wide)->id.rfind("adaln_table_bf16m16_", 0), 0u);
  // K = 24: a half chunk at the end: the mma.sync kernel (its tiles zero-fill the tail).
  EmitOp ragged = blk;
  ragged.op.attrs.K = 24;
  EXPECT_EQ(emit(ragged)->id.rfind("adaln_table_bf16m16_", 0), 0u);
  // norm_out, and the small and tiny configs (stages hold at most K columns; 16 stages at most).
  EXPECT_EQ(emit(full[1])->id.rfind("adaln_table_sm90_k2688_n10752_xf32_", 0), 0u);
  auto small = emit(adalnOps("small")[0], "sm_90a", adalnTuning(0, 256, 1));
  EXPECT_NE(small->source.find("#define AL_KS 96\n#define AL_STAGES 16\n"), std::string::npos);
  auto tiny = emit(adalnOps("tiny")[1], "sm_90a", adalnTuning(0, 256, 2));
  EXPECT_EQ(tiny->id.rfind("adaln_table_sm90_k16_n48_xf32_", 0), 0u) << tiny->id;
  EXPECT_NE(tiny->source.find("#define AL_KS 16\n"), std::string::npos);
  // The tiles form's box stays 64 columns wide at K = 16 (the columns past K arrive as zeros, no chunk reads them).
  EXPECT_NE(emit(adalnOps("tiny")[1])->source.find("#define AL_KS 64\n"), std::string::npos);
  EXPECT_EQ(tiny->launch.grid[0].extent.eval({}), 6);
}

// The AdaLN tuning names of `h3c compile --tune`: per op or for all, ranges, and the stage width's multiple of 16.
TEST(KernelEmit, AdalnTableTuningNames) {
  hk::EmitOptions t;
  t.set("adaln_table:adaln_stages", 3, "test");
  EXPECT_EQ(t.forOp(std::string("adaln_table")).sm90AdalnStages, 3);
  EXPECT_EQ(t.forOp(std::string("linear")).sm90AdalnStages, 0);
  t.set("adaln_ctas", 2, "test");
  EXPECT_EQ(t.forOp(std::string("adaln_table")).sm90AdalnCtas, 2);
  EXPECT_NO_THROW(t.check("test"));
  EXPECT_THROW(t.set("adaln_ctas", 3, "test"), h3c::Error);
  EXPECT_THROW(t.set("adaln_stages", 17, "test"), h3c::Error);
  t.set("adaln_stage_k", 100, "test");
  EXPECT_THROW(t.check("test"), h3c::Error);
  t.set("adaln_stage_k", 96, "test");
  EXPECT_NO_THROW(t.check("test"));
}

// The staged epilogue (gemm_epi_smem=1, gemm_epilogue_smem.cuh): the cooperative kernel of every bf16 linear, qkv's
// fused qk_norm_rope included, gets it, with the two 64 x 256 bf16 staging areas (and gate_residual's table rows) in
// its shared memory (the default since 2026-12-04); gemm_epi_smem=0 carries none of it; combinations beyond 227 KiB
// are refused, by the emitter naming the op and by EmitOptions::check before anything is emitted; the ping-pong kernel
// ignores the option.
TEST(KernelEmit, StagedEpilogueOption) {
  hk::EmitOptions staged, unstaged;
  EXPECT_EQ(staged.sm90EpiSmem, 1);  // the default
  unstaged.sm90EpiSmem = 0;
  const int64_t ring3 = 3 * (128 + 256) * 64 * 2 + 1024 + 16 * 3;  // 3 stages + alignment + mbarriers
  EXPECT_EQ(ring3, 148528);
  // The linears, then qkv + qk_norm_rope (with rope, and the refiner's without): its norm and rope stay in registers,
  // its stores go through the staging area (st.shared.b32, then the epilogue none's 16-byte copy).
  std::vector<EmitOp> ops = h3Ops(h3c::h3::namedConfig("full"));
  for (const EmitOp &o : hopperOnlyOps(h3c::h3::namedConfig("full"))) ops.push_back(o);
  int stagedKernels = 0, stagedQknr = 0;
  for (const EmitOp &o : ops) {
    if (o.op.kind != OpKind::Linear && o.op.kind != OpKind::QkvLinear) continue;
    if (o.op.attrs.wDtype != DType::BF16 || o.op.attrs.xDtype != DType::BF16) continue;
    const plan::Kernel def = *emit(o, "sm_90a", unstaged), st = *emit(o, "sm_90a", staged);
    const std::string what = o.op.nodes.front();
    const bool qknr = o.op.attrs.epilogue == plan::Epilogue::QkNormRope;
    EXPECT_EQ(def.source.find("#define G9_EPI_SMEM"), std::string::npos) << what;
    EXPECT_EQ(def.source.find("stmatrix"), std::string::npos) << what;
    EXPECT_EQ(def.source.find("st.shared.b32"), std::string::npos) << what;
    EXPECT_EQ(def.launch.smemBytes, ring3) << what;
    EXPECT_NE(st.source.find("#define G9_EPI_SMEM 1\n"), std::string::npos) << what;
    EXPECT_NE(st.source.find(qknr ? "st.shared.b32" : "stmatrix.sync.aligned.m8n8.x4.shared.b16"), std::string::npos)
        << what;
    const bool gres = o.op.attrs.epilogue == plan::Epilogue::GateResidual;
    EXPECT_EQ(st.launch.smemBytes, ring3 + 2 * 32768 + (gres ? 2048 : 0)) << what;  // table rows: 8 warps x 32
    EXPECT_NE(st.id, def.id) << what;
    // gemm_epi_smem=2: the same staging, its two full / empty mbarrier pairs, the walk in the epilogue warps.
    hk::EmitOptions warps = staged;
    warps.sm90EpiSmem = 2;
    const plan::Kernel ew = *emit(o, "sm_90a", warps);
    EXPECT_NE(ew.source.find("#define G9_EPI_WARPS 1\n"), std::string::npos) << what;
    EXPECT_EQ(st.source.find("#define G9_EPI_WARPS 1\n"), std::string::npos) << what;
    EXPECT_EQ(ew.launch.smemBytes, st.launch.smemBytes + 32) << what;
    // gemm_epi_smem=3: one staging area for both consumers in turns, the table rows of the 3 epilogue warps only, so
    // 4 stages of 48 KiB fit.
    hk::EmitOptions shared4 = warps;
    shared4.sm90EpiSmem = 3;
    shared4.sm90Stages = 4;
    const plan::Kernel es = *emit(o, "sm_90a", shared4);
    EXPECT_NE(es.source.find("#define G9_EPI_WARPS 1\n"), std::string::npos) << what;
    EXPECT_NE(es.source.find("#define G9_EPI_SHARED 1\n"), std::string::npos) << what;
    EXPECT_EQ(ew.source.find("#define G9_EPI_SHARED 1\n"), std::string::npos) << what;
    EXPECT_EQ(es.launch.smemBytes, 4 * (128 + 256) * 64 * 2 + 1024 + 16 * 4 + 32768 + 32 + (gres ? 768 : 0)) << what;
    EXPECT_LE(es.launch.smemBytes, hk::kMaxCtaSharedBytes) << what;
    ++stagedKernels;
    stagedQknr += qknr;
  }
  // qkv, to_q, to_out, fc2 (gate_residual), fc1 (swiglu), the refiner's residual ones; qkv + qk_norm_rope twice
  EXPECT_GE(stagedKernels, 8);
  EXPECT_EQ(stagedQknr, 2);
  // 4 stages of 48 KiB beside 64 KiB of staging do not fit (the message names the op and the stages that do); at
  // gemm_bn=192 (40 KiB stages, 48 KiB of staging) 4 do.
  const EmitOp toOut = h3Ops(h3c::h3::namedConfig("full"))[15];
  ASSERT_EQ(toOut.op.attrs.epilogue, plan::Epilogue::GateResidual);
  hk::EmitOptions four = staged;
  four.sm90Stages = 4;
  try {
    emit(toOut, "sm_90a", four);
    ADD_FAILURE() << "4 stages with the staged epilogue were not refused";
  } catch (const h3c::Error &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("op 'linear' (node " + toOut.op.nodes.front() + ")"), std::string::npos) << m;
    EXPECT_NE(m.find("265280 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("gemm_stages=3 or fewer"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(emit(toOut, "sm_90a", [] {
    hk::EmitOptions o;
    o.sm90Stages = 4;  // without staging 4 stages fit
    o.sm90EpiSmem = 0;
    return o;
  }()));
  hk::EmitOptions w4 = four;
  w4.sm90Bn = 192;
  EXPECT_EQ(emit(toOut, "sm_90a", w4)->launch.smemBytes, 4 * (128 + 192) * 64 * 2 + 1024 + 16 * 4 + 2 * 24576 + 2048);
  hk::EmitOptions pp = staged, ppUnstaged = unstaged;
  pp.sm90Pingpong = ppUnstaged.sm90Pingpong = 1;
  EXPECT_EQ(emit(toOut, "sm_90a", pp)->id, emit(toOut, "sm_90a", ppUnstaged)->id);  // ignored by ping-pong
  // EmitOptions::check refuses the same before any emission, qkv's fused epilogue included (it stages too; without
  // staging it may keep 4 stages).
  hk::EmitOptions t;
  t.set("gemm_epi_smem", 1, "test");
  EXPECT_NO_THROW(t.check("test"));
  t.set("qkv_linear+qk_norm_rope:gemm_stages", 4, "test");
  try {
    t.check("test");
    ADD_FAILURE() << "4 stages with qkv_linear+qk_norm_rope's staged epilogue were not refused";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find("qkv_linear+qk_norm_rope: gemm_epi_smem=1 with gemm_stages=4"),
              std::string::npos) << e.what();
  }
  t.set("qkv_linear+qk_norm_rope:gemm_epi_smem", 0, "test");
  EXPECT_NO_THROW(t.check("test"));
  t.set("linear+gate_residual:gemm_bn", 192, "test");
  t.set("linear+gate_residual:gemm_stages", 4, "test");
  EXPECT_NO_THROW(t.check("test"));
  t.set("linear+swiglu:gemm_stages", 4, "test");
  EXPECT_THROW(t.check("test"), h3c::Error);
  t.set("linear+swiglu:gemm_stages", 3, "test");
  t.set("linear+swiglu:gemm_pingpong", 1, "test");  // ping-pong ignores the staged epilogue and the cluster
  t.set("linear+swiglu:gemm_cluster", 2, "test");
  EXPECT_NO_THROW(t.check("test"));
  // The plan defaults: the gate_residual and swiglu linears in 2-CTA clusters with one k-block in flight, swiglu's
  // staged epilogue walked in the epilogue warps.
  const hk::EmitOptions d = hk::EmitOptions::planDefaults();
  EXPECT_EQ(d.forOp(std::string("linear+gate_residual")).sm90Cluster, 2);
  EXPECT_EQ(d.forOp(std::string("linear+gate_residual")).sm90Inflight, 1);
  EXPECT_EQ(d.forOp(std::string("linear+gate_residual")).sm90Bm, 128);
  EXPECT_EQ(d.forOp(std::string("linear+swiglu")).sm90Cluster, 2);
  EXPECT_EQ(d.forOp(std::string("linear+swiglu")).sm90Inflight, 1);
  EXPECT_EQ(d.forOp(std::string("linear+swiglu")).sm90EpiSmem, 2);
  EXPECT_EQ(d.forOp(std::string("linear+gate_residual")).sm90EpiSmem, 1);
  EXPECT_EQ(d.forOp(std::string("qkv_linear+qk_norm_rope")).sm90Cluster, 2);
  EXPECT_EQ(d.forOp(std::string("attention")).sm90AttnPersistent, 1);
  EXPECT_EQ(d.forOp(std::string("linear")).sm90AttnPersistent, 0);  // per op: only attention reads it
  EXPECT_NO_THROW(d.check("test"));
  EXPECT_NO_THROW(t.set("gemm_epi_smem", 3, "test"));
  EXPECT_THROW(t.set("gemm_epi_smem", 4, "test"), h3c::Error);
  // the shared area's 4 stages pass the check; its own areas' do not
  hk::EmitOptions s4 = hk::EmitOptions::planDefaults();
  s4.set("linear+gate_residual:gemm_epi_smem", 3, "test");
  s4.set("linear+gate_residual:gemm_stages", 4, "test");
  EXPECT_NO_THROW(s4.check("test"));
  s4.set("linear+gate_residual:gemm_epi_smem", 2, "test");
  EXPECT_THROW(s4.check("test"), h3c::Error);
}

// The 256-row tile (gemm_bm=256): its shared memory is 4 stages of (256 + bn) x 64 bf16 at most, its grid one CTA per
// 256 x bn tile capped at the SMs, its W box bn rows and x's 256; EmitOptions::check refuses it for the epilogues it
// lacks (swiglu, qk_norm_rope), a width that is no multiple of 8 or outside 128-192, and a ring beyond the shared
// memory, before any emission; set per op it leaves the other linears' kernels alone.
TEST(KernelEmit, Sm90Gemm256RowsOption) {
  const EmitOp toOut = op(OpKind::Linear, "to_out", [] {
    plan::OpAttrs a = with(attrs({{"K", 5376}, {"N", 5376}}), h3c::DType::BF16, h3c::DType::BF16, h3c::DType::BF16,
                           plan::Epilogue::GateResidual);
    a.chunk = 2;
    a.numChunks = 6;
    return a;
  }(), kchunks(1), 1);
  hk::EmitOptions t;
  t.perOp.clear();
  t.sm90Bm = 256;
  t.sm90Bn = 168;
  t.sm90Stages = 4;
  t.sm90EpiSmem = 0;  // the register epilogue: 4 stages fit
  const plan::Kernel k = *emit(toOut, "sm_90a", t);
  EXPECT_EQ(k.launch.smemBytes, hk::sm90TallLinearSharedBytes(4, 168, false, true));
  EXPECT_EQ(k.launch.smemBytes, 4 * (256 + 168) * 64 * 2 + 1024 + 16 * 4);
  EXPECT_EQ(k.launch.grid[0].div, 256);
  EXPECT_EQ(k.launch.grid[0].maxPerSm, 1);
  EXPECT_EQ(k.launch.cluster[0], 1);
  for (const plan::KernelParam &p : k.params) {
    if (p.name == "x_map") {
      EXPECT_EQ(p.map.box, (std::vector<int64_t>{64, 128}));
    } else if (p.name == "w_map") {
      EXPECT_EQ(p.map.box, (std::vector<int64_t>{64, 168}));
    }
  }
  EXPECT_NE(k.source.find("m64n168k16"), std::string::npos);
  EXPECT_EQ(k.source.find("#define G9_EPI_SMEM"), std::string::npos);
  EXPECT_NE(k.id.find("_sm90m256n168_"), std::string::npos) << k.id;
  // Staged (3 stages beside two 64 x 192 areas and the table rows), in 2-CTA clusters along the columns.
  hk::EmitOptions st = t;
  st.sm90EpiSmem = 1;
  EXPECT_THROW(emit(toOut, "sm_90a", st), h3c::Error);  // 4 stages do not fit beside it
  st.sm90Stages = 3;
  st.sm90Cluster = 2;
  const plan::Kernel ks = *emit(toOut, "sm_90a", st);
  EXPECT_EQ(ks.launch.smemBytes, 3 * (256 + 168) * 64 * 2 + 1024 + 16 * 3 + 2 * 64 * 192 * 2 + 8 * 32 * 8);
  EXPECT_LE(ks.launch.smemBytes, hk::kMaxCtaSharedBytes);
  EXPECT_NE(ks.source.find("#define G9_EPI_SMEM 1\n"), std::string::npos);
  EXPECT_EQ(ks.launch.cluster[0], 2);
  hk::EmitOptions bad = t;
  bad.sm90Bn = 172;
  EXPECT_THROW(emit(toOut, "sm_90a", bad), h3c::Error);
  bad.sm90Bn = 192;
  EXPECT_NO_THROW(emit(toOut, "sm_90a", bad));
  // check(): per op for to_out / fc2 only; for every op (swiglu, qk_norm_rope included) refused, naming the fix
  hk::EmitOptions c = hk::EmitOptions::planDefaults();
  c.set("linear+gate_residual:gemm_bm", 256, "test");
  c.set("linear+gate_residual:gemm_bn", 168, "test");
  c.set("linear+gate_residual:gemm_stages", 4, "test");
  EXPECT_THROW(c.check("test"), h3c::Error);  // 4 stages beside the default staged epilogue
  c.set("linear+gate_residual:gemm_stages", 3, "test");
  EXPECT_NO_THROW(c.check("test"));
  EXPECT_EQ(c.forOp(std::string("linear+swiglu")).sm90Bm, 128);
  c.set("linear+gate_residual:gemm_bn", 196, "test");
  EXPECT_THROW(c.check("test"), h3c::Error);
  c.set("linear+gate_residual:gemm_bn", 192, "test");
  EXPECT_NO_THROW(c.check("test"));
  c.set("linear+gate_residual:gemm_bn", 256, "test");
  EXPECT_THROW(c.check("test"), h3c::Error);
  hk::EmitOptions every = hk::EmitOptions::planDefaults();
  every.set("gemm_bm", 256, "test");
  every.set("gemm_bn", 168, "test");
  try {
    every.check("test");
    ADD_FAILURE() << "gemm_bm=256 for every op (swiglu included) was not refused";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find("set it per op"), std::string::npos) << e.what();
  }
  EXPECT_THROW(every.set("gemm_bm", 512, "test"), h3c::Error);
}

// Programmatic dependent launch: every kernel of the full config (both archs) waits for its producers first thing
// and is marked for the launch attribute; launch_pdl=0 keeps the same source with plain stream order (another id:
// the launch is part of it).
TEST(KernelEmit, EveryKernelMayBeADependentLaunch) {
  hk::EmitOptions plain;
  plain.set("launch_pdl", 0, "test");
  int kernels = 0;
  for (const char *arch : {"sm_90a", "sm_100a"})
    for (const EmitOp &o : h3Ops(h3c::h3::namedConfig("full"))) {
      const auto k = emit(o, arch), p = emit(o, arch, plain);
      if (!k) continue;
      ++kernels;
      EXPECT_TRUE(k->launch.gridDependency) << k->id;
      EXPECT_FALSE(p->launch.gridDependency) << p->id;
      // The same text but for the id (in the comment and the entry names, phases' too).
      auto text = [](std::string s, const std::string &id) {
        for (size_t at = s.find(id); at != std::string::npos; at = s.find(id, at)) s.replace(at, id.size(), "ID");
        return s;
      };
      EXPECT_EQ(text(p->source, p->id), text(k->source, k->id)) << k->id;
      EXPECT_NE(p->id, k->id);
      // The wait is the kernel body's first statement.
      const size_t entry = k->source.find("extern \"C\" __global__");
      ASSERT_NE(entry, std::string::npos) << k->id;
      const size_t body = k->source.find("{\n", entry);
      EXPECT_EQ(k->source.find("h3c_grid_dependency_wait();", body), k->source.find_first_not_of(" \n", body + 2))
          << k->id;
    }
  EXPECT_GE(kernels, 20);
}

// The backward's gradient kernels launch in plain stream order by default (their persistent GEMMs lost time as
// dependents: bench/NOTES.md 2026-12-06), every phase alike; `grad_pdl=1` makes them dependents as the forward's are,
// and `launch_pdl=0` turns it off for all. The linear gradients' rounding phase is one wave (roundingWave).
TEST(KernelEmit, GradientKernelsArePlainLaunchesUnlessGradPdl) {
  hk::EmitOptions pdl, none;
  pdl.set("grad_pdl", 1, "test");
  none.set("grad_pdl", 1, "test");
  none.set("launch_pdl", 0, "test");
  for (const EmitOp &o : {linearGradX(7168, 5376), linearGradW(5376, 14336, true)}) {
    const auto k = emit(o, "sm_90a"), p = emit(o, "sm_90a", pdl), n = emit(o, "sm_90a", none);
    ASSERT_TRUE(k && p && n);
    ASSERT_FALSE(k->phases.empty()) << k->id;
    EXPECT_FALSE(k->launch.gridDependency) << k->id;
    EXPECT_TRUE(p->launch.gridDependency) << p->id;
    EXPECT_EQ(k->launch.grid[0].maxPerSm, 8) << k->id;  // the rounding phase in one wave of 8 CTAs an SM
    EXPECT_FALSE(n->launch.gridDependency) << n->id;
    for (size_t i = 0; i < k->phases.size(); ++i) {
      EXPECT_FALSE(k->phases[i].launch.gridDependency) << k->id;
      EXPECT_TRUE(p->phases[i].launch.gridDependency) << p->id;
      EXPECT_FALSE(n->phases[i].launch.gridDependency) << n->id;
    }
  }
}

TEST(KernelEmit, HostOpsHaveNoKernel) {
  EXPECT_FALSE(emit(op(OpKind::RopeTable, "rope", {})).has_value());
  EXPECT_FALSE(emit(op(OpKind::TimestepSinusoid, "time_proj", {}), "sm_100a").has_value());
}

TEST(KernelEmit, IdIsStableAndShapeDependent) {
  auto c = h3c::h3::namedConfig("full");
  auto a = emit(h3Ops(c)[4]), b = emit(h3Ops(c)[4]);
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ(a->source, b->source);
  EXPECT_EQ(a->sha256, h3c::sha256Hex(a->source));
  EXPECT_EQ(a->id.rfind("qkv_linear_sm90_k5376_n21504_", 0), 0u) << a->id;  // the Hopper kernel on sm_90a
  EXPECT_EQ(emit(h3Ops(c)[4], "sm_100a")->id.rfind("qkv_linear_bf16_k5376_n21504_", 0), 0u);
  auto t = emit(h3Ops(h3c::h3::namedConfig("tiny"))[4]);
  EXPECT_NE(a->id, t->id);
}

TEST(KernelEmit, LaunchAbiIsWrittenOut) {
  auto ops = h3Ops(h3c::h3::namedConfig("full"));
  // mma.sync (sm_100a): x, y0..y2, w spanning [Wq; Wk; Wv], rows = B*S; one CTA per 128 x 128 tile.
  auto qkv = emit(ops[4], "sm_100a");
  ASSERT_TRUE(qkv);
  ASSERT_EQ(qkv->params.size(), 6u);
  EXPECT_EQ(qkv->params[4].name, "w");
  EXPECT_EQ(qkv->params[4].role, plan::OperandRole::Weight);
  EXPECT_EQ(qkv->params[4].span, 3);
  EXPECT_EQ(qkv->params[5].kind, plan::KernelParam::Kind::Scalar);
  EXPECT_EQ(qkv->params[5].value.text(), "B*S");
  plan::Extents e{2, 8349, 512, 7680, 157, 1};
  EXPECT_EQ(qkv->launch.grid[0].extent.eval(e), 2 * 8349);
  EXPECT_EQ(qkv->launch.grid[0].div, 128);
  EXPECT_EQ(qkv->launch.grid[1].extent.eval(e), 21504 / 128);
  // Hopper (sm_90a): x and W as TMA tensor maps (64 x 128 boxes, 128-byte swizzle), a persistent grid of at least
  // one CTA per 128 x 256 tile, capped at one CTA per SM.
  auto h = emit(ops[4]);
  ASSERT_TRUE(h);
  ASSERT_EQ(h->params.size(), 6u);
  EXPECT_EQ(h->params[0].kind, plan::KernelParam::Kind::TensorMap);
  EXPECT_EQ(h->params[0].name, "x_map");
  EXPECT_EQ(h->params[0].map.dims[0].eval(e), 5376);
  EXPECT_EQ(h->params[0].map.dims[1].text(), "B*S");
  EXPECT_EQ(h->params[0].map.strides[0].eval(e), 5376 * 2);
  EXPECT_EQ(h->params[4].kind, plan::KernelParam::Kind::TensorMap);
  EXPECT_EQ(h->params[4].role, plan::OperandRole::Weight);
  EXPECT_EQ(h->params[4].map.dims[1].eval(e), 21504);
  EXPECT_EQ(h->params[4].span, 3);  // one matrix over [Wq; Wk; Wv]
  EXPECT_EQ(h->params[4].map.box, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(h->params[4].map.swizzle, "128B");
  EXPECT_NE(h->source.find("const __grid_constant__ H3cTensorMap w_map"), std::string::npos);
  EXPECT_NE(h->source.find("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"), std::string::npos);
  EXPECT_EQ(h->launch.block[0], 384);
  EXPECT_EQ(h->launch.grid[0].maxPerSm, 1);
  // Two CTAs per tile (capped at the SMs by maxPerSm): a walk of fewer tiles than the grid runs as half tiles
  // (gemm_half_tail, the default); one per tile without them.
  const int64_t tiles = (2 * 8349 + 127) / 128 * (21504 / 256);
  const int64_t g0 = (h->launch.grid[0].extent.eval(e) + 127) / h->launch.grid[0].div;
  EXPECT_GE(g0, 2 * tiles);
  EXPECT_LT(g0, 2 * (tiles + 21504 / 256));
  EXPECT_NE(h->source.find("#define G9_HALF_TAIL"), std::string::npos);
  hk::EmitOptions whole;
  whole.sm90HalfTail = 0;
  auto hw = emit(ops[4], "sm_90a", whole);
  const int64_t w0 = (hw->launch.grid[0].extent.eval(e) + 127) / hw->launch.grid[0].div;
  EXPECT_GE(w0, tiles);
  EXPECT_LT(w0, tiles + 21504 / 256);
  EXPECT_EQ(hw->source.find("#define G9_HALF_TAIL"), std::string::npos);
  // The mma.sync kernel stays reachable on sm_90a (the GPU checks compare the two byte for byte).
  hk::EmitOptions mma;
  mma.wgmma = false;
  EXPECT_EQ(emit(ops[4], "sm_90a", mma)->params[4].name, "w");
  auto attn = emit(ops[6]);
  EXPECT_EQ(attn->launch.grid[2].extent.text(), "B");  // one batch item per grid.z
  EXPECT_EQ(attn->params.back().value.text(), "S");
  auto gate = emit(ops[15]);
  EXPECT_EQ(gate->params.back().name, "meta_rows");
  EXPECT_EQ(gate->params.back().value.text(), "S");  // the row metadata has no batch axis
  auto unpack = emit(ops[21]);
  EXPECT_EQ(unpack->launch.grid[0].extent.text(), "96*B*Nv + 96*B*Na");
}

// The norms (norm.cuh): one warp per row, norm_rows rows per CTA (8 by default), no dynamic shared memory; the row in
// registers up to 22 chunks of 256 elements (the full config's 5376 is 21), pieces staged by the largest divisor of
// the chunk count up to 4; the scalar path for rows that are not bf16 multiples of 256 (tiny's 24, F32 out).
TEST(KernelEmit, NormLaunchAndVariants) {
  auto nm = [](long long H, DType out) {
    return op(OpKind::NormModulate, "n",
              with(attrs({{"H", H}, {"eps", 1e-5}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6}}),
                   DType::BF16, DType::BF16, out),
              laneTree(), 1);
  };
  auto has = [](const plan::Kernel &k, const std::string &def) {
    return k.source.find("#define " + def + "\n") != std::string::npos;
  };
  plan::Extents e{2, 8349, 512, 7680, 157, 1};
  const plan::Kernel full = *emit(nm(5376, DType::BF16));
  EXPECT_EQ(full.launch.block[0], 256);
  EXPECT_EQ(full.launch.smemBytes, 0);
  EXPECT_EQ(full.launch.grid[0].extent.eval(e), 2 * 8349);
  EXPECT_EQ(full.launch.grid[0].div, 8);
  for (const char *d : {"RN_VEC 1", "RN_ROWS 8", "RN_STAGE 3", "RN_XREG 1"}) EXPECT_TRUE(has(full, d)) << d;
  hk::EmitOptions rows3;
  rows3.set("norm_modulate:norm_rows", 3, "test");
  const plan::Kernel r3 = *emit(nm(5376, DType::BF16), "sm_90a", rows3);
  EXPECT_EQ(r3.launch.block[0], 96);
  EXPECT_EQ(r3.launch.grid[0].div, 3);
  EXPECT_TRUE(has(r3, "RN_ROWS 3"));
  EXPECT_NE(r3.id, full.id);
  EXPECT_EQ(emit(op(OpKind::RmsNorm, "r", with(attrs({{"H", 5376}, {"eps", 1e-5}}), DType::BF16, DType::BF16,
                                               DType::BF16), laneTree(), 1), "sm_90a", rows3)->launch.block[0],
            256);  // the per-op value is norm_modulate's only
  const plan::Kernel wide = *emit(nm(6144, DType::BF16));
  for (const char *d : {"RN_VEC 1", "RN_STAGE 4", "RN_XREG 0"}) EXPECT_TRUE(has(wide, d)) << d;
  EXPECT_TRUE(has(*emit(nm(256, DType::BF16)), "RN_STAGE 1"));
  EXPECT_TRUE(has(*emit(nm(5376, DType::F32)), "RN_VEC 0"));
  EXPECT_TRUE(has(*emit(nm(24, DType::BF16)), "RN_VEC 0"));
}

TEST(KernelEmit, TensorCoreLinearsAreOneChain) {
  auto c = h3c::h3::namedConfig("full");
  auto ops = h3Ops(c);
  auto fc2 = emit(ops[16], "sm_100a");  // the mma.sync kernel (sm_90a runs the Hopper one, same chain)
  ASSERT_TRUE(fc2);
  EXPECT_NE(fc2->source.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
  EXPECT_NE(emit(ops[16])->source.find("wgmma.mma_async"), std::string::npos);
  EXPECT_NE(fc2->source.find("#define GM_EPI GM_EPI_GATE_RESIDUAL\n"), std::string::npos);
  // Section 4: one accumulator chain over K, no unit partials to combine.
  EXPECT_EQ(fc2->source.find("GM_U"), std::string::npos);
  EXPECT_EQ(fc2->source.find("stk["), std::string::npos);
  // The launch never depends on M: the tile is fixed (128 x 128), the grid comes from the row count at run time.
  EXPECT_EQ(fc2->launch.grid[0].div, 128);
  EXPECT_EQ(fc2->launch.grid[1].extent.eval({}), (5376 + 127) / 128);
  // A tensor-parallel rank's to_out (section 5.2): full K, the rank's 5376 / 8 output columns.
  EmitOp local = ops[15];
  ASSERT_EQ(local.op.nodes[0], "transformer_blocks.0.attn.to_out.0");
  local.op.attrs.N = 5376 / 8;
  auto k = emit(local);
  ASSERT_TRUE(k);
  EXPECT_NE(k->source.find("#define GM_N 672\n"), std::string::npos);
  EXPECT_NE(k->source.find("#define GM_K 7168\n"), std::string::npos);
}

// Sequence parallel (section 5.2): a rank's query rows (Sr) over all key rows (S); the layout ops have no kernel.
TEST(KernelEmit, RankQueriesOverAllKeysAndNoKernelForLayoutOps) {
  auto c = h3c::h3::namedConfig("full");
  auto ops = h3Ops(c);
  size_t ai = 0;
  while (ai < ops.size() && ops[ai].op.kind != OpKind::Attention) ++ai;
  ASSERT_LT(ai, ops.size());
  EmitOp attn = ops[ai];
  auto full = emit(attn);
  ASSERT_TRUE(full);
  std::map<std::string, std::string> rows;
  for (const auto &p : full->params)
    if (p.kind == plan::KernelParam::Kind::Scalar) rows[p.name] = p.value.text();
  EXPECT_EQ(rows["item_rows"], "S");
  EXPECT_EQ(rows["kv_rows"], "S");
  attn.vals.in[0].rows = plan::Domain::Sr;
  attn.vals.out[0].rows = plan::Domain::Sr;
  auto sp = emit(attn);
  ASSERT_TRUE(sp);
  for (const auto &p : sp->params)
    if (p.kind == plan::KernelParam::Kind::Scalar) rows[p.name] = p.value.text();
  EXPECT_EQ(rows["item_rows"], "Sr");
  EXPECT_EQ(rows["kv_rows"], "S");
  EXPECT_EQ(sp->launch.grid[0].extent.text(), "Sr");  // query blocks of the rank's rows
  attn.vals.in[1].rows = plan::Domain::Sr;  // keys that are not all of S for a rank's queries
  EXPECT_THROW(emit(attn), h3c::Error);
  for (OpKind k : {OpKind::AllGather, OpKind::Split}) {
    plan::OpAttrs a;
    a.axis = plan::Axis::Rows;
    a.parts = 2;
    EXPECT_FALSE(emit(op(k, "layout", a)));
  }
}

// attn_persistent=1 (sm_90a): one 1-D grid of at least heads * B * ceil(Lq / 128) CTAs (the tile count, computed
// here) and at most one more per (head, item), capped at one CTA per SM; the item count as the last scalar; qEmpty's
// 8 bytes more shared memory. 0 (the default) keeps one CTA per (q tile, head, item); sm_100a's mma.sync kernel has
// no such option.
TEST(KernelEmit, PersistentAttentionWalksTheTilesOnAGridCappedAtTheSms) {
  const EmitOp at = fullAttention();
  const int64_t heads = 56;
  hk::EmitOptions per;
  per.set("attn_persistent", 1, "test");
  EXPECT_EQ(per.sm90AttnPersistent, 1);
  EXPECT_THROW(per.set("attn_persistent", 2, "test"), h3c::Error);
  EXPECT_EQ(hk::EmitOptions{}.sm90AttnPersistent, 0);
  const auto one = emit(at), walk = emit(at, "sm_90a", per);
  ASSERT_TRUE(one && walk);
  EXPECT_NE(one->source.find("#define A9_PERSISTENT 0\n"), std::string::npos);
  EXPECT_NE(walk->source.find("#define A9_PERSISTENT 1\n"), std::string::npos);
  EXPECT_NE(one->id, walk->id);
  EXPECT_EQ(one->launch.grid[2].extent.text(), "B");
  EXPECT_EQ(one->launch.grid[0].maxPerSm, 0);
  EXPECT_EQ(one->params.back().name, "kv_rows");
  ASSERT_EQ(walk->params.size(), one->params.size() + 1);
  EXPECT_EQ(walk->params.back().name, "items");
  EXPECT_EQ(walk->params.back().kind, plan::KernelParam::Kind::Scalar);
  EXPECT_EQ(walk->params.back().value.text(), "B");
  EXPECT_NE(walk->source.find("const long long items"), std::string::npos);
  EXPECT_EQ(walk->launch.block[0], 384);
  EXPECT_EQ(walk->launch.smemBytes, one->launch.smemBytes + 8);
  EXPECT_LE(walk->launch.smemBytes, hk::kMaxCtaSharedBytes);
  EXPECT_EQ(walk->launch.grid[0].maxPerSm, 1);
  for (int i : {1, 2}) {
    EXPECT_EQ(walk->launch.grid[size_t(i)].extent.eval({}), 1);
    EXPECT_EQ(walk->launch.grid[size_t(i)].div, 1);
  }
  auto ctas = [](const plan::Kernel &k, const plan::Extents &e) {
    const plan::GridDim &g = k.launch.grid[0];
    return (g.extent.eval(e) + g.div - 1) / g.div;
  };
  for (const auto &[B, S] : std::vector<std::pair<int64_t, int64_t>>{{1, 8349}, {2, 777}, {3, 5}, {2, 128}}) {
    plan::Extents e;
    e.B = B;
    e.S = S;
    e.Sr = S;
    const int64_t tiles = heads * B * ((S + 127) / 128);
    EXPECT_GE(ctas(*walk, e), tiles) << B << " x " << S;
    EXPECT_LE(ctas(*walk, e), tiles + heads * B) << B << " x " << S;
  }
  // A sequence-parallel rank: the tiles of its query rows Sr (kv_rows stays S).
  EmitOp rank = at;
  rank.vals.in[0].rows = plan::Domain::Sr;
  rank.vals.out[0].rows = plan::Domain::Sr;
  const auto r = emit(rank, "sm_90a", per);
  ASSERT_TRUE(r);
  plan::Extents e;
  e.B = 2;
  e.S = 8349;
  e.Sr = 1044;
  EXPECT_GE(ctas(*r, e), heads * 2 * ((1044 + 127) / 128));
  EXPECT_LE(ctas(*r, e), heads * 2 * ((1044 + 127) / 128) + heads * 2);
  // Every stage count and kv_block that fits one tile fits the persistent one too.
  for (int64_t kv : {64, 128})
    for (int stages : {2, 3}) {
      EmitOp o = at;
      o.op.order.kvBlock = kv;
      hk::EmitOptions opt = per;
      opt.sm90AttnStages = stages;
      EXPECT_TRUE(emit(o, "sm_90a", opt)) << kv << " " << stages;
    }
  // sm_100a and --no-wgmma: the mma.sync kernel, one CTA per 64-query block, whatever the option.
  hk::EmitOptions mma = per;
  mma.wgmma = false;
  for (const auto &k : {emit(at, "sm_100a", per), emit(at, "sm_90a", mma)}) {
    ASSERT_TRUE(k);
    EXPECT_EQ(k->source.find("A9_PERSISTENT"), std::string::npos);
    EXPECT_EQ(k->launch.grid[2].extent.text(), "B");
    EXPECT_EQ(k->launch.grid[0].maxPerSm, 0);
  }
}

TEST(KernelEmit, RejectsOpsOutsideTheContract) {
  auto c = h3c::h3::namedConfig("full");
  auto ops = h3Ops(c);
  EmitOp bad = ops[16];
  bad.op.order.units = 3;
  EXPECT_THROW(emit(bad), h3c::Error);
  bad = ops[16];
  bad.op.order = laneTree();
  try {
    emit(bad);
    FAIL() << "lane_tree linear accepted";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.0.ff.net.2"), std::string::npos) << e.what();
  }
  // Every GEMM reduces K in one chain: any other unit count is outside the contract.
  EXPECT_THROW(emit(op(OpKind::Linear, "fc2", attrs({{"K", 128}, {"N", 24}}), kchunks(8), 1)), h3c::Error);
  EXPECT_THROW(emit(ops[0], "sm_80"), h3c::Error);
  EmitOp f32split = ops[0];
  f32split.op.order.units = 2;
  EXPECT_THROW(emit(f32split), h3c::Error);
  EmitOp attn = ops[6];
  attn.op.order.kvBlock = 96;
  EXPECT_THROW(emit(attn), h3c::Error);
  EmitOp arity = ops[15];
  arity.vals.in.pop_back();
  EXPECT_THROW(emit(arity), h3c::Error);
}

#ifdef H3C_HAVE_CUDA
namespace hc = h3c::runtime::cuda;

// Under AddressSanitizer NVRTC runs several times slower (every allocation is intercepted); the config-wide compiles
// are covered by the Release build, so the sanitizer build keeps the JIT cache and error tests (one kernel each).
#ifdef H3C_SANITIZED
#define H3C_SKIP_HEAVY_UNDER_ASAN() GTEST_SKIP() << "config-wide NVRTC compiles run in the Release build"
#else
#define H3C_SKIP_HEAVY_UNDER_ASAN() (void)0
#endif
// The no-spill checks of tuning variants that no compiled plan uses by default (they are kernel work's, not every
// change's): run with H3C_NVRTC_VARIANTS=1 (`H3C_NVRTC_VARIANTS=1 ctest -R NvrtcCompile`) when a kernel template or
// its emitter changes. Every plan's kernels are compiled above in any case (FullConfigAndPlan*, TinyConfig*,
// the default forms' no-spill checks), and the GPU's JIT refuses a serialized kernel whatever the variant.
bool nvrtcVariants() {
  const char *on = std::getenv("H3C_NVRTC_VARIANTS");
  return on && std::string(on) == "1";
}
#define H3C_SKIP_UNLESS_NVRTC_VARIANTS()                                                                              \
  do {                                                                                                                \
    H3C_SKIP_HEAVY_UNDER_ASAN();                                                                                      \
    if (!nvrtcVariants()) GTEST_SKIP() << "tuning-variant compile checks: H3C_NVRTC_VARIANTS=1";                      \
  } while (0)

std::filesystem::path tempDir(const std::string &name) {
  auto p = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

// The kernels of the real plan: `h3c compile` of the checked-in full fingerprint for `arch` (empty, with a note, when
// this h3c was built without the MLIR compiler).
std::vector<plan::Kernel> fullPlanKernels(const std::string &arch) {
  if (!h3c::testtool::toolHasCompile()) {
    std::printf("note: this h3c has no compile (built without MLIR); the full plan's kernels are not compiled\n");
    return {};
  }
  auto dir = tempDir(std::string("h3c-full-plan-") + arch);
  std::string out;
  EXPECT_EQ(h3c::testtool::runTool("compile " + std::string(H3C_SOURCE_DIR) + "/models/h3/fingerprint.json --arch " +
                                       arch + " -o " + dir.string(),
                                   &out),
            0)
      << out;
  plan::Plan p = plan::loadPlan(dir);
  std::set<std::string> kinds;
  for (const auto &o : p.forward().ops)
    if (o.kernel) kinds.insert(plan::opKindName(o.kind));
  for (const char *k : {"linear", "qkv_linear", "adaln_table", "time_embed", "rms_norm", "norm_modulate",
                        "attention", "pack", "unpack"})
    EXPECT_TRUE(kinds.count(k)) << "the full plan has no '" << k << "' kernel";
  // qk_norm_rope stays apart from qkv on both archs by default (--qk-epilogue folds it into qkv on sm_90a).
  int fused = 0;
  for (const auto &o : p.forward().ops) fused += o.kind == plan::OpKind::QkvLinear && o.attrs.epilogue == plan::Epilogue::QkNormRope;
  EXPECT_EQ(kinds.count("qk_norm_rope"), 1u) << arch;
  EXPECT_EQ(fused, 0) << arch;
  EXPECT_GE(p.kernels.size(), 15u);
  std::vector<plan::Kernel> ks;
  for (const auto &[id, k] : p.kernels) {
    EXPECT_EQ(k.arch, arch);
    ks.push_back(k);
  }
  std::filesystem::remove_all(dir);
  return ks;
}

// Compiles each distinct kernel (by text) for one arch: one op of every kind at config `cfg`'s shapes (h3Ops) and,
// with `plan`, every kernel the real full plan carries, exactly as the runtime would (its own text and options). The
// two lists share most kernels; each is compiled once (NVRTC is most of this binary's test time). Every compile must
// produce an ELF, and ptxas must spill nothing and keep every wgmma asynchronous (so the variant tests below need not
// compile these kernels again: the bare options' staged linears and the plan's defaults are here).
void compileAll(const char *cfg, const std::string &arch, bool plan = false,
                const hk::EmitOptions &options = {}, bool tunedKindsOnly = false) {
  hc::NvrtcJit jit;  // no cache: really compile
  std::vector<std::pair<std::string, plan::Kernel>> ks;  // (where, kernel)
  for (const auto &o : h3Ops(h3c::h3::namedConfig(cfg))) {
    // tunedKindsOnly: the linears and attention (the other kinds' kernels do not change with the GEMM / attention
    // options, and FullConfigAndPlanSm90a compiles them)
    if (tunedKindsOnly && o.op.kind != OpKind::Linear && o.op.kind != OpKind::QkvLinear &&
        o.op.kind != OpKind::Attention)
      continue;
    auto k = emit(o, arch, options);
    ASSERT_TRUE(k);
    ks.emplace_back(o.op.where, *k);
  }
  if (arch == "sm_90a" && options.wgmma)
    for (const auto &o : hopperOnlyOps(h3c::h3::namedConfig(cfg))) {
      auto k = emit(o, arch, options);
      ASSERT_TRUE(k);
      ks.emplace_back(o.op.where, *k);
    }
  if (plan)
    for (const auto &k : fullPlanKernels(arch)) ks.emplace_back("the full plan's " + k.id, k);
  std::set<std::string> seen;
  for (const auto &[where, k] : ks) {
    if (!seen.insert(k.source).second) continue;
    hc::CompiledKernel c;
    plan::Kernel verbose = k;
    verbose.nvrtcOptions.push_back("--ptxas-options=-v");
    try {
      c = jit.compile(verbose);
    } catch (const std::exception &e) {
      ADD_FAILURE() << cfg << " " << arch << " " << where << "\n" << e.what();
      continue;
    }
    ASSERT_GT(c.cubin.size(), 4u);
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << k.id;
    // ptxas's report: no spills, no serialized wgmma (the JIT refuses those anyway; named here)
    EXPECT_NE(c.log.find("0 bytes spill stores, 0 bytes spill loads"), std::string::npos) << where << ":\n" << c.log;
    EXPECT_EQ(c.log.find("serialized"), std::string::npos) << where << ":\n" << c.log;
  }
  EXPECT_EQ(jit.stats().compiled, (int)seen.size());
}

// Compiles with ptxas's report (--ptxas-options=-v: registers, spills, serialized wgmmas) in the log; a compile error
// is a test failure naming `what`, and nullopt.
std::optional<hc::CompiledKernel> compileVerbose(hc::NvrtcJit &jit, plan::Kernel k, const std::string &what) {
  k.nvrtcOptions.push_back("--ptxas-options=-v");
  try {
    return jit.compile(k);
  } catch (const std::exception &e) {
    ADD_FAILURE() << what << " " << k.id << ": " << e.what();
    return std::nullopt;
  }
}
bool spillsNothing(const hc::CompiledKernel &c) {
  return c.log.find("0 bytes spill stores, 0 bytes spill loads") != std::string::npos;
}
// compileVerbose's report: no spills and no serialized wgmma (the JIT refuses such a kernel anyway; the check names
// it here). `what` says which variant failed.
void expectCompilesWithoutSpills(hc::NvrtcJit &jit, const plan::Kernel &k, const std::string &what) {
  const auto c = compileVerbose(jit, k, what);
  if (!c) return;
  EXPECT_TRUE(spillsNothing(*c)) << what << " " << k.id << ":\n" << c->log;
  EXPECT_EQ(c->log.find("serialized"), std::string::npos) << what << " " << k.id << ":\n" << c->log;
}

// The AdaLN streaming kernel's tiles form (adaln_tiles=1): each stage one TMA box of W (two tensor maps of the weight
// in w's place: a whole tile's box and an 8-row one for a range's last tile), 64 columns a stage, the ring first in
// shared memory; the shapes it takes (8 warps x 2 blocks: 128-row tiles at one CTA per SM) and refuses (tiles past a
// box's 256 rows, an odd block count); it compiles for sm_90a with no spills.
TEST(KernelEmit, AdalnTableTilesForm) {
  const auto full = adalnOps("full");
  const EmitOp &blk = full[0];
  hk::EmitOptions t = adalnTuning(0, 256, 1);
  t.sm90AdalnTiles = 1;
  t.sm90AdalnWarps = 8;
  auto k = emit(blk, "sm_90a", t);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->id.rfind("adaln_table_sm90_k2688_n96768_xf32_", 0), 0u) << k->id;
  EXPECT_NE(k->source.find("#define AL_TILES 1\n"), std::string::npos);
  EXPECT_NE(k->source.find("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"),
            std::string::npos);
  // (227 KiB - 1,024 - 8 rows of a) / (128 rows x 128 bytes + barriers) = 11 stages of 16 KiB
  EXPECT_NE(k->source.find("#define AL_KS 64\n#define AL_STAGES 11\n#define AL_WARPS 8\n#define AL_NBW 2\n"),
            std::string::npos);
  EXPECT_EQ(k->launch.block[0], 288);
  EXPECT_LE(k->launch.smemBytes, 232448);
  std::vector<std::string> names;
  for (const auto &p : k->params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "y0", "w_map", "w8_map", "bias", "rows"}));
  EXPECT_EQ(k->params[2].kind, plan::KernelParam::Kind::TensorMap);
  EXPECT_EQ(k->params[2].map.box, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(k->params[3].map.box, (std::vector<int64_t>{64, 8}));
  // Two CTAs per SM with 4 warps x 4 blocks (128-row tiles): (116,736 - 1,024 - 1,024 - a) / 16,400 = 4 stages.
  hk::EmitOptions two = t;
  two.sm90AdalnCtas = 2;
  two.sm90AdalnWarps = 4;
  two.sm90AdalnBlocks = 4;
  auto k2 = emit(blk, "sm_90a", two);
  EXPECT_NE(k2->source.find("#define AL_STAGES 4\n"), std::string::npos);
  EXPECT_NE(k2->source.find("#define AL_NBW 4\n"), std::string::npos);
  // The bulk form keeps the mma.sync kernel's parameters.
  EXPECT_EQ(emit(blk, "sm_90a", adalnTuning(0, 256, 1))->params[2].name, "w");
  hk::EmitOptions big = t;
  big.sm90AdalnBlocks = 4;  // 8 x 4 x 8 = 256 rows: still one box
  EXPECT_NE(emit(blk, "sm_90a", big)->source.find("#define AL_NBW 4\n"), std::string::npos);
  hk::EmitOptions tooBig = t;
  tooBig.set("adaln_warps", 8, "test");
  tooBig.set("adaln_blocks", 4, "test");
  tooBig.set("adaln_tiles", 1, "test");
  EXPECT_NO_THROW(tooBig.check("test"));
  tooBig.sm90AdalnWarps = 9;
  EXPECT_THROW(emit(blk, "sm_90a", tooBig), h3c::Error);
  EXPECT_THROW(t.set("adaln_blocks", 5, "test"), h3c::Error);
  hk::EmitOptions odd = t;
  odd.set("adaln_blocks", 3, "test");
  EXPECT_THROW(odd.check("test"), h3c::Error);
  // The small config (K = 96: one whole box and a half one, whose zero columns no chunk reads).
  const auto smallOps = adalnOps("small");
  auto small = emit(smallOps[0], "sm_90a", t);
  EXPECT_NE(small->source.find("#define AL_KS 64\n"), std::string::npos);
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  expectCompilesWithoutSpills(jit, *k, "adaln tiles 8 x 2, one CTA per SM");
  expectCompilesWithoutSpills(jit, *k2, "adaln tiles 4 x 4, two CTAs per SM");
}

// qk_norm / rope / qk_norm_rope at head_dim 128 take the pairs form (headops.cuh HO_PAIRS, 16 units a warp by
// default; head_pairs=0 the strided form), whose grid gives each warp head_pair_units units; odd or out-of-range unit
// counts are refused; a head_dim other than 128 (tiny: 16) keeps the strided form. Each compiles for both archs with
// no spills.
TEST(KernelEmit, HeadOpsPairsForm) {
  const auto ops = h3Ops(h3c::h3::namedConfig("full"));
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  int seen = 0;
  for (const EmitOp &o : ops) {
    if (o.op.kind != OpKind::QkNormRope && o.op.kind != OpKind::QkNorm && o.op.kind != OpKind::Rope) continue;
    ++seen;
    auto k = emit(o, "sm_100a");
    ASSERT_TRUE(k);
    EXPECT_NE(k->source.find("#define HO_G 16\n#define HO_PAIRS 1\n"), std::string::npos) << k->id;
    EXPECT_EQ(k->launch.grid[0].div, 8 * 16) << k->id;
    hk::EmitOptions strided;
    strided.headPairs = 0;
    auto ks = emit(o, "sm_100a", strided);
    EXPECT_NE(ks->source.find("#define HO_G 4\n#define HO_PAIRS 0\n"), std::string::npos) << ks->id;
    EXPECT_NE(ks->id, k->id);
    hk::EmitOptions two;
    two.headPairUnits = 2;
    EXPECT_EQ(emit(o, "sm_100a", two)->launch.grid[0].div, 16);
    hk::EmitOptions odd;
    odd.headPairUnits = 3;
    EXPECT_THROW(emit(o, "sm_100a", odd), h3c::Error);
    for (const char *arch : {"sm_90a", "sm_100a"})
      expectCompilesWithoutSpills(jit, *emit(o, arch), std::string("pairs form ") + arch);
  }
  EXPECT_EQ(seen, 4);  // the refiner's qk_norm_rope (no rope) and the blocks', qk_norm, rope
  for (const EmitOp &o : h3Ops(h3c::h3::namedConfig("tiny")))
    if (o.op.kind == OpKind::QkNormRope)
      EXPECT_NE(emit(o, "sm_100a")->source.find("#define HO_PAIRS 0\n"), std::string::npos);
  EXPECT_THROW(hk::EmitOptions().set("head_pair_units", 33, "test"), h3c::Error);
}

// f32_vec=1: the F32 linears (proj_in, audio_proj_in, proj_out, audio_proj_out) define FL_VEC (k-major swizzled
// k-tiles, 16-byte reads), another kernel text and id; the default defines nothing new. Both compile for both archs
// with no spills.
TEST(KernelEmit, F32LinearVecOption) {
  hk::EmitOptions vec;
  vec.set("f32_vec", 1, "test");
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  int seen = 0;
  for (const EmitOp &o : h3Ops(h3c::h3::namedConfig("full"))) {
    if (o.op.kind != OpKind::Linear || o.op.attrs.wDtype != h3c::DType::F32) continue;
    ++seen;
    auto k = emit(o, "sm_90a"), kv = emit(o, "sm_90a", vec);
    EXPECT_EQ(k->source.find("#define FL_VEC"), std::string::npos) << k->id;
    EXPECT_NE(kv->source.find("#define FL_VEC 1\n"), std::string::npos) << kv->id;
    EXPECT_NE(k->id, kv->id);
    EXPECT_EQ(k->launch.grid[0].div, kv->launch.grid[0].div);
    for (const char *arch : {"sm_90a", "sm_100a"})
      expectCompilesWithoutSpills(jit, *emit(o, arch, vec), std::string("f32_vec ") + arch);
  }
  EXPECT_GE(seen, 1);
}

// The backward's gradient kernels (docs/contract.md section 14): every kernel of a `--backward` plan (tiny shapes for
// both archs, full with H3C_NVRTC_VARIANTS=1) compiles to an ELF. The default plan runs the linear and attention
// gradients on the tensor cores (grad_linear_mma.cuh, grad_attention_mma.cuh: one later phase, scratch for bf(g) /
// the row statistics and bf(dO)); those kernels spill nothing. `--tune grad_mma=0` (tiny, sm_90a) keeps grad.cuh's
// one-thread forms, attention's with two later phases; norm_modulate_grad and gate_residual_grad have two (the
// tables' unit partials, then their folds), none where nothing reads the table's gradient (`--lora-rank 64
// --trainable lora`: the tables frozen; no y, no dtable, no scratch). (The one-thread forms' spills are not checked.)
TEST(NvrtcCompile, GradientKernelsOfBackwardPlans) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  if (!h3c::testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile (built without MLIR)";
  hc::NvrtcJit jit;
  // H3C_NVRTC_VARIANTS=1 adds the full shapes (the same templates with other constants: NVRTC time CI leaves out).
  const bool full = std::getenv("H3C_NVRTC_VARIANTS") != nullptr;
  struct Case {
    const char *cfg, *arch;
    bool mma, fuse = true;  // fuse: h3-fuse-grad (default), else --no-fuse-grad (rope_grad and every grad_add apart)
    bool lora = false;      // --lora-rank 64 --trainable lora: the AdaLN tables frozen, their gradients not computed
  };
  std::set<std::string> ids;
  for (const Case &c : {Case{"tiny", "sm_90a", true}, Case{"tiny", "sm_100a", true}, Case{"tiny", "sm_90a", false},
                        Case{"tiny", "sm_90a", true, false}, Case{"tiny", "sm_90a", true, true, true},
                        Case{"tiny", "sm_100a", true, true, true}, Case{"full", "sm_90a", true}}) {
    if (std::string(c.cfg) == "full" && !full) continue;
    const std::string what = std::string(c.cfg) + " " + c.arch + (c.mma ? "" : " grad_mma=0") +
                             (c.fuse ? "" : " --no-fuse-grad") + (c.lora ? " lora" : "");
    auto dir = tempDir(std::string("h3c-backward-plan-") + c.cfg + c.arch + (c.mma ? "" : "-ref") + (c.fuse ? "" : "-nf") +
                       (c.lora ? "-lora" : ""));
    std::filesystem::create_directories(dir);
    std::string out;
    ASSERT_EQ(h3c::testtool::runTool(std::string("fingerprint derive --config ") + c.cfg + " -o " + (dir / "fp.json").string(), &out), 0) << out;
    ASSERT_EQ(h3c::testtool::runTool("compile " + (dir / "fp.json").string() + " --backward --arch " + c.arch +
                                         (c.mma ? "" : " --tune grad_mma=0") + (c.fuse ? "" : " --no-fuse-grad") +
                                         (c.lora ? " --lora-rank 64 --trainable lora" : "") + " -o " +
                                         (dir / "plan").string(),
                                     &out),
              0)
        << out;
    const plan::Plan p = plan::loadPlan(dir / "plan");
    std::set<std::string> kinds;
    int tensorCore = 0;
    for (const plan::Op &op : p.backward()->ops) {
      ASSERT_TRUE(op.kernel) << op.where << " has no kernel";
      kinds.insert(plan::opKindName(op.kind));
      // h3-fuse-grad's forms: a qk_norm's norm gradient with the rope's folded in, a norm_modulate_grad's residual.
      if (op.kind == plan::OpKind::RmsNormGrad && op.attrs.rotaryDim > 0) kinds.insert("rms_norm_grad+rope");
      if (op.kind == plan::OpKind::NormModulateGrad && op.attrs.epilogue == plan::Epilogue::Residual)
        kinds.insert("norm_modulate_grad+residual");
      const plan::Kernel &k = p.kernel(op);
      const bool isMma = k.id.find("_mma_") != std::string::npos;
      const bool scratch = std::any_of(k.params.begin(), k.params.end(), [](const plan::KernelParam &q) {
        return q.kind == plan::KernelParam::Kind::Scratch;
      });
      // (A linear gradient reading a grad_round's bf16 g, h3-fuse-grad, is the GEMM alone: no phase, no scratch.)
      const bool gbIn = p.value(op.in[0]).dtype == h3c::DType::BF16 && op.kind != plan::OpKind::AttentionGrad;
      if (isMma) {
        ++tensorCore;
        EXPECT_TRUE(c.mma) << what << ": " << k.id;
        EXPECT_EQ(k.phases.size(), gbIn ? 0u : 1u) << k.id;
        EXPECT_EQ(scratch, !gbIn) << k.id;
      } else if (op.kind == plan::OpKind::AttentionGrad) {
        EXPECT_FALSE(c.mma) << what << ": attention_grad kept the one-thread form";
        EXPECT_EQ(k.phases.size(), 2u) << k.id;
        EXPECT_TRUE(scratch) << k.id;
      } else if (op.kind == plan::OpKind::NormModulateGrad || op.kind == plan::OpKind::GateResidualGrad) {
        // the table's unit partials, their fold; with the tables frozen neither (nor a weight's: the norms have none)
        EXPECT_EQ(op.attrs.tableGrad, c.lora ? 0 : 1) << k.id;
        EXPECT_EQ(k.phases.size(), c.lora ? 0u : 2u) << k.id;
        EXPECT_EQ(scratch, !c.lora) << k.id;
        if (c.lora) kinds.insert(plan::opKindName(op.kind) + std::string("-table"));
      } else {
        EXPECT_TRUE(k.phases.empty()) << k.id;
      }
      if (!ids.insert(k.id + c.arch).second) continue;
      const auto cv = compileVerbose(jit, k, what + " " + op.where);
      if (!cv) continue;
      EXPECT_EQ(cv->cubin.compare(0, 4, "\x7f" "ELF"), 0) << k.id;
      if (isMma) {
        EXPECT_TRUE(spillsNothing(*cv)) << what << " " << k.id << ":\n" << cv->log;
      }
    }
    // Every linear gradient of the tiny and full plans has bf16 operands: all of them and attention's on the tensor
    // cores by default.
    if (c.mma) {
      EXPECT_GT(tensorCore, 0) << what;
    } else {
      EXPECT_EQ(tensorCore, 0) << what;
    }
    for (const char *k : {"grad_add", "linear_grad_x", "linear_grad_w", "swiglu_grad", "rms_norm_grad",
                          "norm_modulate_grad", "gate_residual_grad", "attention_grad", "silu_grad",
                          "adaln_table_grad", "pack_grad", "unpack_grad"})
      EXPECT_EQ(kinds.count(k), c.lora && (std::string(k) == "silu_grad" || std::string(k) == "adaln_table_grad") ? 0u : 1u)
          << what << ": '" << k << "' (the time embedder's gradients only where the tables train)";
    for (const char *k : {"norm_modulate_grad-table", "gate_residual_grad-table"})
      EXPECT_EQ(kinds.count(k), c.lora ? 1u : 0u) << what << ": '" << k << "' only where the tables are frozen";
    for (const char *k : {"grad_round", "rms_norm_grad+rope", "norm_modulate_grad+residual"})
      EXPECT_EQ(kinds.count(k), c.fuse ? 1u : 0u) << what << ": '" << k << "' only where h3-fuse-grad runs";
    EXPECT_EQ(kinds.count("rope_grad"), c.fuse ? 0u : 1u) << what << ": rope_grad only under --no-fuse-grad";
    std::filesystem::remove_all(dir);
  }
}

// A qk_norm's rms_norm_grad at the full config's width (56 heads of 128: the group in registers, 4 channels a lane),
// with and without the rope_grad folded in (h3-fuse-grad), its weight frozen (dx bf16) and trained (dx F32 and dw):
// compiles for sm_90a and sm_100a without spilling (GpuBackward.MemoryBound* compares the kernels with the CPU).
TEST(NvrtcCompile, QkNormGradientAtFullWidthKeepsTheGroupInRegisters) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  const int64_t heads = 56, d = 128, R = 96;
  for (const bool rope : {false, true})
    for (const bool trained : {false, true}) {
      const EmitOp e = qkNormGrad(heads, d, rope ? R : 0, trained);
      for (const char *arch : {"sm_90a", "sm_100a"}) {
        const plan::Kernel k = *emit(e, arch);
        EXPECT_NE(k.source.find("#define GR_G 128\n"), std::string::npos) << k.id;
        expectCompilesWithoutSpills(jit, k, fmt::format("qk-norm gradient{}{} {}", rope ? " with the rope" : "",
                                                        trained ? ", weight trained" : "", arch));
      }
    }
}

// attention_grad at head_dim 128 (the full and small configs): on sm_90a the Hopper form (grad_attention_sm90.cuh,
// wgmma) at both kv_block values, its wgmmas asynchronous and nothing spilled; on sm_100a and with wgmma off the
// mma.sync form, which the GPU checks compare it with byte for byte. Without H3C_NVRTC_VARIANTS=1 (CI time: the
// pipelined Hopper form takes ptxas ~4 s) the plans' kernels only: kv_block 128, wgmma on.
TEST(NvrtcCompile, AttentionGradOnHopperNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  for (int64_t kv : {64, 128})
    for (const std::string arch : {"sm_90a", "sm_100a"})
      for (bool wgmma : {true, false}) {
        if (arch == "sm_100a" && !wgmma) continue;
        if (!nvrtcVariants() && (kv != 128 || !wgmma)) continue;
        hk::EmitOptions opt;
        opt.wgmma = wgmma;
        const plan::Kernel k = *emit(attentionGrad(48, 128, kv), arch, opt);
        const bool hopper = arch == "sm_90a" && wgmma;
        EXPECT_EQ(k.id.find("attention_grad_mma_sm90_h48_d128_kv" + std::to_string(kv)) == 0, hopper) << k.id;
        EXPECT_EQ(k.source.find("wgmma.mma_async") != std::string::npos, hopper) << k.id;
        ASSERT_EQ(k.phases.size(), 1u) << k.id;
        expectCompilesWithoutSpills(jit, k, arch + " kv " + std::to_string(kv) + (wgmma ? "" : " wgmma=0"));
      }
  // The ring at 3 stages (attn_grad_stages=3), the lse form the plans run.
  if (nvrtcVariants()) {
    hk::EmitOptions st3;
    st3.sm90AttnGradStages = 3;
    expectCompilesWithoutSpills(jit, *emit(attentionGrad(48, 128, 128, true, true), "sm_90a", st3), "sm_90a lse 3 stages");
    hk::EmitOptions counts;  // dq's counts by the compute warpgroups
    counts.sm90AttnGradSync = 0;
    expectCompilesWithoutSpills(jit, *emit(attentionGrad(48, 128, 128, true, true), "sm_90a", counts),
                                "sm_90a lse compute counts");
    hk::EmitOptions rows;  // the default: the middle tiles' dq adds two rows a warp instruction; 0 the accumulator
    EXPECT_NE(emit(attentionGrad(48, 128, 128, true, true), "sm_90a", rows)->source.find("#define GB_DQ_ROWS 2\n"),
              std::string::npos);  // layout's, 1 a row an instruction
    rows.sm90AttnGradRows = 0;
    const plan::Kernel kr = *emit(attentionGrad(48, 128, 128, true, true), "sm_90a", rows);
    EXPECT_NE(kr.source.find("#define GB_DQ_ROWS 0\n"), std::string::npos) << kr.id;
    expectCompilesWithoutSpills(jit, kr, "sm_90a lse dq adds in the accumulator layout");
    rows.sm90AttnGradRows = 1;
    const plan::Kernel kr1 = *emit(attentionGrad(48, 128, 128, true, true), "sm_90a", rows);
    EXPECT_NE(kr1.source.find("#define GB_DQ_ROWS 1\n"), std::string::npos) << kr1.id;
    expectCompilesWithoutSpills(jit, kr1, "sm_90a lse dq adds a row a v2 reduction");
  }
  // dv stored bf16 (h3-fuse-grad: the grad_round that alone read it folded in), the plans' lse form.
  {
    EmitOp dvbf = attentionGrad(48, 128, 128, true, true);
    dvbf.vals.out[2].dtype = h3c::DType::BF16;
    const plan::Kernel k = *emit(dvbf, "sm_90a");
    EXPECT_NE(k.id.find("_lse_dvbf"), std::string::npos) << k.id;
    EXPECT_NE(k.source.find("#define GR_DV_BF 1\n"), std::string::npos) << k.id;
    expectCompilesWithoutSpills(jit, k, "sm_90a lse, dv stored bf16");
  }
  // head_dim 64 keeps the mma.sync form on sm_90a.
  EXPECT_EQ(emit(attentionGrad(2, 64, 128), "sm_90a")->id.find("attention_grad_mma_h2_d64"), 0u);
}

// Attention's row statistics saved by the forward (h3-fuse-grad, docs/contract.md section 14): the full config's
// Hopper attention (the plan's default schedule) with its `lse` output and the Hopper backward reading it instead of
// its statistics walk compile without spills (the mma.sync forms' with lse: the tiny backward plans' kernels,
// GradientKernelsOfBackwardPlans, and its forward below at the tiny shape).
TEST(NvrtcCompile, AttentionRowStatisticsForms) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  EmitOp fwd = fullAttention();
  fwd.op.attrs.lse = 1;
  fwd.op.out.push_back(fwd.op.out[0] + ":lse");
  plan::Value l = fwd.vals.out[0];
  l.name = fwd.op.out.back();
  l.cols = fwd.op.attrs.heads;
  l.dtype = h3c::DType::F32;
  fwd.vals.out.push_back(l);
  auto hasLse = [](const plan::Kernel &k) {
    return std::any_of(k.params.begin(), k.params.end(), [](const plan::KernelParam &q) { return q.name == "lse"; });
  };
  const plan::Kernel f9 = *emit(fwd, "sm_90a");
  EXPECT_NE(f9.source.find("#define A9_LSE 1\n"), std::string::npos) << f9.id;
  EXPECT_TRUE(hasLse(f9)) << f9.id;
  expectCompilesWithoutSpills(jit, f9, "attention with lse");
  EmitOp tinyFwd = fwd;
  tinyFwd.op.attrs.heads = 2;
  tinyFwd.op.attrs.headDim = 16;
  for (auto &v : tinyFwd.vals.in) v.cols = 32;
  tinyFwd.vals.out[0].cols = 32;
  tinyFwd.vals.out[1].cols = 2;
  const plan::Kernel ft = *emit(tinyFwd, "sm_90a");
  EXPECT_NE(ft.source.find("#define AT_LSE 1\n"), std::string::npos) << ft.id;
  expectCompilesWithoutSpills(jit, ft, "mma.sync attention with lse");
  const plan::Kernel b9 = *emit(attentionGrad(56, 128, 128, true, true), "sm_90a");
  EXPECT_EQ(b9.id.find("attention_grad_mma_sm90_h56_d128_kv128_lse_"), 0u) << b9.id;
  EXPECT_NE(b9.source.find("#define GB_LSE 1\n"), std::string::npos) << b9.id;
  EXPECT_TRUE(hasLse(b9)) << b9.id;
  expectCompilesWithoutSpills(jit, b9, "attention_grad with lse");
}

// The bf16 linears' dX (linear_grad_x, docs/contract.md section 14) of config c's backward, {N, K}: context_embedder,
// to_q / to_k / to_v, to_out, fc1, fc2, and with unmerged LoRA at rank 64 x's LoRA part bf(dt) down (N = 64: one
// k-block) and dt = bf(g) up (K = 64: the skinny form).
std::vector<std::pair<int64_t, int64_t>> gradXShapes(const h3c::h3::Config &c) {
  const int64_t H = c.hidden_size, I = c.innerDim(), F = c.ffn_dim;
  return {{H, c.text_dim}, {I, H}, {H, I}, {2 * F, H}, {H, F}, {64, H}, {64, I}, {64, F}, {I, 64}, {H, 64}};
}

// compileVerbose's report for a wgmma kernel of every entry: no spills in any entry, no serialized wgmma and no
// warpgroup.arrive injected by ptxas (C7519: a merge of accumulators it could not keep in flight).
void expectQualifiedWgmma(hc::NvrtcJit &jit, const plan::Kernel &k, const std::string &what) {
  const auto c = compileVerbose(jit, k, what);
  if (!c) return;
  size_t reports = 0;  // one per entry
  std::istringstream lines(c->log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("spill stores") == std::string::npos) continue;
    ++reports;
    EXPECT_NE(line.find(", 0 bytes spill stores, 0 bytes spill loads"), std::string::npos) << what << " " << k.id << ": " << line;
  }
  EXPECT_EQ(reports, 1 + k.phases.size()) << what << " " << k.id << ":\n" << c->log;
  EXPECT_EQ(c->log.find("serialized"), std::string::npos) << what << " " << k.id << ":\n" << c->log;
  EXPECT_EQ(c->log.find("warpgroup.arrive is injected"), std::string::npos) << what << " " << k.id << ":\n" << c->log;
}

// The Hopper dX (grad_linear_sm90.cuh) at every dX shape of the full and small configs on sm_90a (NVRTC: one kernel
// per tile width, every shape with H3C_NVRTC_VARIANTS=1): its wgmmas asynchronous, nothing spilled, the tile 192 wide where K is 5,376 (whole waves) and 128 where that pads K least; a
// shape with N not a multiple of 64 (the last k-block's 2 chunks); LoRA's dt (K = 64, N a multiple of 128) on the
// 64-wide tile. The other skinny dX (K <= 64), sm_100a and wgmma off keep the mma.sync form (the GPU check Kernels.LinearGradX compares the two byte for byte). H3C_NVRTC_VARIANTS=1
// adds the tunings (grad_x_bn, grad_x_stages, grad_x_inflight).
TEST(NvrtcCompile, LinearGradXOnHopperNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  std::vector<std::pair<int64_t, int64_t>> shapes = gradXShapes(h3c::h3::namedConfig("full"));
  for (const auto &s : gradXShapes(h3c::h3::namedConfig("small"))) shapes.push_back(s);
  shapes.push_back({200, 128});
  std::set<std::string> seen;
  for (const auto &[N, K] : shapes) {
    const plan::Kernel k = *emit(linearGradX(N, K), "sm_90a");
    const bool hopper = K > 64 || (K == 64 && N % 128 == 0);  // (LoRA's dt: the 64-wide tile, grad_x_narrow)
    EXPECT_EQ(k.id.find(fmt::format("linear_grad_x_mma_sm90_n{}_k{}_", N, K)) == 0, hopper) << k.id;
    EXPECT_EQ(k.source.find("wgmma.mma_async") != std::string::npos, hopper) << k.id;
    ASSERT_EQ(k.phases.size(), 1u) << k.id;
    // The tile width by K: 192 at 5,376 (28 column tiles: whole waves), else the widest that pads K least.
    const std::map<int64_t, const char *> width = {{64, "64"},    {128, "128"},  {160, "192"},  {192, "192"},  {256, "256"},
                                                   {512, "256"},  {5120, "256"}, {5376, "192"}, {7168, "256"},
                                                   {14336, "256"}};
    if (hopper) {
      ASSERT_TRUE(width.count(K)) << K;
      EXPECT_NE(k.source.find(std::string("#define GX_BN ") + width.at(K) + "\n"), std::string::npos) << k.id;
    }
    // NVRTC compiles one kernel per tile width (the same template; N and K are constants in it) unless
    // H3C_NVRTC_VARIANTS=1 asks for every shape: CI's time (every shape ran 11 s of the 2-core test command).
    const std::string form = hopper ? std::string("bn ") + width.at(K) : std::string("skinny");
    if (seen.insert(k.id).second && (nvrtcVariants() || seen.insert(form).second))
      expectQualifiedWgmma(jit, k, fmt::format("dX N {} K {}", N, K));
    if (!hopper || N < 5000) continue;
    // 2-CTA clusters sharing W's boxes (grad_x_cluster=2; Kernels.LinearGradX compares it byte for byte too).
    hk::EmitOptions pair;
    pair.sm90GradXCluster = 2;
    const plan::Kernel kp = *emit(linearGradX(N, K), "sm_90a", pair);
    EXPECT_EQ(kp.phases.at(0).launch.cluster[0], 2) << kp.id;
    EXPECT_NE(kp.source.find("#define GX_CLUSTER 2\n"), std::string::npos) << kp.id;
    if (seen.insert(kp.id).second && (nvrtcVariants() || seen.insert("cluster 2").second))
      expectQualifiedWgmma(jit, kp, fmt::format("dX N {} K {} cluster 2", N, K));
  }
  // LoRA's dt (K = 64, grad_x_narrow=1): the 64-wide tile with a 6-stage ring, over bf16 g as h3-fuse-grad leaves it,
  // at the full config's three N (Kernels.LinearGradX compares it with the mma.sync form byte for byte).
  {
    hk::EmitOptions narrow;
    narrow.sm90GradXNarrow = 1;
    for (int64_t N : {5376, 7168, 28672}) {
      const plan::Kernel k = *emit(linearGradX(N, 64, false, true), "sm_90a", narrow);
      EXPECT_EQ(k.id.find(fmt::format("linear_grad_x_mma_sm90_n{}_k64_gb_", N)), 0u) << k.id;
      EXPECT_NE(k.source.find("#define GX_BN 64\n"), std::string::npos) << k.id;
      EXPECT_NE(k.source.find("#define GX_STAGES 6\n"), std::string::npos) << k.id;
      if (N == 28672) expectQualifiedWgmma(jit, k, fmt::format("dX N {} K 64 (LoRA's dt), bf16 g", N));
    }
  }
  // h3-fuse-grad's residual epilogue (dx = residual + dX, one F32 load and add per output) at both tile widths the
  // fused ops take (q / k: 192; the LoRA path's dX into to_out's and fc2's inputs: 256), qualified as above (the
  // mma.sync and one-thread forms' compile in GradientKernelsOfBackwardPlans).
  // They read g as h3-fuse-grad leaves it: a grad_round's bf16 bf(g), the GEMM alone (no rounding phase, its map
  // over g itself, no scratch).
  for (const auto &[N, K] : {std::pair<int64_t, int64_t>{7168, 5376}, {64, 14336}}) {
    const plan::Kernel k = *emit(linearGradX(N, K, true, true), "sm_90a");
    EXPECT_EQ(k.id.find(fmt::format("linear_grad_x_mma_sm90_n{}_k{}_res_gb_", N, K)), 0u) << k.id;
    EXPECT_NE(k.source.find("#define GR_RESIDUAL 1\n"), std::string::npos) << k.id;
    EXPECT_TRUE(k.phases.empty()) << k.id;
    EXPECT_TRUE(std::any_of(k.params.begin(), k.params.end(), [](const plan::KernelParam &q) {
      return q.name == "residual";
    })) << k.id;
    EXPECT_FALSE(std::any_of(k.params.begin(), k.params.end(), [](const plan::KernelParam &q) {
      return q.kind == plan::KernelParam::Kind::Scratch;
    })) << k.id;
    expectQualifiedWgmma(jit, k, fmt::format("dX N {} K {} residual, bf16 g", N, K));
  }
  // h3-fuse-grad's LoRA down path taken in (lora_k 64: its bf(dt) and down slot, one more stage of the ring and 32
  // more accumulators per 64 columns) at the three tile widths (fc1: 192, q / k / v and fc2: 256, with and without the
  // residual; 128 by tuning) and in 2-CTA clusters, qualified as above; the mma.sync form (sm_100a) compiles without
  // spilling. Kernels.LinearGradX compares them with the two ops they replace, byte for byte.
  {
    struct Fused {
      int64_t N, K;
      bool residual;
      int bn, cluster;
    };
    for (const Fused &f : {Fused{28672, 5376, false, 0, 1}, Fused{7168, 5376, true, 0, 1}, Fused{5376, 14336, false, 0, 1},
                           Fused{5376, 7168, true, 128, 1}, Fused{5376, 7168, false, 0, 2}}) {
      hk::EmitOptions o;
      o.sm90GradXBn = f.bn;
      o.sm90GradXCluster = f.cluster;
      const plan::Kernel k = *emit(linearGradX(f.N, f.K, f.residual, true, 64), "sm_90a", o);
      EXPECT_EQ(k.id.find(fmt::format("linear_grad_x_mma_sm90_n{}_k{}{}_gb_lora64_", f.N, f.K, f.residual ? "_res" : "")),
                0u)
          << k.id;
      EXPECT_NE(k.source.find("#define GX_LORA_K 64\n"), std::string::npos) << k.id;
      for (const char *name : {"lora_t", "t_map", "d_map"})
        EXPECT_TRUE(std::any_of(k.params.begin(), k.params.end(), [&](const plan::KernelParam &q) {
          return q.name == name;
        })) << k.id << " " << name;
      if (f.residual || f.bn == 0 || nvrtcVariants())
        expectQualifiedWgmma(jit, k, fmt::format("dX N {} K {} with a LoRA down path, bn {} cluster {}", f.N, f.K,
                                                 f.bn, f.cluster));
    }
    const plan::Kernel m = *emit(linearGradX(7168, 5376, true, true, 64), "sm_100a");
    EXPECT_EQ(m.id.find("linear_grad_x_mma_n7168_k5376_res_gb_lora64_"), 0u) << m.id;
    EXPECT_NE(m.source.find("#define GL_LORA_K 64\n"), std::string::npos) << m.id;
    expectCompilesWithoutSpills(jit, m, "sm_100a dX with a LoRA down path");
    // A path wider than one k-block, or taken into LoRA's own dt (64 columns), is refused with the op's place.
    EXPECT_THROW(emit(linearGradX(7168, 5376, false, true, 128), "sm_90a"), h3c::Error);
    EXPECT_THROW(emit(linearGradX(5376, 64, false, true, 64), "sm_90a"), h3c::Error);
    EXPECT_THROW(emit(linearGradX(5376, 64, false, true, 64), "sm_100a"), h3c::Error);
  }
  // h3-fuse-grad's swiglu_grad taken in (fc2's dX, K = 14,336: its dy): the store of each pair of dX values through
  // swiglu_grad's operations with the pair's v and g of swiglu_x, dx bf16 or F32 [rows, 2K], with and without the
  // LoRA path, Hopper (1-CTA and 2-CTA) qualified as above, mma.sync (sm_100a) without spills. Kernels.LinearGradX
  // compares them with the dX then swiglu_grad's kernel, byte for byte. The one-thread form refuses it.
  {
    for (int sw : {2, 1})
      for (int64_t lora : {int64_t(64), int64_t(0)})
        for (int cluster : {1, 2}) {
          // (CI time, ~5 s a compile: bf16 dx with the LoRA path in 1-CTA and 2-CTA forms and F32 dx without it, so
          // each of the template's branches compiles; every combination with H3C_NVRTC_VARIANTS=1)
          const bool ci = (sw == 2 && lora == 64) || (sw == 1 && lora == 0 && cluster == 1);
          if (!nvrtcVariants() && !ci) continue;
          hk::EmitOptions o;
          o.sm90GradXCluster = cluster;
          const plan::Kernel k = *emit(linearGradX(5376, 14336, false, true, lora, sw), "sm_90a", o);
          EXPECT_NE(k.id.find(sw == 2 ? "_swiglu_bfout_" : "_swiglu_"), std::string::npos) << k.id;
          EXPECT_NE(k.source.find("#define GR_DX_SWIGLU 1\n"), std::string::npos) << k.id;
          EXPECT_NE(k.source.find(fmt::format("#define GR_DX_BF {}\n", sw == 2 ? 1 : 0)), std::string::npos) << k.id;
          EXPECT_TRUE(std::any_of(k.params.begin(), k.params.end(), [](const plan::KernelParam &q) {
            return q.name == "swiglu_x";
          })) << k.id;
          expectQualifiedWgmma(jit, k, fmt::format("fc2's dX with swiglu_grad taken in, dx {}, lora_k {}, cluster {}",
                                                   sw == 2 ? "bf16" : "F32", lora, cluster));
        }
    const plan::Kernel m = *emit(linearGradX(5376, 14336, false, true, 64, 2), "sm_100a");
    EXPECT_EQ(m.id.find("linear_grad_x_mma_n5376_k14336_gb_lora64_swiglu_bfout_"), 0u) << m.id;
    expectCompilesWithoutSpills(jit, m, "sm_100a dX with swiglu_grad taken in");
    hk::EmitOptions oneThread;
    oneThread.gradMma = 0;
    EXPECT_THROW(emit(linearGradX(5376, 14336, false, true, 0, 2), "sm_90a", oneThread), h3c::Error);
  }
  // A dX storing bf(g) itself (h3-fuse-grad: the grad_round that alone read it folded in): LoRA's dt on the Hopper
  // 64-wide tile and the mma.sync skinny form (sm_100a), without spills.
  {
    EmitOp dt = linearGradX(28672, 64, false, true);
    dt.vals.out[0].dtype = h3c::DType::BF16;
    hk::EmitOptions narrow;
    narrow.sm90GradXNarrow = 1;
    for (const char *arch : {"sm_90a", "sm_100a"}) {
      const plan::Kernel k = *emit(dt, arch, narrow);
      EXPECT_NE(k.id.find("_bfout"), std::string::npos) << k.id;
      EXPECT_NE(k.source.find("#define GR_DX_BF 1\n"), std::string::npos) << k.id;
      expectCompilesWithoutSpills(jit, k, std::string(arch) + " LoRA's dt stored bf16");
    }
  }
  // sm_100a and wgmma off: the mma.sync form.
  hk::EmitOptions off;
  off.wgmma = false;
  hk::EmitOptions noGradX;
  noGradX.sm90GradX = 0;
  for (const auto &[arch, opt] : {std::pair<std::string, hk::EmitOptions>{"sm_100a", {}}, {"sm_90a", off},
                                  {"sm_90a", noGradX}}) {
    const plan::Kernel k = *emit(linearGradX(28672, 5376), arch, opt);
    EXPECT_EQ(k.id.find("linear_grad_x_mma_n28672_k5376_"), 0u) << arch << " " << k.id;
  }
  const plan::Kernel mmaForm = *emit(linearGradX(28672, 5376), "sm_100a");
  expectCompilesWithoutSpills(jit, mmaForm, "sm_100a dX");
  // Tunings out of range are refused with the op's place.
  hk::EmitOptions wide;
  wide.sm90GradXBn = 160;
  EXPECT_THROW(emit(linearGradX(28672, 5376), "sm_90a", wide), h3c::Error);
  hk::EmitOptions deep;
  deep.sm90GradXStages = 5;  // 5 x 48 KiB of the 256-wide tile do not fit
  EXPECT_THROW(emit(linearGradX(7168, 5120), "sm_90a", deep), h3c::Error);
  // EmitOptions::check refuses the same before anything is emitted (a refused emission would leave a kernel-less op).
  hk::EmitOptions t;
  EXPECT_NO_THROW(t.check("test"));
  t.set("grad_x_bn", 160, "test");
  EXPECT_THROW(t.check("test"), h3c::Error);
  t = hk::EmitOptions();
  t.set("linear_grad_x:grad_x_stages", 5, "test");  // checked at the widest tile
  EXPECT_THROW(t.check("test"), h3c::Error);
  t = hk::EmitOptions();
  t.set("grad_x_bn", 192, "test");
  t.set("grad_x_stages", 5, "test");
  t.set("grad_w_stages", 6, "test");
  EXPECT_NO_THROW(t.check("test"));
  if (!nvrtcVariants()) return;
  for (int bn : {128, 192, 256})
    for (int stages : {2, 3, 4})
      for (int inflight : {0, 1}) {
        hk::EmitOptions o;
        o.sm90GradXBn = bn;
        o.sm90GradXStages = stages;
        o.sm90GradXInflight = inflight;
        const plan::Kernel k = *emit(linearGradX(5376, 14336), "sm_90a", o);
        expectQualifiedWgmma(jit, k, fmt::format("dX bn {} stages {} inflight {}", bn, stages, inflight));
      }
}

// The bf16 linears' dW (linear_grad_w with the weight trained) of config c's backward, {N, K}: the weights of
// gradXShapes' linears, and with unmerged LoRA at rank 64 the up slots [N, 64] and the down slots [64, K].
std::vector<std::pair<int64_t, int64_t>> gradWShapes(const h3c::h3::Config &c) {
  const int64_t H = c.hidden_size, I = c.innerDim(), F = c.ffn_dim;
  return {{H, c.text_dim}, {I, H}, {H, I}, {2 * F, H}, {H, F}, {I, 64}, {H, 64}, {2 * F, 64}, {64, H}, {64, I}, {64, F}};
}

// The Hopper dW (grad_linear_w_sm90.cuh) at every dW shape of the full and small configs on sm_90a (NVRTC: one kernel
// per form and config, every shape with H3C_NVRTC_VARIANTS=1), with and without
// the bias's gradient: wgmmas asynchronous, no warpgroup.arrive injected (the unit forms' chunk counts are chosen per
// unit, outside the chains), nothing spilled; sm_100a, wgmma off and `--tune grad_w_sm90=0` keep the mma.sync form.
TEST(NvrtcCompile, LinearGradWOnHopperNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  std::vector<std::pair<int64_t, int64_t>> shapes = gradWShapes(h3c::h3::namedConfig("full"));
  const size_t fullShapes = shapes.size();
  for (const auto &s : gradWShapes(h3c::h3::namedConfig("small"))) shapes.push_back(s);
  std::set<std::string> seen;
  for (size_t i = 0; i < shapes.size(); ++i)
    for (bool bias : {false, true}) {
      const auto [N, K] = shapes[i];
      if (bias && N != 5376 && N != 192) continue;  // the bias's gradient: phase 0 only (one shape per config)
      const plan::Kernel k = *emit(linearGradW(N, K, bias), "sm_90a");
      EXPECT_EQ(k.id.find(fmt::format("linear_grad_w_mma_sm90_n{}_k{}_", N, K)), 0u) << k.id;
      EXPECT_NE(k.source.find("wgmma.mma_async"), std::string::npos) << k.id;
      ASSERT_EQ(k.phases.size(), 1u) << k.id;
      EXPECT_EQ(std::count_if(k.params.begin(), k.params.end(),
                              [](const plan::KernelParam &q) { return q.kind == plan::KernelParam::Kind::TensorMap; }),
                2)
          << k.id;
      // NVRTC compiles the first kernel of each form per config (a base weight, LoRA's up [N, 64] and down [64, K]
      // slots, with and without the bias) unless H3C_NVRTC_VARIANTS=1 asks for every shape (26 kernels: 25 s of the
      // 2-core test command).
      const std::string form = fmt::format("{} {} {} {}", i < fullShapes, N == 64, K == 64, bias);
      if (seen.insert(k.id).second && (nvrtcVariants() || seen.insert(form).second))
        expectQualifiedWgmma(jit, k, fmt::format("dW N {} K {} bias {}", N, K, bias));
    }
  // A grad_round's bf16 g (h3-fuse-grad; the LoRA up slot's dW): the GEMM alone, its per-item map over g, no
  // scratch; qualified as above. With a bias gradient (dbias sums the F32 g) it is refused.
  {
    const plan::Kernel k = *emit(linearGradW(28672, 64, false, true), "sm_90a");
    EXPECT_EQ(k.id.find("linear_grad_w_mma_sm90_n28672_k64_gb_"), 0u) << k.id;
    EXPECT_TRUE(k.phases.empty()) << k.id;
    EXPECT_FALSE(std::any_of(k.params.begin(), k.params.end(), [](const plan::KernelParam &q) {
      return q.kind == plan::KernelParam::Kind::Scratch;
    })) << k.id;
    expectQualifiedWgmma(jit, k, "dW N 28672 K 64, bf16 g");
    EXPECT_THROW(emit(linearGradW(5376, 5376, true, true), "sm_90a"), h3c::Error);
  }
  hk::EmitOptions off;
  off.wgmma = false;
  hk::EmitOptions noGradW;
  noGradW.sm90GradW = 0;
  for (const auto &[arch, opt] : {std::pair<std::string, hk::EmitOptions>{"sm_100a", {}}, {"sm_90a", off},
                                  {"sm_90a", noGradW}}) {
    const plan::Kernel k = *emit(linearGradW(28672, 5376, false), arch, opt);
    EXPECT_EQ(k.id.find("linear_grad_w_mma_n28672_k5376_"), 0u) << arch << " " << k.id;
  }
  hk::EmitOptions deep;
  deep.sm90GradWStages = 7;
  EXPECT_THROW(emit(linearGradW(5376, 7168, false), "sm_90a", deep), h3c::Error);
  // grad_w_narrow=1 with N or K at most 64 (LoRA's dA and dB): the 64 x 64 tiles whose consumers take the units in
  // turn, twice the stages; any wider weight keeps the 128 x 128 tile (qualified above), as do 0 and the default (2)
  // where the other dimension is over 8,192.
  {
    hk::EmitOptions narrow;
    narrow.sm90GradWNarrow = 1;
    const plan::Kernel dA = *emit(linearGradW(64, 5376, false), "sm_90a", narrow);
    EXPECT_NE(dA.source.find("#define GW_NARROW 1\n"), std::string::npos) << dA.id;
    EXPECT_NE(dA.source.find("#define GW_STAGES 10\n"), std::string::npos) << dA.id;
    EXPECT_NE(dA.id.find("_t64_"), std::string::npos) << dA.id;
    expectQualifiedWgmma(jit, dA, "dW N 64 K 5376, the 64 x 64 tiles");
    const plan::Kernel dB = *emit(linearGradW(28672, 64, false, true), "sm_90a", narrow);
    EXPECT_NE(dB.source.find("#define GW_NARROW 1\n"), std::string::npos) << dB.id;
    expectQualifiedWgmma(jit, dB, "dW N 28672 K 64, bf16 g, the 64 x 64 tiles");
    const plan::Kernel base = *emit(linearGradW(5376, 5376, false), "sm_90a", narrow);
    EXPECT_NE(base.source.find("#define GW_NARROW 0\n"), std::string::npos) << base.id;
    const plan::Kernel byShape = *emit(linearGradW(64, 8192, false), "sm_90a");
    EXPECT_NE(byShape.source.find("#define GW_NARROW 1\n"), std::string::npos) << byShape.id;
    const plan::Kernel longK = *emit(linearGradW(64, 8256, false), "sm_90a");
    EXPECT_NE(longK.source.find("#define GW_NARROW 0\n"), std::string::npos) << longK.id;
    EXPECT_EQ(longK.id.find("_t64"), std::string::npos) << longK.id;
    const plan::Kernel longN = *emit(linearGradW(28672, 64, false, true), "sm_90a");
    EXPECT_NE(longN.source.find("#define GW_NARROW 0\n"), std::string::npos) << longN.id;
    hk::EmitOptions never;
    never.sm90GradWNarrow = 0;
    const plan::Kernel plain = *emit(linearGradW(64, 5376, false), "sm_90a", never);
    EXPECT_NE(plain.source.find("#define GW_NARROW 0\n"), std::string::npos) << plain.id;
    EXPECT_EQ(plain.id.find("_t64"), std::string::npos) << plain.id;
  }
  if (!nvrtcVariants()) return;
  for (int stages : {2, 3, 4, 6}) {
    hk::EmitOptions o;
    o.sm90GradWStages = stages;
    expectQualifiedWgmma(jit, *emit(linearGradW(5376, 14336, true), "sm_90a", o), fmt::format("dW stages {}", stages));
  }
}

// lora_down's 64-wide Hopper tile (lora_down:gemm_bn=64) at the full config's rank-64 widths and its rings of 3, 4
// and 6 stages: no spill, no serialized wgmma (the GPU's JIT would refuse the kernel).
TEST(NvrtcCompile, LoraDownNarrowTileNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  for (int64_t K : {5376, 14336})
    for (int stages : {3, 4, 6}) {
      hk::EmitOptions n = hk::EmitOptions::planDefaults();
      n.set("lora_down:gemm_bn", 64, "test");
      n.set("lora_down:gemm_stages", stages, "test");
      const plan::OpAttrs a = with(attrs({{"K", double(K)}, {"N", 64}}), DType::BF16, DType::BF16, DType::BF16);
      const auto k = emit(op(OpKind::LoraDown, "down", a, kchunks(1), 1), "sm_90a", n);
      ASSERT_TRUE(k);
      expectCompilesWithoutSpills(jit, *k, fmt::format("lora_down K={} gemm_bn=64 stages={}", K, stages));
    }
}

TEST(NvrtcCompile, FullConfigAndPlanSm90a) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  compileAll("full", "sm_90a", /*plan=*/true);
}
// The speed variants `h3c compile --tune` offers compile too, and ptxas keeps their wgmmas asynchronous (the JIT
// refuses a serialized kernel): the ping-pong linear and attention without overlap (the 2-CTA cluster linear was
// run on the H200, bench/NOTES.md).
TEST(NvrtcCompile, FullConfigSm90aTuningVariants) {
  H3C_SKIP_UNLESS_NVRTC_VARIANTS();
  hk::EmitOptions pp;
  pp.perOp.clear();  // ping-pong for every linear kind (qkv too), at 5 stages
  pp.sm90Pingpong = 1;
  pp.sm90Stages = 5;
  pp.sm90Inflight = 1;
  pp.sm90AttnOverlap = 0;
  compileAll("full", "sm_90a", /*plan=*/false, pp, /*tunedKindsOnly=*/true);
}
// The qkv GEMM with the qk_norm_rope epilogue (the plan's default: staged, 2-CTA clusters with a k-block in flight;
// its norm and rope in the epilogue warps, gemm_epi_smem=2; the register epilogue; ping-pong; full shapes, and small
// in the default form, with and without rope): ptxas keeps its wgmmas asynchronous (the JIT refuses a serialized
// kernel) and spills nothing, like the plain qkv kernel.
TEST(NvrtcCompile, QkvNormRopeEpilogueNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  hk::EmitOptions pair, reg, pp, warps;
  pair.sm90Cluster = 2;
  pair.sm90Inflight = 1;
  reg.sm90EpiSmem = 0;
  pp.sm90Pingpong = 1;
  warps = pair;  // the norm and rope in the epilogue warps at 88 registers (g9_walk_qk_block)
  warps.sm90EpiSmem = 2;
  for (const char *cfg : {"full", "small"})
    for (const auto &o : hopperOnlyOps(h3c::h3::namedConfig(cfg)))
      for (const hk::EmitOptions *opt : {&pair, &reg, &pp, &warps}) {
        // small, and without H3C_NVRTC_VARIANTS=1: the plan's default form only (CI time)
        if ((std::string(cfg) == "small" || !nvrtcVariants()) && opt != &pair) continue;
        const plan::Kernel k = *emit(o, "sm_90a", *opt);
        EXPECT_EQ(k.source.find("#define G9_EPI_SMEM 1\n") != std::string::npos, opt == &pair || opt == &warps)
            << k.id;
        EXPECT_EQ(k.source.find("#define G9_EPI_WARPS 1\n") != std::string::npos, opt == &warps) << k.id;
        expectCompilesWithoutSpills(jit, k, cfg);
      }
}
// The 192-wide cooperative tile (gemm_bn=192: whole waves at N = 5,376) for the linears with the epilogues it serves,
// alone and with the 2-CTA cluster at 5 stages: ptxas keeps the wgmmas asynchronous and spills nothing; the swiglu
// and qk_norm_rope epilogues refuse it, naming the tile width.
TEST(NvrtcCompile, Sm90Gemm192WideNeitherSerializesNorSpills) {
  H3C_SKIP_UNLESS_NVRTC_VARIANTS();
  hc::NvrtcJit jit;
  hk::EmitOptions w, wc;
  w.perOp.clear();
  w.sm90EpiSmem = 0;  // the register epilogue (5 stages leave no room for the staged one)
  w.sm90Bn = 192;
  wc = w;
  wc.sm90Cluster = 2;
  wc.sm90Stages = 5;
  wc.sm90Inflight = 1;
  int compiled = 0;
  for (const EmitOp &o : bf16Linears(h3c::h3::namedConfig("full"))) {
    const plan::Epilogue e = o.op.attrs.epilogue;
    for (const hk::EmitOptions &opt : {w, wc}) {
      if (e == plan::Epilogue::Swiglu || e == plan::Epilogue::QkNormRope) {
        expectEmitRefused(o, opt, "256-wide");
        continue;
      }
      const plan::Kernel k = *emit(o, "sm_90a", opt);
      EXPECT_NE(k.source.find("m64n192k16"), std::string::npos) << k.id;
      expectCompilesWithoutSpills(jit, k, "192-wide");
      ++compiled;
    }
  }
  EXPECT_GE(compiled, 4);  // to_out and fc2 (gate_residual) at least, both variants
}
// gemm_inflight=2 (half a k-block queued before the wait for the previous one, cuBLAS's order): every bf16 linear of
// the full config in the plan's forms with it (128 x 256: staged, 2-CTA, epilogue warps, half tails; qkv with
// qk_norm_rope; swiglu), the 192-wide tile at 4 stages and the 256-row tile at 4 stages in 2-CTA clusters (both live
// row sets and the first set only, for the last rows): ptxas keeps the wgmmas asynchronous (a wgmma_wait with
// uncommitted wgmmas queued must not make it serialize them) and spills nothing; the ping-pong kernel refuses it.
TEST(NvrtcCompile, HalfKblockInFlightNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  hk::EmitOptions plan = hk::EmitOptions::planDefaults(), pp;
  for (auto &p : plan.perOp)
    if (p.name == "gemm_inflight") p.value = 2;
  plan.sm90Inflight = 2;
  hk::EmitOptions w192 = gpuVariant("192-wide staged epilogue (4 stages, half k-block in flight)"),
                  tall = gpuVariant("256-row 168-wide 2-CTA cluster (4 stages, half k-block in flight)");
  ASSERT_EQ(w192.sm90Inflight, 2);
  ASSERT_EQ(tall.sm90Inflight, 2);
  pp.perOp.clear();
  pp.sm90Pingpong = 1;
  pp.sm90Inflight = 2;
  std::set<std::string> seen;
  int compiled = 0;
  for (const EmitOp &o : bf16Linears(h3c::h3::namedConfig("full"))) {
    const plan::Epilogue e = o.op.attrs.epilogue;
    const bool narrowServed = e != plan::Epilogue::Swiglu && e != plan::Epilogue::QkNormRope;
    // (CI time: the plan's forms of qkv and gate_residual; every form and linear with H3C_NVRTC_VARIANTS=1)
    if (!nvrtcVariants() && e != plan::Epilogue::GateResidual && o.op.kind != OpKind::QkvLinear) continue;
    for (const hk::EmitOptions *opt : {&plan, &w192, &tall}) {
      if (opt != &plan && (!narrowServed || !nvrtcVariants())) continue;
      const plan::Kernel k = *emit(o, "sm_90a", *opt);
      EXPECT_NE(k.source.find("#define G9_INFLIGHT 2\n"), std::string::npos) << k.id;
      if (!seen.insert(k.source).second) continue;
      expectCompilesWithoutSpills(jit, k, "gemm_inflight=2");
      ++compiled;
    }
    expectEmitRefused(o, pp, "in flight 0/1");  // the ping-pong kernel
  }
  EXPECT_GE(compiled, nvrtcVariants() ? 5 : 2);  // qkv, to_out / fc2 (gate_residual), fc1, the residual linears
}
// The residual block's L2 prefetch (gemm_res_prefetch): the GPU test's three forms (the plan's gate_residual kernel,
// staged in 2-CTA clusters with half tails; 1-CTA staged over every k-block; the 256-row tile in clusters) define it
// for the linears that read a residual (to_out / fc2's gate_residual, the refiner's residual) and for no other, and
// the producer's prefetch loop fits its registers (24 beside the half tails and in the 256-row tile): no spill, no
// serialized wgmma.
TEST(NvrtcCompile, ResidualPrefetchNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  const hk::EmitOptions pair = gpuVariant("residual prefetch 8, staged"), whole = gpuVariant("residual prefetch 64"),
                        tall = gpuVariant("residual prefetch 8, 256-row");
  ASSERT_EQ(pair.sm90ResPrefetch, 8);
  ASSERT_EQ(whole.sm90ResPrefetch, 64);
  ASSERT_EQ(tall.sm90Bm, 256);
  std::set<std::string> seen;
  int compiled = 0, plain = 0;
  for (const EmitOp &o : bf16Linears(h3c::h3::namedConfig("full"))) {
    const plan::Epilogue e = o.op.attrs.epilogue;
    const bool reads = e == plan::Epilogue::Residual || e == plan::Epilogue::GateResidual;
    if (e == plan::Epilogue::Swiglu || e == plan::Epilogue::QkNormRope) continue;
    for (const hk::EmitOptions *opt : {&pair, &whole, &tall}) {
      const plan::Kernel k = *emit(o, "sm_90a", *opt);
      const std::string def = fmt::format("#define G9_RES_PREFETCH {}\n", opt->sm90ResPrefetch);
      EXPECT_EQ(k.source.find(def) != std::string::npos, reads) << k.id;
      if (!reads) {
        ++plain;
        continue;
      }
      // (CI time: the plan's form of one linear; the rest with H3C_NVRTC_VARIANTS=1)
      if ((opt != &pair || compiled > 0) && !nvrtcVariants()) continue;
      if (!seen.insert(k.source).second) continue;
      expectCompilesWithoutSpills(jit, k, "residual prefetch");
      ++compiled;
    }
  }
  EXPECT_GE(compiled, nvrtcVariants() ? 4 : 1);  // to_out / fc2 (gate_residual) and the refiner's residual linears
  EXPECT_GE(plain, 3);                            // qkv and the plain linears take no prefetch
}
// The 256-row tile's bulk-row epilogue (gemm_epi_bulk=1: 8-row buffers per consumer warp stored by cp.async.bulk):
// every bf16 linear of the full config it serves (qkv's three outputs, to_out / fc2's gate_residual, the refiner's
// residual) at width 152 with 4 stages in 2-CTA clusters (cuBLAS's tile for N = 5,376: 9 waves of 594 pairs) and at
// 168 with 3 stages: ptxas keeps the wgmmas asynchronous and spills nothing, the shared memory is the ring plus 8 x 8
// rows; 168 wide at 4 stages does not fit beside the buffers and is refused, as the bulk form beside the staged one.
TEST(NvrtcCompile, TallBulkEpilogueNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  // the GPU test's two bulk-row variants, and two forms the emitter refuses
  const hk::EmitOptions b152 = gpuVariant("152-wide bulk-row"), b168 = gpuVariant("168-wide bulk-row");
  ASSERT_EQ(b152.sm90EpiBulk, 1);
  ASSERT_EQ(b168.sm90EpiBulk, 1);
  ASSERT_EQ(b152.sm90Stages, 4);
  hk::EmitOptions tooBig = b152, staged = b152;
  tooBig.sm90Bn = 168;
  staged.sm90EpiSmem = 1;
  staged.sm90Stages = 3;
  std::set<std::string> seen;
  int compiled = 0;
  for (const EmitOp &o : bf16Linears(h3c::h3::namedConfig("full"))) {
    const plan::Epilogue e = o.op.attrs.epilogue;
    if (e == plan::Epilogue::Swiglu || e == plan::Epilogue::QkNormRope) continue;
    // (CI time: gate_residual at width 152; the rest, qkv's three outputs too, with H3C_NVRTC_VARIANTS=1)
    const bool ci = e == plan::Epilogue::GateResidual;
    for (const hk::EmitOptions *opt : {&b152, &b168}) {
      if ((opt == &b168 || !ci) && !nvrtcVariants()) continue;
      const plan::Kernel k = *emit(o, "sm_90a", *opt);
      EXPECT_NE(k.source.find("#define GT_EPI_BULK 1\n"), std::string::npos) << k.id;
      EXPECT_EQ(k.launch.smemBytes, int64_t(opt->sm90Stages) * (256 + opt->sm90Bn) * 128 + 1024 +
                                        16 * opt->sm90Stages + 8 * 8 * opt->sm90Bn * 2)
          << k.id;
      if (!seen.insert(k.source).second) continue;
      expectCompilesWithoutSpills(jit, k, "bulk-row epilogue");
      ++compiled;
    }
    expectEmitRefused(o, tooBig, "beside the bulk-row epilogue's buffers");
    expectEmitRefused(o, staged, "gemm_epi_bulk=1");
  }
  EXPECT_GE(compiled, 2);  // to_out and fc2 (gate_residual) at least
}
// The 256-row tile (gemm_bm=256, gemm_sm90_tall.cuh) for the full config's bf16 linears with the epilogues it serves:
// 168 wide with 4 stages, a k-block in flight and the register epilogue (to_out / fc2 in whole waves: 33 x 32 tiles),
// 192 wide (192 accumulators a thread, the most registers) in 2-CTA clusters, and the form measured fastest per kernel
// (168 wide, staged, 3 stages, clusters): ptxas keeps the wgmmas asynchronous and spills nothing; the swiglu and qk_norm_rope epilogues
// refuse it, naming the tile.
TEST(NvrtcCompile, Sm90Gemm256RowsNeitherSerializesNorSpills) {
  H3C_SKIP_UNLESS_NVRTC_VARIANTS();
  hc::NvrtcJit jit;
  hk::EmitOptions t168, t192, t168s;
  t168.perOp.clear();
  t168.sm90Bm = 256;
  t168.sm90Bn = 168;
  t168.sm90Stages = 4;
  t168.sm90Inflight = 1;
  t168.sm90EpiSmem = 0;  // register epilogue
  t192 = t168;           // 192 wide in 2-CTA clusters, register epilogue (staged, its walk spills 8 bytes)
  t192.sm90Bn = 192;
  t192.sm90Inflight = 0;
  t192.sm90Cluster = 2;
  t168s = t168;  // the fastest form per kernel for to_out / fc2: 168 wide, staged at 3 stages, 2-CTA clusters
  t168s.sm90Stages = 3;
  t168s.sm90EpiSmem = 1;
  t168s.sm90Cluster = 2;
  t168s.sm90Inflight = 0;
  std::set<std::string> seen;
  int compiled = 0;
  for (const EmitOp &o : bf16Linears(h3c::h3::namedConfig("full"))) {
    const plan::Epilogue e = o.op.attrs.epilogue;
    for (const hk::EmitOptions *opt : {&t168, &t192, &t168s}) {
      if (e == plan::Epilogue::Swiglu || e == plan::Epilogue::QkNormRope) {
        expectEmitRefused(o, *opt, "gemm_bm=256");
        continue;
      }
      if (e != plan::Epilogue::GateResidual) continue;  // (CI time: the forms at to_out and fc2; the rest on the GPU)
      const plan::Kernel k = *emit(o, "sm_90a", *opt);
      EXPECT_NE(k.source.find(fmt::format("m64n{}k16", opt->sm90Bn)), std::string::npos) << k.id;
      EXPECT_EQ(k.launch.grid[0].div, 256) << k.id;
      if (!seen.insert(k.source).second) continue;
      expectCompilesWithoutSpills(jit, k, "256-row");
      ++compiled;
    }
  }
  EXPECT_GE(compiled, 6);  // to_out and fc2 (gate_residual) at least, each form
}
// The staged epilogue (gemm_epi_smem=1) at the full and small configs' linear shapes, in the 1-CTA and 2-CTA cluster
// forms and at gemm_bn=192 with 4 stages, and walked in the epilogue warps (gemm_epi_smem=2; 3: one staging area in
// turns, 4 stages): ptxas keeps the wgmmas asynchronous and spills nothing.
TEST(NvrtcCompile, Sm90StagedEpilogueNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  hk::EmitOptions st, pair, w192, warps, shared4;
  st.perOp.clear();
  st.sm90EpiSmem = 1;
  pair = st;
  pair.sm90Cluster = 2;
  pair.sm90Inflight = 1;
  w192 = st;
  w192.sm90Bn = 192;
  w192.sm90Stages = 4;
  warps = pair;  // the walk in the epilogue warps (gemm_epi_smem=2), consumers at 216 registers
  warps.sm90EpiSmem = 2;
  shared4 = warps;  // one staging area in turns (gemm_epi_smem=3) beside 4 stages of 48 KiB
  shared4.sm90EpiSmem = 3;
  shared4.sm90Stages = 4;
  std::set<std::string> seen;
  for (const char *cfg : {"full", "small"})
    for (const EmitOp &o : h3Ops(h3c::h3::namedConfig(cfg))) {
      if (o.op.kind != OpKind::Linear && o.op.kind != OpKind::QkvLinear) continue;
      if (o.op.attrs.wDtype != DType::BF16 || o.op.attrs.xDtype != DType::BF16) continue;
      const bool swiglu = o.op.attrs.epilogue == plan::Epilogue::Swiglu;
      for (const hk::EmitOptions *opt : {&st, &pair, &w192, &warps, &shared4}) {
        const bool gres = o.op.attrs.epilogue == plan::Epilogue::GateResidual;
        if (swiglu && opt == &w192) continue;  // swiglu's tiles are 256 wide
        if (std::string(cfg) == "small" && opt != &st) continue;
        // (CI time) FullConfigAndPlanSm90a compiles the full config's `st` kernels (the bare options) and the plan's
        // defaults (gate_residual in pairs, swiglu in epilogue warps); the epilogue warps here: gate_residual's,
        // the register-hungriest walk.
        if (std::string(cfg) == "full" && (opt == &st || (opt == &pair && gres))) continue;
        if ((opt == &warps || opt == &shared4) && !gres) continue;
        // (CI time) without H3C_NVRTC_VARIANTS=1 the epilogue warps' gate_residual walks only (their own area and
        // the shared one): the tuning options' other forms are the same templates at other constants, and the JIT
        // refuses a serialized kernel anyway.
        if (!nvrtcVariants() && opt != &warps && opt != &shared4) continue;
        const plan::Kernel k = *emit(o, "sm_90a", *opt);
        ASSERT_NE(k.source.find("#define G9_EPI_SMEM 1\n"), std::string::npos) << k.id;
        EXPECT_EQ(k.source.find("#define G9_EPI_WARPS 1\n") != std::string::npos, opt == &warps || opt == &shared4)
            << k.id;
        EXPECT_EQ(k.source.find("#define G9_EPI_SHARED 1\n") != std::string::npos, opt == &shared4) << k.id;
        if (!seen.insert(k.source).second) continue;
        expectCompilesWithoutSpills(jit, k, std::string(cfg) + " " + o.op.nodes.front());
      }
    }
  EXPECT_GE(seen.size(), nvrtcVariants() ? 14u : 4u);
}
// Both kv_block values a plan may carry (128 since 2026-12-04, 64 before: those plans keep running with their bits)
// compile for both archs, Hopper at every stage count that fits, and ptxas spills nothing: the S fragment at 128 keys
// doubles the softmax's registers.
TEST(NvrtcCompile, AttentionAtBothKvBlocksNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  const EmitOp at = fullAttention();
  for (int64_t kv : {64, 128})
    for (const std::string arch : {"sm_90a", "sm_100a"})
      for (int stages : {2, 3, 4}) {
        if (arch == "sm_100a" && stages != 2) continue;  // the mma.sync kernel has no stage option
        EmitOp o = at;
        o.op.order.kvBlock = kv;
        hk::EmitOptions opt;
        opt.sm90AttnStages = stages;
        if (kv == 128 && stages > 3) {  // 4 stages of 64 KiB do not fit: refused, naming the op
          EXPECT_THROW(emit(o, arch, opt), h3c::Error);
          continue;
        }
        const plan::Kernel k = *emit(o, arch, opt);
        EXPECT_NE(k.source.find("_KV " + std::to_string(kv)), std::string::npos) << k.id;
        // (CI time) kv_block 64 (plans before 2026-12-04 carry their own kernel text) and sm_100a (the plans'
        // kernels: FullConfigAndPlanSm100a) compile with H3C_NVRTC_VARIANTS=1 only.
        if (!nvrtcVariants() && (kv != 128 || arch != "sm_90a")) continue;
        expectCompilesWithoutSpills(jit, k, arch + " kv " + std::to_string(kv));
      }
}
// The persistent Hopper attention (attn_persistent=1) in each schedule (overlap 0, overlap, overlap with ping-pong) at
// both kv_block values and the stage counts that fit: ptxas keeps the wgmmas asynchronous and spills nothing, the
// producer's tile walk included (24 registers after setmaxnreg). sm_100a ignores the option (mma.sync kernel).
TEST(NvrtcCompile, PersistentAttentionNeitherSerializesNorSpills) {
  H3C_SKIP_UNLESS_NVRTC_VARIANTS();
  hc::NvrtcJit jit;
  const EmitOp at = fullAttention();
  int compiled = 0;
  for (int64_t kv : {64, 128})
    for (int stages : {2, 3})
      for (int mode = 0; mode < 3; ++mode) {
        // CI time: every schedule at the plan's 3 stages, the default schedule (ping-pong) at 2 as well.
        if (stages == 2 && mode != 2) continue;
        EmitOp o = at;
        o.op.order.kvBlock = kv;
        hk::EmitOptions opt;
        opt.sm90AttnPersistent = 1;
        opt.sm90AttnStages = stages;
        opt.sm90AttnOverlap = mode > 0;
        opt.sm90AttnPingpong = mode == 2;
        const plan::Kernel k = *emit(o, "sm_90a", opt);
        ASSERT_NE(k.source.find("#define A9_PERSISTENT 1\n"), std::string::npos) << k.id;
        expectCompilesWithoutSpills(jit, k, "persistent kv " + std::to_string(kv) + " stages " + std::to_string(stages) +
                                                " mode " + std::to_string(mode));
        ++compiled;
      }
  EXPECT_EQ(compiled, 8);
  hk::EmitOptions opt;
  opt.sm90AttnPersistent = 1;
  expectCompilesWithoutSpills(jit, *emit(at, "sm_100a", opt), "sm_100a persistent option");
}
// The norms keep the full config's row in registers (84 of them) at 16 warps per SM: at most 128 registers and no
// spills, for both archs, every rows-per-CTA value the bench sweeps, with and without modulation and weight.
TEST(NvrtcCompile, NormKernelsKeepTheRowInRegistersWithoutSpilling) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  const EmitOp ops[] = {
      op(OpKind::NormModulate, "n",
         with(attrs({{"H", 5376}, {"eps", 1e-5}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6}}),
              DType::BF16, DType::BF16, DType::BF16),
         laneTree(), 1),
      op(OpKind::RmsNorm, "r", with(attrs({{"H", 5376}, {"eps", 1e-5}}), DType::BF16, DType::BF16, DType::BF16),
         laneTree(), 0)};
  for (const std::string arch : {"sm_90a", "sm_100a"})
    for (const EmitOp &o : ops)
      for (int rows : {1, 8, 16}) {
        hk::EmitOptions opt;
        opt.normRows = rows;
        const plan::Kernel k = *emit(o, arch, opt);
        const auto c = compileVerbose(jit, k, arch);
        if (!c) continue;
        EXPECT_TRUE(spillsNothing(*c)) << arch << " " << k.id << ":\n" << c->log;
        const size_t at = c->log.find("Used ");
        ASSERT_NE(at, std::string::npos) << c->log;
        EXPECT_LE(std::atoi(c->log.c_str() + at + 5), 128) << arch << " " << k.id << ":\n" << c->log;
      }
}
// The AdaLN streaming kernel (sm_90a) at every config's shapes, and the tunings the GPU checks and the bench run at
// the full shape, compiles and spills nothing.
TEST(NvrtcCompile, AdalnTableStreamNeitherSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  for (const char *cfg : {"full", "small", "tiny"})
    for (const auto &o : adalnOps(cfg))
      for (const hk::EmitOptions &opt : {hk::EmitOptions{}, adalnTuning(2, 512, 1), adalnTuning(0, 64, 1),
                                         adalnTuning(0, 192, 1), adalnTuning(0, 256, 2)}) {
        if (std::string(cfg) != "full" && opt.sm90AdalnStageK != 256) continue;
        plan::Kernel k = *emit(o, "sm_90a", opt);
        ASSERT_EQ(k.id.rfind("adaln_table_sm90_", 0), 0u) << k.id;
        expectCompilesWithoutSpills(jit, k, cfg);
      }
}
// The unmerged LoRA forms (docs/contract.md section 13) of the block's GEMMs: each linear / qkv_linear with lora_k (the
// LoRA input its last operand, the up slot its last weight) and the lora_down GEMM, in `c`'s shapes.
std::vector<EmitOp> loraOps(const h3c::h3::Config &c) {
  std::vector<EmitOp> v;
  auto ops = h3Ops(c);
  auto hop = hopperOnlyOps(c);
  ops.insert(ops.end(), hop.begin(), hop.end());
  for (const EmitOp &o : ops) {
    if ((o.op.kind != OpKind::Linear && o.op.kind != OpKind::QkvLinear) || o.op.attrs.xDtype != DType::BF16 ||
        o.op.attrs.wDtype != DType::BF16)
      continue;
    const int64_t groups = o.op.kind == OpKind::QkvLinear ? 3 : 1;
    plan::OpAttrs a = o.op.attrs;
    a.loraK = 64 * groups;
    EmitOp l = op(o.op.kind, o.op.where + "+lora", a, o.op.order, int(o.op.weights.size()) + 1,
                  int(o.op.biases.size()));  // the refiner's to_out keeps its bias
    v.push_back(l);
    plan::OpAttrs d;
    d.K = a.K;
    d.N = a.loraK;
    v.push_back(op(OpKind::LoraDown, o.op.where + ".lora_down", with(d, DType::BF16, DType::BF16, DType::BF16),
                   kchunks(1), 1));
  }
  return v;
}

// Every LoRA form emits with its two extra parameters where the templates' headers say (the Hopper kernel's t_map
// and u_map after w_map, the mma.sync kernel's lora_t and lora_up after w), the kernel id names the width, and a
// lora_k that is no multiple of 64 is refused.
TEST(KernelEmit, UnmergedLoraForms) {
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    auto ops = loraOps(h3c::h3::namedConfig("small"));
    ASSERT_GE(ops.size(), 8u);
    for (const auto &o : ops) {
      if (std::string(arch) == "sm_100a" && o.op.attrs.epilogue == plan::Epilogue::QkNormRope) continue;  // Hopper only
      auto k = emit(o, arch);
      ASSERT_TRUE(k) << o.op.where;
      std::vector<std::string> names;
      for (const auto &p : k->params) names.push_back(p.name);
      auto at = [&](const std::string &n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
      if (o.op.kind == OpKind::LoraDown) {
        EXPECT_EQ(at("t_map"), (long)names.size()) << o.op.where;
        continue;
      }
      const bool maps = std::string(arch) == "sm_90a";
      const std::string t = maps ? "t_map" : "lora_t", u = maps ? "u_map" : "lora_up", w = maps ? "w_map" : "w";
      ASSERT_LT(at(t), (long)names.size()) << o.op.where;
      EXPECT_EQ(at(t), at(w) + 1) << o.op.where;
      EXPECT_EQ(at(u), at(w) + 2) << o.op.where;
      const auto &tp = k->params[size_t(at(t))], &up = k->params[size_t(at(u))];
      EXPECT_EQ(tp.role, plan::OperandRole::In);
      EXPECT_EQ(tp.index, (int64_t)o.op.in.size() - 1);
      EXPECT_EQ(up.role, plan::OperandRole::Weight);
      EXPECT_EQ(up.index, (int64_t)o.op.weights.size() - 1);
      EXPECT_NE(k->id.find("_lora" + std::to_string(o.op.attrs.loraK)), std::string::npos) << k->id;
      EXPECT_NE(k->source.find("#define GM_LORA_K " + std::to_string(o.op.attrs.loraK) + "\n"), std::string::npos);
      EmitOp bad = o;
      bad.op.attrs.loraK = 96;
      EXPECT_THROW(emit(bad, arch), h3c::Error) << o.op.where;
    }
  }
}

// The training forward's fc1 keeps the swiglu's x beside y (`swiglu_x`, h3-fuse training=true: the linear's own
// [v | g], the second output y1): at the full config's shape, with and without the LoRA path, the Hopper kernel at the
// plan's defaults for linear+swiglu (epilogue warps in 2-CTA clusters), the register and consumer-staged epilogues,
// the ping-pong kernel, and sm_100a's mma.sync kernel each take y1 as the second output parameter, name the form
// ("swiglux") and compile with the wgmmas asynchronous and nothing spilled; a linear without the swiglu epilogue, or
// whose second output is not its bf16 [rows, N], is refused.
TEST(NvrtcCompile, SwigluKeepingItsXNeitherSerializesNorSpills) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  std::vector<EmitOp> ops;
  // (the full config's fc1, and the small one's shape that Kernels.SwigluKeepsItsX runs beside it)
  for (const auto &[H, F] : {std::pair<int64_t, int64_t>{h3c::h3::namedConfig("full").hidden_size,
                                                         h3c::h3::namedConfig("full").ffn_dim},
                             {192, 512}})
  for (const int64_t loraK : {int64_t(0), int64_t(64)}) {
    plan::OpAttrs a = with(attrs({{"K", double(H)}, {"N", double(2 * F)}}), DType::BF16, DType::BF16, DType::BF16,
                           plan::Epilogue::Swiglu);
    a.swigluX = 1;
    a.loraK = loraK;
    EmitOp o = op(OpKind::Linear, "transformer_blocks.0.ff.net.0.proj", a, kchunks(1), loraK ? 2 : 1);
    ASSERT_EQ(o.vals.out.size(), 2u);
    o.vals.out[1].cols = 2 * F;
    o.vals.out[1].dtype = DType::BF16;
    ops.push_back(o);
  }
  std::vector<std::pair<std::string, hk::EmitOptions>> forms;
  for (const auto &f : h3c::testops::sm90LinearFamilies()) forms.push_back({"sm_90a", f.second});
  forms.push_back({"sm_100a", hk::EmitOptions::planDefaults()});
  std::set<std::string> seen;
  for (const EmitOp &o : ops) {
    // (CI time: NVRTC compiles the full shape's kernels; the small shape's, the same templates with other constants,
    // with H3C_NVRTC_VARIANTS=1)
    const bool compile = o.op.attrs.K == h3c::h3::namedConfig("full").hidden_size || nvrtcVariants();
    for (const auto &[arch, opts] : forms) {
      auto k = emit(o, arch, opts.forOp(std::string("linear+swiglu")));
      ASSERT_TRUE(k) << o.op.where;
      EXPECT_NE(k->id.find("_swiglux"), std::string::npos) << k->id;
      EXPECT_NE(k->source.find("#define GM_SWIGLU_X 1\n"), std::string::npos) << k->id;
      const auto y1 = std::find_if(k->params.begin(), k->params.end(), [](const plan::KernelParam &q) { return q.name == "y1"; });
      ASSERT_NE(y1, k->params.end()) << k->id;
      EXPECT_EQ(y1->role, plan::OperandRole::Out);
      EXPECT_EQ(y1->index, 1);
      if (compile && seen.insert(k->source + arch).second)
        expectCompilesWithoutSpills(jit, *k, o.op.where + " " + arch + " " + k->id);
    }
    EmitOp bad = o;
    bad.vals.out[1].cols = o.op.attrs.N / 2;
    EXPECT_THROW(emit(bad, "sm_90a"), h3c::Error);
    bad = o;
    bad.op.attrs.epilogue = plan::Epilogue::None;
    EXPECT_THROW(emit(bad, "sm_90a"), h3c::Error);
  }
}

// ptxas keeps the LoRA forms' wgmmas asynchronous and spills nothing (the Hopper kernels with the plan's default
// options per op kind, and the mma.sync kernel of sm_100a for fc1 + swiglu and lora_down).
TEST(NvrtcCompile, UnmergedLoraFormsNeitherSerializeNorSpill) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  hc::NvrtcJit jit;
  std::set<std::string> seen;
  for (const auto &o : loraOps(h3c::h3::namedConfig("small"))) {
    for (const auto &[arch, opts] : {std::pair<std::string, hk::EmitOptions>{"sm_90a", {}}, {"sm_100a", {}}}) {
      if (arch == "sm_100a" && o.op.attrs.epilogue != plan::Epilogue::Swiglu && o.op.kind != OpKind::LoraDown) continue;
      // (qkv + qk_norm_rope: every variant in UnmergedLoraHopperVariantsNeitherSerializeNorSpill)
      if (o.op.attrs.epilogue == plan::Epilogue::QkNormRope) continue;
      auto k = emit(o, arch, opts);
      ASSERT_TRUE(k);
      if (seen.insert(k->source).second) expectCompilesWithoutSpills(jit, *k, o.op.where + " " + arch);
    }
  }
}

// lora_down's 64-wide Hopper tile (lora_down:gemm_bn=64, the plan default with 6 stages): emitted for a rank <= 64
// with its ring's stages; a wider rank gets the 256-wide tile with the stages it holds; gemm_bn=64 refused for
// every other linear (tuning check) and for a wider GEMM of another kind (emitter).
TEST(KernelEmit, LoraDownNarrowTile) {
  hk::EmitOptions n = hk::EmitOptions::planDefaults();
  EXPECT_NO_THROW(n.check("test"));
  const plan::OpAttrs a = with(attrs({{"K", 200}, {"N", 64}}), DType::BF16, DType::BF16, DType::BF16);
  const auto k = emit(op(OpKind::LoraDown, "down", a, kchunks(1), 1), "sm_90a", n);
  ASSERT_TRUE(k);
  EXPECT_NE(k->id.find("_sm90n64_"), std::string::npos) << k->id;
  EXPECT_NE(k->source.find("#define G9_BN 64"), std::string::npos);
  EXPECT_NE(k->source.find("#define G9_STAGES 6"), std::string::npos);
  const auto plain = emit(op(OpKind::LoraDown, "down", a, kchunks(1), 1), "sm_90a");  // EmitOptions' own fields
  ASSERT_TRUE(plain);
  EXPECT_NE(plain->source.find("#define G9_BN 256"), std::string::npos);
  const plan::OpAttrs wide = with(attrs({{"K", 200}, {"N", 192}}), DType::BF16, DType::BF16, DType::BF16);
  const auto k192 = emit(op(OpKind::LoraDown, "down192", wide, kchunks(1), 1), "sm_90a", n);
  ASSERT_TRUE(k192);
  EXPECT_NE(k192->source.find("#define G9_BN 256"), std::string::npos);
  EXPECT_EQ(k192->source.find("#define G9_STAGES 6"), std::string::npos);
  const plan::OpAttrs wideLinear = with(attrs({{"K", 200}, {"N", 192}}), DType::BF16, DType::BF16, DType::BF16);
  hk::EmitOptions every;
  every.sm90Bn = 64;  // (past the tuning check, which refuses it for a linear)
  expectEmitRefused(op(OpKind::Linear, "linear192", wideLinear, kchunks(1), 1), every, "the 64-wide Hopper tile");
  hk::EmitOptions all = hk::EmitOptions::planDefaults();
  all.set("gemm_bn", 64, "test");
  EXPECT_THROW(all.check("test"), h3c::Error);  // (the block linears: 192 or 256)
}

// The emitter refuses LoRA forms it cannot serve, naming why: an up slot or a lora_t missing (the kernel would read
// another operand in their place), a width that is no multiple of 64, an F32 linear, a lora_down with a bias, an
// epilogue or a LoRA path of its own. Under ping-pong options a LoRA op gets the cooperative kernel (the ping-pong
// kernel has no LoRA path) with at most the stages that kernel and its staged epilogue hold.
TEST(KernelEmit, UnmergedLoraRefusalsAndPingpongFallback) {
  const auto expectRefused = [](const EmitOp &o, const char *arch, const std::string &why) {
    expectEmitRefused(o, {}, why, arch);
  };
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    plan::OpAttrs a = with(attrs({{"K", 200}, {"N", 192}}), DType::BF16, DType::BF16, DType::BF16, plan::Epilogue::Residual);
    a.loraK = 64;
    const EmitOp good = op(OpKind::Linear, "to_out+lora", a, kchunks(1), 2, 1);
    ASSERT_TRUE(emit(good, arch));
    expectRefused(op(OpKind::Linear, "no up slot", a, kchunks(1), 1, 1), arch, "and the LoRA up slot");
    EmitOp noT = good;
    noT.op.in.pop_back();
    noT.vals.in.pop_back();
    expectRefused(noT, arch, "the last its lora_t");
    EmitOp wide = good;
    wide.op.attrs.loraK = 96;
    expectRefused(wide, arch, "lora_k a multiple of 64, got 96");
    plan::OpAttrs f = with(attrs({{"K", 64}, {"N", 64}}), DType::F32, DType::F32, DType::F32);
    f.loraK = 64;
    expectRefused(op(OpKind::Linear, "f32+lora", f, kchunks(1), 2), arch, "no LoRA path");
    plan::OpAttrs dn = with(attrs({{"K", 200}, {"N", 64}}), DType::BF16, DType::BF16, DType::BF16);
    ASSERT_TRUE(emit(op(OpKind::LoraDown, "down", dn, kchunks(1), 1), arch));
    expectRefused(op(OpKind::LoraDown, "down+bias", dn, kchunks(1), 1, 1), arch, "lora_down is a bf16 GEMM");
    plan::OpAttrs dr = dn;
    dr.epilogue = plan::Epilogue::Residual;
    expectRefused(op(OpKind::LoraDown, "down+residual", dr, kchunks(1), 1), arch, "lora_down is a bf16 GEMM");
    plan::OpAttrs dl = dn;
    dl.loraK = 64;
    expectRefused(op(OpKind::LoraDown, "down+lora", dl, kchunks(1), 1), arch, "lora_down is a bf16 GEMM");
    plan::OpAttrs q = with(attrs({{"K", 192}, {"N", 256}}), DType::BF16, DType::BF16, DType::BF16);
    q.loraK = 192;
    expectRefused(op(OpKind::QkvLinear, "qkv+lora", q, kchunks(1), 3), arch, "and the LoRA up slot");
  }
  EmitOp qknr = qkvNormRope("qkv+qk_norm_rope+lora", 192, 2, 128, 1e-6, 32);
  qknr.op.attrs.loraK = 192;
  qknr = op(OpKind::QkvLinear, qknr.op.where, qknr.op.attrs, kchunks(1), 6);
  ASSERT_TRUE(emit(qknr));
  EmitOp qNoT = qknr;
  qNoT.op.in.pop_back();
  qNoT.vals.in.pop_back();
  expectRefused(qNoT, "sm_90a", "expected inputs [x(, cos, sin)(, lora_t)]");
  // Ping-pong options: the cooperative kernel, 4 stages where 5 or 6 were asked (3 beside a staged epilogue of the
  // 256-wide tile), within the shared memory of a CTA.
  for (const plan::Epilogue e : {plan::Epilogue::None, plan::Epilogue::GateResidual})
    for (int epiSmem : {0, 1})
      for (int stages : {3, 5, 6}) {
        plan::OpAttrs a = with(attrs({{"K", 256}, {"N", 192}, {"chunk", 2}, {"num_chunks", 6}}), DType::BF16,
                               DType::BF16, DType::BF16, e);
        a.loraK = 64;
        hk::EmitOptions pp;
        pp.sm90Pingpong = 1;
        pp.sm90Stages = stages;
        pp.sm90EpiSmem = epiSmem;
        auto k = emit(op(OpKind::Linear, "pp+lora", a, kchunks(1), 2), "sm_90a", pp);
        ASSERT_TRUE(k);
        EXPECT_EQ(k->id.find("_sm90pp_"), std::string::npos) << k->id;
        EXPECT_NE(k->id.find("_sm90_"), std::string::npos) << k->id;
        const int want = std::min(stages, epiSmem ? 3 : 4);
        EXPECT_NE(k->source.find("#define G9_STAGES " + std::to_string(want) + "\n"), std::string::npos)
            << k->id << " stages " << stages;
        EXPECT_LE(k->launch.smemBytes, hk::kMaxCtaSharedBytes);
        a.loraK = 0;  // without LoRA the ping-pong kernel
        auto plain = emit(op(OpKind::Linear, "pp", a, kchunks(1), 1), "sm_90a", pp);
        EXPECT_NE(plain->id.find("_sm90pp_"), std::string::npos) << plain->id;
      }
}

// Every Hopper schedule variant the GPU test runs (hopperGemmVariants: cluster 2, 192-wide tiles, register / staged
// epilogues, epilogue warps, in flight; ping-pong falling back to the cooperative kernel) of each LoRA form compiles
// for sm_90a without spills or serialized wgmmas, without half tiles (the LoRA producer has none).
TEST(NvrtcCompile, UnmergedLoraHopperVariantsNeitherSerializeNorSpill) {
  H3C_SKIP_UNLESS_NVRTC_VARIANTS();
  hc::NvrtcJit jit;
  std::set<std::string> seen;
  // One op of the form with the most live registers (qkv's norm and rope in the epilogue), the rest in their default
  // variant (UnmergedLoraFormsNeitherSerializeNorSpill) and every variant on the GPU, whose JIT refuses a serialized
  // kernel (Kernels.LoraLinear): all forms here took about 40 s of the test command.
  std::set<std::pair<OpKind, plan::Epilogue>> forms;
  for (const auto &o : loraOps(h3c::h3::namedConfig("small"))) {
    if (o.op.attrs.loraK == 0) continue;  // lora_down: a plain GEMM, its variants those of every linear
    const plan::Epilogue e = o.op.attrs.epilogue;
    if (e != plan::Epilogue::QkNormRope) continue;
    if (!forms.insert({o.op.kind, e}).second) continue;
    for (const auto &[label, opts] : hopperGemmVariants(e != plan::Epilogue::Swiglu && e != plan::Epilogue::QkNormRope)) {
      auto k = emit(o, "sm_90a", opts);
      ASSERT_TRUE(k);
      EXPECT_EQ(k->id.find("_sm90pp_"), std::string::npos) << o.op.where << " " << label;
      EXPECT_EQ(k->source.find("#define G9_HALF_TAIL"), std::string::npos) << o.op.where << " " << label;
      if (seen.insert(k->source).second) expectCompilesWithoutSpills(jit, *k, o.op.where + " " + label);
    }
  }
}

// The 256-row tile with an unmerged LoRA path (its producer picks the maps per k-block within 24 registers): the
// gate_residual form, staged in 2-CTA clusters, neither serializes nor spills.
TEST(NvrtcCompile, UnmergedLora256RowsNeitherSerializesNorSpills) {
  H3C_SKIP_UNLESS_NVRTC_VARIANTS();
  hc::NvrtcJit jit;
  hk::EmitOptions t;
  t.perOp.clear();
  t.sm90Bm = 256;
  t.sm90Bn = 168;
  t.sm90Cluster = 2;
  // and the bulk-row epilogue at width 152, 4 stages (gemm_epi_bulk=1)
  hk::EmitOptions bulk = t;
  bulk.sm90Bn = 152;
  bulk.sm90Stages = 4;
  bulk.sm90EpiSmem = 0;
  bulk.sm90EpiBulk = 1;
  int compiled = 0;
  for (const auto &o : loraOps(h3c::h3::namedConfig("small"))) {
    if (o.op.attrs.loraK == 0 || o.op.attrs.epilogue != plan::Epilogue::GateResidual) continue;
    for (const hk::EmitOptions *opt : {&t, &bulk}) {
      const plan::Kernel k = *emit(o, "sm_90a", *opt);
      EXPECT_NE(k.id.find(fmt::format("_sm90m256n{}_", opt->sm90Bn)), std::string::npos) << k.id;
      EXPECT_EQ(k.source.find("#define GT_EPI_BULK 1\n") != std::string::npos, opt == &bulk) << k.id;
      expectCompilesWithoutSpills(jit, k, "256-row LoRA");
      ++compiled;
    }
    break;
  }
  EXPECT_EQ(compiled, 2);
}

TEST(NvrtcCompile, FullConfigAndPlanSm100a) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  compileAll("full", "sm_100a", /*plan=*/true);
}
// The runtime's own device noise kernel (support/philox.h, runtime/cuda/noise.h) compiles for both archs.
TEST(NvrtcCompile, PhiloxNoiseKernel) {
  hc::NvrtcJit jit;
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    auto c = jit.compile(hc::philoxFillKernel(arch));
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << arch;
  }
}
// The --hash-nodes kernel (support/content_hash.h, runtime/cuda/value_hash.h) too.
TEST(NvrtcCompile, ValueHashKernel) {
  hc::NvrtcJit jit;
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    auto c = jit.compile(hc::valueHashKernel(arch));
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << arch;
  }
}
// The device output scan (runtime/cuda/non_finite.h) too.
TEST(NvrtcCompile, NonFiniteScanKernel) {
  hc::NvrtcJit jit;
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    auto c = jit.compile(hc::nonFiniteKernel(arch));
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << arch;
    EXPECT_NE(c.cubin.find("h3c_non_finite"), std::string::npos) << arch;
  }
}
// The native binding's kernels (runtime/cuda/native_ops.h: input conversion, linear epilogues, softmax, attention
// output) too: one source, every entry of it in the cubin.
TEST(NvrtcCompile, NativeOpKernels) {
  hc::NvrtcJit jit;
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    const auto &entries = hc::nativeKernelEntries();
    ASSERT_EQ(entries.size(), 4u);
    auto c = jit.compile(hc::nativeKernel(entries[0], arch));
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << arch;
    for (const auto &e : entries) {
      EXPECT_EQ(hc::nativeKernel(e, arch).source, hc::nativeKernel(entries[0], arch).source);
      EXPECT_NE(c.cubin.find(e), std::string::npos) << arch << ": no entry " << e;
    }
  }
  EXPECT_THROW(hc::nativeKernel("h3c_native_nothing", "sm_90a"), h3c::Error);
}
TEST(NvrtcCompile, TinyConfigSm90a) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  compileAll("tiny", "sm_90a");
}
TEST(NvrtcCompile, TinyConfigSm100a) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  compileAll("tiny", "sm_100a");
}

// The GPU executor JIT-compiles a plan's kernels from worker threads: several compiles at once into one cache folder
// give the same cubins as one after the other, and the counts add up.
TEST(NvrtcJit, CompilesFromSeveralThreadsAtOnce) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  std::vector<h3c::plan::Kernel> ks;
  std::set<std::string> ids;
  for (const auto &o : h3Ops(h3c::h3::namedConfig("tiny"))) {
    auto k = emit(o, "sm_90a");
    if (k && ids.insert(k->id).second && ks.size() < 6) ks.push_back(*k);
  }
  ASSERT_EQ(ks.size(), 6u);
  auto dir = tempDir("h3c-jit-threads");
  hc::NvrtcJit parallel(dir);
  std::vector<std::string> cubins(ks.size());
  std::vector<std::thread> pool;
  std::atomic<size_t> next{0};
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < ks.size();) cubins[i] = parallel.compile(ks[i]).cubin;
    });
  for (auto &t : pool) t.join();
  EXPECT_EQ(parallel.stats().compiled, (int)ks.size());
  hc::NvrtcJit serial;  // no cache: compiles again (two of them, to keep the test short)
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(serial.compile(ks[i]).cubin, cubins[i]) << ks[i].id;
  hc::NvrtcJit warm(dir);  // every entry the threads wrote is complete and hits
  for (const auto &k : ks) EXPECT_TRUE(warm.compile(k).fromCache) << k.id;
  EXPECT_EQ(warm.stats().cacheHits, (int)ks.size());
  std::filesystem::remove_all(dir);
}

TEST(NvrtcJit, CacheHitsAndRebuildsCorruptEntries) {
  auto dir = tempDir("h3c-jit-cache");
  auto k = emit(h3Ops(h3c::h3::namedConfig("tiny"))[3]);  // rms_norm: quick to compile
  auto k100 = emit(h3Ops(h3c::h3::namedConfig("tiny"))[3], "sm_100a");
  std::string cubin;
  {
    hc::NvrtcJit jit(dir);
    auto a = jit.compile(*k);
    EXPECT_FALSE(a.fromCache);
    auto b = jit.compile(*k);
    EXPECT_TRUE(b.fromCache);
    EXPECT_EQ(a.cubin, b.cubin);
    cubin = a.cubin;
    // Another arch is another key.
    auto c = jit.compile(*k100);
    EXPECT_FALSE(c.fromCache);
    EXPECT_NE(c.key, a.key);
  }
  auto entry = dir / (hc::NvrtcJit::cacheKey(*k) + ".cubin");
  ASSERT_TRUE(std::filesystem::exists(entry));
  // No temp files left behind by the atomic writes.
  int files = 0;
  for (auto &e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2);
  // Flip one byte of the stored cubin: detected, rebuilt, and the rebuilt entry verifies again.
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(-10, std::ios::end);
    ch ^= 0x5a;
    f.write(&ch, 1);
  }
  {
    hc::NvrtcJit jit(dir);
    auto r = jit.compile(*k);
    EXPECT_FALSE(r.fromCache);
    EXPECT_TRUE(r.rebuiltCorrupt);
    EXPECT_EQ(jit.stats().corruptRebuilt, 1);
    EXPECT_EQ(r.cubin, cubin);
    auto again = jit.compile(*k);
    EXPECT_TRUE(again.fromCache);
  }
  // A truncated entry is corrupt too.
  std::filesystem::resize_file(entry, 20);
  {
    hc::NvrtcJit jit(dir);
    auto r = jit.compile(*k);
    EXPECT_TRUE(r.rebuiltCorrupt);
  }
  std::filesystem::remove_all(dir);
}

TEST(NvrtcJit, CompileErrorNamesTheKernelWithTheLog) {
  plan::Kernel bad;
  bad.id = "broken_kernel_1234";
  bad.entry = "h3c_broken";
  bad.arch = "sm_90a";
  bad.nvrtcOptions = hk::nvrtcOptions("sm_90a");
  bad.source = "extern \"C\" __global__ void h3c_broken(float *p) { p[0] = undeclared_thing; }\n";
  hc::NvrtcJit jit;
  try {
    jit.compile(bad);
    FAIL() << "compiled a broken kernel";
  } catch (const hc::CompileError &e) {
    std::string w = e.what();
    EXPECT_NE(w.find("broken_kernel_1234"), std::string::npos) << w;
    EXPECT_NE(w.find("undeclared_thing"), std::string::npos) << w;
  }
  EXPECT_THROW(hk::nvrtcOptions("sm_80"), h3c::Error);
  // Options that do not target the kernel's arch are refused before NVRTC runs.
  plan::Kernel wrong = bad;
  wrong.arch = "sm_100a";
  EXPECT_THROW(jit.compile(wrong), h3c::Error);
}

TEST(NvrtcJit, KeyCoversSourceArchAndVersion) {
  auto k = *emit(h3Ops(h3c::h3::namedConfig("tiny"))[3]);
  auto k2 = k;
  k2.source += "\n// changed\n";
  auto k3 = k;
  k3.nvrtcOptions.push_back("-DEXTRA=1");
  EXPECT_NE(hc::NvrtcJit::cacheKey(k), hc::NvrtcJit::cacheKey(k2));
  EXPECT_NE(hc::NvrtcJit::cacheKey(k), hc::NvrtcJit::cacheKey(k3));
  EXPECT_NE(hc::NvrtcJit::cacheKey(k), hc::NvrtcJit::cacheKey(*emit(h3Ops(h3c::h3::namedConfig("tiny"))[3], "sm_100a")));
  EXPECT_EQ(hc::NvrtcJit::cacheKey(k), hc::NvrtcJit::cacheKey(k));
  EXPECT_FALSE(hc::NvrtcJit::nvrtcVersion().empty());
}
#endif

} // namespace
