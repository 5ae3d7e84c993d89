// The GPU executor (docs/contract.md sections 3-6): walks the plan's forward ops in launch order on one device
// through the driver API. It knows nothing of the compiler: every kernel is the plan's own CUDA text, JIT-compiled
// with the plan's NVRTC options and launched with the plan's launch ABI (kernel_runner.h). Activations live in one
// planned arena (one cuMemAlloc, one region per plan slot, sized by the largest value the slot holds at this
// request's extents); weights live in one allocation per plan weight buffer (tensors back to back, as the plan lays
// them out), uploaded from the WeightSource or generated on the device by the runtime's synthetic generator
// (bit-identical to the host's). Host-computed values (rope tables, the timestep sinusoid, pack's row metadata) use
// the same host code as the CPU executor and are uploaded. Every node is recorded with binding `row`, except
// nodes bound to `reference` (the CPU's fp64 op on the device's inputs, outputs uploaded) and the linears and
// attention bound to `native` (cuBLASLt and the runtime's epilogues, native_ops.h). In audit mode every kernel
// op's outputs are compared with that fp64 reference on the same inputs (a sync and copies per op: a diagnosis mode),
// and with --hash-nodes every output is hashed on the device (runtime/cuda/value_hash.h).
// The executor is resident (engine.h): the kernels stay loaded, the weights stay on the device while the plan and the
// weight content (WeightSource::describe) stay the same, and the arena is reused (grown for a larger request). With a
// DeviceIO, the caller's activations and outputs are bound in place of their arena regions and all work is ordered
// on the caller's stream; the outputs, never copied back, are scanned for NaN / Inf there (cuda/non_finite.h) for the
// ledger and the strict rule.
#include "h3c/runtime/executor.h"
#include "h3c/runtime/backward.h"
#include "h3c/runtime/host_ops.h"

#include "h3c/models/checkpoint.h"
#include "h3c/plan/checkpoint.h"
#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/native_ops.h"
#include "h3c/runtime/cuda/non_finite.h"
#include "h3c/runtime/cuda/runtime_kernel.h"
#include "h3c/runtime/cuda/value_hash.h"
#include "h3c/runtime/cuda/lora_merge.h"
#include "h3c/runtime/cuda/weight_upload.h"
#include "h3c/runtime/value_dump.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"
#include "h3c/support/synth_rng.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace h3c::rt {

namespace cuda_src {
extern const char *const synth_rng;
extern const char *const synth_fill;
} // namespace cuda_src

namespace {

namespace hc = h3c::runtime::cuda;
using nlohmann::json;

constexpr size_t kAlign = 256;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct DevValue {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  int64_t rows = 0;  // including the batch axis
};

// The runtime's own synthetic-weight kernel (not part of any plan): compiled and cached like a plan kernel.
const plan::Kernel &synthFillKernel(const std::string &arch) {
  return hc::runtimeKernel("h3c_synth_fill", arch,
                           {"// h3c synthetic weight generator", cuda_src::synth_rng, cuda_src::synth_fill});
}

// The weights as the device holds them (hot updates, merged LoRA adapters and the unmerged adapter slots
// included), for the fp64 ops of --bind reference and audit mode: each tensor is downloaded when an op reads it. The
// WeightSource the forward was given holds the weights of the load only.
class DeviceWeightView final : public WeightSource {
public:
  DeviceWeightView(const plan::Plan &p, WeightSource &base, std::function<Tensor(const std::string &)> read)
      : WeightSource(p.config), base_(base), read_(std::move(read)) {
    for (const auto &b : p.weights)
      for (const auto &t : b.tensors)
        if (t.adapter) specs_[t.name] = h3::TensorSpec{t.name, t.shape, t.dtype, h3::TensorSpec::Init::Zeros};
  }
  Tensor load(const std::string &name) override {
    spec(name);  // names a tensor neither the config nor the plan's slots has
    return read_(name);
  }
  nlohmann::json describe() const override { return base_.describe(); }

private:
  WeightSource &base_;
  std::function<Tensor(const std::string &)> read_;
};

class GpuExecutor final : public Executor {
public:
  std::string device() const override { return "gpu"; }

  json deviceInfo() const override {
    const auto &d = hc::device();
    return {{"gpu", d.name},
            {"compute_capability", std::to_string(d.ccMajor) + "." + std::to_string(d.ccMinor)},
            {"arch", d.arch()},
            {"driver_version", d.driverVersion},
            {"nvrtc_version", hc::NvrtcJit::nvrtcVersion()}};
  }

  Outputs run(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
              LedgerBuilder &ledger, const DeviceIO *io) override {
    keptTicket_ = 0;  // the arena is this forward's now
    // One GPU runs one rank; multi-rank plans (sp x tp > 1) need the multi-GPU executor (NCCL, not yet written).
    if (p.options.sp * p.options.tp != 1)
      fail("--device gpu", "the GPU executor runs single-rank plans (sp = tp = 1); this plan has sp = {}, tp = {} "
           "({} ranks): run it with --device cpu, or compile with --sp 1 --tp 1", p.options.sp, p.options.tp,
           p.options.sp * p.options.tp);
    begin(p, req);
    const plan::Function &fn = p.forward();

    // H3C_GPU_PROFILE=1: per-op CUDA events, a per-kind table and the forward time on stderr (=ops: every op's time
    // too; timing only; the results are the same bits).
    const bool profile = std::getenv("H3C_GPU_PROFILE") != nullptr;
    // H3C_PROFILE (or H3C_GPU_PROFILE): the executor's host phases (no events, nothing synchronized in between).
    const bool hostProfile = hostProfileOn();
    auto t0 = std::chrono::steady_clock::now();
    prepareKernels(fn);
    auto t1 = std::chrono::steady_clock::now();
    loadWeights(p, weights, opt.progress);
    stream_ = io ? reinterpret_cast<CUstream>(io->stream) : nullptr;
    allocateArena(p, req);
    bound_.clear();
    if (io) bindCaller(fn, *io);
    uploadInputs(fn, req);
    auto t2 = std::chrono::steady_clock::now();

    const auto &d = hc::driver();
    ProfileEvents events;
    std::vector<CUevent> &ev = events.ev;
    if (profile) events.start(fn.ops.size(), stream_);
    const auto dump = ValueDump::fromEnv();
    // --hash-nodes: two lane sums per op output (slot k: the k-th output in op order) in one zeroed device buffer,
    // finished on the host after the run.
    const hc::LoadedKernel *hashK = opt.hashNodes ? &runner_->load(hc::valueHashKernel(runner_->arch())) : nullptr;
    std::unique_ptr<hc::DeviceBuffer> sums;
    if (hashK) {
      size_t outputs = 0;
      for (const plan::Op &op : fn.ops) outputs += op.out.size();
      sums = std::make_unique<hc::DeviceBuffer>(std::max<size_t>(16, 16 * outputs));
      hc::check(d.cuMemsetD8(sums->get(), 0, sums->bytes()), "zeroing the hash sums");
      hc::check(d.cuCtxSynchronize(), "zeroing the hash sums");  // before any launch on the caller's stream
    }
    size_t nextHash = 0;
    // Outputs left in the caller's memory are scanned for NaN / Inf on the device after the last op (the kernel and
    // the slots made here: a module load and an allocation before the first launch, not behind them).
    const hc::LoadedKernel *scanK = io ? &runner_->load(hc::nonFiniteKernel(runner_->arch())) : nullptr;
    if (scanK && !outputScan_) outputScan_ = std::make_unique<hc::NonFiniteScan>();
    std::vector<std::map<std::string, std::vector<int64_t>>> opShapes;
    opShapes.reserve(fn.ops.size());
    const bool audit = opt.mode == Mode::Audit;
    const int cpuThreads = opt.threads > 0 ? opt.threads : int(hardwareThreads());
    std::vector<std::optional<AuditError>> opAudit(fn.ops.size());
    std::vector<Binding> opBinding(fn.ops.size(), Binding::Row);
    std::unique_ptr<DeviceWeightView> deviceWeights;  // made by the first op that needs the fp64 reference
    for (const plan::Op &op : fn.ops) {
      // A node asked for `reference` (--bind GLOB=reference): the op runs as the CPU's fp64 implementation on the
      // device's inputs and its outputs go back to the device; the ledger says `reference` (strict refuses it).
      // Audit mode: the outputs of a kernel op against that same fp64 op on the same inputs. Both read the op's
      // inputs as they are before it runs (its output may take a dead input's slot); the fp64 op runs once.
      // A node asked for `native` (--bind GLOB=native, or off mode's default): a linear or attention op runs on the
      // vendor library (runNative); other kinds have no native form and run their row kernel, recorded `row`.
      bool reference = false, native = false;
      for (const auto &n : op.nodes) {
        reference |= op.kernel && ledger.requested(n) == Binding::Reference;
        native |= ledger.requested(n) == Binding::Native;
      }
      native = native && !reference && op.kernel && hc::NativeOps::implements(op);
      opBinding[op.index] = reference ? Binding::Reference : native ? Binding::Native : Binding::Row;
      ValueMap fp64;  // the op's inputs, then also its fp64 outputs
      if ((audit || reference) && op.kernel) {
        hc::check(d.cuStreamSynchronize(stream_), "fp64 reference: before " + op.firstNode());
        for (const auto &n : op.in) fp64[n] = downloadValue(n);
        if (!deviceWeights)
          deviceWeights = std::make_unique<DeviceWeightView>(
              p, weights, [&](const std::string &n) { return readWeight(p, weights, n); });
        OpEnv env{p, req, *deviceWeights, Precision::Fp64, cpuThreads, -1};
        runCpuOp(op, env, fp64);
      }
      if (reference)
        for (const auto &o : op.out) upload(o, fp64.at(o));
      else if (native)
        runNative(op);
      else
        runOp(op);
      if (audit && op.kernel) {
        hc::check(d.cuStreamSynchronize(stream_), "audit: " + op.firstNode());
        for (const auto &o : op.out) {
          const AuditError e = auditCompare(downloadValue(o), fp64.at(o), o);
          if (!opAudit[op.index] || e.maxRel > opAudit[op.index]->maxRel || std::isnan(e.maxRel)) opAudit[op.index] = e;
        }
      }
      if (hashK)
        for (const auto &o : op.out) {
          const DevValue &dv = values_.at(o);
          hc::launchValueHash(*hashK, dv.ptr, dv.bytes, sums->get() + 16 * nextHash++, stream_, o);
        }
      if (dump) hc::check(d.cuStreamSynchronize(stream_), "H3C_DUMP_VALUES");
      if (dump)
        for (const auto &o : op.out) {
          const plan::Value &v = p.value(o);
          const DevValue &dv = values_.at(o);
          std::vector<char> host(dv.bytes);
          if (!host.empty()) hc::check(d.cuMemcpyDtoH(host.data(), dv.ptr, host.size()), "H3C_DUMP_VALUES " + o);
          dump->write(int64_t(op.index), o, v.dtype, host.data(), host.size() / dtypeSize(v.dtype));
        }
      if (profile) hc::check(d.cuEventRecord(ev[op.index + 1], stream_), "cuEventRecord");
      auto &shapes = opShapes.emplace_back();
      for (const auto *names : {&op.in, &op.out})
        for (const auto &n : *names) shapes[n] = shapeOf(p.value(n));
    }
    const std::vector<int64_t> sampleShape = {req.B, req.Nv, (int64_t)p.config.videoPatchDim()},
                               audioShape = {req.B, req.Na, (int64_t)p.config.audio_in_channels};
    if (scanK) queueOutputScan(*scanK, fn, sampleShape, audioShape);
    // The caller's stream only (other work of the caller's process keeps running); the whole context otherwise.
    const auto t3 = std::chrono::steady_clock::now();  // every op queued
    hc::check(io ? d.cuStreamSynchronize(stream_) : d.cuCtxSynchronize(), "running the plan");
    const auto t4 = std::chrono::steady_clock::now();
    if (ropeDevicePending_) ropeDeviceValid_ = true;
    std::vector<std::map<std::string, std::string>> opHashes(fn.ops.size());
    if (hashK) {
      std::vector<unsigned long long> s(2 * nextHash);
      if (!s.empty()) sums->download(s.data(), s.size() * 8);
      size_t k = 0;  // the slots in the order they were launched
      for (const plan::Op &op : fn.ops)
        for (const auto &o : op.out) {
          opHashes[op.index][o] = contentHashHex(s[2 * k], s[2 * k + 1], values_.at(o).bytes);
          ++k;
        }
    }
    for (const plan::Op &op : fn.ops)
      ledger.recordOp(op, opBinding[op.index], std::move(opShapes[op.index]), opAudit[op.index],
                      std::move(opHashes[op.index]));
    if (profile) report(fn, ev, t1 - t0, t2 - t1);
    if (hostProfile) {
      // Where the executor's wall time goes on the host: before the first launch the GPU idles, while queuing it runs
      // what was queued, the wait is the rest of the device work, and the records come after it.
      auto ms = [](std::chrono::steady_clock::duration x) { return std::chrono::duration<double, std::milli>(x).count(); };
      std::fprintf(stderr, "h3c gpu: forward host phases: kernels %.2f ms, weights + arena + input uploads %.2f ms "
                   "(before the first launch), queue %zu ops %.2f ms, stream wait %.2f ms, ledger records %.2f ms\n",
                   ms(t1 - t0), ms(t2 - t1), fn.ops.size(), ms(t3 - t2), ms(t4 - t3),
                   ms(std::chrono::steady_clock::now() - t4));
    }

    Outputs o;
    if (io) {  // already in the caller's memory: the device scan's results stand for the bytes
      o.sample.shape = sampleShape;
      o.audio_sample.shape = audioShape;
      const hc::NonFiniteScan::Slots slots = outputScan_->readSlots(stream_);
      o.sampleNonFinite = hc::NonFiniteScan::decode(slots, 0);
      o.audioSampleNonFinite = hc::NonFiniteScan::decode(slots, 1);
      return o;
    }
    o.sample = download(fn.outputs.at("sample"), sampleShape);
    o.audio_sample = download(fn.outputs.at("audio_sample"), audioShape);
    return o;
  }

private:
  // The state of one run of the plan on this request.
  void begin(const plan::Plan &p, const CanonicalRequest &req) {
    if (!runner_) runner_ = std::make_unique<hc::KernelRunner>();
    ropeDevicePending_ = false;
    req_ = &req;
    plan_ = &p;
    extents_ = req.extents();
    values_.clear();
  }

  // The two outputs' NaN / Inf scan, queued on the forward's stream after its last op (non_finite.h): one kernel
  // over the elements `download` would copy, and 48 bytes read back after the stream's synchronization.
  void queueOutputScan(const hc::LoadedKernel &k, const plan::Function &fn, const std::vector<int64_t> &sampleShape,
                       const std::vector<int64_t> &audioShape) {
    std::array<CUdeviceptr, 2> ptr{};
    std::array<int64_t, 2> count{};
    const std::pair<const char *, const std::vector<int64_t> *> outs[] = {{"sample", &sampleShape},
                                                                         {"audio_sample", &audioShape}};
    for (size_t i = 0; i < 2; ++i) {
      const std::string &name = fn.outputs.at(outs[i].first);
      const DevValue &dv = values_.at(name);
      if (plan_->value(name).dtype != DType::F32) fail("value " + name, "output must be F32");
      int64_t n = 1;
      for (int64_t e : *outs[i].second) n *= e;
      if (size_t(n) * 4 > dv.bytes) fail("value " + name, "output shape larger than its value");
      ptr[i] = dv.ptr;
      count[i] = n;
    }
    outputScan_->reset(stream_);
    outputScan_->launch(k, ptr, count, stream_);
  }

  void report(const plan::Function &fn, std::vector<CUevent> &ev, std::chrono::steady_clock::duration jit,
              std::chrono::steady_clock::duration upload) {
    const auto &d = hc::driver();
    std::map<std::string, std::pair<double, int>> perKind;
    float total = 0;
    hc::check(d.cuEventElapsedTime(&total, ev.front(), ev.back()), "cuEventElapsedTime");
    std::vector<float> opMs(fn.ops.size());
    for (const plan::Op &op : fn.ops) {
      float &ms = opMs[size_t(op.index)];
      hc::check(d.cuEventElapsedTime(&ms, ev[op.index], ev[op.index + 1]), "cuEventElapsedTime");
      std::string key = plan::opKindName(op.kind);
      if ((op.kind == plan::OpKind::Linear || op.kind == plan::OpKind::QkvLinear) &&
          op.attrs.epilogue != plan::Epilogue::None)
        key += std::string("+") + plan::epilogueName(op.attrs.epilogue);
      perKind[key].first += ms;
      perKind[key].second += 1;
    }
    size_t freeB = 0, totalB = 0;
    d.cuMemGetInfo(&freeB, &totalB);
    double wbytes = 0;
    for (const auto &kv : weightBuffers_) wbytes += double(kv.second.bytes());
    std::fprintf(stderr,
                 "h3c gpu: %s, B=%lld S=%lld: forward %.3f ms (device events, %zu ops); JIT %.2f s, arena+weights "
                 "%.2f s; arena %.3f GiB, weights %.2f GiB, device memory in use %.2f GiB of %.2f\n",
                 hc::device().name.c_str(), (long long)req_->B, (long long)req_->S, total, fn.ops.size(),
                 std::chrono::duration<double>(jit).count(), std::chrono::duration<double>(upload).count(),
                 arenaBytes_ / 1073741824.0, wbytes / 1073741824.0, (totalB - freeB) / 1073741824.0,
                 totalB / 1073741824.0);
    for (const auto &[k, v] : perKind)
      std::fprintf(stderr, "h3c gpu:   %-28s %4d ops %10.3f ms\n", k.c_str(), v.second, v.first);
    // H3C_GPU_PROFILE=ops: every op's time too, with its first node (which of a kind's few ops is the slow one).
    const char *level = std::getenv("H3C_GPU_PROFILE");
    if (level && std::string(level) == "ops")
      for (const plan::Op &op : fn.ops)
        std::fprintf(stderr, "h3c gpu:   op %4lld %-22s %-48s %9.3f ms\n", (long long)op.index,
                     plan::opKindName(op.kind), op.nodes.empty() ? "" : op.nodes.front().c_str(),
                     opMs[size_t(op.index)]);
  }

  // The CUDA events of H3C_GPU_PROFILE: destroyed on every path out of a run (an op that throws included).
  struct ProfileEvents {
    std::vector<CUevent> ev;
    ProfileEvents() = default;
    ProfileEvents(const ProfileEvents &) = delete;
    ProfileEvents &operator=(const ProfileEvents &) = delete;
    ~ProfileEvents() {
      for (CUevent e : ev)
        if (e) hc::driver().cuEventDestroy(e);
    }
    // n + 1 events (one before the first of n steps, one after each), the first recorded now on `stream`.
    void start(size_t n, CUstream stream) {
      ev.assign(n + 1, nullptr);
      for (auto &e : ev) hc::check(hc::driver().cuEventCreate(&e, 0), "cuEventCreate");
      hc::check(hc::driver().cuEventRecord(ev[0], stream), "cuEventRecord");
    }
  };

  // The backward's H3C_GPU_PROFILE tables: per schedule step its device time, the forward's first lives by op kind,
  // the recomputes and the gradient ops by kernel (its id without the hash: the op kind, the form and the shape).
  void reportSchedule(const plan::Plan &p, const std::vector<plan::ScheduleStep> &all, size_t first,
                      std::vector<CUevent> &ev) {
    const plan::ScheduleStep *steps = all.data() + first;  // the steps that ran, from `first`
    const size_t n = all.size() - first;
    const auto &d = hc::driver();
    std::map<std::string, std::pair<double, int>> perKey;
    double forward = 0, recompute = 0, backward = 0;
    for (size_t i = 0; i < n; ++i) {
      float ms = 0;
      hc::check(d.cuEventElapsedTime(&ms, ev[i], ev[i + 1]), "cuEventElapsedTime");
      const plan::Op &op = *steps[i].op;
      std::string key;
      if (steps[i].backward || steps[i].recompute) {
        const std::string &id = p.kernel(op).id;
        key = (steps[i].recompute ? "recompute " : "") + id.substr(0, id.rfind('_'));
        (steps[i].recompute ? recompute : backward) += ms;
      } else {
        key = std::string("forward ") + plan::opKindName(op.kind);
        forward += ms;
      }
      perKey[key].first += ms;
      perKey[key].second += 1;
    }
    size_t freeB = 0, totalB = 0;
    d.cuMemGetInfo(&freeB, &totalB);
    std::fprintf(stderr,
                 "h3c gpu: %s, B=%lld S=%lld: forward %.3f ms, recompute %.3f ms, backward %.3f ms (device events, "
                 "%zu steps); arena %.3f GiB, device memory in use %.2f GiB of %.2f\n",
                 hc::device().name.c_str(), (long long)req_->B, (long long)req_->S, forward, recompute, backward,
                 n, arenaBytes_ / 1073741824.0, (totalB - freeB) / 1073741824.0, totalB / 1073741824.0);
    for (const auto &[k, v] : perKey)
      std::fprintf(stderr, "h3c gpu:   %-50s %4d ops %10.3f ms\n", k.c_str(), v.second, v.first);
  }

  std::vector<int64_t> shapeOf(const plan::Value &v) const {
    int64_t r = extents_.rows(v.rows);
    if (v.batch) return {req_->B, r, v.cols};
    return {r, v.cols};
  }
  int64_t totalRows(const plan::Value &v) const { return extents_.rows(v.rows) * (v.batch ? req_->B : 1); }
  size_t valueBytes(const plan::Value &v) const {
    return size_t(totalRows(v)) * size_t(v.cols) * dtypeSize(v.dtype);
  }

  // Every op's kernel, exactly as the plan carries it. Once per plan: the later forwards of a resident engine find
  // them here (the runner keeps what it loaded, so this is only bookkeeping over the ops, at every forward before).
  void prepareKernels(const plan::Function &fn) {
    if (kernelsFor_ == plan_ && kernelsSha_ == plan_->planSha256) return;
    kernelsFor_ = nullptr;
    kernels_.clear();
    std::vector<const plan::Kernel *> all;  // JIT-compiled in parallel threads, then loaded
    for (const plan::Op &op : fn.ops)
      if (op.kernel) all.push_back(&plan_->kernel(op));
    runner_->loadAll(all);
    for (const plan::Op &op : fn.ops)
      if (op.kernel) kernels_[op.index] = &runner_->load(plan_->kernel(op));
    kernelsFor_ = plan_;
    kernelsSha_ = plan_->planSha256;
  }

  // Returns each slot's address. Every value starts at its slot's (a recomputed value moves to its recompute slot's
  // at its recompute: backward()).
  std::map<int64_t, CUdeviceptr> allocateArena(const plan::Plan &p, const CanonicalRequest &req,
                                               bool withBackward = false) {
    // The layout depends on the plan, the request's extents and whether the backward's values are in; every step of
    // a sampling loop or a training loop asks for the same one (~8 ms of string sets and maps at the 33B plan's
    // ~9,000 values), so the last one is kept while the arena it points into stays.
    ArenaLayout &c = arenaLayout_;
    if (c.plan == &p && c.planSha == p.planSha256 && c.withBackward == withBackward && c.ext == extents_ && arena_ &&
        arena_->get() == c.base) {
      gradSlots_ = c.gradSlots;
      arenaBytes_ = c.total;
      values_ = c.values;
      return c.slotAt;
    }
    c = ArenaLayout{};
    std::map<int64_t, CUdeviceptr> at = layOutArena(p, req, withBackward);
    c.plan = &p;
    c.planSha = p.planSha256;
    c.withBackward = withBackward;
    c.ext = extents_;  // (B among them: begin() took them from the request)
    c.base = arena_->get();
    c.total = arenaBytes_;
    c.gradSlots = gradSlots_;
    c.values = values_;
    c.slotAt = at;
    return at;
  }

  std::map<int64_t, CUdeviceptr> layOutArena(const plan::Plan &p, const CanonicalRequest &req, bool withBackward) {
    // The forward's values only, unless the backward runs too: a plan with a backward (docs/contract.md section 14)
    // also holds the gradients and their slots (every weight's F32 gradient among them), which a forward must not
    // allocate, and the recompute slots of a checkpointed plan's recomputed values.
    std::set<std::string> forwardValues;
    for (const plan::Function *fn : {&p.forward(), withBackward ? p.backward() : nullptr}) {
      if (!fn) continue;
      forwardValues.insert(fn->inputs.begin(), fn->inputs.end());
      for (const plan::Op &op : fn->ops)
        for (const auto *names : {&op.in, &op.out}) forwardValues.insert(names->begin(), names->end());
    }
    std::set<int64_t> forwardSlots;
    for (const auto &name : forwardValues) {
      const plan::Value &v = p.value(name);
      forwardSlots.insert(v.slot);
      if (withBackward && v.recomputeSlot >= 0) forwardSlots.insert(v.recomputeSlot);
    }
    // The slots that hold nothing but weight gradients (the backward's `grad:<tensor>` outputs: each lives from its
    // gradient op to the end, in a slot of its own) are no part of the arena: the backward places them
    // (placeWeightGrads), in the caller's memory where a DeviceGrads names them (the Python package's CUDA masters'
    // .grad: 1.38 GB at LoRA rank 64 that the arena would otherwise hold beside them), else in gradRegion_.
    gradSlots_.clear();
    if (withBackward) {
      std::set<std::string> weightGrads;
      for (const auto &[key, v] : p.backward()->outputs)
        if (key.rfind("grad:@", 0) != 0) weightGrads.insert(v);
      std::map<int64_t, bool> onlyGrads;
      for (const auto &name : forwardValues) {
        const plan::Value &v = p.value(name);
        const bool grad = weightGrads.count(name) > 0;
        auto [it, fresh] = onlyGrads.emplace(v.slot, grad);
        if (!fresh) it->second = it->second && grad;
        if (v.recomputeSlot >= 0) onlyGrads[v.recomputeSlot] = false;
      }
      for (const auto &[id, only] : onlyGrads)
        if (only) gradSlots_[id] = 0;
    }
    std::map<int64_t, size_t> slotBytes;
    for (const auto &s : p.slots) {
      if (!forwardSlots.count(s.id)) continue;
      size_t b = size_t(s.fixedBytes);
      for (const auto &[dom, bpr] : s.bytesPerRow) b += size_t(bpr) * size_t(extents_.rows(dom)) * size_t(req.B);
      slotBytes[s.id] = b;
    }
    for (const auto &name : forwardValues) {
      const plan::Value &v = p.value(name);
      slotBytes[v.slot] = std::max(slotBytes[v.slot], valueBytes(v));
      if (withBackward && v.recomputeSlot >= 0)
        slotBytes[v.recomputeSlot] = std::max(slotBytes[v.recomputeSlot], valueBytes(v));
    }
    size_t total = 0;
    std::map<int64_t, size_t> slotOffset;
    for (const auto &[id, b] : slotBytes) {
      if (gradSlots_.count(id)) {
        gradSlots_[id] = b;
        continue;
      }
      slotOffset[id] = total;
      total += alignUp(std::max<size_t>(b, 1));
    }
    if (!arena_ || arena_->bytes() < total) {
      arena_.reset();
      arena_ = std::make_unique<hc::DeviceBuffer>(total);
    }
    arenaBytes_ = total;
    for (const auto &name : forwardValues) {
      const plan::Value &v = p.value(name);
      DevValue d;
      d.bytes = valueBytes(v);
      d.rows = totalRows(v);
      d.ptr = gradSlots_.count(v.slot) ? 0 : arena_->get() + slotOffset.at(v.slot);  // (0: placeWeightGrads)
      values_[name] = d;
    }
    std::map<int64_t, CUdeviceptr> at;
    for (const auto &[id, off] : slotOffset) at[id] = arena_->get() + off;
    return at;
  }

  // A host value (graph input, host-op output) to the value's arena region, in the value's dtype.
  void upload(const std::string &name, const HostValue &h) {
    const plan::Value &v = plan_->value(name);
    const DevValue &d = values_.at(name);
    const size_t n = size_t(d.rows) * size_t(v.cols);
    if (v.dtype == DType::I64) {
      if (h.i.size() != n) fail("value " + name, "has {} elements, expected {}", h.i.size(), n);
      if (n) hc::check(hc::driver().cuMemcpyHtoDAsync(d.ptr, h.i.data(), n * 8, stream_), "upload " + name);
      return;
    }
    if (h.f.size() != n) fail("value " + name, "has {} elements, expected {}", h.f.size(), n);
    if (v.dtype == DType::F32) {
      if (n) hc::check(hc::driver().cuMemcpyHtoDAsync(d.ptr, h.f.data(), n * 4, stream_), "upload " + name);
    } else {
      std::vector<uint16_t> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = floatToBf16(h.f[i]);
      if (n) hc::check(hc::driver().cuMemcpyHtoDAsync(d.ptr, b.data(), n * 2, stream_), "upload " + name);
    }
  }

  // A host table for a value that may carry a batch axis (then repeated per item).
  void uploadRepeated(const std::string &name, const std::vector<float> &f) {
    const plan::Value &v = plan_->value(name);
    if (!(v.batch && req_->B > 1) && v.dtype == DType::F32) {  // as it is: no copy of the table
      const DevValue &d = values_.at(name);
      const size_t n = size_t(d.rows) * size_t(v.cols);
      if (f.size() != n) fail("value " + name, "has {} elements, expected {}", f.size(), n);
      if (n) hc::check(hc::driver().cuMemcpyHtoDAsync(d.ptr, f.data(), n * 4, stream_), "upload " + name);
      return;
    }
    HostValue h;
    if (v.batch && req_->B > 1) {
      h.f.reserve(f.size() * size_t(req_->B));
      for (int64_t b = 0; b < req_->B; ++b) h.f.insert(h.f.end(), f.begin(), f.end());
    } else {
      h.f = f;
    }
    upload(name, h);
  }

  // The graph inputs not bound to the caller's memory. An activation goes up from the request's own bytes when
  // canonicalize borrowed them (the engine): as they are when the dtypes agree, else converted element by element
  // (F32 -> BF16 rounds to nearest even, BF16 -> F32 widens exactly), the bits the float path gives.
  void uploadInputs(const plan::Function &fn, const CanonicalRequest &req) {
    const std::pair<const char *, const Tensor *> borrowed[] = {
        {"@hidden_states", req.videoIn}, {"@audio_hidden_states", req.audioIn}, {"@encoder_hidden_states", req.textIn}};
    const bool allBorrowed = req.videoIn && req.audioIn && req.textIn;
    const ValueMap in = graphInputValues(req, /*withActivations=*/!allBorrowed);
    for (const auto &name : fn.inputs) {
      if (bound_.count(name)) continue;
      const Tensor *t = nullptr;
      for (const auto &[n, tensor] : borrowed)
        if (allBorrowed && name == n) t = tensor;
      if (t) uploadTensor(name, *t);
      else upload(name, in.at(name));
    }
  }

  // A request tensor (float) to the value's arena region in the value's dtype.
  void uploadTensor(const std::string &name, const Tensor &t) {
    const plan::Value &v = plan_->value(name);
    const DevValue &d = values_.at(name);
    const size_t n = size_t(d.rows) * size_t(v.cols);
    if (size_t(t.numel()) != n) fail("value " + name, "has {} elements, expected {}", t.numel(), n);
    if (n == 0) return;
    const auto &drv = hc::driver();
    if (t.dtype == v.dtype && (v.dtype == DType::F32 || v.dtype == DType::BF16)) {
      hc::check(drv.cuMemcpyHtoDAsync(d.ptr, t.bytes.data(), t.bytes.size(), stream_), "upload " + name);
    } else if (t.dtype == DType::F32 && v.dtype == DType::BF16) {
      std::vector<uint16_t> b(n);
      const uint8_t *src = t.bytes.data();
      for (size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        b[i] = floatToBf16(f);
      }
      hc::check(drv.cuMemcpyHtoDAsync(d.ptr, b.data(), n * 2, stream_), "upload " + name);
    } else {
      HostValue h;
      h.f = t.toFloats();
      upload(name, h);
    }
  }

  // The caller's device memory in place of the arena regions of the bound activations and of the two outputs. A
  // graph input is never written (values are single-assignment) and an output is written only by its producer, so
  // rebinding one value's address leaves every other value of its slot where it was.
  void bindCaller(const plan::Function &fn, const DeviceIO &io) {
    auto bind = [&](const std::string &value, uint64_t ptr, const std::string &what) {
      if (ptr == 0 && valueBytes(plan_->value(value)) > 0) fail(what, "null device address");
      values_.at(value).ptr = CUdeviceptr(ptr);
      bound_.insert(value);
    };
    for (const auto &[name, ptr] : io.inputs) {
      if (name != "hidden_states" && name != "audio_hidden_states" && name != "encoder_hidden_states")
        fail("device input " + name, "only the three activations can be bound");
      bind("@" + name, ptr, name);
    }
    bind(fn.outputs.at("sample"), io.sample, "sample");
    bind(fn.outputs.at("audio_sample"), io.audioSample, "audio_sample");
  }

public:
  // Once per plan and weight content: later forwards upload nothing. The key is read after the upload, which is what
  // computes a checkpoint's content hash (weight_upload.h); on later calls the hash is known and costs nothing.
  void loadWeights(const plan::Plan &p, WeightSource &weights, bool progress) override {
    if (p.options.sp * p.options.tp != 1) return;  // run() refuses the plan
    if (!weightsKey_.empty() && weightsKey_ == p.planSha256 + " " + weights.describe().dump()) return;
    if (!runner_) runner_ = std::make_unique<hc::KernelRunner>();
    weightsKey_.clear();
    uploadWeights(p, weights, progress);
    hc::check(hc::driver().cuCtxSynchronize(), "uploading weights");
    weightsKey_ = p.planSha256 + " " + weights.describe().dump();
  }

  // Every named tensor hashed where it lives: one hash launch per tensor into one zeroed buffer of lane sums, one
  // copy back (~20 ms for the 61.7 GiB of the full model at the H200's bandwidth).
  std::map<std::string, std::string> weightHashes(const plan::Plan &p, WeightSource &weights,
                                                  const std::vector<std::string> &names) override {
    loadWeights(p, weights, false);
    std::map<std::string, std::string> h;
    if (names.empty()) return h;
    const auto &d = hc::driver();
    const hc::LoadedKernel &k = runner_->load(hc::valueHashKernel(runner_->arch()));
    hc::DeviceBuffer sums(16 * names.size());
    hc::check(d.cuMemsetD8(sums.get(), 0, sums.bytes()), "zeroing the weight hash sums");
    std::vector<size_t> bytes(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const plan::WeightTensor &t = p.weightTensor(names[i]);
      bytes[i] = size_t(t.numel()) * dtypeSize(t.dtype);
      hc::launchValueHash(k, weightAt(names[i]), bytes[i], sums.get() + 16 * i, nullptr, "weight " + names[i]);
    }
    hc::check(d.cuCtxSynchronize(), "hashing the weights");
    std::vector<unsigned long long> s(2 * names.size());
    sums.download(s.data(), s.size() * 8);
    for (size_t i = 0; i < names.size(); ++i) h[names[i]] = contentHashHex(s[2 * i], s[2 * i + 1], bytes[i]);
    return h;
  }

  // A hot update's writes into the device weight buffers, on the caller's stream (device sources are the caller's
  // tensors, written by work queued there), finished before returning.
  void writeWeights(const plan::Plan &p, WeightSource &weights, const std::vector<WeightWrite> &writes,
                    uint64_t stream) override {
    keptTicket_ = 0;  // a kept forward ran on the weights before
    loadWeights(p, weights, false);
    const auto &d = hc::driver();
    CUstream s = reinterpret_cast<CUstream>(stream);
    for (const WeightWrite &w : writes) {
      const plan::WeightTensor &t = p.weightTensor(w.tensor);
      if (w.offset + w.bytes > uint64_t(t.numel()) * dtypeSize(t.dtype))
        fail("update:" + w.tensor, "internal error: bytes [{}, {}) outside the tensor", w.offset, w.offset + w.bytes);
      if (!w.bytes) continue;
      const CUdeviceptr dst = weightAt(w.tensor) + w.offset;
      if (w.device)
        hc::check(d.cuMemcpyDtoDAsync(dst, CUdeviceptr(w.device), w.bytes, s), "update " + w.tensor);
      else
        hc::check(d.cuMemcpyHtoDAsync(dst, w.host, w.bytes, s), "update " + w.tensor);
    }
    hc::check(d.cuStreamSynchronize(s), "updating the weights");
  }

  void mergeLora(const plan::Plan &p, WeightSource &weights, const std::string &tensor,
                 const LoraTerms &terms) override {
    keptTicket_ = 0;  // a kept forward ran on the weights before
    loadWeights(p, weights, false);
    const plan::WeightTensor &t = p.weightTensor(tensor);
    if (t.shape.size() != 2) fail("lora:" + tensor, "is not a matrix");
    hc::mergeLoraOnDevice(*runner_, weightAt(tensor), t.dtype, t.shape[0], t.shape[1], terms, nullptr);
  }

  void restoreWeights(const plan::Plan &p, WeightSource &ws, const std::vector<std::string> &names) override {
    keptTicket_ = 0;  // a kept forward ran on the weights before
    loadWeights(p, ws, false);
    const json desc = ws.describe();  // loaded: a checkpoint's hash is known, nothing is hashed again
    const bool synthetic = desc.value("kind", "") == "synthetic";
    const uint64_t seed = synthetic ? desc.at("seed").get<uint64_t>() : 0;
    const hc::LoadedKernel *synth = synthetic ? &runner_->load(synthFillKernel(runner_->arch())) : nullptr;
    for (const auto &name : names) {
      const plan::WeightTensor &t = p.weightTensor(name);
      fillWeight(ws, ws.spec(name), weightAt(name), size_t(t.numel()) * dtypeSize(t.dtype), synth, seed);
    }
    hc::check(hc::driver().cuCtxSynchronize(), "restoring weights");
  }

  Tensor readWeight(const plan::Plan &p, WeightSource &weights, const std::string &name) override {
    loadWeights(p, weights, false);
    const plan::WeightTensor &t = p.weightTensor(name);
    Tensor out = Tensor::zeros(t.dtype, t.shape);
    hc::check(hc::driver().cuMemcpyDtoH(out.bytes.data(), weightAt(name), out.bytes.size()), "reading weight " + name);
    return out;
  }

  // The forward and the backward on the device, in the order of plan::backwardSchedule(p, true) (docs/contract.md
  // section 14): the forward's ops as run() launches them (row bindings only), the gradients of its outputs uploaded,
  // the backward's gradient kernels, and before the first gradient op reading a checkpoint segment's values, the
  // segment's recompute ops again (their own kernels and launch parameters: the same bits), each recomputed value
  // in its recompute slot. Every value of both functions lives in the arena where the plan's slot timeline puts it
  // (the reader checked that no two live values share a slot over this schedule); then the gradients are copied
  // back. backward.h has checked the plan and the gradients' shapes. `resume`: forwardKept's ticket; when it is the
  // kept forward's (nothing ran on this executor since) and the request has its extents, the backward starts at the
  // schedule's first step after the forward, on the values the kept forward left in the arena.
  BackwardResult backward(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req,
                          const OutputGrads &dy, const RunOptions &opt, uint64_t resume,
                          const DeviceGrads *into) override {
    const plan::Function *bwd = p.backward();
    if (!bwd) fail("plan.json#/functions/backward", "the plan has no backward");
    const plan::Extents e = req.extents();
    const bool reuse = resume != 0 && resume == keptTicket_ && keptPlan_ == &p && e == extents_;
    keptTicket_ = 0;
    const HostClock::time_point h0 = HostClock::now();
    const std::vector<plan::ScheduleStep> &steps = scheduleOf(p);
    const size_t first = reuse ? forwardEnd(steps) : 0;
    const HostClock::time_point h1 = HostClock::now();
    if (reuse) req_ = &req;  // the same extents: every launch and download reads them
    else prepareBackward(p, weights, req, opt);
    const std::set<std::string> boundGrads = placeWeightGrads(p, into);
    const HostClock::time_point h2 = HostClock::now();
    const plan::Function &fwd = p.forward();
    // H3C_GPU_PROFILE=1: a CUDA event after each step of the schedule; the forward's table by op kind, the
    // recompute's and the backward's by kernel on stderr (timing only; the same bits).
    const bool profile = std::getenv("H3C_GPU_PROFILE") != nullptr;
    const auto &d = hc::driver();
    ProfileEvents events;
    std::vector<CUevent> &ev = events.ev;
    const int64_t videoCols = p.config.videoPatchDim(), audioCols = p.config.audio_in_channels;
    const auto t0 = std::chrono::steady_clock::now();
    const size_t ranSteps = steps.size() - first;  // (the cached schedule's steps from `first`, not copied)
    if (profile) events.start(ranSteps, stream_);
    size_t recomputed = 0;
    for (size_t i = 0; i < ranSteps; ++i) {
      const plan::ScheduleStep &step = steps[first + i];
      recomputed += step.recompute ? 1 : 0;
      runStep(p, step, &dy);
      if (profile) hc::check(d.cuEventRecord(ev[i + 1], stream_), "cuEventRecord");
    }
    const HostClock::time_point h3 = HostClock::now();
    hc::check(hc::driver().cuCtxSynchronize(), "running the backward");
    const HostClock::time_point h4 = HostClock::now();
    if (profile) reportSchedule(p, steps, first, ev);
    if (ropeDevicePending_) ropeDeviceValid_ = true;
    if (hostProfileOn()) {
      // What the memory of a training step is made of (docs/contract.md section 14): the arena (the plan's slots),
      // the weights, and the device's whole use (the CUDA context and kernel scratch included).
      size_t freeB = 0, totalB = 0;
      hc::driver().cuMemGetInfo(&freeB, &totalB);
      double wbytes = 0;
      for (const auto &kv : weightBuffers_) wbytes += double(kv.second.bytes());
      std::fprintf(stderr, "h3c gpu: backward B=%lld S=%lld: %zu steps%s (%zu recomputed forward ops, %zu checkpoint "
                   "segments) %.1f ms; arena %.3f GB, weight gradients %.3f GB (%.3f GB of them in the caller's "
                   "memory), weights %.3f GB, device memory in use %.3f GB of %.3f (GB = 1e9 bytes)\n",
                   (long long)req.B, (long long)req.S, ranSteps, reuse ? " after the kept forward" : "", recomputed,
                   bwd->checkpoints.size(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                   arenaBytes_ / 1e9, (gradRegionBytes_ + boundGradBytes_) / 1e9, boundGradBytes_ / 1e9,
                   wbytes / 1e9, (totalB - freeB) / 1e9, totalB / 1e9);
    }
    BackwardResult r;
    r.arenaBytes = int64_t(arenaBytes_);
    r.forwardKept = reuse;
    if (!into || into->outputs) {
      r.outputs.sample = download(fwd.outputs.at("sample"), {req.B, req.Nv, videoCols});
      r.outputs.audio_sample = download(fwd.outputs.at("audio_sample"), {req.B, req.Na, audioCols});
    }
    // The weight gradients the caller's device memory does not hold already (placeWeightGrads): into it where
    // named, else to the host straight into their tensors (one copy each).
    for (const auto &[key, v] : bwd->outputs) {
      if (key.rfind("grad:@", 0) == 0) {
        if (into && !into->inputGrads) continue;
        const HostValue h = downloadValue(v);
        r.inputGrads[key.substr(6)] = Tensor::fromFloats(DType::F32, {h.batch, h.rows, h.cols}, h.f.data());
        continue;
      }
      const std::string tensor = key.substr(5);
      if (boundGrads.count(v)) continue;
      const auto dst = into ? into->weights.find(tensor) : std::map<std::string, uint64_t>::const_iterator{};
      if (into && dst != into->weights.end()) {  // (its slot is shared: a plan's placement may do that)
        const DevValue &dv = values_.at(v);
        hc::check(hc::driver().cuMemcpyDtoD(CUdeviceptr(dst->second), dv.ptr, dv.bytes),
                  "copying the gradient of " + tensor);
      } else {
        r.weightGrads[tensor] = download(v, p.weightTensor(tensor).shape);
      }
    }
    if (hostProfileOn())
      std::fprintf(stderr, "h3c gpu: backward host phases: schedule %.2f ms, prepare %.2f ms%s, launch %zu steps "
                   "%.2f ms, wait %.2f ms, outputs + gradients %.2f ms\n", msBetween(h0, h1), msBetween(h1, h2),
                   reuse ? " (the kept forward's)" : "", ranSteps, msBetween(h2, h3), msBetween(h3, h4),
                   msBetween(h4, HostClock::now()));
    return r;
  }

  // The forward half of backward() (executor.h): the schedule's forward steps in the backward's arena, kept there for
  // the backward of the ticket returned.
  Outputs forwardKept(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
                      uint64_t &ticket) override {
    if (!p.backward()) fail("plan.json#/functions/backward", "the plan has no backward");
    keptTicket_ = 0;
    const HostClock::time_point h0 = HostClock::now();
    const std::vector<plan::ScheduleStep> &steps = scheduleOf(p);
    const HostClock::time_point h1 = HostClock::now();
    prepareBackward(p, weights, req, opt);
    const HostClock::time_point h2 = HostClock::now();
    const size_t end = forwardEnd(steps);
    for (size_t i = 0; i < end; ++i) runStep(p, steps[i], nullptr);
    const HostClock::time_point h3 = HostClock::now();
    hc::check(hc::driver().cuCtxSynchronize(), "running the forward of a backward");
    const HostClock::time_point h4 = HostClock::now();
    if (ropeDevicePending_) ropeDeviceValid_ = true;
    const plan::Function &fwd = p.forward();
    Outputs out;
    out.sample = download(fwd.outputs.at("sample"), {req.B, req.Nv, p.config.videoPatchDim()});
    out.audio_sample = download(fwd.outputs.at("audio_sample"), {req.B, req.Na, p.config.audio_in_channels});
    keptTicket_ = ticket = ++lastTicket_;
    keptPlan_ = &p;
    if (hostProfileOn())
      std::fprintf(stderr, "h3c gpu: kept forward host phases: schedule %.2f ms, prepare %.2f ms, launch %zu steps "
                   "%.2f ms, wait %.2f ms, outputs %.2f ms\n", msBetween(h0, h1), msBetween(h1, h2), end,
                   msBetween(h2, h3), msBetween(h3, h4), msBetween(h4, HostClock::now()));
    return out;
  }

private:
  using HostClock = std::chrono::steady_clock;
  static double msBetween(HostClock::time_point a, HostClock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }
  static bool hostProfileOn() { return std::getenv("H3C_PROFILE") || std::getenv("H3C_GPU_PROFILE"); }

  // plan::backwardSchedule(p, true), made once per plan (a few ms of host work at the full config that every kept
  // forward and every backward would otherwise repeat before their first launch); the plan's sha with its address,
  // as kernels_, since an address may be reused by another plan.
  const std::vector<plan::ScheduleStep> &scheduleOf(const plan::Plan &p) {
    if (scheduleFor_ != &p || scheduleSha_ != p.planSha256) {
      schedule_ = plan::backwardSchedule(p, true);
      scheduleFor_ = &p;
      scheduleSha_ = p.planSha256;
    }
    return schedule_;
  }

  // Where the backward writes each weight gradient (the values of gradSlots_, outside the arena): the caller's
  // device memory where `into` names the tensor (its gradient kernels write there: no copy, no second 1.38 GB at
  // LoRA rank 64), else gradRegion_ (made at the first backward that needs it, then kept). Returns the values placed
  // in the caller's memory. The caller's memory is the caller's stream's (the Python package's torch.empty on
  // torch's current stream): the backward's stream waits for that stream's work before any kernel writes it.
  std::set<std::string> placeWeightGrads(const plan::Plan &p, const DeviceGrads *into) {
    std::set<std::string> bound;
    std::map<int64_t, size_t> own;  // the slots of the gradients left to gradRegion_: bytes, then offsets
    for (const auto &[key, v] : p.backward()->outputs) {
      if (key.rfind("grad:@", 0) == 0) continue;
      const int64_t slot = p.value(v).slot;
      if (!gradSlots_.count(slot)) continue;  // a slot shared with other values: in the arena, copied after
      DevValue &dv = values_.at(v);
      const auto dst = into ? into->weights.find(key.substr(5)) : std::map<std::string, uint64_t>::const_iterator{};
      if (into && dst != into->weights.end()) {
        if (dst->second == 0 && dv.bytes > 0) fail("gradients into device memory", "null address for '{}'",
                                                   key.substr(5));
        dv.ptr = CUdeviceptr(dst->second);
        bound.insert(v);
      } else {
        own[slot] = gradSlots_.at(slot);
      }
    }
    size_t total = 0;  // the slots back to back, as in the arena
    for (auto &[id, b] : own) {
      const size_t bytes = alignUp(std::max<size_t>(b, 1));
      b = total;
      total += bytes;
    }
    if (total && (!gradRegion_ || gradRegion_->bytes() < total)) {
      gradRegion_.reset();
      gradRegion_ = std::make_unique<hc::DeviceBuffer>(total);
    }
    gradRegionBytes_ = total;
    for (const auto &[key, v] : p.backward()->outputs) {
      if (key.rfind("grad:@", 0) == 0 || bound.count(v)) continue;
      const auto it = own.find(p.value(v).slot);  // (now its offset)
      if (it != own.end()) values_.at(v).ptr = gradRegion_->get() + it->second;
    }
    boundGradBytes_ = 0;
    for (const auto &v : bound) boundGradBytes_ += values_.at(v).bytes;
    if (!bound.empty()) {  // the caller's memory may still be in use by work queued on its stream
      const auto &d = hc::driver();
      CUevent ready = nullptr;
      hc::check(d.cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      hc::check(d.cuEventRecord(ready, reinterpret_cast<CUstream>(into->stream)), "cuEventRecord");
      hc::check(d.cuStreamWaitEvent(stream_, ready, 0), "cuStreamWaitEvent");
      hc::check(d.cuEventDestroy(ready), "cuEventDestroy");
    }
    return bound;
  }

  // The backward's set-up (both halves): the request's extents, the kernels of both functions, the weights, the
  // arena over the backward's slot timeline, the forward's inputs uploaded.
  void prepareBackward(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt) {
    if (p.options.sp * p.options.tp != 1) fail("--device gpu", "the backward runs on one rank");
    const HostClock::time_point h0 = HostClock::now();
    begin(p, req);
    bound_.clear();
    stream_ = nullptr;
    const plan::Function &fwd = p.forward();
    prepareKernels(fwd);
    std::vector<const plan::Kernel *> all;
    for (const plan::Op &op : p.backward()->ops) all.push_back(&p.kernel(op));
    runner_->loadAll(all);
    const HostClock::time_point h1 = HostClock::now();
    loadWeights(p, weights, opt.progress);
    const HostClock::time_point h2 = HostClock::now();
    slotAt_ = allocateArena(p, req, /*withBackward=*/true);
    const HostClock::time_point h3 = HostClock::now();
    uploadInputs(fwd, req);
    if (hostProfileOn())
      std::fprintf(stderr, "h3c gpu: backward set-up: kernels %.2f ms, weights %.2f ms, arena %.2f ms, inputs %.2f ms\n",
                   msBetween(h0, h1), msBetween(h1, h2), msBetween(h2, h3), msBetween(h3, HostClock::now()));
  }

  // The schedule's forward steps end where the first step is a gradient op or a recompute, or defines a gradient of
  // an output (the backward's inputs).
  static size_t forwardEnd(const std::vector<plan::ScheduleStep> &steps) {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].backward || steps[i].recompute) return i;
      for (const auto &n : steps[i].defineBefore)
        if (n.rfind("@grad:", 0) == 0) return i;
    }
    return steps.size();
  }

  // One step of the backward's schedule. dy: the gradients of the forward's outputs (null for the forward's steps).
  void runStep(const plan::Plan &p, const plan::ScheduleStep &s, const OutputGrads *dy) {
    const plan::Function &fwd = p.forward();
    // The backward's inputs (the gradients of the forward's outputs) come into being after the forward: uploaded
    // in stream order behind its ops (their slots may have held forward values until then).
    for (const auto &n : s.defineBefore) {
      if (n.rfind("@grad:", 0) != 0) continue;  // the forward's inputs: uploadInputs
      const bool video = n == "@grad:" + fwd.outputs.at("sample");
      if (!video && n != "@grad:" + fwd.outputs.at("audio_sample"))
        fail("plan.json#/functions/backward/inputs", "'{}' is no gradient of a forward output", n);
      if (!dy) fail("plan.json#/functions/backward", "internal error: '{}' defined in the forward's steps", n);
      uploadTensor(n, video ? dy->sample : dy->audioSample);
    }
    if (s.backward) {
      launchKernel(*s.op, runner_->load(p.kernel(*s.op)));
      return;
    }
    if (s.recompute) {  // the second life of what it defines: its recompute slot (the first may be another's now)
      for (const auto &o : s.op->out) {
        const int64_t slot = p.value(o).recomputeSlot;
        if (slot < 0) fail("plan.json#/values/" + o, "is recomputed but has no recompute_slot");
        values_.at(o).ptr = slotAt_.at(slot);
      }
    }
    runOp(*s.op);
  }

private:
  // Weights: one device allocation per plan weight buffer, tensors back to back in the plan's order. A checkpoint
  // is streamed in one pass that also checks it (weight_upload.h); synthetic weights are generated on the device.
  // A failed upload keeps nothing: the buffers are freed and weightsKey_ stays empty.
  void uploadWeights(const plan::Plan &p, WeightSource &ws, bool progress) {
    auto *ckpt = dynamic_cast<CheckpointWeights *>(&ws);
    json desc = ckpt ? json::object() : ws.describe();  // a checkpoint's describe() would hash it apart from the load
    const bool synthetic = desc.value("kind", "") == "synthetic";
    const uint64_t seed = synthetic ? desc.at("seed").get<uint64_t>() : 0;
    const hc::LoadedKernel *synth = synthetic ? &runner_->load(synthFillKernel(runner_->arch())) : nullptr;
    weightBuffers_.clear();
    weightAddr_.clear();
    std::vector<StreamTarget> streamed;
    try {
      for (const auto &b : p.weights) {
        size_t total = 0;
        for (const auto &t : b.tensors) total += size_t(t.numel()) * dtypeSize(t.dtype);
        hc::DeviceBuffer &buf = weightBuffers_[b.name] = hc::DeviceBuffer(total);
        size_t off = 0;
        for (const auto &t : b.tensors) {
          if (t.adapter) {  // an unmerged LoRA slot: no source holds it; zero until an adapter is written into it
            const size_t bytes = size_t(t.numel()) * dtypeSize(t.dtype);
            hc::check(hc::driver().cuMemsetD8(buf.get() + off, 0, bytes), "zeroing adapter slot " + t.name);
            weightAddr_[t.name] = buf.get() + off;
            off += bytes;
            continue;
          }
          const h3::TensorSpec &spec = ws.spec(t.name);
          if (spec.dtype != t.dtype || spec.shape != t.shape)
            fail("weight " + t.name, "the weight source has {} {}, the plan {} {}", dtypeName(spec.dtype),
                 spec.numel(), dtypeName(t.dtype), t.numel());
          size_t bytes = size_t(t.numel()) * dtypeSize(t.dtype);
          if (ckpt) streamed.push_back({t.name, uint64_t(buf.get() + off), bytes});
          else fillWeight(ws, spec, buf.get() + off, bytes, synth, seed);
          weightAddr_[t.name] = buf.get() + off;
          off += bytes;
        }
      }
      if (ckpt) hc::uploadCheckpoint(*ckpt, streamed, progress);
    } catch (...) {
      hc::driver().cuCtxSynchronize();  // no copy or generator may still write the buffers when they are freed
      weightBuffers_.clear();
      weightAddr_.clear();
      throw;
    }
  }

  void fillWeight(WeightSource &ws, const h3::TensorSpec &spec, CUdeviceptr dst, size_t bytes,
                  const hc::LoadedKernel *synth, uint64_t seed) {
    if (synth) {
      void *ptr = reinterpret_cast<void *>(dst);
      long long n = spec.numel();
      uint64_t key = synth::tensorKey(seed, spec.name.data(), spec.name.size());
      long long keyBits;
      std::memcpy(&keyBits, &key, 8);
      double scale = h3::kSynthWeightStd * H3C_SYNTH_UNIT_SCALE;
      int bf16 = spec.dtype == DType::BF16 ? 1 : 0;
      int init = spec.init == h3::TensorSpec::Init::Ones ? 1 : spec.init == h3::TensorSpec::Init::Zeros ? 2 : 0;
      void *params[] = {&ptr, &n, &keyBits, &scale, &bf16, &init};
      unsigned blocks = unsigned(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 65536)));
      hc::check(hc::driver().cuLaunchKernel(synth->fn, blocks, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr),
                "launching the synthetic generator for " + spec.name);
      return;
    }
    Tensor t = ws.load(spec.name);
    if (t.bytes.size() != bytes || t.dtype != spec.dtype)
      fail("weight " + spec.name, "loaded {} bytes of {}, expected {} bytes of {}", t.bytes.size(),
           dtypeName(t.dtype), bytes, dtypeName(spec.dtype));
    hc::check(hc::driver().cuMemcpyHtoD(dst, t.bytes.data(), bytes), "upload weight " + spec.name);
  }

  CUdeviceptr weightAt(const std::string &tensor) const {
    auto it = weightAddr_.find(tensor);
    if (it == weightAddr_.end()) fail("weight " + tensor, "is in no weight buffer of the plan");
    return it->second;
  }

  void runOp(const plan::Op &op) {
    const CanonicalRequest &q = *req_;
    const h3::Config &c = plan_->config;
    switch (op.kind) {
    case plan::OpKind::RopeTable: {
      // The table depends on the positions only: the steps of a sampling loop reuse it, on the host and on the
      // device (kept per executor): a later forward with the same positions and batch binds the two values to the
      // device copy, with no upload (2 x 3.2 MB at S = 8,349, from pageable memory, at the head of the stream).
      const size_t R = size_t(6 * c.rope_freq_dim);
      if (ropePositions_ != q.positions || ropeCos_.size() != size_t(q.S) * R) {
        ropeTable(c, q.positions.data(), q.S, ropeCos_, ropeSin_, kRopeThreads);
        ropePositions_ = q.positions;
        ropeDeviceValid_ = false;
      }
      const std::string &cosName = op.out.at(0), &sinName = op.out.at(1);
      const size_t cosBytes = values_.at(cosName).bytes, sinBytes = values_.at(sinName).bytes;
      const size_t bytes = alignUp(cosBytes) + std::max<size_t>(sinBytes, 1);
      const bool fresh = !ropeDeviceValid_ || ropeDeviceB_ != q.B || !ropeDevice_ || ropeDevice_->bytes() != bytes;
      if (fresh && (!ropeDevice_ || ropeDevice_->bytes() != bytes)) {
        ropeDevice_.reset();
        ropeDevice_ = std::make_unique<hc::DeviceBuffer>(bytes);
      }
      values_.at(cosName).ptr = ropeDevice_->get();
      values_.at(sinName).ptr = ropeDevice_->get() + alignUp(cosBytes);
      if (fresh) {
        ropeDeviceValid_ = false;
        uploadRepeated(cosName, ropeCos_);
        uploadRepeated(sinName, ropeSin_);
        ropeDeviceB_ = q.B;
        ropeDevicePending_ = true;  // valid once this forward has synchronized its stream
      }
      return;
    }
    case plan::OpKind::TimestepSinusoid:
      uploadRepeated(op.out.at(0), timestepSinusoid(c, q.timestep));
      return;
    case plan::OpKind::Pack: {
      // The per-row metadata outputs (plan::hostOutputs): positions (F32), tags, ts_index (I64), canonical order.
      for (size_t k : plan::hostOutputs(op.kind)) {
        HostValue h;
        if (k == 1) h.f = q.positions;
        else h.i = k == 2 ? q.tags : q.tsIndex;
        upload(op.out.at(k), h);
      }
      break;
    }
    default: break;
    }
    auto kit = kernels_.find(op.index);
    if (kit == kernels_.end())
      fail(op.where, "op '{}' has neither a kernel nor a host implementation", plan::opKindName(op.kind));
    launchKernel(op, *kit->second);
  }

  // The op's kernel on its operands' device addresses.
  void launchKernel(const plan::Op &op, const hc::LoadedKernel &k) {
    runner_->launch(k, extents_, [&](plan::OperandRole role, int64_t i) -> CUdeviceptr {
      switch (role) {
      case plan::OperandRole::In: return values_.at(op.in.at(size_t(i))).ptr;
      case plan::OperandRole::Out: return values_.at(op.out.at(size_t(i))).ptr;
      case plan::OperandRole::Weight: return weightAt(op.weights.at(size_t(i)));
      case plan::OperandRole::Bias: return weightAt(op.biases.at(size_t(i)));
      }
      return 0;
    }, stream_);
  }

  // The op on the vendor library (native_ops.h), its operands where the row kernel would find them.
  void runNative(const plan::Op &op) {
    if (!native_) native_ = std::make_unique<hc::NativeOps>(*runner_);
    hc::NativeCall c;
    c.op = &op;
    c.batch = req_->B;
    c.stream = stream_;
    for (const auto *names : {&op.in, &op.out})
      for (const auto &n : *names) {
        const plan::Value &v = plan_->value(n);
        const DevValue &dv = values_.at(n);
        (names == &op.in ? c.in : c.out).push_back({dv.ptr, v.dtype, dv.rows, v.cols});
      }
    for (const auto *names : {&op.weights, &op.biases})
      for (const auto &n : *names) {
        const plan::WeightTensor &t = plan_->weightTensor(n);
        const std::vector<int64_t> shape = t.localShape();
        (names == &op.weights ? c.weights : c.biases)
            .push_back({weightAt(n), t.dtype, shape.empty() ? 1 : shape[0], shape.size() > 1 ? shape[1] : 1});
      }
    native_->run(c);
  }

  // A device value as a host value (BF16 widened to float exactly; the CPU ops read it as they read their own).
  HostValue downloadValue(const std::string &name) {
    const plan::Value &v = plan_->value(name);
    const DevValue &dv = values_.at(name);
    HostValue h;
    h.dtype = v.dtype;
    h.batch = v.batch ? req_->B : 1;
    h.rows = extents_.rows(v.rows);
    h.cols = v.cols;
    const size_t n = size_t(h.numel());
    if (n * dtypeSize(v.dtype) != dv.bytes) fail("value " + name, "device size {} B, expected {} elements", dv.bytes, n);
    if (n == 0) return h;
    const auto &d = hc::driver();
    if (v.dtype == DType::I64) {
      h.i.resize(n);
      hc::check(d.cuMemcpyDtoH(h.i.data(), dv.ptr, n * 8), "download " + name);
    } else if (v.dtype == DType::F32) {
      h.f.resize(n);
      hc::check(d.cuMemcpyDtoH(h.f.data(), dv.ptr, n * 4), "download " + name);
    } else if (v.dtype == DType::BF16) {
      std::vector<uint16_t> b(n);
      hc::check(d.cuMemcpyDtoH(b.data(), dv.ptr, n * 2), "download " + name);
      h.f.resize(n);
      for (size_t i = 0; i < n; ++i) h.f[i] = bf16ToFloat(b[i]);
    } else {
      fail("value " + name, "no host form for {}", dtypeName(v.dtype));
    }
    return h;
  }

  Tensor download(const std::string &name, std::vector<int64_t> shape) {
    const plan::Value &v = plan_->value(name);
    const DevValue &d = values_.at(name);
    if (v.dtype != DType::F32) fail("value " + name, "output must be F32");
    Tensor t;
    t.dtype = DType::F32;
    t.shape = std::move(shape);
    int64_t n = 1;
    for (auto s : t.shape) n *= s;
    if (size_t(n) * 4 > d.bytes) fail("value " + name, "output shape larger than its value");
    t.bytes.resize(size_t(n) * 4);
    if (n) hc::check(hc::driver().cuMemcpyDtoH(t.bytes.data(), d.ptr, t.bytes.size()), "download " + name);
    return t;
  }

  std::unique_ptr<hc::KernelRunner> runner_;
  // Made at the first native op (it opens cuBLASLt); declared after runner_, so destroyed before it.
  std::unique_ptr<hc::NativeOps> native_;
  std::unique_ptr<hc::DeviceBuffer> arena_;
  // allocateArena's last layout: what it was made for (plan address and sha, extents, B, with the backward or not,
  // the arena's base) and what it made (the values' regions before any binding, the slots' addresses, the weight
  // gradients' slots, the bytes).
  struct ArenaLayout {
    const plan::Plan *plan = nullptr;
    std::string planSha;
    bool withBackward = false;
    plan::Extents ext;
    CUdeviceptr base = 0;
    size_t total = 0;
    std::map<int64_t, size_t> gradSlots;
    std::map<std::string, DevValue> values;
    std::map<int64_t, CUdeviceptr> slotAt;
  } arenaLayout_;
  std::map<int64_t, CUdeviceptr> slotAt_;  // the backward's slots (prepareBackward)
  // The slots that hold weight gradients only (allocateArena: not in the arena), with their bytes; the region that
  // holds those the caller's memory does not (placeWeightGrads), its bytes in use and the bytes the caller's hold.
  std::map<int64_t, size_t> gradSlots_;
  std::unique_ptr<hc::DeviceBuffer> gradRegion_;
  size_t gradRegionBytes_ = 0, boundGradBytes_ = 0;
  // forwardKept's ticket while its values are in the arena (0: none; anything else run on this executor clears it)
  // and the plan it ran.
  uint64_t keptTicket_ = 0, lastTicket_ = 0;
  const plan::Plan *keptPlan_ = nullptr;
  // scheduleOf's cache: the schedule, and the plan (address and sha) it was made for.
  std::vector<plan::ScheduleStep> schedule_;
  const plan::Plan *scheduleFor_ = nullptr;
  std::string scheduleSha_;
  std::unique_ptr<hc::NonFiniteScan> outputScan_;  // the output scan's slots (the first forward with a DeviceIO)
  size_t arenaBytes_ = 0;
  const CanonicalRequest *req_ = nullptr;
  const plan::Plan *plan_ = nullptr;
  plan::Extents extents_;
  std::map<std::string, DevValue> values_;
  std::map<size_t, const hc::LoadedKernel *> kernels_;
  const plan::Plan *kernelsFor_ = nullptr;  // the plan kernels_ was made for (with its sha: an address may be reused)
  std::string kernelsSha_;
  std::map<std::string, hc::DeviceBuffer> weightBuffers_;
  std::map<std::string, CUdeviceptr> weightAddr_;
  std::string weightsKey_;          // plan sha + weight description of what weightBuffers_ hold ("" = nothing)
  CUstream stream_ = nullptr;       // this forward's stream (the caller's with a DeviceIO)
  std::set<std::string> bound_;     // values bound to the caller's memory in this forward
  // The last rope table and the positions it was made from (cos/sin in double per angle: ~10 ms at S = 8,349 on one
  // thread, so it is threaded and reused across the steps of a sampling loop).
  static constexpr int kRopeThreads = 8;
  std::vector<float> ropePositions_, ropeCos_, ropeSin_;
  // The device copy of that table (cos at 0, sin after it, each repeated per batch item): valid for ropeDeviceB_
  // items once the forward that uploaded it has synchronized its stream (ropeDevicePending_ until then).
  std::unique_ptr<hc::DeviceBuffer> ropeDevice_;
  int64_t ropeDeviceB_ = 0;
  bool ropeDeviceValid_ = false, ropeDevicePending_ = false;
};

} // namespace

std::unique_ptr<Executor> makeGpuExecutor() { return std::make_unique<GpuExecutor>(); }

} // namespace h3c::rt
