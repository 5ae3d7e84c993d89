// The CPU reference executor and the executor factory (runModel and the resident engine: engine.cpp).
#include "h3c/runtime/executor.h"
#include "h3c/runtime/backward.h"
#include "h3c/runtime/value_dump.h"

#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/error.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cmath>
#include <thread>

namespace h3c::rt {

namespace {

// The content hash of a value's bytes in its plan dtype, as the GPU executor stores it (BF16 values are held as floats
// that BF16 represents exactly: the conversion is exact).
std::string hashValue(const HostValue &v, DType dtype) {
  if (dtype == DType::I64)
    return contentHash(v.i.data(), v.i.size() * 8);
  if (dtype == DType::F32)
    return contentHash(v.f.data(), v.f.size() * 4);
  if (dtype != DType::BF16)
    fail("--hash-nodes", "no byte layout for a {} value", dtypeName(dtype));
  std::vector<uint16_t> b(v.f.size());
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = floatToBf16(v.f[i]);
  return contentHash(b.data(), b.size() * 2);
}

// The CPU reference. A multi-rank plan (sp x tp > 1, docs/contract.md section 5.2) is simulated rank by rank: every
// rank has its own value map and its own weights (the rank's rows of split tensors), every op runs once per rank on
// that rank's values, and the layout ops copy rows or columns between the maps. Nothing is shared but the request.
class CpuExecutor final : public Executor {
public:
  std::string device() const override { return "cpu"; }
  Outputs run(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
              LedgerBuilder &ledger, const DeviceIO *io) override {
    if (io)
      fail("device", "the CPU executor reads and writes host memory only (device tensors need the GPU executor)");
    const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const std::vector<plan::Rank> grid = plan::rankGrid(p.options.sp, p.options.tp);
    std::vector<ValueMap> values(grid.size(), graphInputValues(req));
    std::vector<std::unique_ptr<WeightSource>> rankWeights;
    std::vector<int64_t> rankRows;
    for (const plan::Rank &r : grid) {
      rankWeights.push_back(p.options.tp > 1 ? makeRankWeights(weights, p, r.tpIndex) : nullptr);
      auto [b, e] = plan::rankRows(r.spIndex, p.options.sp, req.S);
      rankRows.push_back(p.options.sp > 1 ? e - b : -1);
    }
    const plan::Function &fn = p.forward();
    auto last = p.lastUse(fn);
    const auto dump = ValueDump::fromEnv();
    const auto t0 = std::chrono::steady_clock::now();
    for (const plan::Op &op : fn.ops) {
      std::optional<AuditError> audit;
      if (plan::isLayoutOp(op.kind)) {
        runLayoutOp(op, p, req, values);
      } else {
        // A node asked for `reference` runs the op's fp64 implementation; `native` has no CPU vendor library, so
        // the CPU's ordered implementation (row) runs instead and the ledger says so.
        bool reference = false;
        for (const auto &n : op.nodes)
          reference |= ledger.requested(n) == Binding::Reference;
        for (const plan::Rank &r : grid) {
          WeightSource &w = rankWeights[size_t(r.rank)] ? *rankWeights[size_t(r.rank)] : weights;
          ValueMap &vals = values[size_t(r.rank)];
          OpEnv env{p, req, w, reference ? Precision::Fp64 : Precision::Ordered, threads, rankRows[size_t(r.rank)]};
          ValueMap auditIn;
          if (opt.mode == Mode::Audit)
            for (const auto &n : op.in)
              auditIn[n] = vals.at(n);
          runCpuOp(op, env, vals);
          if (opt.mode == Mode::Audit) {
            OpEnv ref = env;
            ref.precision = Precision::Fp64;
            runCpuOp(op, ref, auditIn);
            for (const auto &o : op.out) {
              AuditError e = auditCompare(vals.at(o), auditIn.at(o), o);
              if (!audit || e.maxRel > audit->maxRel || (std::isnan(e.maxRel)))
                audit = e;
            }
          }
        }
      }
      if (dump)  // rank 0's values (sp = tp = 1: all of them)
        for (const auto &o : op.out) {
          const HostValue &v = values[0].at(o);
          if (v.dtype == DType::I64) dump->write(int64_t(op.index), o, DType::I64, v.i.data(), v.i.size());
          else dump->write(int64_t(op.index), o, DType::F32, v.f.data(), v.f.size());
        }
      if (!op.nodes.empty()) {
        std::map<std::string, std::vector<int64_t>> shapes;  // rank 0's
        for (const auto *names : {&op.in, &op.out})
          for (const auto &n : *names)
            shapes[n] = values[0].at(n).shape();
        bool reference = false;
        for (const auto &n : op.nodes)
          reference |= ledger.requested(n) == Binding::Reference;
        std::map<std::string, std::string> hashes;
        if (opt.hashNodes)
          for (const auto &o : op.out)
            hashes[o] = hashValue(values[0].at(o), p.value(o).dtype);
        ledger.recordOp(op, reference ? Binding::Reference : Binding::Row, shapes, audit, std::move(hashes));
      }
      if (opt.progress)
        std::fprintf(stderr, "[%zu/%zu] %s %s  %.1f s\n", op.index + 1, fn.ops.size(), plan::opKindName(op.kind),
                     op.firstNode().c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (ValueMap &vals : values) {
        for (const auto &n : op.in) {
          auto it = last.find(n);
          if (it != last.end() && it->second == op.index)
            vals.erase(n);
        }
        // Values nobody reads (e.g. unused pack metadata) are dropped at once.
        for (const auto &n : op.out)
          if (!last.count(n))
            vals.erase(n);
      }
    }
    // Every rank ends with the same whole outputs (unpack is replicated): rank 0's, after checking the others agree.
    auto take = [&](const std::string &key, int64_t rows, int64_t cols) {
      const std::string &name = fn.outputs.at(key);
      const HostValue &v = values[0].at(name);
      if (v.batch != req.B || v.rows != rows || v.cols != cols)
        fail("plan.json#/functions/forward/outputs/" + key, "output shape [{}, {}, {}] differs from [{}, {}, {}]", v.batch, v.rows,
             v.cols, req.B, rows, cols);
      for (size_t r = 1; r < values.size(); ++r)
        if (values[r].at(name).f != v.f)
          fail("plan.json#/functions/forward/outputs/" + key, "rank {} ends with other values than rank 0", r);
      return Tensor::fromFloats(DType::F32, {req.B, rows, cols}, v.f.data());
    };
    Outputs out;
    out.sample = take("sample", req.Nv, p.config.videoPatchDim());
    out.audio_sample = take("audio_sample", req.Na, p.config.audio_in_channels);
    return out;
  }
};

} // namespace

std::map<std::string, std::string> Executor::weightHashes(const plan::Plan & /*p*/, WeightSource & /*weights*/,
                                                          const std::vector<std::string> & /*names*/) {
  fail("weights", "internal error: the {} executor holds no weights to hash", device());
}

void Executor::writeWeights(const plan::Plan & /*p*/, WeightSource & /*weights*/,
                            const std::vector<WeightWrite> & /*writes*/, uint64_t /*stream*/) {
  fail("update", "internal error: the {} executor holds no weights to write", device());
}

Tensor Executor::readWeight(const plan::Plan & /*p*/, WeightSource &weights, const std::string &name) {
  return weights.load(name);
}

void Executor::mergeLora(const plan::Plan & /*p*/, WeightSource & /*weights*/, const std::string &tensor,
                         const LoraTerms & /*terms*/) {
  fail("lora:" + tensor, "internal error: the {} executor holds no weights to merge into", device());
}

void Executor::restoreWeights(const plan::Plan & /*p*/, WeightSource & /*weights*/,
                              const std::vector<std::string> & /*names*/) {
  fail("weights", "internal error: the {} executor holds no weights to restore", device());
}

BackwardResult Executor::backward(const plan::Plan & /*p*/, WeightSource & /*weights*/, const CanonicalRequest & /*req*/,
                                  const OutputGrads & /*dy*/, const RunOptions & /*opt*/, uint64_t /*resume*/,
                                  const DeviceGrads * /*into*/) {
  fail("--device " + device(), "this executor has no backward (the CPU reference runs it: --device cpu)");
}

Outputs Executor::forwardKept(const plan::Plan & /*p*/, WeightSource & /*weights*/, const CanonicalRequest & /*req*/,
                              const RunOptions & /*opt*/, uint64_t & /*ticket*/) {
  fail("--device " + device(), "this executor keeps no forward for a backward (the CPU reference runs it: --device cpu)");
}

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

} // namespace h3c::rt
