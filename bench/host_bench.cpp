// The host side of one forward at full request size, on the CPU and without running the model (issue 14): what the
// engine and the Python package do per forward besides the executor's device work. A request built as the benches
// build theirs (`h3c request make`: text 512, audio 157, video 8 x 30 x 32, S = 8,349, BF16 activations; with
// --positions F64 the pipeline's float64 position_ids), then per phase the median of --reps runs:
//   canonicalize            as `h3c run` did (activations copied into floats) and as the engine does now (borrowed)
//   request sha256          the ledger's request hash (the engine runs it beside the executor)
//   request read            the package's copy of the ten tensors: into fresh buffers (before) or kept ones (now)
//   graph inputs            what the GPU executor's input upload built: every input as floats, or none of the
//                           activations (uploaded from the request's bytes)
//   ledger (with --plan)    the per-forward records, the strict verdict, and the sealed document `h3c run` and
//                           `h3c generate` write (the package builds it only when read)
//   h3c_host_bench [--plan DIR] [--text N] [--audio N] [--video T,H,W] [--dtype BF16|F32] [--positions I64|F64]
//                  [--reps N]
// Timing only: nothing here is a test, and no number is a pass/fail threshold.
#include "h3c/models/config.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/runtime/ledger.h"
#include "h3c/runtime/request.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace h3c;
using namespace h3c::rt;

namespace {

struct Args {
  std::string plan, dtype = "BF16", positions = "I64";
  int64_t text = 512, audio = 157, videoT = 8, videoH = 30, videoW = 32;
  int reps = 15;
};

Args parse(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail(k, "needs a value");
      return argv[++i];
    };
    if (k == "--plan") a.plan = next();
    else if (k == "--text") a.text = std::stoll(next());
    else if (k == "--audio") a.audio = std::stoll(next());
    else if (k == "--dtype") a.dtype = next();
    else if (k == "--positions") a.positions = next();
    else if (k == "--reps") a.reps = std::stoi(next());
    else if (k == "--video") {
      const std::string v = next();
      if (std::sscanf(v.c_str(), "%lld,%lld,%lld", reinterpret_cast<long long *>(&a.videoT),
                      reinterpret_cast<long long *>(&a.videoH), reinterpret_cast<long long *>(&a.videoW)) != 3)
        fail("--video", "expected T,H,W, got '{}'", v);
    } else fail(k, "unknown option (see the header of bench/host_bench.cpp)");
  }
  if (a.reps < 1) fail("--reps", "must be >= 1");
  return a;
}

// The median of `reps` timed runs after one untimed run, in ms.
double median(int reps, const std::function<void()> &fn) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void line(const char *what, double ms) { std::printf("  %-74s %8.3f ms\n", what, ms); }

// position_ids as the pipeline passes them: float64 (the same values, so the same request after .to(float32)).
void positionsToF64(Request &r) {
  Tensor &p = r.tensors.at("position_ids");
  std::vector<int64_t> v = p.toInts();
  Tensor d;
  d.dtype = DType::F64;
  d.shape = p.shape;
  d.bytes.resize(v.size() * 8);
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = double(v[i]);
    std::memcpy(d.bytes.data() + 8 * i, &x, 8);
  }
  p = std::move(d);
}

// What the package does with each request tensor: its bytes into the engine's request, reusing `into`'s buffers.
void readRequest(const Request &from, Request &into) {
  for (const auto &[name, t] : from.tensors) {
    Tensor &d = into.tensors[name];
    d.dtype = t.dtype;
    d.shape = t.shape;
    d.bytes.resize(t.bytes.size());
    std::memcpy(d.bytes.data(), t.bytes.data(), t.bytes.size());
  }
}

} // namespace

int main(int argc, char **argv) try {
  const Args a = parse(argc, argv);
  std::optional<plan::Plan> p;
  if (!a.plan.empty()) p = plan::loadPlan(a.plan);
  const h3::Config c = p ? p->config : h3::namedConfig("full");
  RequestShape sh;
  sh.text = a.text;
  sh.audio = a.audio;
  sh.videoT = a.videoT;
  sh.videoH = a.videoH;
  sh.videoW = a.videoW;
  sh.timesteps = 2;
  if (!parseDType(a.dtype, sh.floatDtype) || (sh.floatDtype != DType::BF16 && sh.floatDtype != DType::F32))
    fail("--dtype", "expected BF16 or F32, got '{}'", a.dtype);
  Request r = makeRequest(c, sh, 5);
  if (a.positions == "F64") positionsToF64(r);
  else if (a.positions != "I64") fail("--positions", "expected I64 or F64, got '{}'", a.positions);
  size_t bytes = 0;
  for (const auto &kv : r.tensors) bytes += kv.second.bytes.size();
  const CanonicalRequest probe = canonicalize(r, c, "--inputs", Activations::Borrowed);
  std::printf("h3c host bench: S = %lld (Nt %lld, Nv %lld, Na %lld), %s activations, %s position_ids, request %.2f MB; "
              "median of %d\n", (long long)probe.S, (long long)probe.Nt, (long long)probe.Nv, (long long)probe.Na,
              a.dtype.c_str(), a.positions.c_str(), double(bytes) / 1e6, a.reps);

  line("canonicalize, activations copied into floats (h3c run before)",
       median(a.reps, [&] { (void)canonicalize(r, c, "--inputs", Activations::Copied); }));
  line("canonicalize, activations borrowed (the engine now)",
       median(a.reps, [&] { (void)canonicalize(r, c, "--inputs", Activations::Borrowed); }));
  line("request sha256 (now beside the executor)", median(a.reps, [&] { (void)requestSha256(r); }));

  line("request read into fresh buffers (the package before: .cpu() + toHost)", median(a.reps, [&] {
         Request fresh;
         readRequest(r, fresh);
       }));
  Request kept;
  line("request read into kept buffers (the package now)", median(a.reps, [&] { readRequest(r, kept); }));

  const CanonicalRequest copied = canonicalize(r, c, "--inputs", Activations::Copied);
  line("graph inputs with the activations as floats (GPU input upload before)",
       median(a.reps, [&] { (void)graphInputValues(copied, true); }));
  line("graph inputs without the activations (GPU input upload now)",
       median(a.reps, [&] { (void)graphInputValues(probe, false); }));

  if (p) {
    const plan::Function &fn = p->forward();
    const plan::Extents e = probe.extents();
    std::vector<std::map<std::string, std::vector<int64_t>>> shapes;
    for (const plan::Op &op : fn.ops) {
      auto &m = shapes.emplace_back();
      for (const auto *names : {&op.in, &op.out})
        for (const auto &n : *names) {
          const plan::Value &v = p->value(n);
          const int64_t rows = e.rows(v.rows);
          m[n] = v.batch ? std::vector<int64_t>{probe.B, rows, v.cols} : std::vector<int64_t>{rows, v.cols};
        }
    }
    auto recorded = [&] {
      LedgerBuilder b(*p, Mode::Strict, "gpu");
      b.header()["request"] = {{"sha256", std::string(64, '0')}, {"S", probe.S}};
      for (const plan::Op &op : fn.ops) b.recordOp(op, Binding::Row, shapes[op.index]);
      return b;
    };
    std::printf("  plan %s: %zu ops, %zu values\n", a.plan.c_str(), fn.ops.size(), p->values.size());
    line("ledger: builder + per-op records", median(a.reps, [&] { (void)recorded(); }));
    const LedgerBuilder b = recorded();
    line("ledger: strict verdict (the package, every forward)", median(a.reps, [&] { (void)b.verdict(); }));
    line("ledger: sealed document, dumped (h3c run; h3c generate every step)",
         median(std::max(1, a.reps / 3), [&] { (void)sealedJsonDump(b.finish(), 1); }));
  }
  return 0;
} catch (const std::exception &e) {
  std::fprintf(stderr, "h3c_host_bench: %s\n", e.what());
  return 1;
}
