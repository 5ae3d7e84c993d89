// runBackward (backward.h): the forward's ops by runCpuOp, the backward's by runCpuGradOp, over one value map whose
// values live from their op to their last reader in either function (the plan's one slot timeline, section 14).
#include "h3c/runtime/backward.h"

#include "cpu_grad_ops.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/error.h"

#include <climits>
#include <thread>

namespace h3c::rt {

namespace {

// The forward's values the backward (or an output) still needs are kept; the rest freed after their last reader.
// Index space: the forward's ops, then the backward's.
std::map<std::string, size_t> lastReaders(const plan::Function &fwd, const plan::Function &bwd) {
  std::map<std::string, size_t> last;
  for (const plan::Op &op : fwd.ops)
    for (const auto &v : op.in) last[v] = op.index;
  for (const plan::Op &op : bwd.ops)
    for (const auto &v : op.in) last[v] = fwd.ops.size() + op.index;
  for (const auto *fn : {&fwd, &bwd})
    for (const auto &[key, v] : fn->outputs) last[v] = SIZE_MAX;
  return last;
}

void freeDead(const plan::Op &op, size_t at, const std::map<std::string, size_t> &last, ValueMap &vals) {
  for (const auto &n : op.in) {
    auto it = last.find(n);
    if (it != last.end() && it->second == at) vals.erase(n);
  }
  for (const auto &n : op.out)
    if (!last.count(n)) vals.erase(n);
}

HostValue gradInput(const Tensor &t, const std::string &what, int64_t B, int64_t rows, int64_t cols) {
  if (t.dtype != DType::F32 || t.shape != std::vector<int64_t>{B, rows, cols})
    fail(what, "expected an F32 [{}, {}, {}] gradient, got {} {}", B, rows, cols, dtypeName(t.dtype),
         shapeText(t.shape));
  HostValue h;
  h.batch = B;
  h.rows = rows;
  h.cols = cols;
  h.f = t.toFloats();
  return h;
}

} // namespace

void checkOutputGrads(const plan::Plan &p, const CanonicalRequest &req, const OutputGrads &dy) {
  gradInput(dy.sample, "gradient of sample", req.B, req.Nv, p.config.videoPatchDim());
  gradInput(dy.audioSample, "gradient of audio_sample", req.B, req.Na, p.config.audio_in_channels);
}

BackwardResult runCpuBackward(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req,
                              const OutputGrads &dy, int threads, const GradOpObserver &observe) {
  const plan::Function *bwd = p.backward();
  if (!bwd) fail("plan.json#/functions/backward", "the plan has no backward (compile it with h3c compile --backward)");
  if (p.options.sp != 1 || p.options.tp != 1) fail("plan.json#/options", "the backward runs on one rank");
  const plan::Function &fwd = p.forward();
  const int t = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const auto last = lastReaders(fwd, *bwd);
  ValueMap vals = graphInputValues(req);
  OpEnv env{p, req, weights, Precision::Ordered, t, -1};
  for (const plan::Op &op : fwd.ops) {
    runCpuOp(op, env, vals);
    freeDead(op, op.index, last, vals);
  }
  BackwardResult r;
  const int64_t videoCols = p.config.videoPatchDim(), audioCols = p.config.audio_in_channels;
  auto output = [&](const char *key, int64_t rows, int64_t cols) {
    const HostValue &v = vals.at(fwd.outputs.at(key));
    return Tensor::fromFloats(DType::F32, {req.B, rows, cols}, v.f.data());
  };
  r.outputs.sample = output("sample", req.Nv, videoCols);
  r.outputs.audio_sample = output("audio_sample", req.Na, audioCols);
  // The backward's inputs: "@grad:<output value>" for each forward output.
  for (const auto &[key, v] : fwd.outputs) {
    const bool video = key == "sample";
    vals["@grad:" + v] = gradInput(video ? dy.sample : dy.audioSample, video ? "gradient of sample" : "gradient of audio_sample",
                                   req.B, video ? req.Nv : req.Na, video ? videoCols : audioCols);
  }
  for (const auto &n : bwd->inputs)
    if (!vals.count(n)) fail("plan.json#/functions/backward/inputs", "'{}' is no gradient of a forward output", n);
  for (const plan::Op &op : bwd->ops) {
    runCpuGradOp(op, env, vals);
    if (observe) observe(op, vals);
    freeDead(op, fwd.ops.size() + op.index, last, vals);
  }
  for (const auto &[key, v] : bwd->outputs) {
    const HostValue &h = vals.at(v);
    if (key.rfind("grad:@", 0) == 0) {
      r.inputGrads[key.substr(6)] = Tensor::fromFloats(DType::F32, {h.batch, h.rows, h.cols}, h.f.data());
    } else {
      const std::string tensor = key.substr(5);
      r.weightGrads[tensor] = Tensor::fromFloats(DType::F32, p.weightTensor(tensor).shape, h.f.data());
    }
  }
  return r;
}

BackwardResult runBackward(const plan::Plan &p, WeightSource &weights, const Request &request, const OutputGrads &dy,
                           const RunOptions &opt, Executor *executor) {
  const plan::Function *bwd = p.backward();
  if (!bwd) fail("plan.json#/functions/backward", "the plan has no backward (compile it with h3c compile --backward)");
  if (h3::configToJson(weights.config()).dump() != h3::configToJson(p.config).dump())
    fail("--config", "the weights' config differs from the plan's config");
  if (opt.device != "cpu") {
    // Never run a part of the backward and skip the rest: a device runs it only when every gradient op has a kernel.
    for (const plan::Op &op : bwd->ops)
      if (!op.kernel)
        fail(op.where + "/kernel", "gradient op '{}' ({}) has no {} kernel (\"kernel\": null): the backward runs on "
             "the CPU reference only (--device cpu)", plan::opKindName(op.kind), op.firstNode(), opt.device);
  }
  const CanonicalRequest req = canonicalize(request, p.config, "--inputs");
  if (opt.device == "cpu") return runCpuBackward(p, weights, req, dy, opt.threads);
  if (p.options.sp != 1 || p.options.tp != 1) fail("plan.json#/options", "the backward runs on one rank");
  checkOutputGrads(p, req, dy);
  if (executor) {
    if (executor->device() != opt.device) fail("--device", "the executor runs on {}, not {}", executor->device(), opt.device);
    return executor->backward(p, weights, req, dy, opt);
  }
  return makeExecutor(opt.device)->backward(p, weights, req, dy, opt);
}

} // namespace h3c::rt
