// h3c._h3c: the extension module under the Python package (python/h3c/__init__.py holds the diffusers-shaped API).
// One translation unit on purpose: pybind11's headers are heavy, and the module is a thin layer over the runtime:
//   Engine   the resident engine (runtime/engine.h) built from a plan folder and a checkpoint or synthetic seed;
//            forward() takes the ten request tensors as DLPack tensors, host or CUDA (copied into the engine's kept
//            request, as `h3c run` reads its file; CUDA ones by one device-to-host copy each on the caller's
//            stream) and, on the GPU, the activations and output buffers as DLPack CUDA tensors bound in place
//            (DeviceIO: no staging copy) with the caller's stream; the strict rule's verdict (nodes run `row`, weights
//            and outputs finite: the engine records CUDA outputs from its scan on the device) is h3c.Error;
//            backward() runs the plan's backward (a plan compiled with --backward) on the CPU reference;
//   Array    a host result (outputs, gradients, sampler values) exported through DLPack without a copy;
//   the sampler (trajectory/sampler.h) and trajectory verify / drift (trajectory/trajectory.h).
// Every h3c::Error becomes h3c.Error with the CLI's message ("<where>: <what>"); nothing here aborts the process.
#include "h3c/models/checkpoint.h"
#include "h3c/models/config.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/backward.h"
#include "h3c/runtime/engine.h"
#include "h3c/runtime/weight_identity.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/version.h"
#include "h3c/trajectory/sampler.h"
#include "h3c/trajectory/trajectory.h"
#ifdef H3C_HAVE_CUDA
#include "h3c/runtime/cuda/driver.h"
#endif

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <unistd.h>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

namespace py = pybind11;
using namespace h3c;
using namespace h3c::rt;

namespace {

// ---- DLPack in ------------------------------------------------------------------------------------------------------

// A consumed DLPack capsule: the producer's tensor stays alive until this is destroyed (protocol: rename the capsule
// to "used_dltensor", call the deleter when done).
class Imported {
public:
  Imported(const py::handle &obj, const std::string &name) : name_(name) {
    if (!py::hasattr(obj, "__dlpack__"))
      fail(name, "expected a tensor with __dlpack__ (a torch tensor or a NumPy array), got {}",
           std::string(py::str(py::type::of(obj).attr("__name__"))));
    py::object cap = obj.attr("__dlpack__")();
    if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
      fail(name, "__dlpack__ did not return a DLPack capsule");
    m_ = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
  }
  ~Imported() {
    if (m_ && m_->deleter) m_->deleter(m_);
  }
  Imported(const Imported &) = delete;
  Imported &operator=(const Imported &) = delete;

  const DLTensor &t() const { return m_->dl_tensor; }
  std::vector<int64_t> shape() const { return {t().shape, t().shape + t().ndim}; }
  DType dtype() const {
    const DLDataType d = t().dtype;
    if (d.lanes != 1) fail(name_, "vector dtypes (lanes {}) are not supported", d.lanes);
    if (d.code == kDLFloat && d.bits == 32) return DType::F32;
    if (d.code == kDLFloat && d.bits == 64) return DType::F64;
    if (d.code == kDLBfloat && d.bits == 16) return DType::BF16;
    if (d.code == kDLFloat && d.bits == 16) return DType::F16;
    if (d.code == kDLInt && d.bits == 64) return DType::I64;
    if (d.code == kDLInt && d.bits == 32) return DType::I32;
    fail(name_, "unsupported dtype (DLPack code {}, {} bits)", int(d.code), int(d.bits));
  }
  bool contiguous() const {
    if (!t().strides) return true;
    int64_t expect = 1;
    for (int i = t().ndim - 1; i >= 0; --i) {
      if (t().shape[i] != 1 && t().strides[i] != expect) return false;
      expect *= t().shape[i];
    }
    return true;
  }
  const char *data() const { return static_cast<const char *>(t().data) + t().byte_offset; }

  bool onDevice() const { return t().device.device_type == kDLCUDA; }

  // The tensor's bytes into `out` in row-major order, reusing out's buffer (no allocation once it is large enough:
  // the Python package reads every request into the same tensors). A host tensor is copied (strided views gathered
  // element by element); a CUDA tensor (contiguous, on h3c's device) is copied on `stream`, after the caller's work
  // queued there, and is complete once that stream is synchronized.
  void readInto(Tensor &out, uint64_t stream) const {
    const DType dt = dtype();
    const int64_t numel = [&] {
      int64_t n = 1;
      for (int d = 0; d < t().ndim; ++d) n *= t().shape[d];
      return n;
    }();
    const size_t es = dtypeSize(dt);
    if (onDevice()) {
#ifdef H3C_HAVE_CUDA
      checkDevice();
      if (!contiguous()) fail(name_, "must be contiguous on the device");
      out.dtype = dt;
      out.shape = shape();
      out.bytes.resize(size_t(numel) * es);
      if (!out.bytes.empty())
        runtime::cuda::check(runtime::cuda::driver().cuMemcpyDtoHAsync(out.bytes.data(), CUdeviceptr(data()),
                                                                       out.bytes.size(), CUstream(stream)),
                             "reading " + name_ + " back to the host");
      return;
#else
      (void)stream;
      fail(name_, "is a CUDA tensor, and this h3c was built without CUDA");
#endif
    }
    if (t().device.device_type != kDLCPU && t().device.device_type != kDLCUDAHost)
      fail(name_, "expected a host tensor here (DLPack device type {})", int(t().device.device_type));
    out.dtype = dt;
    out.shape = shape();
    out.bytes.resize(size_t(numel) * es);
    if (out.bytes.empty()) return;
    if (contiguous()) {
      std::memcpy(out.bytes.data(), data(), out.bytes.size());
      return;
    }
    std::vector<int64_t> idx(size_t(t().ndim), 0);
    for (int64_t k = 0; k < numel; ++k) {
      int64_t off = 0;
      for (int d = 0; d < t().ndim; ++d) off += idx[size_t(d)] * t().strides[d];
      std::memcpy(out.bytes.data() + size_t(k) * es, data() + off * int64_t(es), es);
      for (int d = t().ndim - 1; d >= 0 && ++idx[size_t(d)] == t().shape[d]; --d) idx[size_t(d)] = 0;
    }
  }

  // A host tensor's bytes in a tensor of their own.
  Tensor toHost() const {
    if (onDevice()) fail(name_, "expected a host tensor here (DLPack device type {})", int(t().device.device_type));
    Tensor out;
    readInto(out, 0);
    return out;
  }

  // A CUDA tensor bound in place: contiguous, on the executor's device, `want` dtype and shape.
  uint64_t devicePointer(DType want, const std::vector<int64_t> &wantShape) const {
    if (t().device.device_type != kDLCUDA)
      fail(name_, "expected a CUDA tensor (DLPack device type {})", int(t().device.device_type));
#ifdef H3C_HAVE_CUDA
    checkDevice();
#endif
    if (dtype() != want) fail(name_, "is {} on the device, expected {}", dtypeName(dtype()), dtypeName(want));
    if (shape() != wantShape) fail(name_, "has shape {}, expected {}", nlohmann::json(shape()).dump(),
                                   nlohmann::json(wantShape).dump());
    if (!contiguous()) fail(name_, "must be contiguous on the device");
    return reinterpret_cast<uint64_t>(data());
  }

private:
#ifdef H3C_HAVE_CUDA
  void checkDevice() const {
    if (t().device.device_id != int(runtime::cuda::device().dev))
      fail(name_, "is on cuda:{}, h3c runs on cuda:{} (set H3C_CUDA_DEVICE)", t().device.device_id,
           int(runtime::cuda::device().dev));
  }
#endif
  std::string name_;
  DLManagedTensor *m_ = nullptr;
};

// ---- DLPack out -----------------------------------------------------------------------------------------------------

DLDataType dlType(DType d) {
  switch (d) {
  case DType::F32: return {kDLFloat, 32, 1};
  case DType::F64: return {kDLFloat, 64, 1};
  case DType::BF16: return {kDLBfloat, 16, 1};
  case DType::I64: return {kDLInt, 64, 1};
  default: fail("h3c", "no DLPack export for {}", dtypeName(d));
  }
}

// A host result. Each __dlpack__ hands out a view that shares the bytes (the consumer frees its view without the
// GIL: the deleter touches no Python object).
class Array {
public:
  explicit Array(Tensor t) : t_(std::make_shared<Tensor>(std::move(t))) {}
  static Array floats(std::vector<int64_t> shape, const std::vector<float> &v) {
    return Array(Tensor::fromFloats(DType::F32, std::move(shape), v.data()));
  }
  py::capsule dlpack() const {
    struct Ctx {
      std::shared_ptr<Tensor> t;
      std::vector<int64_t> shape;
      DLManagedTensor m{};
    };
    auto *c = new Ctx{t_, t_->shape, {}};
    c->m.dl_tensor.data = c->t->bytes.empty() ? nullptr : c->t->bytes.data();
    c->m.dl_tensor.device = {kDLCPU, 0};
    c->m.dl_tensor.ndim = int(c->shape.size());
    c->m.dl_tensor.dtype = dlType(c->t->dtype);
    c->m.dl_tensor.shape = c->shape.data();
    c->m.dl_tensor.strides = nullptr;
    c->m.dl_tensor.byte_offset = 0;
    c->m.manager_ctx = c;
    c->m.deleter = [](DLManagedTensor *m) { delete static_cast<Ctx *>(m->manager_ctx); };
    // Unconsumed capsules free their tensor themselves.
    return py::capsule(&c->m, "dltensor", [](PyObject *cap) {
      if (PyCapsule_IsValid(cap, "dltensor")) {
        auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"));
        m->deleter(m);
      }
    });
  }
  const Tensor &tensor() const { return *t_; }

private:
  std::shared_ptr<Tensor> t_;
};

std::vector<float> hostFloats(const py::handle &obj, const std::string &name) {
  Tensor t = Imported(obj, name).toHost();
  if (t.dtype != DType::F32) fail(name, "expected float32, got {}", dtypeName(t.dtype));
  return t.toFloats();
}

// ---- the engine -----------------------------------------------------------------------------------------------------

const char *const kActivations[] = {"hidden_states", "audio_hidden_states", "encoder_hidden_states"};

class PyEngine {
public:
  PyEngine(const std::string &planPath, std::optional<std::string> checkpoint, std::optional<int64_t> synthetic,
           const std::string &device, const std::string &mode, int threads, const std::vector<std::string> &binds,
           std::optional<std::string> config, bool hashNodes) {
    if (checkpoint.has_value() == synthetic.has_value())
      fail("h3c.Transformer", "give checkpoint=DIR or synthetic=SEED (exactly one)");
    if (synthetic && *synthetic < 0) fail("synthetic", "the seed must be >= 0, got {}", *synthetic);
    plan_ = plan::loadPlan(planPath);
    if (config && h3::configToJson(h3::loadConfig(*config)).dump() != h3::configToJson(plan_.config).dump())
      fail("--config", "'{}' differs from the config the plan was compiled for", *config);
    opt_.device = device;
    opt_.mode = parseMode(mode);
    opt_.tp = plan_.options.tp;
    opt_.sp = plan_.options.sp;
    opt_.threads = threads;
    opt_.sealLedger = false;  // transformer.ledger builds it on first read
    opt_.hashNodes = hashNodes;
    for (const auto &b : binds) opt_.binds.push_back(parseBindRule(b));
    if (device != "cpu" && device != "gpu") fail("device", "expected \"cuda\" or \"cpu\", got '{}'", device);
    weights_ = checkpoint ? makeCheckpointWeights(plan_.config, *checkpoint)
                          : makeSyntheticWeights(plan_.config, uint64_t(*synthetic));
    engine_ = std::make_unique<Engine>(plan_, *weights_, opt_);
  }

  // host: the ten request tensors, host or (device "gpu") CUDA DLPack tensors: read into the engine's request (the
  // validation and the ledger's request hash read it, exactly as `h3c run` reads its file). device: activations on
  // the GPU (bound in place); outs: the two output buffers on the GPU; stream: the caller's CUstream. Returns
  // (sample, audio_sample) as Arrays on the CPU, (None, None) on the GPU (written into outs).
  py::tuple forward(const py::dict &host, const py::dict &device, const py::object &outSample,
                    const py::object &outAudio, uint64_t stream) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    // The engine's lock: the staged request and the last ledger are the engine's.
    std::unique_lock<std::mutex> lock = lockEngine();
    if (opt_.device != "gpu") stream = 0;
    // Every request tensor into staged_, whose buffers are kept from forward to forward (no allocation, no page
    // faults once warm): host tensors by memcpy, CUDA tensors by one copy each on the caller's stream (no torch
    // .cpu() tensor in between), then one synchronization. The imports live (and are released) under the GIL.
    std::vector<std::unique_ptr<Imported>> held =  // the caller's tensors, alive through the forward
        importRequest(host, opt_.device == "gpu" ? nullptr : "this engine runs on the CPU");
    bool anyDevice = false;
    for (const auto &h : held) anyDevice |= h->onDevice();
    {
      py::gil_scoped_release release;
      for (size_t i = 0; i < held.size(); ++i)
        held[i]->readInto(staged_.tensors[requestTensorNames()[i]], stream);
#ifdef H3C_HAVE_CUDA
      if (anyDevice)
        runtime::cuda::check(runtime::cuda::driver().cuStreamSynchronize(CUstream(stream)),
                             "reading the request back to the host");
#endif
    }
    const auto t1 = Clock::now();
    const Request &req = staged_;
    std::optional<DeviceIO> io;
    if (opt_.device == "gpu" && (!device.empty() || !outSample.is_none())) {
      io.emplace();
      io->stream = stream;
      // The output shapes from the activations' own shapes; a request that lacks them is refused here with
      // canonicalize's message (the engine canonicalizes, checks and hashes the request as it runs).
      const Tensor &hs = req.tensors.at("hidden_states"), &ahs = req.tensors.at("audio_hidden_states");
      if (hs.shape.size() != 3 || ahs.shape.size() != 3) canonicalize(req, plan_.config, "--inputs");
      const int64_t B = hs.shape.at(0), Nv = hs.shape.at(1), Na = ahs.shape.at(1);
      for (const char *name : kActivations) {
        if (!device.contains(name)) continue;
        held.push_back(std::make_unique<Imported>(device[name], name));
        io->inputs[name] = held.back()->devicePointer(plan_.value(std::string("@") + name).dtype,
                                                      req.tensors.at(name).shape);
      }
      const int64_t C = plan_.config.videoPatchDim(), Ca = plan_.config.audio_in_channels;
      held.push_back(std::make_unique<Imported>(outSample, "sample"));
      io->sample = held.back()->devicePointer(DType::F32, {B, Nv, C});
      held.push_back(std::make_unique<Imported>(outAudio, "audio_sample"));
      io->audioSample = held.back()->devicePointer(DType::F32, {B, Na, Ca});
    }
    RunResult r;
    const auto t2 = Clock::now();
    {
      py::gil_scoped_release release;
      r = engine_->run(req, opt_, io ? &*io : nullptr);
    }
    const auto t3 = Clock::now();
    ledgerBuilder_ = r.ledgerBuilder;  // the document is built when transformer.ledger is read
    ledger_.clear();
    LedgerVerdict v = ledgerBuilder_->verdict();
    const auto t4 = Clock::now();
    auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    profile_ = {{"read_request", ms(t1 - t0)}, {"bind_device", ms(t2 - t1)}, {"engine", ms(t3 - t2)},
                {"verdict", ms(t4 - t3)}};
    for (const auto &[phase, msValue] : engine_->lastPhases()) profile_["engine." + phase] = msValue;
    if (opt_.mode == Mode::Strict && !v.strictOk) {
      std::string names;
      for (size_t i = 0; i < v.offenders.size() && i < 20; ++i) names += "\n  " + v.offenders[i];
      fail("--mode strict", "the strict rule failed ({} offender(s): nodes not run `row`, non-finite values); no "
           "outputs returned (ledger: transformer.ledger):{}", v.offenders.size(), names);
    }
    if (io) return py::make_tuple(py::none(), py::none());
    return py::make_tuple(Array(std::move(r.outputs.sample)), Array(std::move(r.outputs.audio_sample)));
  }

  // The gradients of a loss through a plan compiled with `h3c compile --backward` (runtime/backward.h: one forward
  // keeping the values the backward reads, then the plan's backward function, on the engine's device: the CPU
  // reference, or the GPU executor's gradient kernels on its device weights). host: the ten request tensors (host tensors);
  // grad_sample / grad_audio_sample: the loss's gradients with respect to the two outputs (F32, their shapes).
  // Returns (outputs, input gradients, weight gradients): the forward's (sample, audio_sample), and dicts of F32
  // Arrays by name (the three activations; every weight tensor the plan trains, by plan name).
  // `resume`: forward_kept's ticket for this request (0: none; see forwardKept below). The result's fourth item says
  // whether the backward started from that kept forward. `grads_into`: {weight name: device address} of F32 CUDA
  // tensors of the weights' shapes (the package's CUDA parameters' gradients) that the GPU backward fills on `stream`
  // (executor.h's DeviceGrads); those names are absent from the returned weight gradients. `input_grads` /
  // `outputs` false: the GPU backward returns no activation gradients / outputs (empty dict / None; the CPU
  // reference returns them anyway).
  py::tuple backward(const py::dict &host, const py::object &gradSample, const py::object &gradAudio,
                     uint64_t resume, const std::map<std::string, uint64_t> &gradsInto, uint64_t stream,
                     bool inputGrads, bool outputs) {
    std::unique_lock<std::mutex> lock = lockEngine();
    const std::vector<std::unique_ptr<Imported>> held =
        importRequest(host, "the backward takes host tensors (CPU reference)");
    OutputGrads dy{Imported(gradSample, "grad_sample").toHost(), Imported(gradAudio, "grad_audio_sample").toHost()};
    BackwardResult r;
    {
      py::gil_scoped_release release;
      for (size_t i = 0; i < held.size(); ++i) held[i]->readInto(staged_.tensors[requestTensorNames()[i]], 0);
      const DeviceGrads into{gradsInto, stream, inputGrads, outputs};
      r = engine_->backward(staged_, dy, resume, gradsInto.empty() && inputGrads && outputs ? nullptr : &into);
    }
    py::dict inputs, weights;
    for (auto &[name, t] : r.inputGrads) inputs[name.c_str()] = Array(std::move(t));
    for (auto &[name, t] : r.weightGrads) weights[name.c_str()] = Array(std::move(t));
    const bool haveOutputs = !r.outputs.sample.shape.empty();
    return py::make_tuple(haveOutputs ? py::object(py::make_tuple(Array(std::move(r.outputs.sample)),
                                                                  Array(std::move(r.outputs.audio_sample))))
                                      : py::object(py::none()),
                          inputs, weights, r.forwardKept);
  }

  // The forward of a training step (Engine::forwardKept): host request tensors in, (sample, audio_sample, ticket)
  // out, the values the backward reads kept on the GPU for backward(..., ticket). Writes no ledger (the rollout's
  // forward does); a strict engine refuses non-finite outputs.
  py::tuple forwardKept(const py::dict &host) {
    std::unique_lock<std::mutex> lock = lockEngine();
    const std::vector<std::unique_ptr<Imported>> held =
        importRequest(host, "the training forward takes host tensors (CPU reference)");
    std::pair<Outputs, uint64_t> r;
    {
      py::gil_scoped_release release;
      for (size_t i = 0; i < held.size(); ++i) held[i]->readInto(staged_.tensors[requestTensorNames()[i]], 0);
      r = engine_->forwardKept(staged_);
    }
    return py::make_tuple(Array(std::move(r.first.sample)), Array(std::move(r.first.audio_sample)), r.second);
  }

  // The last forward's ledger, as `h3c run --ledger` writes it (built on first read: ~50 ms of JSON and sealing
  // at 479 ops that a sampling loop's forwards would otherwise pay at every step).
  std::string ledger() {  // a copy: the lock is let go before pybind11 converts it
    std::unique_lock<std::mutex> lock = lockEngine();
    if (ledger_.empty() && ledgerBuilder_) ledger_ = sealedJsonDump(ledgerBuilder_->finish(), 1) + "\n";
    return ledger_;
  }
  std::map<std::string, std::string> inputDtypes() const {
    std::map<std::string, std::string> m;
    for (const char *n : kActivations) m[n] = std::string(dtypeName(plan_.value(std::string("@") + n).dtype));
    return m;
  }
  std::pair<int64_t, int64_t> outputChannels() const {
    return {plan_.config.videoPatchDim(), plan_.config.audio_in_channels};
  }
  // A hot update (runtime/weight_update.h): `tensors` = [(name, tensor)], host tensors as given (cast and scanned
  // here), CUDA tensors already in the pinned dtype and scanned for NaN / Inf by the package (h3c/__init__.py).
  // Nothing changes unless every tensor passes the checks.
  void updateWeights(const py::list &tensors, const std::string &qkvLayout, uint64_t stream) {
    const h3::QkvLayout layout = h3::parseQkvLayout(qkvLayout);
    std::unique_lock<std::mutex> lock = lockEngine();
    std::vector<std::unique_ptr<Imported>> held;
    std::vector<Tensor> copies;  // host tensors that were not contiguous
    copies.reserve(tensors.size());
    std::vector<WeightInput> inputs;
    for (const auto &item : tensors) {
      const py::tuple pair = item.cast<py::tuple>();
      const std::string name = pair[0].cast<std::string>();
      held.push_back(std::make_unique<Imported>(pair[1], "update:" + name));
      const Imported &im = *held.back();
      WeightInput in{name, im.dtype(), im.shape(), nullptr, 0};
      if (im.onDevice()) {
        if (opt_.device != "gpu") fail("update:" + name, "is a CUDA tensor; this engine runs on the CPU");
        if (!im.contiguous()) fail("update:" + name, "must be contiguous on the device");
        in.device = reinterpret_cast<uint64_t>(im.data());
      } else if (im.contiguous()) {
        in.host = im.data();
      } else {
        copies.push_back(im.toHost());
        in.host = copies.back().bytes.data();
      }
      inputs.push_back(std::move(in));
    }
    py::gil_scoped_release release;
    engine_->updateWeights(inputs, layout, opt_.device == "gpu" ? stream : 0, /*deviceChecked=*/true);
  }
  // An update read from a .safetensors file or folder (runtime/weight_update.h openUpdateFiles: `h3c run --update`).
  void updateFromFiles(const std::string &path) {
    std::unique_lock<std::mutex> lock = lockEngine();
    py::gil_scoped_release release;
    const UpdateFiles u = openUpdateFiles(path, plan_.config);
    engine_->updateWeights(u.inputs, u.layout);
  }
  // A LoRA adapter file merged into the weights (runtime/lora.h, Engine::loadLora), and every adapter unloaded.
  void loadLora(const std::string &path, double scale) {
    std::unique_lock<std::mutex> lock = lockEngine();
    py::gil_scoped_release release;
    engine_->loadLora(readLora(path, plan_.config), scale);
  }
  // An adapter given as (name, shape, float32 bytes) tensors (a state dict): written to a temporary .safetensors file
  // so that the one reader's key and alpha rules apply, read, and loaded; the weights record names it "<state dict>".
  void loadLoraTensors(const std::vector<std::tuple<std::string, std::vector<int64_t>, py::bytes>> &tensors,
                       double scale) {
    std::vector<st::TensorDecl> decls;
    std::map<std::string, std::string> data;
    for (const auto &[name, shape, bytes] : tensors) {
      decls.push_back({name, DType::F32, shape});
      if (!data.emplace(name, std::string(bytes)).second) fail("lora:" + name, "given twice");
    }
    std::unique_lock<std::mutex> lock = lockEngine();
    py::gil_scoped_release release;
    static std::atomic<int> counter{0};
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("h3c-lora-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    struct Cleanup {
      std::filesystem::path d;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    } cleanup{dir};
    {
      st::Writer w(dir / "adapter.safetensors", decls);
      for (const auto &info : w.order()) {
        const std::string &b = data.at(info.name);
        w.write(info.name, b.data(), b.size());
      }
      w.commit();
    }
    LoraAdapter a = readLora(dir / "adapter.safetensors", plan_.config);
    a.path = "<state dict>";
    engine_->loadLora(std::move(a), scale);
  }
  void unloadLoras() {
    std::unique_lock<std::mutex> lock = lockEngine();
    py::gil_scoped_release release;
    engine_->unloadLoras();
  }
  // The dtype a tensor of an update must have on the device (diffusers or native name), or "" when the name is
  // none of the plan's (the update then refuses it, naming it).
  std::string updateDtype(const std::string &name) const {
    for (const auto &b : plan_.weights)
      for (const auto &t : b.tensors)
        if (t.name == name) return std::string(dtypeName(t.dtype));
    if (h3::isNativeName(name))
      for (const auto &t : h3::nativeTensors(h3::diffusersTensors(plan_.config), plan_.config))
        if (t.name == name) return std::string(dtypeName(t.dtype));
    return "";
  }
  // The weights' identity record of the next ledger (weight_identity.h), as JSON.
  std::string weightsRecord() {
    std::unique_lock<std::mutex> lock = lockEngine();
    py::gil_scoped_release release;
    return engine_->weightsRecord().dump();
  }
  // The plan's weight tensors: name -> shape, name -> dtype ("BF16" / "F32"), and one tensor's current bytes.
  std::map<std::string, std::vector<int64_t>> weightShapes() const {
    std::map<std::string, std::vector<int64_t>> m;
    for (const auto &b : plan_.weights)
      for (const auto &t : b.tensors) m[t.name] = t.shape;
    return m;
  }
  std::map<std::string, std::string> weightDtypes() const {
    std::map<std::string, std::string> m;
    for (const auto &b : plan_.weights)
      for (const auto &t : b.tensors) m[t.name] = std::string(dtypeName(t.dtype));
    return m;
  }
  py::bytes readWeight(const std::string &name) {
    Tensor t;
    {
      std::unique_lock<std::mutex> lock = lockEngine();
      py::gil_scoped_release release;
      t = engine_->readWeight(name);
    }
    return py::bytes(reinterpret_cast<const char *>(t.bytes.data()), t.bytes.size());
  }
  std::string planSha() const { return plan_.planSha256; }
  bool hasBackward() const { return plan_.functions.count("backward") > 0; }
  // The tensors the plan's backward trains (their gradients exist: `h3c compile --trainable`, docs/contract.md
  // section 14), and the plan's unmerged LoRA adapter slots (section 13); both by plan name, sorted.
  std::vector<std::string> trainableWeights() const {
    std::vector<std::string> v;
    if (const plan::Function *b = plan_.backward())
      for (const auto &[key, value] : b->outputs)
        if (key.rfind("grad:@", 0) != 0) v.push_back(key.substr(5));
    return v;
  }
  std::vector<std::string> trainablePatterns() const {
    return plan_.backward() ? plan_.backward()->trainable : std::vector<std::string>{};
  }
  std::vector<std::string> adapterSlots() const {
    std::vector<std::string> v;
    for (const auto &b : plan_.weights)
      for (const auto &t : b.tensors)
        if (t.adapter) v.push_back(t.name);
    std::sort(v.begin(), v.end());
    return v;
  }
  std::string configJson() const { return h3::configToJson(plan_.config).dump(); }
  std::string weightsJson() const { return weights_->describe().dump(); }
  int64_t forwards() const { return engine_->forwards(); }
  std::map<std::string, double> profile() {
    std::unique_lock<std::mutex> lock = lockEngine();
    return profile_;
  }
  std::string device() const { return opt_.device; }

private:
  // The ten request tensors of `host` (exactly those: a missing or an unexpected name is refused, as `h3c run` refuses
  // its file's), imported in requestTensorNames() order; hostOnly: why a CUDA tensor is refused (null: accepted).
  std::vector<std::unique_ptr<Imported>> importRequest(const py::dict &host, const char *hostOnly) const {
    for (const auto &name : requestTensorNames())
      if (!host.contains(name.c_str())) fail("--inputs", "missing tensor '{}'", name);
    for (const auto &kv : host)
      if (std::find(requestTensorNames().begin(), requestTensorNames().end(), std::string(py::str(kv.first))) ==
          requestTensorNames().end())
        fail("--inputs", "unexpected tensor '{}'", std::string(py::str(kv.first)));
    std::vector<std::unique_ptr<Imported>> held;
    for (const auto &name : requestTensorNames()) {
      held.push_back(std::make_unique<Imported>(host[name.c_str()], name));
      if (hostOnly && held.back()->onDevice()) fail(name, "is a CUDA tensor; {}", hostOnly);
    }
    return held;
  }

  // The engine's lock, waited for without the GIL (called with it held): a forward on another thread holds the lock
  // while it takes the GIL back, so waiting with the GIL would deadlock.
  std::unique_lock<std::mutex> lockEngine() {
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    py::gil_scoped_release release;
    lock.lock();
    return lock;
  }

  plan::Plan plan_;
  std::unique_ptr<WeightSource> weights_;
  RunOptions opt_;
  std::unique_ptr<Engine> engine_;
  std::mutex mu_;
  std::shared_ptr<const LedgerBuilder> ledgerBuilder_;
  std::string ledger_;
  Request staged_;                         // the request of the last forward (its buffers reused by the next)
  std::map<std::string, double> profile_;  // the last forward's phases in ms (H3C_PROFILE's line in h3c/__init__.py)
};

// ---- the sampler ------------------------------------------------------------------------------------------------------

py::dict sdeDict(const SdeConstants &k) {
  py::dict d;
  d["std"] = k.std;
  d["scale"] = k.scale;
  d["coef"] = k.coef;
  d["log_scale"] = k.logScale;
  return d;
}

} // namespace

PYBIND11_MODULE(_h3c, m) {
  m.doc() = "h3c's runtime: the resident engine, the sampler and the trajectory tools (see h3c/__init__.py)";
  m.attr("version") = h3c::versionString();  // as `h3c --version`, and what its ledgers record under "h3c"
  m.attr("build") = h3c::buildString();
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error &e) {
      py::object inst = py::reinterpret_borrow<py::object>(error.ptr())(e.what());
      inst.attr("where") = e.where();
      inst.attr("message") = e.message();
      PyErr_SetObject(error.ptr(), inst.ptr());
    }
  });

  py::class_<Array>(m, "Array")
      .def("__dlpack__", [](const Array &a, py::args, py::kwargs) { return a.dlpack(); })
      .def("__dlpack_device__", [](const Array &) { return py::make_tuple(int(kDLCPU), 0); })
      .def_property_readonly("shape", [](const Array &a) { return a.tensor().shape; })
      .def_property_readonly("dtype", [](const Array &a) { return std::string(dtypeName(a.tensor().dtype)); });

  py::class_<PyEngine>(m, "Engine")
      .def(py::init<const std::string &, std::optional<std::string>, std::optional<int64_t>, const std::string &,
                    const std::string &, int, const std::vector<std::string> &, std::optional<std::string>, bool>(),
           py::arg("plan"), py::arg("checkpoint"), py::arg("synthetic"), py::arg("device"), py::arg("mode"),
           py::arg("threads"), py::arg("binds"), py::arg("config"), py::arg("hash_nodes") = false)
      .def("forward", &PyEngine::forward, py::arg("host"), py::arg("device"), py::arg("out_sample"),
           py::arg("out_audio_sample"), py::arg("stream"))
      .def("update_weights", &PyEngine::updateWeights, py::arg("tensors"), py::arg("qkv_layout"), py::arg("stream"))
      .def("update_dtype", &PyEngine::updateDtype, py::arg("name"))
      .def("load_lora", &PyEngine::loadLora, py::arg("path"), py::arg("scale"))
      .def("load_lora_tensors", &PyEngine::loadLoraTensors, py::arg("tensors"), py::arg("scale"))
      .def("update_from_files", &PyEngine::updateFromFiles, py::arg("path"))
      .def("unload_loras", &PyEngine::unloadLoras)
      .def("read_weight", &PyEngine::readWeight, py::arg("name"))
      .def("backward", &PyEngine::backward, py::arg("host"), py::arg("grad_sample"), py::arg("grad_audio_sample"),
           py::arg("resume") = 0, py::arg("grads_into") = std::map<std::string, uint64_t>{}, py::arg("stream") = 0,
           py::arg("input_grads") = true, py::arg("outputs") = true)
      .def("forward_kept", &PyEngine::forwardKept, py::arg("host"))
      .def_property_readonly("weight_shapes", &PyEngine::weightShapes)
      .def_property_readonly("weight_dtypes", &PyEngine::weightDtypes)
      .def_property_readonly("weights_record_json", &PyEngine::weightsRecord)
      .def_property_readonly("ledger_json", &PyEngine::ledger)
      .def_property_readonly("input_dtypes", &PyEngine::inputDtypes)
      .def_property_readonly("output_channels", &PyEngine::outputChannels)
      .def_property_readonly("plan_sha256", &PyEngine::planSha)
      .def_property_readonly("has_backward", &PyEngine::hasBackward)
      .def_property_readonly("trainable_weights", &PyEngine::trainableWeights)
      .def_property_readonly("trainable_patterns", &PyEngine::trainablePatterns)
      .def_property_readonly("adapter_slots", &PyEngine::adapterSlots)
      .def_property_readonly("config_json", &PyEngine::configJson)
      .def_property_readonly("weights_json", &PyEngine::weightsJson)
      .def_property_readonly("forwards", &PyEngine::forwards)
      .def_property_readonly("last_profile", &PyEngine::profile)
      .def_property_readonly("device", &PyEngine::device);

  py::class_<MiniMaxH3Scheduler>(m, "Scheduler")
      .def(py::init<double>(), py::arg("shift"))
      .def("set_timesteps", &MiniMaxH3Scheduler::setTimesteps, py::arg("num_inference_steps"))
      .def_property_readonly("shift", &MiniMaxH3Scheduler::shift)
      .def_property_readonly("sigmas", &MiniMaxH3Scheduler::sigmas)
      .def_property_readonly("timesteps", &MiniMaxH3Scheduler::timesteps)
      .def_property_readonly("num_steps", &MiniMaxH3Scheduler::numSteps)
      .def("step", [](const MiniMaxH3Scheduler &s, int64_t i, const py::object &v, const py::object &x) {
        Imported xi(x, "sample");
        const std::vector<int64_t> shape = xi.shape();
        std::vector<float> vf = hostFloats(v, "velocity"), xf = hostFloats(x, "sample");
        if (vf.size() != xf.size()) fail("velocity", "has {} values, the sample {}", vf.size(), xf.size());
        if (i < 0 || i >= s.numSteps()) fail("step", "index {} out of range [0, {})", i, s.numSteps());
        s.step(i, vf.data(), xf.data(), xf.size());
        return Array::floats(shape, xf);
      }, py::arg("i"), py::arg("velocity"), py::arg("sample"));

  m.def("sde_constants", [](const MiniMaxH3Scheduler &s, int64_t i, double a) {
    if (i < 0 || i >= s.numSteps()) fail("step", "index {} out of range [0, {})", i, s.numSteps());
    return sdeDict(sdeConstants(s, i, a));
  }, py::arg("scheduler"), py::arg("i"), py::arg("noise_level"));
  m.def("sde_step", [](const MiniMaxH3Scheduler &s, int64_t i, double a, const py::object &v, const py::object &x,
                       const py::object &z) {
    if (i < 0 || i >= s.numSteps()) fail("step", "index {} out of range [0, {})", i, s.numSteps());
    const std::vector<int64_t> shape = Imported(x, "sample").shape();
    std::vector<float> vf = hostFloats(v, "velocity"), xf = hostFloats(x, "sample"), zf = hostFloats(z, "noise");
    if (vf.size() != xf.size() || zf.size() != xf.size())
      fail("sde_step", "velocity ({}), sample ({}) and noise ({}) differ in size", vf.size(), xf.size(), zf.size());
    std::vector<float> mean(xf.size());
    const SdeConstants k = sdeConstants(s, i, a);
    const double sumSq = sdeStep(s, i, k, vf.data(), zf.data(), xf.data(), mean.data(), xf.size());
    return py::make_tuple(Array::floats(shape, xf), Array::floats(shape, mean), sumSq,
                          sdeLogProb(sumSq, k, int64_t(xf.size())));
  }, py::arg("scheduler"), py::arg("i"), py::arg("noise_level"), py::arg("velocity"), py::arg("sample"),
     py::arg("noise"));
  m.def("philox_normals", [](uint64_t seed, uint32_t modality, uint32_t draw, int64_t count) {
    if (count < 0) fail("count", "must be >= 0, got {}", count);
    std::vector<float> v(static_cast<size_t>(count));
    philoxNormals(seed, modality, draw, count, v.data());
    return Array::floats({count}, v);
  }, py::arg("seed"), py::arg("modality"), py::arg("draw"), py::arg("count"));
  m.def("linspace_f32", &linspaceF32, py::arg("start"), py::arg("end"), py::arg("steps"));

  // The weights' identity (runtime/weight_identity.h) of a complete set of tensors, computed on the host: what a
  // trainer compares with a rollout ledger's header.weights.sha256. Every tensor of the config, by diffusers name,
  // in its pinned dtype or F32 (rounded to nearest even for BF16 tensors, as an update is).
  m.def("weights_identity", [](const py::list &tensors, const std::string &config) {
    const h3::Config c = h3::loadConfig(config);
    std::map<std::string, h3::TensorSpec> specs;
    for (auto &t : h3::diffusersTensors(c)) specs[t.name] = t;
    std::map<std::string, HashedTensor> hashed;
    for (const auto &item : tensors) {
      const py::tuple pair = item.cast<py::tuple>();
      const std::string name = pair[0].cast<std::string>();
      auto it = specs.find(name);
      if (it == specs.end()) fail("weights:" + name, "is no tensor of the config '{}'", config);
      if (hashed.count(name)) fail("weights:" + name, "is given twice");
      Tensor t = Imported(pair[1], "weights:" + name).toHost();
      if (t.shape != it->second.shape)
        fail("weights:" + name, "has shape {}, the tensor {}", shapeText(t.shape), shapeText(it->second.shape));
      if (t.dtype == DType::F32 && it->second.dtype == DType::BF16) {
        Tensor b = Tensor::zeros(DType::BF16, t.shape);
        for (int64_t i = 0; i < t.numel(); ++i) {
          const uint16_t v = floatToBf16(t.getFloat(i));
          std::memcpy(b.bytes.data() + 2 * i, &v, 2);
        }
        t = std::move(b);
      }
      if (t.dtype != it->second.dtype)
        fail("weights:" + name, "is {}, the tensor {}", dtypeName(t.dtype), dtypeName(it->second.dtype));
      hashed[name] = {std::string(dtypeName(t.dtype)), shapeText(t.shape), contentHash(t.bytes.data(), t.bytes.size())};
    }
    for (const auto &[name, spec] : specs)
      if (!hashed.count(name)) fail("weights:" + name, "is missing (the identity covers every tensor of the config)");
    return combineWeightHashes(hashed);
  }, py::arg("tensors"), py::arg("config"));
  m.def("verify_trajectory", [](const std::string &dir) { return verifyTrajectory(dir).toJson().dump(); },
        py::arg("path"));
  m.def("drift", [](const std::string &a, const std::string &b) {
    DriftReport r = driftTrajectories(loadTrajectory(a), loadTrajectory(b));
    return py::make_tuple(r.toJson().dump(), r.text());
  }, py::arg("a"), py::arg("b"));
}
