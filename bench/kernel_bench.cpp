// Per-kernel GPU timings of h3c's generated kernels at the H3 shapes (M = 8349 packed rows by default), with CUDA
// events: 3 warm-up launches, then the median of 20 timed launches each. Inputs are random (never zeros). Each kernel
// is JIT-compiled and launched exactly as a plan carries it (its text, NVRTC options and launch ABI).
// Prints a table (ms, TFLOP/s or GB/s) and writes JSON lines to argv[1] when given.
//   h3c_kernel_bench [out.jsonl] [--rows M] [--sweep] [--energy [--rounds R]] [--vendor] [--only TEXT[|TEXT...]]
//                    [--variant LABEL=NAME=VALUE[,NAME=VALUE...]]...
// --vendor adds cuBLASLt's plain GEMM of each linear's shape (bf16 out: torch's F.linear) in the same process.
// --energy times each kernel sustained (back-to-back launches, the mean per launch) and reads the board's energy
// counter and SM clock over it (NVML): watts, MHz and millijoules per launch beside the time. The block linears run
// the default, cuBLASLt and a focused set of Hopper variants in R rounds (6 by default) of ~150 ms slices each, the
// order rotated every round after an untimed one (timeRounds), and print each form's time and SM clock, its time
// range over the rounds and its speed against cuBLASLt's round by round; the other kernels run ~0.6 s each. The
// full forward is power-capped (bench/NOTES.md), so energy per launch is what a kernel costs the ops around it.
// --variant adds a Hopper linear variant of the plan's defaults with `h3c compile --tune`'s settings (NAME or
// OP:NAME, e.g. `--variant "bn192 st4=linear+gate_residual:gemm_bn=192,linear+gate_residual:gemm_stages=4"`) beside
// the linears it applies to (with --energy: the default, cuBLASLt and the given variants only, in rounds), so
// that a tuning is timed without a new build.
// --sweep also times every tuning variant of the Hopper linear (stages, L2 group, k-blocks in flight; the cooperative
// and the ping-pong schedule, one 2-CTA cluster variant, the epilogue staged through shared memory), of the Hopper
// attention (stages, overlap, ping-pong, one CTA per tile or persistent; --energy: the persistent grid beside the
// default, twice), of norm_modulate's rows per CTA and row metadata and of the AdaLN table's streaming kernel (stage
// width, stages, CTAs per SM) beside the mma.sync kernel of the same op; the output bits of all variants are the same
// (the GPU checks compare them).
#include "emit_ops.h"
#include "nvml_meter.h"
#include "vendor_gemm.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/dtype.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

using nlohmann::json;
namespace hc = h3c::runtime::cuda;
namespace plan = h3c::plan;
using namespace h3c::testops;
using h3c::DType;

namespace {

std::mt19937_64 rng(99);

std::unique_ptr<hc::DeviceBuffer> randBuf(size_t elems, bool bf16, double stdv) {
  std::normal_distribution<double> d(0, stdv);
  auto b = std::make_unique<hc::DeviceBuffer>(elems * (bf16 ? 2 : 4));
  // One chunk of 2^24 samples, uploaded again for every later chunk: the timings do not depend on the values, and
  // drawing every value took ~25 ns each, ~20 s of setup for the full shapes' buffers (a `--only` run of one kernel
  // spent its whole time limit there, bench/NOTES.md 2026-12-06 call 6).
  const size_t chunk = std::min<size_t>(size_t(1) << 24, elems);
  std::vector<uint16_t> hb;
  std::vector<float> hf;
  if (bf16) {
    hb.resize(chunk);
    for (auto &e : hb) e = h3c::floatToBf16((float)d(rng));
  } else {
    hf.resize(chunk);
    for (auto &e : hf) e = (float)d(rng);
  }
  for (size_t off = 0; off < elems; off += chunk) {
    const size_t n = std::min(chunk, elems - off);
    if (bf16) b->upload(hb.data(), n * 2, off * 2);
    else b->upload(hf.data(), n * 4, off * 4);
  }
  return b;
}

struct Result {
  std::string name;
  double ms = 0, flops = 0, bytes = 0;
  double watts = 0, mhz = 0, mj = 0;  // --energy only
};

// Operand addresses of one launch, by role and position.
struct Operands {
  std::vector<CUdeviceptr> in, out, w, b;
  CUdeviceptr at(plan::OperandRole r, int64_t i) const {
    const auto &v = r == plan::OperandRole::In ? in : r == plan::OperandRole::Out ? out : r == plan::OperandRole::Weight ? w : b;
    if (size_t(i) >= v.size()) throw std::runtime_error("operand not given");
    return v[size_t(i)];
  }
};

struct Events {
  CUevent e0 = nullptr, e1 = nullptr;
  Events() {
    hc::check(hc::driver().cuEventCreate(&e0, 0), "event");
    hc::check(hc::driver().cuEventCreate(&e1, 0), "event");
  }
  ~Events() {
    hc::driver().cuEventDestroy(e0);
    hc::driver().cuEventDestroy(e1);
  }
  // Milliseconds from e0 to e1 around `fire` called n times.
  float around(const std::function<void()> &fire, int n, const std::string &what) {
    const auto &d = hc::driver();
    hc::check(d.cuEventRecord(e0, nullptr), "record");
    for (int i = 0; i < n; ++i) fire();
    hc::check(d.cuEventRecord(e1, nullptr), "record");
    hc::check(d.cuEventSynchronize(e1), "sync " + what);
    float ms = 0;
    hc::check(d.cuEventElapsedTime(&ms, e0, e1), "elapsed");
    return ms;
  }
};

// The median of 20 timed launches after 3 warm-ups.
void timeMedian(const std::function<void()> &fire, const std::string &what, Result &r) {
  for (int i = 0; i < 3; ++i) fire();
  hc::check(hc::driver().cuCtxSynchronize(), "warm-up " + what);
  Events ev;
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) t.push_back(ev.around(fire, 1, what));
  std::sort(t.begin(), t.end());
  r.ms = t[t.size() / 2];
}

// Sustained: launches back to back for about 0.6 s (after 0.2 s of warm-up), the mean per launch, with the board's
// energy and mean SM clock over the same window.
void timeSustained(const std::function<void()> &fire, const std::string &what, h3c::bench::NvmlMeter &meter,
                   Result &r) {
  Events ev;
  const float once = std::max(ev.around(fire, 1, what), 0.001f);
  ev.around(fire, std::max(1, int(200.0f / once)), what);
  const int n = std::max(3, int(600.0f / once));
  meter.start();
  const unsigned long long e0 = meter.millijoules();
  const float ms = ev.around(fire, n, what);
  const unsigned long long e1 = meter.millijoules();
  r.mhz = meter.stop();
  r.ms = ms / n;
  r.mj = double(e1 - e0) / n;
  r.watts = double(e1 - e0) / ms;
}

// A kernel collected for timeRounds: its name, one launch, and its work.
struct Pending {
  std::string name;
  std::function<void()> fire;
  double flops = 0, bytes = 0;
};

// Sustained, every form of one linear in turn (--energy's linears): `rounds` rounds, each running every form back to
// back for about `sliceMs` with the energy counter and SM clock read around it, the forms' order rotated by one each
// round, after one untimed round that brings the board to its sustained power. So each form runs at the power cap and
// temperature the others run at; timed one after another (the protocol until 2026-12-07), the first vendor line of a
// run measured 0.807 ms at 1,980 MHz on a board still cool from the JIT, the same kernel 0.936 ms at the cap.
// Returns one Result per form (the means over its slices: time and SM clock; no energy, since the board's counter
// trails a slice this short: on an H100 it put cuBLASLt's slices at 1,115 W under a 700 W cap, 2026-12-07) and each
// form's per-round times in `perRound`.
std::vector<Result> timeRounds(const std::vector<Pending> &forms, h3c::bench::NvmlMeter &meter, int rounds,
                               float sliceMs, std::vector<std::vector<double>> &perRound) {
  Events ev;
  const size_t n = forms.size();
  std::vector<int> launches(n);
  for (size_t f = 0; f < n; ++f) {
    const float once = std::max(ev.around(forms[f].fire, 1, forms[f].name), 0.001f);
    launches[f] = std::max(3, int(sliceMs / once));
  }
  std::vector<Result> r(n);
  std::vector<double> ms(n, 0), mhzMs(n, 0);
  std::vector<long long> total(n, 0);
  perRound.assign(n, {});
  for (int round = -1; round < rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      const size_t f = (i + size_t(round + 1)) % n;
      if (round < 0) {
        ev.around(forms[f].fire, launches[f], forms[f].name);
        continue;
      }
      meter.start();
      const float t = ev.around(forms[f].fire, launches[f], forms[f].name);
      const double mhz = meter.stop();
      ms[f] += t;
      mhzMs[f] += mhz * t;
      total[f] += launches[f];
      perRound[f].push_back(t / launches[f]);
    }
  }
  for (size_t f = 0; f < n; ++f) {
    r[f].name = forms[f].name;
    r[f].flops = forms[f].flops;
    r[f].bytes = forms[f].bytes;
    r[f].ms = ms[f] / double(total[f]);
    r[f].mhz = mhzMs[f] / ms[f];
  }
  return r;
}

// --variant LABEL=NAME=VALUE[,NAME=VALUE...]: the plan's defaults with `h3c compile --tune`'s settings, parsed and
// checked once (EmitOptions::set and check: names, ranges, shared memory), and the op profiles the settings name.
struct UserVariant {
  std::string label;
  h3c::kernels::EmitOptions options;
  bool everyOp = false;       // a setting without OP: applies to every linear
  std::set<std::string> ops;  // the profiles named by OP:NAME settings
};

UserVariant parseVariant(const std::string &label, const std::string &settings) {
  UserVariant u{label, h3c::kernels::EmitOptions::planDefaults()};
  const std::string where = "--variant " + label;
  for (size_t at = 0; at <= settings.size();) {
    const size_t end = std::min(settings.find(',', at), settings.size());
    const std::string kv = settings.substr(at, end - at);
    const std::string name = u.options.set(kv, where + " " + kv);
    const size_t colon = name.find(':');
    if (colon == std::string::npos) u.everyOp = true;
    else u.ops.insert(name.substr(0, colon));
    at = end + 1;
  }
  u.options.check(where);
  return u;
}

} // namespace

int main(int argc, char **argv) {
  std::string why;
  if (!hc::driverAvailable(&why)) {
    std::printf("SKIP: no GPU: %s\n", why.c_str());
    return 0;
  }
  std::string outPath;
  long long M = 8349;
  bool sweep = false, energy = false, vendor = false;
  int rounds = 6;  // --rounds: timeRounds' rounds of --energy's linears
  std::string only;  // --only TEXT[|TEXT...]: time only the kernels whose name contains one of the TEXTs
  std::vector<UserVariant> userVariants;  // --variant LABEL=SETTINGS, parsed and checked here
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) M = std::atoll(argv[++i]);
    else if (a == "--sweep") sweep = true;
    else if (a == "--energy") energy = true;
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--vendor") vendor = true;
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--variant" && i + 1 < argc) {
      const std::string v = argv[++i];
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "--variant: expected LABEL=NAME=VALUE[,NAME=VALUE...], got '%s'\n", v.c_str());
        return 2;
      }
      try {
        userVariants.push_back(parseVariant(v.substr(0, eq), v.substr(eq + 1)));
      } catch (const std::exception &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
      }
    }
    else outPath = a;
  }
  try {
    const auto &dev = hc::device();
    hc::KernelRunner runner;
    const long long H = 5376, I = 7168, F = 14336, E = 2688, heads = 56, d = 128, T = 2;
    const DType BF = DType::BF16, F32 = DType::F32;
    size_t free0 = 0, total = 0;
    hc::check(hc::driver().cuMemGetInfo(&free0, &total), "meminfo");
    auto x = randBuf(size_t(M * F * 2), true, 1.0);  // large enough for every activation input
    auto x2 = randBuf(size_t(M * I), true, 1.0);
    auto y = randBuf(size_t(M * 3 * I), true, 1.0);   // outputs (overwritten)
    auto y2 = randBuf(size_t(M * I), true, 1.0);
    auto y3 = randBuf(size_t(M * I), true, 1.0);
    auto w = randBuf(size_t(std::max(2 * F * H, 18 * H * E)), true, 0.01);  // every weight matrix fits
    auto table = randBuf(size_t(T * 3 * 6 * H), true, 0.3);
    auto tempF = randBuf(size_t(T * E), false, 1.0);
    auto cosb = randBuf(size_t(M * 96), false, 1.0), sinb = randBuf(size_t(M * 96), false, 1.0);
    auto lseBuf = randBuf(size_t(M * 64), false, 1.0);  // attention's row statistics (F32 [M, heads]), written by its lse form
    std::vector<long long> meta(static_cast<size_t>(M));
    auto ts = std::make_unique<hc::DeviceBuffer>(size_t(M) * 8), tags = std::make_unique<hc::DeviceBuffer>(size_t(M) * 8);
    for (long long r = 0; r < M; ++r) meta[size_t(r)] = r % T;
    ts->upload(meta.data(), meta.size() * 8);
    for (long long r = 0; r < M; ++r) meta[size_t(r)] = r % 3;
    tags->upload(meta.data(), meta.size() * 8);
    // Metadata in runs, as canonical order gives it (--sweep's norm_modulate): timestep r * T / M, tag 1 for the first
    // tenth of the rows (text), 0 for the next 80 % (video), 2 for the rest (audio).
    auto tsRuns = std::make_unique<hc::DeviceBuffer>(size_t(M) * 8);
    auto tagsRuns = std::make_unique<hc::DeviceBuffer>(size_t(M) * 8);
    for (long long r = 0; r < M; ++r) meta[size_t(r)] = r * T / M;
    tsRuns->upload(meta.data(), meta.size() * 8);
    for (long long r = 0; r < M; ++r) meta[size_t(r)] = r < M / 10 ? 1 : r < 9 * M / 10 ? 0 : 2;
    tagsRuns->upload(meta.data(), meta.size() * 8);

    // --only A|B|...: the kernels whose name contains any of the alternatives.
    auto wanted = [&](const std::string &name) {
      if (only.empty()) return true;
      for (size_t at = 0;;) {
        const size_t bar = only.find('|', at);
        if (name.find(only.substr(at, bar == std::string::npos ? std::string::npos : bar - at)) != std::string::npos)
          return true;
        if (bar == std::string::npos) return false;
        at = bar + 1;
      }
    };
    std::vector<Result> results;
    std::map<std::string, plan::Kernel> kernels;  // the runner keeps pointers to these
    const plan::Extents ext{1, M, 0, 0, 0, T};
    h3c::bench::NvmlMeter meter;
    if (energy && !meter.ok()) std::printf("--energy: NVML unavailable (%s): times only\n", meter.why().c_str());
    // One result's line.
    auto print = [&](const Result &r) {
      std::printf("%-60s %9.3f ms  %8.1f TFLOP/s  %8.1f GB/s", r.name.c_str(), r.ms, r.flops / r.ms / 1e9,
                  r.bytes / r.ms / 1e6);
      if (r.mj > 0) std::printf("  %6.0f W  %5.0f MHz  %8.1f mJ", r.watts, r.mhz, r.mj);
      else if (r.mhz > 0) std::printf("  %5.0f MHz", r.mhz);
    };
    // Where bench() and vendorGemm() put their kernels instead of timing them (--energy's linears: timeRounds).
    std::vector<Pending> *pending = nullptr;
    // Times `fire` (median, or sustained with energy) and prints one line.
    auto measure = [&](const std::string &name, const std::function<void()> &fire, double flops, double bytes) {
      Result r{name, 0, flops, bytes};
      if (energy && meter.ok()) timeSustained(fire, name, meter, r);
      else timeMedian(fire, name, r);
      results.push_back(r);
      print(r);
      std::printf("\n");
      std::fflush(stdout);
    };
    auto bench = [&](const std::string &name, const EmitOp &op, const Operands &ops, double flops, double bytes,
                     const h3c::kernels::EmitOptions &opt = h3c::kernels::EmitOptions::planDefaults()) {
      if (!wanted(name)) return;
      try {
        auto k = emit(op, dev.arch(), opt);
        const plan::Kernel &kk = kernels.emplace(k->id, *k).first->second;
        const hc::LoadedKernel &lk = runner.load(kk);
        if (pending) {  // a launch that owns its operands' addresses (the runner keeps lk)
          pending->push_back({name, [&runner, &lk, ext, own = ops] {
                                runner.launch(lk, ext, [&](plan::OperandRole role, int64_t i) { return own.at(role, i); });
                              }, flops, bytes});
          return;
        }
        auto addr = [&](plan::OperandRole role, int64_t i) { return ops.at(role, i); };
        measure(name, [&] { runner.launch(lk, ext, addr); }, flops, bytes);
      } catch (const std::exception &e) {
        std::printf("%-60s FAILED: %s\n", name.c_str(), e.what());
        std::fflush(stdout);
      }
    };
    // One phase of op's kernel alone, named `name`: its first entry (phase < 0) or phases[phase] as the entry; a
    // scratch it reads holds what the run before left there.
    auto benchPhase = [&](const std::string &name, const EmitOp &op, const Operands &ops, int phase, double flops,
                          double bytes, const h3c::kernels::EmitOptions &opt) {
      if (!wanted(name)) return;
      plan::Kernel k = *emit(op, dev.arch(), opt);
      if (phase >= 0) {
        k.entry = k.phases.at(size_t(phase)).entry;
        k.launch = k.phases.at(size_t(phase)).launch;
      }
      k.phases.clear();
      k.id += "_phase" + std::to_string(phase + 1);
      const hc::LoadedKernel &lk = runner.load(kernels.emplace(k.id, k).first->second);
      auto addr = [&](plan::OperandRole role, int64_t i) { return ops.at(role, i); };
      measure(name, [&] { runner.launch(lk, ext, addr); }, flops, bytes);
    };
    // cuBLASLt's plain GEMM of the same shape (y = x W^T, bf16 out), in this process.
    auto vendorGemm = [&](const std::string &name, long long K, long long n) {
      if (!wanted(name)) return;
      try {
        auto g = std::make_shared<h3c::bench::VendorGemm>(M, n, K);
        // fc1's plain output (M x 28,672) is wider than y
        auto out = std::make_shared<hc::DeviceBuffer>(size_t(M * n * 2));
        auto fire = [g, out, xa = x->get(), wa = w->get()] { g->run(xa, wa, out->get()); };
        const double flops = 2.0 * M * K * n, bytes = 2.0 * (M * K + K * n + M * n);
        if (pending) pending->push_back({name, fire, flops, bytes});
        else measure(name, fire, flops, bytes);
      } catch (const std::exception &e) {
        std::printf("%-60s FAILED: %s\n", name.c_str(), e.what());
        std::fflush(stdout);
      }
    };
    auto gemm = [&](const std::string &name, OpKind kind, long long K, long long N, plan::Epilogue epi,
                    const h3c::kernels::EmitOptions &opt = h3c::kernels::EmitOptions::planDefaults()) {
      plan::OpAttrs a = with(attrs({{"K", K}, {"N", N}}), BF, BF, BF, epi);
      if (epi == plan::Epilogue::GateResidual) {
        a.chunk = 2;
        a.numChunks = 6;
      }
      Operands o;
      o.in = {x->get()};
      if (epi == plan::Epilogue::Residual) o.in.push_back(x2->get());
      if (epi == plan::Epilogue::GateResidual) o.in.insert(o.in.end(), {x2->get(), table->get(), ts->get(), tags->get()});
      o.out = {y->get(), y2->get(), y3->get()};
      o.w = {w->get(), w->get(), w->get()};
      long long n = kind == OpKind::QkvLinear ? 3 * N : N;
      bench(name, op(kind, name, a, kchunks(1), kind == OpKind::QkvLinear ? 3 : 1), o, 2.0 * M * K * n,
            2.0 * (M * K + K * n + M * n), opt);
    };
    struct Linear {
      const char *name;
      OpKind kind;
      long long K, N;
      plan::Epilogue epi;
    };
    const std::vector<Linear> linears = {
        {"qkv (fused to_q/k/v)", OpKind::QkvLinear, H, I, plan::Epilogue::None},
        {"to_out + gate_residual", OpKind::Linear, I, H, plan::Epilogue::GateResidual},
        {"fc1 + swiglu", OpKind::Linear, H, 2 * F, plan::Epilogue::Swiglu},
        {"fc2 + gate_residual", OpKind::Linear, F, H, plan::Epilogue::GateResidual},
        // to_out's GEMM without its epilogue: the same work as cuBLASLt's plain line, for a profile of the two main
        // loops side by side (the `linear` profile of --variant)
        {"to_out plain", OpKind::Linear, I, H, plan::Epilogue::None},
    };
    // A cooperative (or ping-pong) Hopper linear's tuning, for every linear kind (the per-op defaults cleared).
    using Variants = std::vector<std::pair<std::string, h3c::kernels::EmitOptions>>;
    auto addVariant = [](Variants &v, const std::string &label, int st, int fl, int cl, int bn, int pp, int epi,
                         int gm = 8, int halfTail = 1) {
      h3c::kernels::EmitOptions o;
      o.perOp.clear();
      o.sm90Stages = st;
      o.sm90Inflight = fl;
      o.sm90Cluster = cl;
      o.sm90Bn = bn;
      o.sm90Pingpong = pp;
      o.sm90EpiSmem = epi;
      o.sm90GroupM = pp ? 16 : gm;
      o.sm90HalfTail = halfTail;
      v.push_back({label, o});
    };
    // --variant: the variants that apply to this linear (a setting for every op, or one naming its profile).
    auto addUser = [&](Variants &v, const Linear &l) {
      const std::string profile = l.kind == OpKind::QkvLinear ? "qkv_linear"
                                  : l.epi == plan::Epilogue::GateResidual ? "linear+gate_residual"
                                  : l.epi == plan::Epilogue::Swiglu ? "linear+swiglu" : "linear";
      for (const UserVariant &u : userVariants)
        if (u.everyOp || u.ops.count(profile)) v.push_back({u.label, u.options});
    };
    // The staged epilogue's step 3 in the producer warpgroup's epilogue warps (gemm_epi_smem=2): 1-CTA, 2-CTA in
    // flight, and the 192-wide tile at 4 stages for the epilogues it serves.
    auto addWarps = [&](Variants &v, const Linear &l) {
      addVariant(v, "st3 f0 epi-warps", 3, 0, 1, 256, 0, 2);
      addVariant(v, "st3 f1 epi-warps", 3, 1, 1, 256, 0, 2);
      addVariant(v, "st3 f1 c2 epi-warps", 3, 1, 2, 256, 0, 2);
      addVariant(v, "st4 f1 c2 epi-shared", 4, 1, 2, 256, 0, 3);  // one staging area in turns: 4 stages fit
      addVariant(v, "st4 f0 c2 epi-shared", 4, 0, 2, 256, 0, 3);
      if (l.N == H) addVariant(v, "st3 f1 c2 epi-warps whole tiles", 3, 1, 2, 256, 0, 2, 8, 0);
      if (l.epi != plan::Epilogue::Swiglu) addVariant(v, "bn192 st4 f1 c2 epi-warps", 4, 1, 2, 192, 0, 2);
    };
    // The 256-row tile (gemm_bm=256) at the widths that fill whole waves at N = 5,376 (168: 8 waves, 192: 7), the
    // register epilogue at 4 stages or the staged one at 3, alone or in 2-CTA clusters sharing x, with and without a
    // k-block in flight.
    auto addTall = [&](Variants &v, const Linear &l) {
      if (l.epi == plan::Epilogue::Swiglu) return;
      auto tall = [&](int bn, int st, int fl, int cl, int epi) {
        addVariant(v, fmt::format("m256 bn{} st{} f{} c{}{}", bn, st, fl, cl, epi ? " epi-smem" : ""), st, fl, cl, bn,
                   0, epi, 8, 0);
        v.back().second.sm90Bm = 256;
      };
      tall(168, 4, 1, 1, 0);
      tall(168, 4, 1, 2, 0);
      tall(192, 4, 0, 2, 0);
      for (int bn : {168, 192})
        for (int fl : {0, 1})
          for (int cl : {1, 2}) tall(bn, 3, fl, cl, 1);
    };
    // --energy: the default, cuBLASLt and the variants that trade speed against power (timed in rounds below).
    auto energyVariants = [&](const Linear &l) {
      Variants v;
      if (!userVariants.empty()) {  // --variant: the default, cuBLASLt and these only
        addUser(v, l);
        return v;
      }
      // (the register epilogue, ping-pong, g16 and the 1-CTA staged kernel in flight measured no better on
      // 2026-12-04: bench/NOTES.md, session of 14:36)
      // The epilogue staged through shared memory (coalesced 16-byte accesses): 3 stages at most beside it.
      addVariant(v, "st3 f0 epi-smem", 3, 0, 1, 256, 0, 1);
      addVariant(v, "st3 f1 c2 epi-smem", 3, 1, 2, 256, 0, 1);
      // whole tiles only (gemm_half_tail=0): the last partial wave at N = 5,376 as whole tiles on half the SMs
      if (l.N == H) addVariant(v, "st3 f1 c2 epi-smem whole tiles", 3, 1, 2, 256, 0, 1, 8, 0);
      addWarps(v, l);
      addTall(v, l);
      return v;
    };
    // lora_down of rank 64 (the adapters' t = x down^T) at the blocks' x widths beside cuBLASLt's plain GEMM of the
    // same shape: the plan's form (on sm_90a the Hopper GEMM's 64-wide tile, 6 stages: 0.039 / 0.089 ms against
    // cuBLASLt's 0.043 / 0.092 at K = 5,376 / 14,336 on an H100, bench/NOTES.md 2026-12-06 18:18), its ring at 3 and
    // 4 stages, and the 256-wide tile it replaced (0.082 / 0.157).
    for (long long K : {H, F}) {
      const std::string base = fmt::format("lora_down r64 K={}", K);
      gemm(base, OpKind::LoraDown, K, 64, plan::Epilogue::None);
      if (dev.arch() == "sm_90a") {
        for (int st : {3, 4}) {
          h3c::kernels::EmitOptions n = h3c::kernels::EmitOptions::planDefaults();
          n.set("lora_down:gemm_stages", st, "bench");
          gemm(fmt::format("{} [sm90 bn64 st{}]", base, st), OpKind::LoraDown, K, 64, plan::Epilogue::None, n);
        }
        h3c::kernels::EmitOptions wide = h3c::kernels::EmitOptions::planDefaults();
        wide.set("lora_down:gemm_bn", 256, "bench");
        wide.set("lora_down:gemm_stages", h3c::kernels::EmitOptions{}.sm90Stages, "bench");
        gemm(base + " [sm90 bn256]", OpKind::LoraDown, K, 64, plan::Epilogue::None, wide);
      }
      vendorGemm(base + " [cuBLASLt plain]", K, 64);
    }
    for (const Linear &l : linears) {
      if (energy && dev.arch() == "sm_90a") {
        // The default, cuBLASLt and the variants in rounds (timeRounds), each form's line the mean of its slices,
        // then each form's time against cuBLASLt's, round by round.
        const long long n = l.kind == OpKind::QkvLinear ? 3 * l.N : l.N;
        std::vector<Pending> forms;
        pending = meter.ok() ? &forms : nullptr;
        gemm(l.name, l.kind, l.K, l.N, l.epi);
        vendorGemm(std::string(l.name) + " [cuBLASLt plain]", l.K, n);
        for (const auto &[label, o] : energyVariants(l))
          gemm(fmt::format("{} [sm90 {}]", l.name, label), l.kind, l.K, l.N, l.epi, o);
        pending = nullptr;
        if (forms.empty()) continue;
        std::vector<std::vector<double>> perRound;
        const std::vector<Result> timed = timeRounds(forms, meter, rounds, 150.0f, perRound);
        size_t vendorAt = forms.size();
        for (size_t f = 0; f < forms.size(); ++f)
          if (forms[f].name.find("cuBLASLt") != std::string::npos) vendorAt = f;
        for (size_t f = 0; f < timed.size(); ++f) {
          results.push_back(timed[f]);
          print(timed[f]);
          const auto [lo, hi] = std::minmax_element(perRound[f].begin(), perRound[f].end());
          std::printf("  rounds %.3f-%.3f", *lo, *hi);
          if (vendorAt < forms.size() && f != vendorAt) {
            // this form's speed as a fraction of cuBLASLt's in each round (the same board state), median
            std::vector<double> q;
            for (size_t i = 0; i < perRound[f].size(); ++i) q.push_back(perRound[vendorAt][i] / perRound[f][i]);
            std::sort(q.begin(), q.end());
            std::printf("  %.3fx cuBLASLt (median of %zu rounds, %.3f-%.3f)", q[q.size() / 2], q.size(), q.front(),
                        q.back());
          }
          std::printf("\n");
        }
        std::fflush(stdout);
        continue;
      }
      gemm(l.name, l.kind, l.K, l.N, l.epi);
      if (vendor) vendorGemm(std::string(l.name) + " [cuBLASLt plain]", l.K, l.kind == OpKind::QkvLinear ? 3 * l.N : l.N);
      if (dev.arch() == "sm_90a") {
        Variants v;
        addWarps(v, l);
        addTall(v, l);
        addUser(v, l);
        for (const auto &[label, o] : v) gemm(fmt::format("{} [sm90 {}]", l.name, label), l.kind, l.K, l.N, l.epi, o);
      }
      if (!sweep || dev.arch() != "sm_90a") continue;
      h3c::kernels::EmitOptions mma;
      mma.wgmma = false;
      gemm(std::string(l.name) + " [mma.sync]", l.kind, l.K, l.N, l.epi, mma);
      for (int st : {3, 4})
        for (int gm : {8, 16})
          for (int fl : {0, 1}) {
            h3c::kernels::EmitOptions o;
            o.perOp.clear();  // this variant for every linear kind (the plan's defaults differ per kind)
            o.sm90EpiSmem = 0;  // the register epilogue (the staged lines follow)
            o.sm90Stages = st;
            o.sm90GroupM = gm;
            o.sm90Inflight = fl;
            gemm(fmt::format("{} [sm90 st{} g{} f{}]", l.name, st, gm, fl), l.kind, l.K, l.N, l.epi, o);
            if (gm == 8) {  // 3 stages measured slower (bench/NOTES.md); the multicast round trip may need 4
              o.sm90Cluster = 2;
              gemm(fmt::format("{} [sm90 st{} g{} f{} c2]", l.name, st, gm, fl), l.kind, l.K, l.N, l.epi, o);
            }
            if (l.epi != plan::Epilogue::Swiglu && gm == 8) {  // 128 x 192 tiles: whole waves at N = 5,376
              h3c::kernels::EmitOptions w = o;
              w.sm90Cluster = 1;
              w.sm90Bn = 192;
              gemm(fmt::format("{} [sm90 bn192 st{} g{} f{}]", l.name, st, gm, fl), l.kind, l.K, l.N, l.epi, w);
              if (st == 4) {  // the staged epilogue beside 4 stages of 40 KiB
                w.sm90EpiSmem = 1;
                gemm(fmt::format("{} [sm90 bn192 st{} g{} f{} epi-smem]", l.name, st, gm, fl), l.kind, l.K, l.N,
                     l.epi, w);
              }
            }
            if (st == 3) {  // the epilogue staged through shared memory (3 stages of 48 KiB at most beside it)
              h3c::kernels::EmitOptions e = o;
              e.sm90Cluster = 1;
              e.sm90EpiSmem = 1;
              gemm(fmt::format("{} [sm90 st{} g{} f{} epi-smem]", l.name, st, gm, fl), l.kind, l.K, l.N, l.epi, e);
              if (gm == 8) {
                e.sm90Cluster = 2;
                gemm(fmt::format("{} [sm90 st{} g{} f{} c2 epi-smem]", l.name, st, gm, fl), l.kind, l.K, l.N, l.epi,
                     e);
              }
            }
          }
      for (int st : {4, 5, 6})
        for (int gm : {8, 16})
          for (int fl : {0, 1}) {
            h3c::kernels::EmitOptions o;
            o.perOp.clear();
            o.sm90Pingpong = 1;
            o.sm90Stages = st;
            o.sm90GroupM = gm;
            o.sm90Inflight = fl;
            gemm(fmt::format("{} [sm90 ping-pong st{} g{} f{}]", l.name, st, gm, fl), l.kind, l.K, l.N, l.epi, o);
          }
    }
    {
      Operands o;
      o.in = {x->get(), x2->get(), y2->get()};
      o.out = {y->get()};
      const EmitOp at =
          op(OpKind::Attention, "attention", with(attrs({{"heads", heads}, {"head_dim", d}}), BF, BF, BF), flash());
      const double flops = 4.0 * M * M * d * heads, bytes = 4.0 * M * heads * d * 2;
      bench("attention 56x128 (flash)", at, o, flops, bytes);
      // With the row statistics the backward reads (h3-fuse-grad's `lse`, F32 [M, heads]): attention_grad's lse form
      // below reads what this run wrote.
      {
        Operands ol = o;
        ol.out.push_back(lseBuf->get());
        bench("attention 56x128 (flash) [lse]", attentionForward(heads, d, 128, true), ol, flops, bytes);
      }
      if ((sweep || energy) && dev.arch() == "sm_90a") {
        // The plan's default runs the persistent grid (at most one CTA per SM walking the 56 x 66 tiles); beside it
        // the one-CTA-per-tile kernel (attn_persistent=0) at the same schedule; with --energy twice, in alternation.
        h3c::kernels::EmitOptions oneTile;
        oneTile.sm90AttnPersistent = 0;
        for (int rep = 0; rep < (energy ? 2 : 1); ++rep) {
          if (rep > 0) bench("attention 56x128 (flash)", at, o, flops, bytes);
          bench("attention 56x128 (flash) [sm90 one CTA per tile]", at, o, flops, bytes, oneTile);
        }
      }
      if (sweep && dev.arch() == "sm_90a") {
        // kv_block 64 (the contract's order until 2026-12-04, other bits) beside 128 (today's): the same work.
        for (int64_t kv : {64, 128}) {
          EmitOp akv = at;
          akv.op.order.kvBlock = kv;
          h3c::kernels::EmitOptions mma;
          mma.wgmma = false;
          bench(fmt::format("attention 56x128 kv{} [mma.sync]", kv), akv, o, flops, bytes, mma);
          for (int per : {0, 1})
            for (int st : {2, 3, 4})
              for (int mode = 0; mode < 3; ++mode) {
                if (kv == 128 && st > 3) continue;  // 4 stages of 64 KiB do not fit
                h3c::kernels::EmitOptions v;
                v.sm90AttnStages = st;
                v.sm90AttnOverlap = mode > 0;
                v.sm90AttnPingpong = mode == 2;
                v.sm90AttnPersistent = per;
                bench(fmt::format("attention 56x128 kv{} [sm90 st{} overlap{} pingpong{}{}]", kv, st,
                                  v.sm90AttnOverlap, v.sm90AttnPingpong, per ? " persistent" : ""),
                      akv, o, flops, bytes, v);
              }
        }
      }
    }
    {
      // attention_grad (the backward of one block's attention, docs/contract.md section 14): the plan's form (on
      // sm_90a the Hopper kernel, grad_attention_sm90.cuh) and the mma.sync form. TFLOP/s count FlashAttention-2's
      // work, 2.5x the forward's (S, dP, dv, dk, dq). The Hopper form runs those five products (dq's parts added in
      // key-tile order); the mma.sync form computes S and dP twice (a walk over the keys for dq, one over the queries
      // for dk and dv), and without lse phase 0 reruns the forward's key walk for L.
      const size_t n = size_t(M * heads * d);
      auto ob = randBuf(n, true, 1.0), dout = randBuf(n, false, 1.0);
      hc::DeviceBuffer gq(n * 4), gk(n * 4), gv(n * 4);
      Operands o;
      o.in = {x->get(), x2->get(), y2->get(), ob->get(), dout->get()};
      o.out = {gq.get(), gk.get(), gv.get()};
      const EmitOp ag = attentionGrad(heads, d, 128);
      const double flops = 10.0 * M * M * d * heads, bytes = (4.0 * 2 + 4.0 * 4) * M * heads * d;
      // Each variant (name tail, options) whole, then its phase 0 alone (the Hopper form's: bf(dO), D, L and the dq
      // counters; the mma.sync form's also dq over the keys; the rest of the time is phase 1's).
      using Variants = std::vector<std::pair<std::string, h3c::kernels::EmitOptions>>;
      auto timeForms = [&](const std::string &base, const EmitOp &op, const Operands &ops, const Variants &variants) {
        for (const auto &[tail, opt] : variants) {
          const std::string name = base + tail;
          bench(name, op, ops, flops, bytes, opt);
          if (!only.empty() && name.find(only) == std::string::npos) continue;
          benchPhase(name + " [phase 0 only]", op, ops, -1, 0.6 * flops, bytes, opt);
        }
      };
      // The plan's form (on sm_90a the Hopper kernel) and, on sm_90a, the mma.sync form.
      h3c::kernels::EmitOptions mma = h3c::kernels::EmitOptions::planDefaults();
      mma.wgmma = false;
      Variants variants = {{"", h3c::kernels::EmitOptions::planDefaults()}};
      if (dev.arch() == "sm_90a") variants.emplace_back(" [mma.sync]", mma);
      timeForms("attention_grad 56x128", ag, o, variants);
      // The plan's form since h3-fuse-grad: L read from the forward's lse (no statistics walk in phase 0); on sm_90a
      // also the load ring at 3 stages (attn_grad_stages=3).
      Operands ol = o;
      ol.in.push_back(lseBuf->get());
      if (dev.arch() == "sm_90a") {
        h3c::kernels::EmitOptions st3 = h3c::kernels::EmitOptions::planDefaults();
        st3.sm90AttnGradStages = 3;
        variants.emplace_back(" [st3]", st3);
        h3c::kernels::EmitOptions ns = h3c::kernels::EmitOptions::planDefaults();
        ns.sm90AttnGradSync = 0;
        variants.emplace_back(" [no sync warp]", ns);
        h3c::kernels::EmitOptions rows = h3c::kernels::EmitOptions::planDefaults();
        rows.sm90AttnGradRows = 0;
        variants.emplace_back(" [dq accumulator layout]", rows);
        h3c::kernels::EmitOptions rows1 = h3c::kernels::EmitOptions::planDefaults();
        rows1.sm90AttnGradRows = 1;
        variants.emplace_back(" [dq rows v2]", rows1);
      }
      timeForms("attention_grad 56x128 [lse]", attentionGrad(heads, d, 128, true, true), ol, variants);
      // Where the Hopper form's time goes (GB_DQ_DIAG, grad_attention_sm90.cuh: timing only, dq wrong): dq's
      // adds in no order (no wait for the tiles before), no adds at all (the products alone), and the parts of the
      // adds' count.
      if (dev.arch() == "sm_90a")
        for (int diag : {1, 2, 3, 4, 5}) {
          const char *const what[] = {"", "dq adds unordered", "no dq adds", "unordered, no count",
                                      "unordered, count, no adds", "unordered, no count, half the rows"};
          const std::string name = fmt::format("attention_grad 56x128 [lse] [diag: {}]", what[diag]);
          if (!only.empty() && name.find(only) == std::string::npos) continue;
          h3c::kernels::EmitOptions computeCounts = h3c::kernels::EmitOptions::planDefaults();
          computeCounts.sm90AttnGradSync = 0;  // (the diagnostics time that form, adds in the accumulator layout)
          computeCounts.sm90AttnGradRows = 0;
          plan::Kernel k = *emit(attentionGrad(heads, d, 128, true, true), dev.arch(), computeCounts);
          k.id += fmt::format("_diag{}", diag);
          k.source = fmt::format("#define GB_DQ_DIAG {}\n", diag) + k.source;
          const hc::LoadedKernel &lk = runner.load(kernels.emplace(k.id, k).first->second);
          auto addr = [&](plan::OperandRole role, int64_t i) { return ol.at(role, i); };
          measure(name, [&] { runner.launch(lk, ext, addr); }, flops, bytes);
        }
    }
    {
      // norm_modulate_grad (a block's norm1 / norm2 backward, its bf16 weight trained as in an all-parameters plan):
      // dx, the table's shift / scale gradients and dw, whole and by phase (phase 0: dx and the inverse RMS; 1: the
      // units' partial sums; 2: their folds), the block-per-row first phase (default) beside the warp-per-row one.
      // Bytes: what the op must move at least (dy F32 and x bf16 read, dx F32 written, twice dy and x for phase 1).
      plan::OpAttrs a = attrs({{"H", double(H)}, {"num_chunks", 6.0}, {"shift_chunk", 0.0}, {"scale_chunk", 1.0},
                               {"eps", 1e-6}});
      a.wDtype = BF;
      a.rowIndex = plan::RowIndex::Adaln;
      plan::Order order;
      order.kind = plan::OrderKind::RowUnits;
      EmitOp nm = op(OpKind::NormModulateGrad, "transformer_blocks.0.norm1.norm_modulate_grad", a, order, 1);
      const std::pair<int64_t, h3c::DType> ins[] = {{H, h3c::DType::F32}, {H, BF}, {6 * H, BF}, {1, h3c::DType::I64},
                                                    {1, h3c::DType::I64}};
      for (size_t i = 0; i < 5; ++i) nm.vals.in[i].cols = ins[i].first, nm.vals.in[i].dtype = ins[i].second;
      nm.vals.out[0].cols = H, nm.vals.out[0].dtype = h3c::DType::F32;
      nm.vals.out[1].cols = 6 * H, nm.vals.out[1].dtype = h3c::DType::F32;
      trainWeight(nm, H);
      auto dyF = randBuf(size_t(M * H), false, 1.0), dxF = randBuf(size_t(M * H), false, 1.0);
      auto dtab = randBuf(size_t(T * 3 * 6 * H), false, 1.0), dwF = randBuf(size_t(H), false, 1.0);
      Operands o;
      o.in = {dyF->get(), x->get(), table->get(), tsRuns->get(), tagsRuns->get()};
      o.out = {dxF->get(), dtab->get(), dwF->get()};
      o.w = {w->get()};
      const double bytes = double(M) * H * (4 + 2 + 4), p1 = double(M) * H * (4 + 2);
      h3c::kernels::EmitOptions warp = h3c::kernels::EmitOptions::planDefaults();
      warp.gradNormBlock = 0;
      for (int form = 0; form < 2; ++form) {
        const h3c::kernels::EmitOptions &opt = form == 0 ? h3c::kernels::EmitOptions::planDefaults() : warp;
        const std::string base = std::string("norm_modulate_grad h5376 t3") + (form == 0 ? "" : " [warp per row]");
        bench(base, nm, o, 0, bytes + p1, opt);
        benchPhase(base + " [phase 0 only]", nm, o, -1, 0, bytes, opt);
        if (form == 0) {
          benchPhase(base + " [phase 1 only]", nm, o, 0, 0, p1, opt);
          benchPhase(base + " [phase 2 only]", nm, o, 1, 0, 0, opt);
        }
      }
    }
    {
      // The bf16 linears' gradients (docs/contract.md section 14) at each shape of the full config's backward:
      // linear_grad_x (dX = bf(g) W) and linear_grad_w (dW = row_units of bf(g)^T x, one item of M rows). For each,
      // the plan's form (on sm_90a the Hopper GEMMs, grad_linear_sm90.cuh / grad_linear_w_sm90.cuh) and the mma.sync
      // form, each with its phase 0 (g rounded into the scratch) and its GEMM alone, beside cuBLASLt's GEMM of the
      // same shape (bf16 operands, F32 out; for dW one chain over all rows, no units). TFLOP/s count 2 M N K.
      struct Shape {
        const char *name;
        long long N, K;
      };
      const Shape xShapes[] = {{"context_embedder", H, 5120}, {"to_q/k/v", I, H}, {"to_out", H, I},
                               {"fc1", 2 * F, H},           {"fc2", H, F},      {"lora down x-part r64", 64, H},
                               {"lora up dt r64", 2 * F, 64}, {"lora up dt r64", I, 64}};
      const Shape wShapes[] = {{"context_embedder", H, 5120}, {"to_q/k/v", I, H},          {"to_out", H, I},
                               {"fc1", 2 * F, H},           {"fc2", H, F},               {"lora up r64", 2 * F, 64},
                               {"lora up r64", I, 64},      {"lora up r64", H, 64},      {"lora down r64", 64, H},
                               {"lora down r64", 64, I},    {"lora down r64", 64, F}};
      auto wanted = [&](const std::string &name) { return only.empty() || name.find(only) != std::string::npos; };
      auto anyWanted = [&](const std::string &base) {
        for (const char *tail : {"", " [mma.sync]", " [no PDL]", " [phase 0 only]", " [GEMM only]", " [mma.sync] [GEMM only]",
                                 " [cuBLASLt]"})
          if (wanted(base + tail)) return true;
        return false;
      };
      // Both forms of op (mmaOpt: the mma.sync one), whole, the plan form's phase 0 alone, and their GEMM alone
      // (phase 1 as the entry; the scratch holds the run before's bf(g)); gemmBytes: the GEMM's traffic (bf(g) bf16).
      auto forms = [&](const std::string &base, const EmitOp &op, const Operands &o,
                       const h3c::kernels::EmitOptions &mmaOpt, double flops, double bytes, double gemmBytes) {
        for (int form = 0; form < (dev.arch() == "sm_90a" ? 2 : 1); ++form) {
          const std::string name = base + (form == 0 ? "" : " [mma.sync]");
          const h3c::kernels::EmitOptions &opt = form == 0 ? h3c::kernels::EmitOptions::planDefaults() : mmaOpt;
          bench(name, op, o, flops, bytes, opt);
          if (form == 0) {
            // The whole op with plain stream order between its phases (launch_pdl=0): where it beats the line above,
            // the programmatic dependent launch costs what the phases' sum does not show.
            h3c::kernels::EmitOptions noPdl = opt;
            noPdl.gridDependency = 0;
            bench(name + " [no PDL]", op, o, flops, bytes, noPdl);
            // g rounded into the scratch alone: bytes 4 + 2 per g
            benchPhase(name + " [phase 0 only]", op, o, -1, 0, 3.0 * (bytes - gemmBytes), opt);
          }
          benchPhase(name + " [GEMM only]", op, o, 0, flops, gemmBytes, opt);
        }
      };
      // cuBLASLt's GEMM (made by `make`) run as run(b, a, out), when wanted.
      auto vendorGrad = [&](const std::string &name, const std::function<std::unique_ptr<h3c::bench::VendorGemm>()> &make,
                            CUdeviceptr b, CUdeviceptr a, CUdeviceptr c, double flops, double bytes) {
        if (!wanted(name)) return;
        try {
          const auto v = make();
          measure(name, [&] { v->run(b, a, c); }, flops, bytes);
        } catch (const std::exception &e) {
          std::printf("%-60s FAILED: %s\n", name.c_str(), e.what());
          std::fflush(stdout);
        }
      };
      std::unique_ptr<hc::DeviceBuffer> g, out;  // g F32 [M, 2F] (fc1's); dX F32 [M, F] or dW F32 [2F, H]
      auto buffers = [&] {
        if (g) return;
        g = randBuf(size_t(M * 2 * F), false, 1.0);
        out = std::make_unique<hc::DeviceBuffer>(size_t(std::max(M * F, 2 * F * H) * 4));
      };
      h3c::kernels::EmitOptions mmaX = h3c::kernels::EmitOptions::planDefaults(), mmaW = mmaX;
      mmaX.sm90GradX = 0;
      mmaW.sm90GradW = 0;
      for (const Shape &s : xShapes) {
        const std::string base = fmt::format("linear_grad_x {} N={} K={}", s.name, s.N, s.K);
        if (!anyWanted(base)) continue;
        buffers();
        Operands o;
        o.in = {g->get()};
        o.out = {out->get()};
        o.w = {w->get()};
        const double flops = 2.0 * M * s.N * s.K, gemmBytes = 2.0 * M * s.N + 2.0 * s.N * s.K + 4.0 * M * s.K;
        // (LoRA's dt, K = 64: the plan's form is the Hopper dX's 64-wide tile, grad_x_narrow; [mma.sync] the skinny
        // 32 x 64 tiles it replaced)
        forms(base, linearGradX(s.N, s.K), o, mmaX, flops, gemmBytes + 2.0 * M * s.N, gemmBytes);
        if (sweep && dev.arch() == "sm_90a")  // the Hopper dX's tunings (timing only): tile width, stages, in flight
          for (int bn : {128, 192, 256})
            for (int stages : {3, 4})
              for (int inflight : {0, 1})
                for (int cluster : {1, 2}) {
                  h3c::kernels::EmitOptions v = h3c::kernels::EmitOptions::planDefaults();
                  v.sm90GradXBn = bn;
                  v.sm90GradXStages = stages;
                  v.sm90GradXInflight = inflight;
                  v.sm90GradXCluster = cluster;
                  bench(fmt::format("{} [bn {} stages {} inflight {} cluster {}]", base, bn, stages, inflight, cluster),
                        linearGradX(s.N, s.K), o, flops, gemmBytes + 2.0 * M * s.N, v);
                }
        vendorGrad(base + " [cuBLASLt]",
                   [&] { return std::make_unique<h3c::bench::VendorGemm>(h3c::bench::VendorGemm::GradX{}, M, s.N, s.K); },
                   g->get(), w->get(), out->get(), flops, gemmBytes);
      }
      {  // fc2's dX as the 33B LoRA step runs it (h3-fuse-grad): bf(g), its LoRA down path and the swiglu_grad of
         // its dy taken in, dx bf16 [M, 2F] from x = [v | g] (against "fc2" above plus swiglu_grad's kernel)
        const std::string base = fmt::format("linear_grad_x fc2 + lora r64 + swiglu N={} K={}", H, F);
        if (wanted(base)) {
          buffers();
          Operands o;
          o.in = {y->get(), x2->get(), x->get()};  // g bf16 [M, H], lora_t [M, 64], swiglu_x [M, 2F]
          o.out = {out->get()};
          o.w = {w->get(), w->get()};  // W [H, F], the down slot [64, F]
          const double flops = 2.0 * M * H * F + 2.0 * M * 64 * F,
                       bytes = 2.0 * M * H + 2.0 * M * 64 + 4.0 * M * F + 4.0 * M * F + 2.0 * H * F;
          bench(base, linearGradX(H, F, false, true, 64, 2), o, flops, bytes,
                h3c::kernels::EmitOptions::planDefaults());
        }
      }
      for (const Shape &s : wShapes) {
        const std::string base = fmt::format("linear_grad_w {} N={} K={}", s.name, s.N, s.K);
        if (!anyWanted(base)) continue;
        buffers();
        Operands o;
        o.in = {g->get(), x->get()};
        o.out = {out->get()};
        const double flops = 2.0 * M * s.N * s.K, gemmBytes = 2.0 * M * s.N + 2.0 * M * s.K + 4.0 * s.N * s.K;
        forms(base, linearGradW(s.N, s.K, false), o, mmaW, flops, gemmBytes + 2.0 * M * s.N, gemmBytes);
        if ((s.N <= 64 || s.K <= 64) && dev.arch() == "sm_90a") {  // the Hopper tile that is not the plan's form
          h3c::kernels::EmitOptions t = h3c::kernels::EmitOptions::planDefaults();
          t.sm90GradWNarrow = h3c::kernels::sm90GradWNarrowTiles(t, s.N, s.K) ? 0 : 1;
          const std::string name =
              base + (t.sm90GradWNarrow ? " [64 x 64 tiles] [GEMM only]" : " [128 x 128 tile] [GEMM only]");
          if (wanted(name)) benchPhase(name, linearGradW(s.N, s.K, false), o, 0, flops, gemmBytes, t);
        }
        if (sweep && dev.arch() == "sm_90a")  // the Hopper dW's ring stages (timing only)
          for (int stages : {3, 4, 6}) {
            h3c::kernels::EmitOptions v = h3c::kernels::EmitOptions::planDefaults();
            v.sm90GradWStages = stages;
            bench(fmt::format("{} [stages {}]", base, stages), linearGradW(s.N, s.K, false), o, flops,
                  gemmBytes + 2.0 * M * s.N, v);
          }
        vendorGrad(base + " [cuBLASLt]",
                   [&] { return std::make_unique<h3c::bench::VendorGemm>(h3c::bench::VendorGemm::GradW{}, M, s.N, s.K); },
                   g->get(), x->get(), out->get(), flops, gemmBytes);
      }
    }
    {
      Operands o;
      o.in = {x->get(), table->get(), ts->get(), tags->get()};
      o.out = {y->get()};
      o.w = {w->get()};
      const plan::OpAttrs na =
          with(attrs({{"H", H}, {"eps", 1e-5}, {"shift_chunk", 0}, {"scale_chunk", 1}, {"num_chunks", 6}}), BF, BF, BF);
      const EmitOp nm = op(OpKind::NormModulate, "norm1", na, laneTree(), 1);
      bench("norm_modulate H=5376", nm, o, 0, 4.0 * M * H);
      if (sweep) {
        // Rows per CTA (8 by default; the SM holds 16 rows either way), row metadata in runs as in the forward
        // against the bench's (the next row in the next table row: 6 table rows in L1 at once), and rms_norm (the
        // refiner's).
        for (int rows : {1, 2, 4, 16}) {
          h3c::kernels::EmitOptions opt;
          opt.normRows = rows;
          bench(fmt::format("norm_modulate H=5376 [rows/CTA {}]", rows), nm, o, 0, 4.0 * M * H, opt);
        }
        Operands runs = o;
        runs.in[2] = tsRuns->get();
        runs.in[3] = tagsRuns->get();
        bench("norm_modulate H=5376 [table rows in runs]", nm, runs, 0, 4.0 * M * H);
        Operands r = o;
        r.in = {x->get()};
        bench("rms_norm H=5376",
              op(OpKind::RmsNorm, "norm", with(attrs({{"H", H}, {"eps", 1e-5}}), BF, BF, BF), laneTree(), 1), r, 0,
              4.0 * M * H);
      }
    }
    {
      Operands o;
      o.in = {x->get(), x2->get(), cosb->get(), sinb->get()};
      o.out = {y->get(), y2->get()};
      o.w = {w->get(), w->get()};
      const EmitOp qk = op(OpKind::QkNormRope, "qk",
                           with(attrs({{"heads", heads}, {"head_dim", d}, {"eps", 1e-5}, {"rotary_dim", 96}}), BF, BF, BF),
                           laneTree(), 2);
      bench("qk_norm_rope 56x128 r96 (q and k)", qk, o, 0, 2 * 4.0 * M * I);
      // The pairs form (the default at head_dim 128, 16 units a warp) at other unit counts, and the strided form
      // (head_pairs=0) at its (row, head) units a warp (head_units; its default 4) against one and 8.
      for (int units : {2, 8, 32}) {
        h3c::kernels::EmitOptions opt;
        opt.headPairUnits = units;
        bench(fmt::format("qk_norm_rope 56x128 r96 (q and k) [pairs, {} units]", units), qk, o, 0, 2 * 4.0 * M * I,
              opt);
      }
      for (int units : {1, 4, 8}) {
        h3c::kernels::EmitOptions opt;
        opt.headPairs = 0;
        opt.headUnits = units;
        bench(fmt::format("qk_norm_rope 56x128 r96 (q and k) [strided, head_units {}]", units), qk, o, 0,
              2 * 4.0 * M * I, opt);
      }
    }
    if (dev.arch() == "sm_90a") {
      // The Hopper fusion (h3-fuse on sm_90a): qkv with the qk_norm_rope epilogue, to compare against the "qkv
      // (fused to_q/k/v)" and "qk_norm_rope" lines above, which it replaces.
      Operands o;
      o.in = {x->get(), cosb->get(), sinb->get()};
      o.out = {y->get(), y2->get(), y3->get()};
      o.w = {w->get(), w->get(), w->get(), w->get(), w->get()};  // [Wq; Wk; Wv] (span 3), norm_q, norm_k
      const EmitOp qknr = qkvNormRope("qkv_qknr", H, heads, d, 1e-5, 96);
      const double flops = 2.0 * M * H * 3 * I, bytes = 2.0 * (M * H + H * 3 * I + M * 3 * I);
      bench("qkv + qk_norm_rope epilogue (56x128 r96)", qknr, o, flops, bytes);
      if (energy || sweep) {
        // Its outputs staged through shared memory (the default: norm and rope in registers, 16-byte stores) against
        // the register epilogue's 4-byte stores, and staged in 2-CTA clusters with a k-block in flight; with --energy
        // twice in alternation.
        h3c::kernels::EmitOptions reg, staged, pair, warps;
        reg.sm90EpiSmem = 0;
        staged.sm90EpiSmem = 1;
        pair = staged;
        pair.sm90Cluster = 2;
        pair.sm90Inflight = 1;
        warps = pair;  // the stores in the epilogue warps (gemm_epi_smem=2)
        warps.sm90EpiSmem = 2;
        for (int rep = 0; rep < (energy ? 2 : 1); ++rep) {
          bench("qkv + qk_norm_rope epilogue [register]", qknr, o, flops, bytes, reg);
          bench("qkv + qk_norm_rope epilogue [staged]", qknr, o, flops, bytes, staged);
          bench("qkv + qk_norm_rope epilogue [staged st3 f1 c2]", qknr, o, flops, bytes, pair);
          bench("qkv + qk_norm_rope epilogue [epi-warps st3 f1 c2]", qknr, o, flops, bytes, warps);
        }
      }
    }
    {
      // The F32 embedder linears on CUDA cores (linear_f32.cuh; proj_out at K = 5,376 to 96 columns, proj_in at K =
      // 96 to 5,376; rows: the video tokens, M here), the default k-tiles against f32_vec=1.
      Operands o;
      o.in = {x->get()};
      o.out = {y->get()};
      o.w = {w->get()};
      o.b = {tempF->get()};
      h3c::kernels::EmitOptions vec = h3c::kernels::EmitOptions::planDefaults();
      vec.f32Vec = 1;
      for (const auto &[name, K, N] : {std::tuple<const char *, long long, long long>{"proj_out (F32)", H, 96},
                                       {"proj_in (F32)", 96, H}}) {
        const EmitOp f = op(OpKind::Linear, name, with(attrs({{"K", K}, {"N", N}}), F32, F32, F32), kchunks(1), 1, 1);
        const double flops = 2.0 * M * K * N, bytes = 4.0 * (M * K + K * N + M * N);
        bench(name, f, o, flops, bytes);
        bench(std::string(name) + " [f32_vec]", f, o, flops, bytes, vec);
      }
    }
    {
      Operands o;
      o.in = {tempF->get()};
      o.out = {y->get()};
      o.w = {w->get()};
      const EmitOp ad =
          op(OpKind::AdalnTable, "adaln",
             with(attrs({{"K", E}, {"N", 18 * H}, {"num_chunks", 6}, {"rows_per_timestep", 3}}), BF, F32, BF),
             kchunks(1), 1);
      const double flops = 2.0 * T * E * 18 * H, bytes = 2.0 * E * 18 * H;  // the weight, read once
      bench("adaln_table T=2 (18H x 2688)", ad, o, flops, bytes);
      if (sweep && dev.arch() == "sm_90a") {
        // The streaming kernel's tunings (adaln_sm90.cuh; the same bits) beside the mma.sync kernel it replaced:
        // K columns per stage, ring stages (max: as many as fit at K = 2688: 10, 7, 5, 3, 2 stages for 128-512
        // columns with one CTA per SM; 4, 2, 2 for 128-256 with two), CTAs per SM. Only stage counts that fit.
        h3c::kernels::EmitOptions mma;
        mma.wgmma = false;
        bench("adaln_table T=2 [mma.sync]", ad, o, flops, bytes, mma);
        const int tunings[][3] = {{128, 0, 1}, {128, 4, 1}, {192, 0, 1}, {192, 3, 1}, {256, 0, 1}, {256, 2, 1},
                                  {256, 3, 1}, {256, 4, 1}, {384, 0, 1}, {384, 2, 1}, {512, 0, 1}, {128, 0, 2},
                                  {192, 0, 2}, {256, 0, 2}};
        for (const auto &t : tunings) {
          h3c::kernels::EmitOptions v;
          v.sm90AdalnTiles = 0;  // the bulk form
          v.sm90AdalnStageK = t[0];
          v.sm90AdalnStages = t[1];
          v.sm90AdalnCtas = t[2];
          bench(fmt::format("adaln_table T=2 [sm90 k{} st{} c{}]", t[0], t[1] ? std::to_string(t[1]) : "max", t[2]),
                ad, o, flops, bytes, v);
        }
        // The tiles form (adaln_tiles=1: one TMA box a stage): consumer warps x 8-row blocks a warp, CTAs per SM,
        // ring stages (0: as many as fit).
        const int tiled[][4] = {{8, 2, 1, 0}, {8, 2, 1, 6}, {8, 4, 1, 0}, {4, 4, 1, 0}, {4, 2, 1, 0},
                                {4, 4, 2, 0}, {4, 2, 2, 0}, {2, 4, 2, 0}, {6, 2, 1, 0}};
        for (const auto &t : tiled) {
          h3c::kernels::EmitOptions v;
          v.sm90AdalnTiles = 1;
          v.sm90AdalnWarps = t[0];
          v.sm90AdalnBlocks = t[1];
          v.sm90AdalnCtas = t[2];
          v.sm90AdalnStages = t[3];
          bench(fmt::format("adaln_table T=2 [sm90 tiles w{} b{} c{} st{}]", t[0], t[1], t[2],
                            t[3] ? std::to_string(t[3]) : "max"),
                ad, o, flops, bytes, v);
        }
      }
    }
    size_t free1 = 0;
    hc::check(hc::driver().cuMemGetInfo(&free1, &total), "meminfo");
    std::printf("device %s; bench buffers %.2f GiB (device free %.1f of %.1f GiB)\n", dev.name.c_str(),
                (free0 - free1) / 1073741824.0, free1 / 1073741824.0, total / 1073741824.0);
    if (!outPath.empty()) {
      std::ofstream o(outPath);
      for (const auto &r : results)
        o << json{{"impl", r.name.find("cuBLASLt") == std::string::npos ? "h3c" : "cublaslt"},
                  {"kernel", r.name}, {"rows", M}, {"ms", r.ms}, {"tflops", r.flops / r.ms / 1e9},
                  {"gbps", r.bytes / r.ms / 1e6}, {"watts", r.watts}, {"sm_mhz", r.mhz}, {"mj", r.mj}}.dump()
          << "\n";
    }
  } catch (const std::exception &e) {
    std::printf("bench failed: %s\n", e.what());
    return 2;
  }
  return 0;
}
