// The GPU executor (docs/contract.md sections 3-6): walks the plan's ops in launch order on one device through the
// driver API. Activations live in one planned arena (one cuMemAlloc, one region per plan slot, sized by the largest
// value the slot holds at this request's row counts); weights are uploaded once per run from the WeightSource, or
// generated on the device by the synthetic generator (bit-identical to the host's); host-only ops (rope_table,
// timestep_sinusoid, pack metadata) use the same host tables as the CPU executor and are uploaded. Every kernel is
// the emitter's fixed-order kernel for the op, so every node is recorded with binding `row`.
#include "h3c/runtime/executor.h"
#include "h3c/runtime/host_ops.h"

#include "h3c/kernels/emit.h"
#include "h3c/models/checkpoint.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"
#include "h3c/support/synth_rng.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace h3c::rt {
namespace {

namespace hc = h3c::runtime::cuda;
namespace hk = h3c::kernels;
using nlohmann::json;

constexpr size_t kAlign = 256;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct DevValue {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  int64_t rows = 0;  // including the batch axis
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

  Outputs run(const Plan &plan, WeightSource &weights, const CanonicalRequest &req, const RunOptions &opt,
              LedgerBuilder &ledger) override {
    if (plan.tp != 1 || opt.tp != 1)
      fail("--tp", "the GPU executor runs tp = 1 plans (got plan tp {}, --tp {})", plan.tp, opt.tp);
    const auto &dev = hc::device();
    if (!runner_) runner_ = std::make_unique<hc::KernelRunner>();
    req_ = &req;
    plan_ = &plan;
    values_.clear();
    weights_.clear();

    // H3C_GPU_PROFILE=1: per-op CUDA events, a per-kind table and the forward time on stderr (timing only; the
    // results are the same bits).
    const bool profile = std::getenv("H3C_GPU_PROFILE") != nullptr;
    auto t0 = std::chrono::steady_clock::now();
    prepareKernels(plan);
    auto t1 = std::chrono::steady_clock::now();
    allocateArena(plan, req);
    uploadInputs(plan, req);
    uploadWeights(plan, weights);
    hc::check(hc::driver().cuCtxSynchronize(), "uploading weights");
    auto t2 = std::chrono::steady_clock::now();

    const auto &d = hc::driver();
    std::vector<CUevent> ev;
    if (profile) {
      ev.resize(plan.ops.size() + 1);
      for (auto &e : ev) hc::check(d.cuEventCreate(&e, 0), "cuEventCreate");
      hc::check(d.cuEventRecord(ev[0], nullptr), "cuEventRecord");
    }
    for (const PlanOp &op : plan.ops) {
      runOp(op);
      if (profile) hc::check(d.cuEventRecord(ev[op.index + 1], nullptr), "cuEventRecord");
      std::map<std::string, std::vector<int64_t>> shapes;
      for (const auto *names : {&op.in, &op.out})
        for (const auto &n : *names) shapes[n] = shapeOf(plan.value(n));
      ledger.recordOp(op, Binding::Row, shapes);
    }
    hc::check(d.cuCtxSynchronize(), "running the plan");
    auto t3 = std::chrono::steady_clock::now();
    if (profile) {
      std::map<std::string, std::pair<double, int>> perKind;
      float total = 0;
      hc::check(d.cuEventElapsedTime(&total, ev.front(), ev.back()), "cuEventElapsedTime");
      for (const PlanOp &op : plan.ops) {
        float ms = 0;
        hc::check(d.cuEventElapsedTime(&ms, ev[op.index], ev[op.index + 1]), "cuEventElapsedTime");
        std::string key = op.op;
        if (op.hasAttr("epilogue") && op.attrs.at("epilogue").is_string() && op.attrs.at("epilogue") != "none")
          key += "+" + op.attrs.at("epilogue").get<std::string>();
        perKind[key].first += ms;
        perKind[key].second += 1;
      }
      for (auto &e : ev) d.cuEventDestroy(e);
      size_t freeB = 0, totalB = 0;
      d.cuMemGetInfo(&freeB, &totalB);
      std::fprintf(stderr, "h3c gpu: %s, B=%lld S=%lld: forward %.3f ms (device events, %zu ops); JIT %.2f s, arena+weights "
                   "%.2f s; arena %.3f GiB, weights %.2f GiB, device memory in use %.2f GiB of %.2f\n",
                   hc::device().name.c_str(), (long long)req.B, (long long)req.S, total, plan.ops.size(),
                   std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
                   arenaBytes_ / 1073741824.0, weightBytes() / 1073741824.0, (totalB - freeB) / 1073741824.0,
                   totalB / 1073741824.0);
      for (const auto &[k, v] : perKind)
        std::fprintf(stderr, "h3c gpu:   %-28s %4d ops %10.3f ms\n", k.c_str(), v.second, v.first);
    }
    (void)t3;
    (void)dev;

    Outputs o;
    o.sample = download(plan.outputs.at("sample"), {req.B, req.Nv, (int64_t)plan.config.videoPatchDim()});
    o.audio_sample = download(plan.outputs.at("audio_sample"), {req.B, req.Na, (int64_t)plan.config.audio_in_channels});
    return o;
  }

private:
  double weightBytes() const {
    double b = 0;
    for (const auto &kv : weights_) b += double(kv.second.bytes());
    return b;
  }
  std::vector<int64_t> shapeOf(const PlanValue &v) const {
    int64_t r = req_->rows(v.rows);
    if (v.batch) return {req_->B, r, v.cols};
    return {r, v.cols};
  }
  int64_t totalRows(const PlanValue &v) const { return req_->rows(v.rows) * (v.batch ? req_->B : 1); }
  size_t valueBytes(const PlanValue &v) const {
    return size_t(totalRows(v)) * size_t(v.cols) * dtypeSize(v.dtype) * size_t(std::max<int64_t>(1, v.ranks));
  }

  // Every op's kernel: re-emitted by this build's emitter, checked against the plan's kernel file, compiled.
  void prepareKernels(const Plan &plan) {
    kernels_.clear();
    for (const PlanOp &op : plan.ops) {
      const json &j = plan.json.at("ops").at(op.index);
      std::optional<hk::KernelSource> k = hk::emitKernel(j, runner_->arch());
      if (!k) {
        if (op.kernel) fail(op.where, "names kernel {} but this build runs the op on the host", *op.kernel);
        continue;
      }
      if (op.kernel) {
        if (*op.kernel != k->id)
          fail(op.where + "/kernel", "plan kernel {} differs from this build's emitter ({}): recompile the plan",
               *op.kernel, k->id);
        auto it = plan.kernels.find(*op.kernel);
        if (it != plan.kernels.end() && !it->second.file.empty()) {
          auto path = plan.dir / it->second.file;
          std::error_code ec;
          if (std::filesystem::exists(path, ec) && readFile(path) != k->source)
            fail(path.string(), "kernel source differs from this build's emitter: recompile the plan");
        }
      }
      kernels_[op.index] = &runner_->load(*k);
    }
  }

  void allocateArena(const Plan &plan, const CanonicalRequest &req) {
    std::map<int64_t, size_t> slotBytes;
    for (const auto &s : plan.slots) {
      size_t b = size_t(s.fixedBytes);
      for (const auto &[dom, bpr] : s.bytesPerRow) b += size_t(bpr) * size_t(req.rows(dom)) * size_t(req.B);
      slotBytes[s.id] = b;
    }
    std::vector<const PlanValue *> unslotted;
    for (const auto &[name, v] : plan.values) {
      if (v.ranks > 1) fail("plan value " + name, "rank partials (tp > 1) are not supported on the GPU");
      if (v.slot < 0) {
        unslotted.push_back(&v);
        continue;
      }
      slotBytes[v.slot] = std::max(slotBytes[v.slot], valueBytes(v));
    }
    size_t total = 0;
    std::map<int64_t, size_t> slotOffset;
    for (const auto &[id, b] : slotBytes) {
      slotOffset[id] = total;
      total += alignUp(std::max<size_t>(b, 1));
    }
    std::map<std::string, size_t> ownOffset;
    for (const PlanValue *v : unslotted) {
      ownOffset[v->name] = total;
      total += alignUp(std::max<size_t>(valueBytes(*v), 1));
    }
    // Scratch for the host-computed sinusoid a fused time_embed reads.
    scratchOffset_ = total;
    total += alignUp(size_t(std::max<int64_t>(1, req.T)) * size_t(plan.config.freq_dim) * 4);
    if (!arena_ || arena_->bytes() < total) {
      arena_.reset();
      arena_ = std::make_unique<hc::DeviceBuffer>(total);
    }
    arenaBytes_ = total;
    for (const auto &[name, v] : plan.values) {
      DevValue d;
      d.bytes = valueBytes(v);
      d.rows = totalRows(v);
      d.ptr = arena_->get() + (v.slot >= 0 ? slotOffset.at(v.slot) : ownOffset.at(name));
      values_[name] = d;
    }
  }

  void uploadFloats(const std::string &name, const std::vector<float> &f) {
    const PlanValue &v = plan_->value(name);
    const DevValue &d = values_.at(name);
    if (int64_t(f.size()) != d.rows * v.cols)
      fail("value " + name, "has {} elements, expected {}", f.size(), d.rows * v.cols);
    if (v.dtype == DType::F32) {
      hc::check(hc::driver().cuMemcpyHtoD(d.ptr, f.data(), f.size() * 4), "upload " + name);
    } else if (v.dtype == DType::BF16) {
      std::vector<uint16_t> b(f.size());
      for (size_t i = 0; i < f.size(); ++i) b[i] = floatToBf16(f[i]);
      hc::check(hc::driver().cuMemcpyHtoD(d.ptr, b.data(), b.size() * 2), "upload " + name);
    } else {
      fail("value " + name, "expected a float dtype, got {}", dtypeName(v.dtype));
    }
  }
  void uploadInts(const std::string &name, const std::vector<int64_t> &i) {
    const PlanValue &v = plan_->value(name);
    const DevValue &d = values_.at(name);
    if (v.dtype != DType::I64) fail("value " + name, "expected I64, got {}", dtypeName(v.dtype));
    if (int64_t(i.size()) != d.rows * v.cols)
      fail("value " + name, "has {} elements, expected {}", i.size(), d.rows * v.cols);
    hc::check(hc::driver().cuMemcpyHtoD(d.ptr, i.data(), i.size() * 8), "upload " + name);
  }

  void uploadInputs(const Plan &plan, const CanonicalRequest &req) {
    for (const auto &name : plan.inputs) {
      if (!values_.count(name)) continue;
      if (name == "@hidden_states") uploadFloats(name, req.video);
      else if (name == "@audio_hidden_states") uploadFloats(name, req.audio);
      else if (name == "@encoder_hidden_states") uploadFloats(name, req.text);
      else if (name == "@timestep") uploadFloats(name, req.timestep);
      // The index/metadata inputs are consumed on the host (rope_table, pack) in canonical order.
    }
  }

  // Weights: one device buffer per op weight list; qkv's [Wq; Wk; Wv] concatenated (the kernel reads one matrix).
  void uploadWeights(const Plan &plan, WeightSource &ws) {
    json desc = ws.describe();
    bool synthetic = desc.value("kind", "") == "synthetic";
    uint64_t seed = synthetic ? desc.at("seed").get<uint64_t>() : 0;
    const hc::LoadedKernel *synth = synthetic ? &runner_->load(hk::synthFillKernel()) : nullptr;
    for (const PlanOp &op : plan.ops) {
      auto &list = opWeights_[op.index];
      list.clear();
      for (const char *role : {"weight", "bias"}) {
        const auto &names = op.weightList(role);
        if (names.empty()) continue;
        bool concat = op.op == "qkv_linear" && std::string(role) == "weight";
        if (concat) {
          size_t total = 0;
          for (const auto &n : names) total += size_t(ws.spec(n).numel()) * dtypeSize(ws.spec(n).dtype);
          auto &buf = weights_[op.where + "/qkv"];
          buf = hc::DeviceBuffer(total);
          size_t off = 0;
          for (const auto &n : names) {
            size_t b = size_t(ws.spec(n).numel()) * dtypeSize(ws.spec(n).dtype);
            fillWeight(ws, n, buf.get() + off, b, synth, seed);
            off += b;
          }
          list.push_back(buf.get());
        } else {
          for (const auto &n : names) {
            auto it = weights_.find(n);
            if (it == weights_.end()) {
              size_t b = size_t(ws.spec(n).numel()) * dtypeSize(ws.spec(n).dtype);
              hc::DeviceBuffer buf(b);
              fillWeight(ws, n, buf.get(), b, synth, seed);
              it = weights_.emplace(n, std::move(buf)).first;
            }
            list.push_back(it->second.get());
          }
        }
      }
      if (list.size() > 4) fail(op.where + "/weights", "at most 4 weight tensors per kernel, got {}", list.size());
    }
  }

  void fillWeight(WeightSource &ws, const std::string &name, CUdeviceptr dst, size_t bytes,
                  const hc::LoadedKernel *synth, uint64_t seed) {
    const h3::TensorSpec &spec = ws.spec(name);
    if (spec.dtype != DType::F32 && spec.dtype != DType::BF16)
      fail("weight " + name, "dtype {} is not F32/BF16", dtypeName(spec.dtype));
    if (synth) {
      hk::KernelArgs a;
      a.out[0] = reinterpret_cast<void *>(dst);
      a.meta[0] = spec.numel();
      uint64_t key = synth::tensorKey(seed, spec.name.data(), spec.name.size());
      std::memcpy(&a.meta[1], &key, 8);
      double scale = h3::kSynthWeightStd * H3C_SYNTH_UNIT_SCALE;
      std::memcpy(&a.meta[2], &scale, 8);
      a.meta[3] = spec.dtype == DType::BF16 ? 1 : 0;
      a.meta[4] = spec.init == h3::TensorSpec::Init::Ones ? 1 : spec.init == h3::TensorSpec::Init::Zeros ? 2 : 0;
      int64_t blocks = std::min<int64_t>((spec.numel() + 255) / 256, 65536);
      runner_->launchBlocks(*synth, a, (unsigned)std::max<int64_t>(blocks, 1));
      return;
    }
    Tensor t = ws.load(name);
    if (t.bytes.size() != bytes || t.dtype != spec.dtype)
      fail("weight " + name, "loaded {} bytes of {}, expected {} bytes of {}", t.bytes.size(), dtypeName(t.dtype),
           bytes, dtypeName(spec.dtype));
    hc::check(hc::driver().cuMemcpyHtoD(dst, t.bytes.data(), bytes), "upload weight " + name);
  }

  // The per-row metadata rows (meta[3]): the metadata value's own row count (S when it has no batch axis).
  int64_t metaRows(const PlanOp &op) const {
    for (const auto &n : op.in) {
      if ((n.find(":ts_index") != std::string::npos || n.find(":cos") != std::string::npos))
        return values_.at(n).rows;
    }
    return req_->S;
  }

  void runOp(const PlanOp &op) {
    const CanonicalRequest &q = *req_;
    const h3::Config &c = plan_->config;
    if (op.op == "rope_table") {
      std::vector<float> cs, sn;
      ropeTable(c, q.positions.data(), q.S, cs, sn);
      uploadRepeated(op.out.at(0), cs);
      uploadRepeated(op.out.at(1), sn);
      return;
    }
    if (op.op == "timestep_sinusoid") {
      uploadFloats(op.out.at(0), timestepSinusoid(c, q.timestep));
      return;
    }
    if (op.op == "pack") {
      for (size_t k = 1; k < op.out.size(); ++k) {
        const std::string &n = op.out[k];
        if (n.find(":positions") != std::string::npos) uploadInts(n, q.positions);
        else if (n.find(":tags") != std::string::npos) uploadInts(n, q.tags);
        else if (n.find(":ts_index") != std::string::npos) uploadInts(n, q.tsIndex);
        else fail(op.where + "/out", "unknown pack output '{}'", n);
      }
    }
    auto kit = kernels_.find(op.index);
    if (kit == kernels_.end()) fail(op.where, "op '{}' has neither a kernel nor a host implementation", op.op);
    const hc::LoadedKernel &k = *kit->second;

    hk::KernelArgs a;
    if (op.in.size() > 8 && op.op != "pack") fail(op.where + "/in", "at most 8 inputs per kernel");
    for (size_t i = 0; i < op.in.size() && i < 8; ++i)
      a.in[i] = reinterpret_cast<const void *>(values_.at(op.in[i]).ptr);
    if (op.out.size() > 4) fail(op.where + "/out", "at most 4 outputs per kernel");
    for (size_t i = 0; i < op.out.size(); ++i) a.out[i] = reinterpret_cast<void *>(values_.at(op.out[i]).ptr);
    const auto &wl = opWeights_.at(op.index);
    for (size_t i = 0; i < wl.size(); ++i) a.w[i] = reinterpret_cast<const void *>(wl[i]);

    if (op.op == "time_embed") {
      // The kernel reads the host-computed sinusoid (time_proj) rather than the raw timesteps.
      std::vector<float> s = timestepSinusoid(c, q.timestep);
      CUdeviceptr p = arena_->get() + scratchOffset_;
      hc::check(hc::driver().cuMemcpyHtoD(p, s.data(), s.size() * 4), "upload time_proj");
      a.in[0] = reinterpret_cast<const void *>(p);
    }

    const std::string &first = k.launch.rowsOf == "out0" ? op.out.at(0) : op.in.empty() ? op.out.at(0) : op.in.at(0);
    const PlanValue &fv = plan_->value(first);
    int64_t rows = totalRows(fv);
    if (k.launch.rowsOf == "unpack") rows = q.B * (q.Nv + q.Na);
    if (k.launch.rowsOf == "T") rows = q.T;
    a.meta[hk::kMetaRows] = rows;
    a.meta[hk::kMetaBatch] = q.B;
    a.meta[hk::kMetaItemRows] = q.rows(fv.rows);
    a.meta[hk::kMetaMetaRows] = metaRows(op);
    a.meta[hk::kMetaNt] = q.Nt;
    a.meta[hk::kMetaNv] = q.Nv;
    a.meta[hk::kMetaNa] = q.Na;
    a.meta[hk::kMetaT] = q.T;
    runner_->launch(k, a);
  }

  // A host table uploaded to a value that may carry a batch axis (then repeated per item).
  void uploadRepeated(const std::string &name, const std::vector<float> &f) {
    const PlanValue &v = plan_->value(name);
    if (!v.batch || req_->B == 1) return uploadFloats(name, f);
    std::vector<float> all;
    all.reserve(f.size() * size_t(req_->B));
    for (int64_t b = 0; b < req_->B; ++b) all.insert(all.end(), f.begin(), f.end());
    uploadFloats(name, all);
  }

  Tensor download(const std::string &name, std::vector<int64_t> shape) {
    const PlanValue &v = plan_->value(name);
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
  std::unique_ptr<hc::DeviceBuffer> arena_;
  size_t arenaBytes_ = 0, scratchOffset_ = 0;
  const CanonicalRequest *req_ = nullptr;
  const Plan *plan_ = nullptr;
  std::map<std::string, DevValue> values_;
  std::map<size_t, const hc::LoadedKernel *> kernels_;
  std::map<std::string, hc::DeviceBuffer> weights_;
  std::map<size_t, std::vector<CUdeviceptr>> opWeights_;
};

} // namespace

std::unique_ptr<Executor> makeGpuExecutor() { return std::make_unique<GpuExecutor>(); }

} // namespace h3c::rt
