// Kernel emission and NVRTC compilation (no GPU needed): every kernel kind of the H3 forward, at the shapes of the
// full and tiny configs, is emitted and compiled for sm_90a and sm_100a; the JIT cache hits, detects a corrupt entry
// and rebuilds it; compile errors name the kernel; the emitter rejects ops it cannot run in the contract's order.
#include "h3c/kernels/detmath.h"
#include "h3c/kernels/emit.h"
#include "h3c/models/config.h"
#include "h3c/support/error.h"

#ifdef H3C_HAVE_CUDA
#include "h3c/runtime/cuda/nvrtc_jit.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

using nlohmann::json;
namespace hk = h3c::kernels;

namespace {

json kchunks(int units) { return {{"kind", "k_chunks"}, {"k_step", 16}, {"units", units}, {"acc", "f32"}}; }
json laneTree() { return {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}}; }
json flash() { return {{"kind", "flash"}, {"kv_block", 64}, {"k_step", 16}, {"acc", "f32"}, {"p", "bf16"}}; }

json op(const std::string &kind, const std::string &node, json attrs, json order = nullptr, int nw = 0, int nb = 0,
        int nout = 1) {
  json o{{"op", kind}, {"nodes", {node}}, {"attrs", std::move(attrs)}};
  if (!order.is_null()) o["order"] = std::move(order);
  json w = json::array(), b = json::array();
  for (int i = 0; i < nw; ++i) w.push_back(node + ".w" + std::to_string(i));
  for (int i = 0; i < nb; ++i) b.push_back(node + ".b" + std::to_string(i));
  o["weights"] = {{"weight", w}, {"bias", b}};
  json out = json::array();
  for (int i = 0; i < nout; ++i) out.push_back(node + ":" + std::to_string(i));
  o["out"] = out;
  return o;
}

// The largest power-of-two unit count <= 8 that the contract's divisibility rule allows for K.
int rowUnits(long long K) {
  int u = 8;
  while (u > 1 && K % (16LL * u) != 0) u /= 2;
  return u;
}

// One op of every kernel kind the H3 forward runs (fused and unfused forms), at the shapes of config `c`.
std::vector<json> h3Ops(const h3c::h3::Config &c) {
  const long long H = c.hidden_size, I = c.innerDim(), F = c.ffn_dim, E = c.time_embed_dim;
  std::vector<json> v;
  v.push_back(op("linear", "proj_in", {{"K", c.videoPatchDim()}, {"N", H}, {"w_dtype", "F32"}, {"out_dtype", "F32"}},
                 kchunks(1), 1, 1));
  v.push_back(op("linear", "audio_proj_in",
                 {{"K", c.audio_in_channels}, {"N", H}, {"w_dtype", "F32"}, {"out_dtype", "F32"}}, kchunks(1), 1, 1));
  v.push_back(op("linear", "context_embedder", {{"K", c.text_dim}, {"N", H}, {"x_dtype", "F32"}, {"out_dtype", "BF16"}},
                 kchunks(1), 1, 1));
  v.push_back(op("rms_norm", "token_refiner.refiner_blocks.0.norm1", {{"H", H}, {"eps", c.norm_eps}}, laneTree(), 1));
  v.push_back(op("qkv_linear", "refiner.qkv", {{"K", H}, {"N", I}, {"out_dtype", "BF16"}}, kchunks(1), 3, 0, 3));
  v.push_back(op("qk_norm_rope", "refiner.qk_norm",
                 {{"heads", c.num_attention_heads}, {"head_dim", c.attention_head_dim}, {"eps", c.qk_norm_eps},
                  {"rotary_dim", 0}},
                 laneTree(), 2, 0, 2));
  v.push_back(op("attention", "refiner.attention", {{"heads", c.num_attention_heads}, {"head_dim", c.attention_head_dim}},
                 flash()));
  v.push_back(op("linear", "refiner.to_out", {{"K", I}, {"N", H}, {"out_dtype", "BF16"}, {"epilogue", "residual"}},
                 kchunks(1), 1, 1));
  v.push_back(op("linear", "refiner.fc1", {{"K", H}, {"N", 2 * F}, {"out_dtype", "BF16"}, {"epilogue", "swiglu"}},
                 kchunks(1), 1));
  v.push_back(op("linear", "refiner.fc2", {{"K", F}, {"N", H}, {"out_dtype", "BF16"}, {"epilogue", "residual"}},
                 kchunks(1), 1));
  v.push_back(op("pack", "pack", {{"H", H}}));
  v.push_back(op("time_embed", "time_embed", {{"K", c.freq_dim}, {"hidden", c.time_embed_hidden_dim}, {"N", E}},
                 kchunks(1), 2, 2));
  v.push_back(op("adaln_table", "transformer_blocks.0.adaln_proj", {{"K", E}, {"N", 18 * H}}, kchunks(1), 1, 1));
  v.push_back(op("norm_modulate", "transformer_blocks.0.norm1",
                 {{"H", H}, {"eps", c.norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6},
                  {"row_index", "adaln"}, {"out_dtype", "BF16"}},
                 laneTree(), 1));
  v.push_back(op("qk_norm_rope", "transformer_blocks.0.attn.qk",
                 {{"heads", c.num_attention_heads}, {"head_dim", c.attention_head_dim}, {"eps", c.qk_norm_eps},
                  {"rotary_dim", c.rotaryDim()}},
                 laneTree(), 2, 0, 2));
  v.push_back(op("linear", "transformer_blocks.0.attn.to_out.0",
                 {{"K", I}, {"N", H}, {"out_dtype", "BF16"}, {"epilogue", "gate_residual"}, {"chunk", 2},
                  {"num_chunks", 6}, {"row_index", "adaln"}},
                 kchunks(rowUnits(I)), 1));
  v.push_back(op("linear", "transformer_blocks.0.ff.net.2",
                 {{"K", F}, {"N", H}, {"out_dtype", "BF16"}, {"epilogue", "gate_residual"}, {"chunk", 5},
                  {"num_chunks", 6}, {"row_index", "adaln"}},
                 kchunks(rowUnits(F)), 1));
  v.push_back(op("adaln_table", "norm_out.linear", {{"K", E}, {"N", 2 * H}}, kchunks(1), 1, 1));
  v.push_back(op("norm_modulate", "norm_out.norm",
                 {{"H", H}, {"eps", c.final_norm_eps}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 2},
                  {"row_index", "timestep"}, {"out_dtype", "F32"}},
                 laneTree(), 1));
  v.push_back(op("linear", "proj_out", {{"K", H}, {"N", c.videoPatchDim()}, {"w_dtype", "F32"}, {"out_dtype", "F32"}},
                 kchunks(1), 1, 1));
  v.push_back(op("linear", "audio_proj_out",
                 {{"K", H}, {"N", c.audio_in_channels}, {"w_dtype", "F32"}, {"out_dtype", "F32"}}, kchunks(1), 1, 1));
  v.push_back(op("unpack", "unpack", {{"video_cols", c.videoPatchDim()}, {"audio_cols", c.audio_in_channels}}, nullptr,
                 0, 0, 2));
  // Unfused forms (plans compiled without h3-fuse).
  v.push_back(op("linear", "to_q", {{"K", H}, {"N", I}, {"out_dtype", "BF16"}}, kchunks(1), 1));
  v.push_back(op("qk_norm", "norm_q", {{"heads", c.num_attention_heads}, {"head_dim", c.attention_head_dim},
                                        {"eps", c.qk_norm_eps}}, laneTree(), 1));
  v.push_back(op("rope", "rope_q", {{"heads", c.num_attention_heads}, {"head_dim", c.attention_head_dim},
                                     {"rotary_dim", c.rotaryDim()}}));
  v.push_back(op("swiglu", "ff.swiglu", {{"F", F}}));
  v.push_back(op("silu", "time_embedder.act", {{"cols", c.time_embed_hidden_dim}, {"dtype", "F32"}}));
  v.push_back(op("residual", "residual_ff", {{"cols", H}}));
  v.push_back(op("gate_residual", "gate_residual_ff",
                 {{"H", H}, {"chunk", 5}, {"num_chunks", 6}, {"row_index", "adaln"}}));
  v.push_back(op("linear", "time_embedder.linear_1",
                 {{"K", c.freq_dim}, {"N", c.time_embed_hidden_dim}, {"w_dtype", "F32"}, {"out_dtype", "F32"}},
                 kchunks(1), 1, 1));
  return v;
}

// ---- emitter (pure C++) ----

TEST(KernelEmit, EveryOpKindEmitsForFullAndTiny) {
  for (const char *cfg : {"full", "small", "tiny"}) {
    auto ops = h3Ops(h3c::h3::namedConfig(cfg));
    for (const auto &o : ops) {
      auto k = hk::emitKernel(o, "sm_90a");
      ASSERT_TRUE(k.has_value()) << o.dump();
      EXPECT_NE(k->source.find("extern \"C\" __global__"), std::string::npos);
      EXPECT_NE(k->source.find("#define"), std::string::npos);
      EXPECT_EQ(k->source.find("#include"), std::string::npos) << "kernels must not include headers";
      EXPECT_EQ(k->entry, "h3c_" + k->id);
      EXPECT_GT(k->launch.threads, 0);
      EXPECT_LE(k->launch.smemBytes, 227 * 1024);
    }
  }
}

TEST(KernelEmit, HostOpsHaveNoKernel) {
  EXPECT_FALSE(hk::emitKernel(json{{"op", "rope_table"}}, "sm_90a").has_value());
  EXPECT_FALSE(hk::emitKernel(json{{"op", "timestep_sinusoid"}}, "sm_100a").has_value());
}

TEST(KernelEmit, IdIsStableAndShapeDependent) {
  auto c = h3c::h3::namedConfig("full");
  auto a = hk::emitKernel(h3Ops(c)[4], "sm_90a"), b = hk::emitKernel(h3Ops(c)[4], "sm_90a");
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ(a->source, b->source);
  EXPECT_EQ(a->id.rfind("qkv_linear_bf16_k5376_n21504_u1_", 0), 0u) << a->id;
  auto t = hk::emitKernel(h3Ops(h3c::h3::namedConfig("tiny"))[4], "sm_90a");
  EXPECT_NE(a->id, t->id);
}

TEST(KernelEmit, TensorCoreLinearsFollowTheUnitTree) {
  auto c = h3c::h3::namedConfig("full");
  auto ops = h3Ops(c);
  auto fc2 = hk::emitKernel(ops[16], "sm_90a");
  ASSERT_TRUE(fc2);
  EXPECT_NE(fc2->source.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
  EXPECT_NE(fc2->source.find("#define GM_U 8\n"), std::string::npos);
  EXPECT_NE(fc2->source.find("#define GM_EPI 2\n"), std::string::npos);
  // The pairwise tree for 8 units: after unit 7, ((p6 + p7) into slot 0), (p45 + p67 into slot 1),
  // (p0123 + p4567 into slot 2).
  EXPECT_NE(fc2->source.find("case 7: gm_add(stk[0], acc); gm_add(stk[1], stk[0]); gm_add(stk[2], stk[1]); break;"),
            std::string::npos);
  EXPECT_NE(fc2->source.find("case 3: gm_add(stk[0], acc); gm_add(stk[1], stk[0]); gm_copy(stk[2], stk[1]); break;"),
            std::string::npos);
  EXPECT_NE(fc2->source.find("case 4: gm_copy(stk[0], acc); break;"), std::string::npos);
  // The launch never depends on M: the tile is fixed, the grid comes from the row count at run time.
  EXPECT_EQ(fc2->launch.unitsPerBlock, 128);
  EXPECT_EQ(fc2->launch.gridY, (5376 + 63) / 64);
}

TEST(KernelEmit, RejectsOpsOutsideTheContract) {
  auto c = h3c::h3::namedConfig("full");
  auto ops = h3Ops(c);
  json bad = ops[16];
  bad["order"]["units"] = 3;
  EXPECT_THROW(hk::emitKernel(bad, "sm_90a"), h3c::Error);
  bad = ops[16];
  bad["order"]["kind"] = "lane_tree";
  EXPECT_THROW(hk::emitKernel(bad, "sm_90a"), h3c::Error);
  bad = ops[16];
  bad["attrs"].erase("chunk");
  try {
    hk::emitKernel(bad, "sm_90a");
    FAIL() << "missing chunk accepted";
  } catch (const h3c::Error &e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.0.ff.net.2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chunk"), std::string::npos) << e.what();
  }
  // units = 8 needs K % 128 == 0 (tiny's K = 32 does not qualify).
  json tinyFc2 = op("linear", "fc2", {{"K", 32}, {"N", 24}, {"out_dtype", "BF16"}}, kchunks(8), 1);
  EXPECT_THROW(hk::emitKernel(tinyFc2, "sm_90a"), h3c::Error);
  EXPECT_THROW(hk::emitKernel(json{{"op", "conv3d"}}, "sm_90a"), h3c::Error);
  EXPECT_THROW(hk::emitKernel(ops[0], "sm_80"), h3c::Error);
  json f32split = ops[0];
  f32split["order"]["units"] = 2;
  EXPECT_THROW(hk::emitKernel(f32split, "sm_90a"), h3c::Error);
  json attn = ops[6];
  attn["order"]["kv_block"] = 128;
  EXPECT_THROW(hk::emitKernel(attn, "sm_90a"), h3c::Error);
}

// detmath::expf against the correctly rounded exp (from double): within 1 ulp over the whole finite range, and the
// special cases exact.
TEST(DetMath, ExpWithinOneUlp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-103.0f, 88.7f);
  auto ulpDiff = [](float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    return std::abs((long long)ia - (long long)ib);
  };
  int worst = 0;
  for (int i = 0; i < 200000; ++i) {
    float x = i < 1000 ? -10.0f + i * 0.02f : d(rng);
    float ref = (float)std::exp((double)x);
    float got = h3c::detmath::expf(x);
    if (ref < 1e-37f) continue;  // subnormal outputs: checked separately below
    worst = std::max<int>(worst, (int)ulpDiff(got, ref));
  }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(h3c::detmath::expf(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(h3c::detmath::expf(100.0f)));
  EXPECT_EQ(h3c::detmath::expf(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(h3c::detmath::expf(NAN)));
  float sub = h3c::detmath::expf(-100.0f);
  EXPECT_NEAR(sub / (float)std::exp(-100.0), 1.0, 1e-3);
  // silu(x) = x / (1 + exp(-x)) against double.
  for (float x : {-20.0f, -1.5f, -0.01f, 0.0f, 0.3f, 2.0f, 15.0f}) {
    double ref = x / (1.0 + std::exp(-(double)x));
    EXPECT_NEAR(h3c::detmath::silu(x), ref, std::fabs(ref) * 3e-7 + 1e-30) << x;
  }
}

#ifdef H3C_HAVE_CUDA
namespace hc = h3c::runtime::cuda;

// Under AddressSanitizer NVRTC runs several times slower (every allocation is intercepted); the full-config compiles
// are covered by the Release build, so the sanitizer build keeps only the tiny ones.
#if defined(__SANITIZE_ADDRESS__)
#define H3C_SKIP_HEAVY_UNDER_ASAN() GTEST_SKIP() << "full-size NVRTC compiles run in the Release build"
#else
#define H3C_SKIP_HEAVY_UNDER_ASAN() (void)0
#endif

std::filesystem::path tempDir(const std::string &name) {
  auto p = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

// Compiles each distinct kernel of a config for one arch. Every compile must produce a non-empty ELF.
void compileAll(const char *cfg, const std::string &arch) {
  hc::NvrtcJit jit;  // no cache: really compile
  std::set<std::string> seen;
  for (const auto &o : h3Ops(h3c::h3::namedConfig(cfg))) {
    auto k = hk::emitKernel(o, arch);
    ASSERT_TRUE(k);
    if (!seen.insert(k->id).second) continue;
    hc::CompiledKernel c;
    try {
      c = jit.compile(*k, arch);
    } catch (const hc::CompileError &e) {
      FAIL() << cfg << " " << arch << " " << o.dump() << "\n" << e.what();
    }
    ASSERT_GT(c.cubin.size(), 4u);
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << k->id;
  }
  EXPECT_EQ(jit.stats().compiled, (int)seen.size());
}

TEST(NvrtcCompile, FullConfigSm90a) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  compileAll("full", "sm_90a");
}
TEST(NvrtcCompile, FullConfigSm100a) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  compileAll("full", "sm_100a");
}
TEST(NvrtcCompile, TinyConfigSm90a) { compileAll("tiny", "sm_90a"); }
TEST(NvrtcCompile, TinyConfigSm100a) { compileAll("tiny", "sm_100a"); }

// The real plan: `h3c compile` of the checked-in full fingerprint, then every kernel file the plan lists is compiled
// by NVRTC for sm_90a and sm_100a (skipped when this h3c was built without the MLIR compiler).
TEST(NvrtcCompile, EveryKernelOfTheFullPlan) {
  H3C_SKIP_HEAVY_UNDER_ASAN();
  std::string tool = H3C_TOOL;
  auto dir = tempDir("h3c-full-plan");
  std::string cmd = tool + " compile " + std::string(H3C_SOURCE_DIR) + "/models/h3/fingerprint.json --arch sm_90a -o " +
                    dir.string() + " >/dev/null 2>&1";
  {
    // A build without MLIR has no `compile` (its --help then prints the top-level usage): skip there.
    std::string help;
    if (FILE *p = popen((tool + " compile --help 2>&1").c_str(), "r")) {
      char buf[512];
      while (size_t n = fread(buf, 1, sizeof buf, p)) help.append(buf, n);
      pclose(p);
    }
    if (help.find("--arch") == std::string::npos) GTEST_SKIP() << "this h3c has no compile (built without MLIR)";
  }
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dir / "plan.json");
  json plan = json::parse(f);
  ASSERT_TRUE(plan.contains("kernels"));
  std::set<std::string> kinds;
  for (const auto &op : plan.at("ops"))
    if (!op.at("kernel").is_null()) kinds.insert(op.at("op").get<std::string>());
  for (const char *k : {"linear", "qkv_linear", "adaln_table", "time_embed", "rms_norm", "norm_modulate",
                        "qk_norm_rope", "attention", "pack", "unpack"})
    EXPECT_TRUE(kinds.count(k)) << "the full plan has no '" << k << "' kernel";
  hc::NvrtcJit jit;
  int n = 0;
  for (const auto &[id, k] : plan.at("kernels").items()) {
    hk::KernelSource src;
    src.id = id;
    src.entry = k.at("entry").get<std::string>();
    std::ifstream kf(dir / k.at("file").get<std::string>());
    src.source.assign(std::istreambuf_iterator<char>(kf), std::istreambuf_iterator<char>());
    ASSERT_FALSE(src.source.empty()) << id;
    for (const char *arch : {"sm_90a", "sm_100a"}) {
      try {
        auto c = jit.compile(src, arch);
        EXPECT_GT(c.cubin.size(), 4u);
      } catch (const std::exception &e) {
        ADD_FAILURE() << id << " " << arch << ": " << e.what();
      }
    }
    ++n;
  }
  EXPECT_GE(n, 15);
  std::filesystem::remove_all(dir);
}

TEST(NvrtcJit, CacheHitsAndRebuildsCorruptEntries) {
  auto dir = tempDir("h3c-jit-cache");
  auto k = hk::emitKernel(h3Ops(h3c::h3::namedConfig("tiny"))[3], "sm_90a");  // rms_norm: quick to compile
  std::string cubin;
  {
    hc::NvrtcJit jit(dir);
    auto a = jit.compile(*k, "sm_90a");
    EXPECT_FALSE(a.fromCache);
    auto b = jit.compile(*k, "sm_90a");
    EXPECT_TRUE(b.fromCache);
    EXPECT_EQ(a.cubin, b.cubin);
    cubin = a.cubin;
    // Another arch is another key.
    auto c = jit.compile(*k, "sm_100a");
    EXPECT_FALSE(c.fromCache);
    EXPECT_NE(c.key, a.key);
  }
  auto entry = dir / (hc::NvrtcJit::cacheKey(*k, "sm_90a") + ".cubin");
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
    auto r = jit.compile(*k, "sm_90a");
    EXPECT_FALSE(r.fromCache);
    EXPECT_TRUE(r.rebuiltCorrupt);
    EXPECT_EQ(jit.stats().corruptRebuilt, 1);
    EXPECT_EQ(r.cubin, cubin);
    auto again = jit.compile(*k, "sm_90a");
    EXPECT_TRUE(again.fromCache);
  }
  // A truncated entry is corrupt too.
  std::filesystem::resize_file(entry, 20);
  {
    hc::NvrtcJit jit(dir);
    auto r = jit.compile(*k, "sm_90a");
    EXPECT_TRUE(r.rebuiltCorrupt);
  }
  std::filesystem::remove_all(dir);
}

TEST(NvrtcJit, CompileErrorNamesTheKernelWithTheLog) {
  hk::KernelSource bad;
  bad.id = "broken_kernel_1234";
  bad.entry = "h3c_broken";
  bad.source = "extern \"C\" __global__ void h3c_broken(float *p) { p[0] = undeclared_thing; }\n";
  hc::NvrtcJit jit;
  try {
    jit.compile(bad, "sm_90a");
    FAIL() << "compiled a broken kernel";
  } catch (const hc::CompileError &e) {
    std::string w = e.what();
    EXPECT_NE(w.find("broken_kernel_1234"), std::string::npos) << w;
    EXPECT_NE(w.find("undeclared_thing"), std::string::npos) << w;
  }
  EXPECT_THROW(hc::NvrtcJit::options("sm_80"), h3c::Error);
}

TEST(NvrtcJit, KeyCoversSourceArchAndVersion) {
  auto k = *hk::emitKernel(h3Ops(h3c::h3::namedConfig("tiny"))[3], "sm_90a");
  auto k2 = k;
  k2.source += "\n// changed\n";
  EXPECT_NE(hc::NvrtcJit::cacheKey(k, "sm_90a"), hc::NvrtcJit::cacheKey(k2, "sm_90a"));
  EXPECT_NE(hc::NvrtcJit::cacheKey(k, "sm_90a"), hc::NvrtcJit::cacheKey(k, "sm_100a"));
  EXPECT_EQ(hc::NvrtcJit::cacheKey(k, "sm_90a"), hc::NvrtcJit::cacheKey(k, "sm_90a"));
  EXPECT_FALSE(hc::NvrtcJit::nvrtcVersion().empty());
}
#endif

} // namespace
