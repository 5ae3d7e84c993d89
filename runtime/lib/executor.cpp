// The CPU reference executor and runModel(), the entry point shared by both devices.
#include "h3c/runtime/executor.h"
#include "h3c/runtime/value_dump.h"

#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cmath>
#include <thread>

namespace h3c::rt {

namespace {

AuditError compare(const HostValue &got, const HostValue &ref, const std::string &name) {
  AuditError e;
  e.output = name;
  double refMax = 0;
  if (got.dtype == DType::I64)
    return e;
  for (size_t i = 0; i < got.f.size() && i < ref.f.size(); ++i) {
    double d = std::fabs(double(got.f[i]) - double(ref.f[i]));
    if (!(d <= e.maxAbs))  // NaN propagates as "infinite" error
      e.maxAbs = std::isnan(d) ? INFINITY : d;
    refMax = std::max(refMax, std::fabs(double(ref.f[i])));
  }
  // Relative to the reference's largest magnitude (element-wise ratios explode near zero crossings).
  e.maxRel = refMax > 0 ? e.maxAbs / refMax : e.maxAbs;
  return e;
}

class CpuExecutor final : public Executor {
public:
  std::string device() const override { return "cpu"; }
  Outputs run(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
              LedgerBuilder &ledger) override {
    const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    ValueMap values = graphInputValues(req);
    const plan::Function &fn = p.forward();
    auto last = p.lastUse(fn);
    const auto dump = ValueDump::fromEnv();
    const auto t0 = std::chrono::steady_clock::now();
    for (const plan::Op &op : fn.ops) {
      // A node asked for `reference` runs the op's fp64 implementation; `native` has no CPU vendor library, so the
      // CPU's ordered implementation (row) runs instead and the ledger says so.
      bool reference = false;
      for (const auto &n : op.nodes)
        reference |= ledger.requested(n) == Binding::Reference;
      OpEnv env{p, req, weights, reference ? Precision::Fp64 : Precision::Ordered, threads};
      std::optional<AuditError> audit;
      ValueMap auditIn;
      if (opt.mode == Mode::Audit)
        for (const auto &n : op.in)
          auditIn[n] = values.at(n);
      runCpuOp(op, env, values);
      if (dump)
        for (const auto &o : op.out) {
          const HostValue &v = values.at(o);
          if (v.dtype == DType::I64) dump->write(int64_t(op.index), o, DType::I64, v.i.data(), v.i.size());
          else dump->write(int64_t(op.index), o, DType::F32, v.f.data(), v.f.size());
        }
      if (opt.mode == Mode::Audit) {
        OpEnv ref{p, req, weights, Precision::Fp64, threads};
        runCpuOp(op, ref, auditIn);
        for (const auto &o : op.out) {
          AuditError e = compare(values.at(o), auditIn.at(o), o);
          if (!audit || e.maxRel > audit->maxRel || (std::isnan(e.maxRel)))
            audit = e;
        }
      }
      std::map<std::string, std::vector<int64_t>> shapes;
      for (const auto *names : {&op.in, &op.out})
        for (const auto &n : *names)
          shapes[n] = values.at(n).shape();
      ledger.recordOp(op, reference ? Binding::Reference : Binding::Row, shapes, audit);
      if (opt.progress)
        std::fprintf(stderr, "[%zu/%zu] %s %s  %.1f s\n", op.index + 1, fn.ops.size(), plan::opKindName(op.kind),
                     op.firstNode().c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (const auto &n : op.in) {
        auto it = last.find(n);
        if (it != last.end() && it->second == op.index)
          values.erase(n);
      }
      // Values nobody reads (e.g. unused pack metadata) are dropped at once.
      for (const auto &n : op.out)
        if (!last.count(n))
          values.erase(n);
    }
    auto take = [&](const std::string &key, int64_t rows, int64_t cols) {
      const HostValue &v = values.at(fn.outputs.at(key));
      if (v.batch != req.B || v.rows != rows || v.cols != cols)
        fail("plan.json#/functions/forward/outputs/" + key, "output shape [{}, {}, {}] differs from [{}, {}, {}]", v.batch, v.rows,
             v.cols, req.B, rows, cols);
      return Tensor::fromFloats(DType::F32, {req.B, rows, cols}, v.f.data());
    };
    Outputs out;
    out.sample = take("sample", req.Nv, p.config.videoPatchDim());
    out.audio_sample = take("audio_sample", req.Na, p.config.audio_in_channels);
    return out;
  }
};

std::string requestSha(const Request &r) {
  Sha256 h;
  for (const auto &[name, t] : r.tensors) {
    h.update(name);
    h.update(dtypeName(t.dtype));
    for (auto d : t.shape)
      h.update(&d, sizeof d);
    h.update(t.bytes.data(), t.bytes.size());
  }
  return h.hexDigest();
}

} // namespace

std::unique_ptr<Executor> makeCpuExecutor() { return std::make_unique<CpuExecutor>(); }

std::unique_ptr<Executor> makeExecutor(const std::string &device) {
  if (device == "cpu")
    return makeCpuExecutor();
  if (device == "gpu") {
#ifdef H3C_HAVE_CUDA
    return makeGpuExecutor();
#else
    fail("--device", "this h3c was built without CUDA; use --device cpu");
#endif
  }
  fail("--device", "expected cpu or gpu, got '{}'", device);
}

RunResult runModel(const plan::Plan &p, WeightSource &weights, const Request &request, const RunOptions &opt) {
  if (opt.tp != p.options.tp)
    fail("--tp", "the plan was compiled for tp = {}, asked for {} (compile with --tp {})", p.options.tp, opt.tp, opt.tp);
  if (h3::configToJson(weights.config()).dump() != h3::configToJson(p.config).dump())
    fail("--config", "the weights' config differs from the plan's config");
  CanonicalRequest req = canonicalize(request, p.config, "--inputs");
  auto exec = makeExecutor(opt.device);
  LedgerBuilder ledger(p, opt.mode, opt.tp, exec->device(), opt.binds);
  nlohmann::json info = exec->deviceInfo();
  for (auto it = info.begin(); it != info.end(); ++it)
    ledger.header()[it.key()] = it.value();
  ledger.header()["checkpoint"] = weights.describe();
  ledger.header()["request"] = {{"sha256", requestSha(request)}, {"B", req.B}, {"S", req.S}, {"Nt", req.Nt},
                                {"Nv", req.Nv}, {"Na", req.Na}, {"T", req.T}};
  RunResult r;
  r.outputs = exec->run(p, weights, req, opt, ledger);
  r.ledger = ledger.finish();
  return r;
}

} // namespace h3c::rt
