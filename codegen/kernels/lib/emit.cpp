// emitKernel: picks the kernel template for a plan op, checks the op's reduction order against what the template
// implements (docs/contract.md section 4), and specializes the template with #defines. All shapes except the row
// count are compile-time constants; nothing depends on M (rows), the batch or the row order.
#include "h3c/kernels/emit.h"

#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace h3c::kernels {
namespace tmpl {
extern const char *const common;
extern const char *const detmath;
extern const char *const gemm_bf16;
extern const char *const attention;
extern const char *const norm;
extern const char *const headops;
extern const char *const elementwise;
extern const char *const linear_f32;
extern const char *const time_embed;
extern const char *const synth_rng;
extern const char *const synth_fill;
} // namespace tmpl

namespace {

using nlohmann::json;

struct OpView {
  const json &op;
  std::string kind;
  std::string where;
  const json &attrs;

  bool has(const char *k) const { return attrs.is_object() && attrs.contains(k) && !attrs.at(k).is_null(); }
  long long integer(const char *k) const {
    if (!has(k)) fail(where, "attrs.{} is required for a '{}' kernel", k, kind);
    const json &v = attrs.at(k);
    if (!v.is_number_integer()) fail(where, "attrs.{} must be an integer, got {}", k, v.dump());
    return v.get<long long>();
  }
  long long integerOr(const char *k, long long def) const { return has(k) ? integer(k) : def; }
  long long positive(const char *k) const {
    long long v = integer(k);
    if (v <= 0 || v > (1LL << 30)) fail(where, "attrs.{} must be in [1, 2^30], got {}", k, v);
    return v;
  }
  std::string str(const char *k) const {
    if (!has(k)) fail(where, "attrs.{} is required for a '{}' kernel", k, kind);
    if (!attrs.at(k).is_string()) fail(where, "attrs.{} must be a string", k);
    return attrs.at(k).get<std::string>();
  }
  std::string strOr(const char *k, const std::string &def) const { return has(k) ? str(k) : def; }
  double number(const char *k) const {
    if (!has(k) || !attrs.at(k).is_number()) fail(where, "attrs.{} (a number) is required for a '{}' kernel", k, kind);
    return attrs.at(k).get<double>();
  }
  bool f32(const char *k, const std::string &def) const {
    std::string d = strOr(k, def);
    if (d == "F32") return true;
    if (d == "BF16") return false;
    fail(where, "attrs.{} must be \"BF16\" or \"F32\", got \"{}\"", k, d);
  }
  size_t weightCount(const char *k) const {
    if (!op.contains("weights") || !op.at("weights").is_object() || !op.at("weights").contains(k)) return 0;
    const json &w = op.at("weights").at(k);
    if (!w.is_array()) fail(where, "weights.{} must be an array", k);
    return w.size();
  }
  size_t outCount(size_t def) const {
    if (!op.contains("out") || !op.at("out").is_array()) return def;
    return op.at("out").size();
  }
  // The op's reduction order; its kind must be `want`.
  const json &order(const char *want) const {
    if (!op.contains("order") || !op.at("order").is_object())
      fail(where, "a '{}' op needs an order {{\"kind\": \"{}\", ...}} (docs/contract.md section 4)", kind, want);
    const json &o = op.at("order");
    if (!o.contains("kind") || o.at("kind") != want)
      fail(where, "order.kind must be \"{}\" for a '{}' op, got {}", want, kind, o.value("kind", json()).dump());
    if (o.contains("acc") && o.at("acc") != "f32") fail(where, "order.acc must be \"f32\"");
    return o;
  }
  long long orderInt(const json &o, const char *k, long long def) const {
    if (!o.contains(k)) return def;
    if (!o.at(k).is_number_integer()) fail(where, "order.{} must be an integer", k);
    return o.at(k).get<long long>();
  }
};

// A float literal with the exact F32 value (hex float, C++17).
std::string floatLit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", (double)(float)v);
  return buf;
}

int rowsPerTs(const OpView &v) {
  std::string r = v.str("row_index");
  if (r == "adaln") return 3;
  if (r == "timestep") return 1;
  fail(v.where, "attrs.row_index must be \"adaln\" or \"timestep\", got \"{}\"", r);
}

struct Builder {
  std::ostringstream defs;
  void def(const std::string &k, const std::string &v) { defs << "#define " << k << " " << v << "\n"; }
  void def(const std::string &k, long long v) { def(k, std::to_string(v)); }
};

std::string stripPragmaOnce(std::string s) {
  auto p = s.find("#pragma once");
  if (p != std::string::npos) s.erase(p, 12);
  return s;
}

KernelSource finish(const std::string &name, const std::string &entryMacro, Builder &b, const char *body,
                    const Launch &launch) {
  // The id hashes everything the kernel's code depends on (defines and templates), so it changes with any change.
  std::string tail = std::string(tmpl::common) + "\n" + stripPragmaOnce(tmpl::detmath) + "\n" + body;
  std::string hash = sha256Hex(b.defs.str() + tail).substr(0, 8);
  KernelSource k;
  k.id = name + "_" + hash;
  k.entry = "h3c_" + k.id;
  std::ostringstream src;
  src << "// h3c kernel " << k.id << " (generated by h3c::kernels::emitKernel; docs/contract.md sections 3-6)\n";
  src << "#define " << entryMacro << " " << k.entry << "\n" << b.defs.str() << tail;
  k.source = src.str();
  k.launch = launch;
  return k;
}

// The pairwise-tree merge after unit u of U = 2^L units (gemm_bf16.cuh), as a switch with compile-time register
// indices. With t = the number of trailing one bits of u, the finished unit partial is combined with the t stack
// slots below it (p[2i] + p[2i+1], level by level) and the result parked in slot t; after the last unit the whole
// tree's value is in slot L - 1.
std::string mergeMacro(int L) {
  std::ostringstream m;
  m << "switch (u) { ";
  for (int u = 0; u < (1 << L); ++u) {
    int lvl = 0;
    while ((u >> lvl) & 1) ++lvl;
    m << "case " << u << ": ";
    for (int i = 0; i < lvl; ++i)
      m << "gm_add(stk[" << i << "], " << (i == 0 ? std::string("acc") : fmt::format("stk[{}]", i - 1)) << "); ";
    if (lvl < L)
      m << "gm_copy(stk[" << lvl << "], " << (lvl == 0 ? std::string("acc") : fmt::format("stk[{}]", lvl - 1))
        << "); ";
    m << "break; ";
  }
  m << "}";
  return m.str();
}

KernelSource emitGemmBf16(const OpView &v, long long K, long long N, int xmode, int epi, bool outF32, bool bias,
                          int nout, int U) {
  if (K % 8 != 0) fail(v.where, "bf16 linear needs K % 8 == 0 (16-byte rows), got K = {}", K);
  int L = 0;
  while ((1 << L) < U) ++L;
  if (U < 1 || (1 << L) != U || U > 8) fail(v.where, "order.units must be 1, 2, 4 or 8, got {}", U);
  if (U > 1 && K % (16LL * U) != 0)
    fail(v.where, "order.units = {} needs K % (units * k_step) == 0, got K = {}", U, K);
  if (epi == 3 && N % 2 != 0) fail(v.where, "swiglu epilogue needs an even N (value and gate halves), got {}", N);
  Builder b;
  int BM, BN, WM, WN, BK = 32, stages = 3;
  if (U == 1) {
    BM = 128; BN = 128; WM = 2; WN = 4;  // warp tile 64 x 32
  } else {
    BM = 128; BN = 64; WM = 4; WN = 2;   // warp tile 32 x 32: room for the log2(U) partials of the tree
    if ((K / U) % 32 != 0) BK = 16;      // a k-tile never straddles two units
  }
  b.def("GM_K", K); b.def("GM_N", N); b.def("GM_U", U); b.def("GM_L", L);
  b.def("GM_BM", BM); b.def("GM_BN", BN); b.def("GM_BK", BK); b.def("GM_WM", WM); b.def("GM_WN", WN);
  b.def("GM_STAGES", stages); b.def("GM_XMODE", xmode); b.def("GM_EPI", epi); b.def("GM_OUT_F32", outF32 ? 1 : 0);
  b.def("GM_HAS_BIAS", bias ? 1 : 0); b.def("GM_NOUT", nout);
  if (epi == 2) {
    long long nc = v.positive("num_chunks"), ch = v.integer("chunk");
    if (ch < 0 || ch >= nc) fail(v.where, "attrs.chunk {} out of [0, num_chunks = {})", ch, nc);
    b.def("GM_CHUNK", ch); b.def("GM_NUM_CHUNKS", nc); b.def("GM_RPT", rowsPerTs(v));
  } else {
    b.def("GM_CHUNK", 0); b.def("GM_NUM_CHUNKS", 1); b.def("GM_RPT", 1);
  }
  if (U > 1) b.def("GM_MERGE(u)", mergeMacro(L));
  Launch l;
  l.threads = WM * WN * 32;
  l.smemBytes = stages * (BM + BN) * (BK + 8) * 2;
  l.rowsOf = "in0";
  l.unitsPerRow = 1;
  l.unitsPerBlock = BM;
  long long outCols = epi == 3 ? N / 2 : N;
  int bno = epi == 3 ? BN / 2 : BN;
  l.gridY = (int)((outCols + bno - 1) / bno);
  static const char *epiName[] = {"", "_res", "_gres", "_swiglu"};
  std::string name = fmt::format("{}_bf16_k{}_n{}{}{}_u{}", v.kind, K, N, epiName[epi], xmode ? "_xf32" : "", U);
  return finish(name, "GM_ENTRY", b, tmpl::gemm_bf16, l);
}

int kChunkUnits(const OpView &v) {
  const json &o = v.order("k_chunks");
  if (v.orderInt(o, "k_step", 16) != 16) fail(v.where, "order.k_step must be 16");
  return (int)v.orderInt(o, "units", 1);
}

KernelSource emitLinear(const OpView &v) {
  long long K = v.positive("K"), N = v.positive("N");
  bool wF32 = v.f32("w_dtype", "BF16");
  bool xF32 = v.f32("x_dtype", wF32 ? "F32" : "BF16");
  bool outF32 = v.f32("out_dtype", "BF16");
  std::string epiS = v.strOr("epilogue", "none");
  int epi = epiS == "none" ? 0 : epiS == "residual" ? 1 : epiS == "gate_residual" ? 2 : epiS == "swiglu" ? 3 : -1;
  if (epi < 0) fail(v.where, "attrs.epilogue must be none, residual, gate_residual or swiglu, got \"{}\"", epiS);
  int U = kChunkUnits(v);
  bool bias = v.weightCount("bias") > 0;
  if (v.weightCount("weight") != 1) fail(v.where, "a linear op needs exactly one weight tensor");
  if (wF32) {
    if (epi != 0) fail(v.where, "F32 linears take no epilogue (got \"{}\")", epiS);
    if (U != 1) fail(v.where, "F32 linears run the sequential fma order: order.units must be 1, got {}", U);
    Builder b;
    b.def("FL_K", K); b.def("FL_N", N); b.def("FL_HAS_BIAS", bias ? 1 : 0); b.def("FL_XBF", xF32 ? 0 : 1);
    b.def("FL_OUT_BF", outF32 ? 0 : 1);
    Launch l;
    l.unitsPerBlock = 64;
    l.gridY = (int)((N + 63) / 64);
    return finish(fmt::format("linear_f32_k{}_n{}", K, N), "FL_ENTRY", b, tmpl::linear_f32, l);
  }
  if (epi != 0 && outF32) fail(v.where, "epilogue \"{}\" produces BF16; out_dtype F32 is not allowed", epiS);
  return emitGemmBf16(v, K, N, xF32 ? 1 : 0, epi, outF32, bias, 1, U);
}

KernelSource emitQkv(const OpView &v) {
  long long K = v.positive("K"), N = v.positive("N");
  int U = kChunkUnits(v);
  if (v.weightCount("bias") > 0) fail(v.where, "qkv_linear takes no bias (H3's to_q/to_k/to_v have none)");
  if (v.weightCount("weight") != 3) fail(v.where, "qkv_linear needs three weight tensors [Wq, Wk, Wv]");
  if (v.f32("out_dtype", "BF16")) fail(v.where, "qkv_linear outputs BF16");
  return emitGemmBf16(v, K, 3 * N, 0, 0, false, false, 3, U);
}

KernelSource emitAdaln(const OpView &v) {
  long long K = v.positive("K"), N = v.positive("N");
  int U = kChunkUnits(v);
  return emitGemmBf16(v, K, N, 2, 0, false, v.weightCount("bias") > 0, 1, U);
}

KernelSource emitTimeEmbed(const OpView &v) {
  long long K = v.has("K") ? v.positive("K") : v.positive("freq_dim");
  long long H = v.has("hidden") ? v.positive("hidden") : v.positive("time_embed_hidden_dim");
  long long N = v.has("N") ? v.positive("N") : v.positive("time_embed_dim");
  if ((K + H) * 4 > 40 * 1024) fail(v.where, "time_embed: freq_dim + hidden too large for shared memory");
  if (v.op.contains("order") && v.op.at("order").is_object() && kChunkUnits(v) != 1)
    fail(v.where, "time_embed runs the sequential F32 order: order.units must be 1");
  Builder b;
  b.def("TE_K", K); b.def("TE_HID", H); b.def("TE_N", N);
  Launch l;
  l.rowsOf = "T";
  l.unitsPerBlock = 1;
  l.gridY = (int)((N + 255) / 256);
  return finish(fmt::format("time_embed_k{}_h{}_n{}", K, H, N), "TE_ENTRY", b, tmpl::time_embed, l);
}

void checkLaneTree(const OpView &v) {
  const json &o = v.order("lane_tree");
  if (v.orderInt(o, "lanes", 32) != 32) fail(v.where, "order.lanes must be 32");
}

KernelSource emitNorm(const OpView &v, bool modulate) {
  checkLaneTree(v);
  long long H = v.positive("H");
  Builder b;
  b.def("RN_H", H); b.def("RN_EPS", floatLit(v.number("eps")));
  b.def("RN_HAS_W", v.weightCount("weight") > 0 ? 1 : 0);
  b.def("RN_XF32", v.f32("x_dtype", "BF16") ? 1 : 0);
  b.def("RN_OUT_F32", v.f32("out_dtype", "BF16") ? 1 : 0);
  b.def("RN_MOD", modulate ? 1 : 0);
  if (modulate) {
    long long nc = v.positive("num_chunks"), sh = v.integer("shift_chunk"), sc = v.integer("scale_chunk");
    if (sh < 0 || sh >= nc || sc < 0 || sc >= nc) fail(v.where, "shift_chunk/scale_chunk out of [0, num_chunks)");
    b.def("RN_SHIFT", sh); b.def("RN_SCALE", sc); b.def("RN_NUMCH", nc); b.def("RN_RPT", rowsPerTs(v));
  } else {
    b.def("RN_SHIFT", 0); b.def("RN_SCALE", 0); b.def("RN_NUMCH", 1); b.def("RN_RPT", 1);
  }
  Launch l;
  l.unitsPerBlock = 8;
  return finish(fmt::format("{}_h{}", v.kind, H), "RN_ENTRY", b, tmpl::norm, l);
}

KernelSource emitHeadOp(const OpView &v, bool norm, bool rope) {
  if (norm) checkLaneTree(v);
  long long heads = v.positive("heads"), d = v.positive("head_dim");
  if (d > 1024) fail(v.where, "head_dim {} too large", d);
  long long R = rope ? v.integer("rotary_dim") : 0;
  if (R < 0 || R > d || R % 2 != 0) fail(v.where, "attrs.rotary_dim must be even and in [0, head_dim], got {}", R);
  int nt = (int)v.outCount(v.kind == "qk_norm_rope" ? 2 : 1);
  if (nt != 1 && nt != 2) fail(v.where, "expected 1 or 2 outputs, got {}", nt);
  Builder b;
  b.def("HO_HEADS", heads); b.def("HO_D", d); b.def("HO_NORM", norm ? 1 : 0);
  b.def("HO_EPS", norm ? floatLit(v.number("eps")) : std::string("0.0f")); b.def("HO_R", R); b.def("HO_NT", nt);
  Launch l;
  l.unitsPerRow = heads;
  l.unitsPerBlock = 8;
  l.gridY = nt;
  return finish(fmt::format("{}_h{}_d{}_r{}_t{}", v.kind, heads, d, R, nt), "HO_ENTRY", b, tmpl::headops, l);
}

KernelSource emitAttention(const OpView &v) {
  const json &o = v.order("flash");
  if (v.orderInt(o, "kv_block", 64) != 64) fail(v.where, "order.kv_block must be 64");
  if (v.orderInt(o, "k_step", 16) != 16) fail(v.where, "order.k_step must be 16");
  if (o.contains("p") && o.at("p") != "bf16") fail(v.where, "order.p must be \"bf16\"");
  long long heads = v.positive("heads"), d = v.positive("head_dim");
  if (d % 16 != 0 || d > 256) fail(v.where, "attention needs head_dim % 16 == 0 and <= 256, got {}", d);
  Builder b;
  b.def("AT_D", d); b.def("AT_HEADS", heads); b.def("AT_SCALE", floatLit(1.0 / std::sqrt((double)d)));
  Launch l;
  l.threads = 128;
  l.smemBytes = 5 * 64 * (int)(d + 8) * 2;
  l.unitsPerBlock = 64;
  l.gridY = (int)heads;
  l.perItem = true;
  return finish(fmt::format("attention_h{}_d{}", heads, d), "AT_ENTRY", b, tmpl::attention, l);
}

KernelSource emitElementwise(const OpView &v) {
  Builder b;
  int kind;
  long long cols;
  Launch l;
  if (v.kind == "swiglu") {
    kind = 1; cols = v.has("F") ? v.positive("F") : v.positive("cols");
  } else if (v.kind == "silu") {
    kind = 2; cols = v.positive("cols");
  } else if (v.kind == "residual") {
    kind = 3; cols = v.positive("cols");
  } else if (v.kind == "gate_residual") {
    kind = 4; cols = v.positive("H");
  } else if (v.kind == "pack") {
    kind = 5; cols = v.positive("H");
    l.rowsOf = "out0";
  } else {  // unpack
    kind = 6; cols = v.positive("video_cols");
    l.rowsOf = "unpack";
  }
  b.def("EW_KIND", kind); b.def("EW_COLS", cols);
  b.def("EW_F32", kind == 2 && v.f32("dtype", "F32") ? 1 : 0);
  if (kind == 4) {
    long long nc = v.positive("num_chunks"), ch = v.integer("chunk");
    if (ch < 0 || ch >= nc) fail(v.where, "attrs.chunk {} out of [0, num_chunks = {})", ch, nc);
    b.def("EW_CHUNK", ch); b.def("EW_NUMCH", nc); b.def("EW_RPT", rowsPerTs(v));
  } else {
    b.def("EW_CHUNK", 0); b.def("EW_NUMCH", 1); b.def("EW_RPT", 1);
  }
  long long ac = 0;
  if (kind == 6) {
    ac = v.positive("audio_cols");
    if (ac > cols) fail(v.where, "unpack expects audio_cols <= video_cols");
  }
  b.def("EW_ACOLS", ac);
  l.unitsPerRow = cols;
  l.unitsPerBlock = 256;
  return finish(fmt::format("{}_c{}", v.kind, cols), "EW_ENTRY", b, tmpl::elementwise, l);
}

const char *const kOps[] = {"linear", "qkv_linear", "adaln_table", "time_embed", "rms_norm", "norm_modulate",
                            "qk_norm", "rope", "qk_norm_rope", "attention", "swiglu", "silu", "residual",
                            "gate_residual", "pack", "unpack", "rope_table", "timestep_sinusoid", nullptr};

} // namespace

const char *const *knownOps() { return kOps; }

KernelSource synthFillKernel() {
  KernelSource k;
  std::string src = std::string("// h3c synthetic weight generator\n") + tmpl::common + "\n" +
                    stripPragmaOnce(tmpl::synth_rng) + "\n" + tmpl::synth_fill;
  k.id = "synth_fill_" + sha256Hex(src).substr(0, 8);
  k.entry = "h3c_synth_fill";
  k.source = src;
  k.launch.threads = 256;
  return k;
}

std::optional<KernelSource> emitKernel(const json &planOp, const std::string &arch) {
  if (arch != "sm_90a" && arch != "sm_100a") fail("emitKernel", "arch must be sm_90a or sm_100a, got \"{}\"", arch);
  if (!planOp.is_object() || !planOp.contains("op") || !planOp.at("op").is_string())
    fail("emitKernel", "a plan op must be an object with a string \"op\"");
  std::string kind = planOp.at("op").get<std::string>();
  std::string where = "op '" + kind + "'";
  if (planOp.contains("nodes") && planOp.at("nodes").is_array() && !planOp.at("nodes").empty() &&
      planOp.at("nodes")[0].is_string())
    where += " (node " + planOp.at("nodes")[0].get<std::string>() + ")";
  static const json kEmpty = json::object();
  const json &attrs = planOp.contains("attrs") ? planOp.at("attrs") : kEmpty;
  if (!attrs.is_object()) fail(where, "attrs must be an object");
  OpView v{planOp, kind, where, attrs};
  // The kernels are the same C++ for both archs (mma.sync exists on sm_90a and sm_100a); the arch selects the NVRTC
  // target and is part of the JIT cache key.
  if (kind == "rope_table" || kind == "timestep_sinusoid") return std::nullopt;
  if (kind == "linear") return emitLinear(v);
  if (kind == "qkv_linear") return emitQkv(v);
  if (kind == "adaln_table") return emitAdaln(v);
  if (kind == "time_embed") return emitTimeEmbed(v);
  if (kind == "rms_norm") return emitNorm(v, false);
  if (kind == "norm_modulate") return emitNorm(v, true);
  if (kind == "qk_norm") return emitHeadOp(v, true, false);
  if (kind == "rope") return emitHeadOp(v, false, true);
  if (kind == "qk_norm_rope") {
    // Rope when the op carries the cos/sin tables (q, k, cos, sin); the refiner's form has only q, k.
    bool rope = planOp.contains("in") && planOp.at("in").is_array() ? planOp.at("in").size() >= 4
                                                                    : v.integerOr("rotary_dim", 0) > 0;
    return emitHeadOp(v, true, rope);
  }
  if (kind == "attention") return emitAttention(v);
  if (kind == "swiglu" || kind == "silu" || kind == "residual" || kind == "gate_residual" || kind == "pack" ||
      kind == "unpack")
    return emitElementwise(v);
  fail(where, "no GPU kernel for op kind '{}'", kind);
}

} // namespace h3c::kernels
