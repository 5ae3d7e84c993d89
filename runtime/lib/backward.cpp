// runBackward (backward.h): the forward's ops by runCpuOp, the backward's by runCpuGradOp, over one value map whose
// values live from their op to their last reader in either function (plan/checkpoint.h's timeline, the checkpoint
// segments' recomputes included; section 14).
#include "h3c/runtime/backward.h"

#include "h3c/plan/checkpoint.h"

#include "cpu_grad_ops.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <climits>
#include <set>
#include <thread>

namespace h3c::rt {

namespace {

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
  // plan/checkpoint.h's timeline: the forward, then the backward with each checkpoint segment's forward ops rerun
  // (runCpuOp, the same numerics: the same bits) before its first gradient op; every value freed after its last
  // reader, so a checkpointed plan keeps only the segments' kept values and boundaries across the forward.
  const std::vector<plan::ScheduleStep> steps = plan::backwardSchedule(p, true);
  ValueMap vals = graphInputValues(req);
  OpEnv env{p, req, weights, Precision::Ordered, t, -1};
  BackwardResult r;
  const int64_t videoCols = p.config.videoPatchDim(), audioCols = p.config.audio_in_channels;
  // The live bytes of activations and their gradients; weight gradients (an op's outputs past its activation
  // outputs) live to the end whatever the segments and are left out, as in plan::liveBytesPeak.
  std::set<std::string> weightGrads;
  for (const plan::Op &op : bwd->ops)
    for (size_t k = plan::outputRoles(op.kind, op.attrs).size(); k < op.out.size(); ++k) weightGrads.insert(op.out[k]);
  auto hostBytes = [&](const std::string &n, const HostValue &v) {
    return weightGrads.count(n) ? int64_t(0) : int64_t(v.f.size() * sizeof(float) + v.i.size() * sizeof(int64_t));
  };
  int64_t live = 0;
  for (const auto &[n, v] : vals) live += hostBytes(n, v);
  r.peakActivationBytes = live;
  bool outputsTaken = false;
  for (const plan::ScheduleStep &s : steps) {
    if (s.backward && !outputsTaken) {
      auto output = [&](const char *key, int64_t rows, int64_t cols) {
        const HostValue &v = vals.at(fwd.outputs.at(key));
        return Tensor::fromFloats(DType::F32, {req.B, rows, cols}, v.f.data());
      };
      r.outputs.sample = output("sample", req.Nv, videoCols);
      r.outputs.audio_sample = output("audio_sample", req.Na, audioCols);
      outputsTaken = true;
    }
    for (const auto &n : s.defineBefore) {
      if (!s.backward) continue;  // the forward's inputs: graphInputValues above
      // The backward's inputs: "@grad:<output value>" for each forward output.
      const bool video = n == "@grad:" + fwd.outputs.at("sample");
      if (!video && n != "@grad:" + fwd.outputs.at("audio_sample"))
        fail("plan.json#/functions/backward/inputs", "'{}' is no gradient of a forward output", n);
      vals[n] = gradInput(video ? dy.sample : dy.audioSample, video ? "gradient of sample" : "gradient of audio_sample",
                          req.B, video ? req.Nv : req.Na, video ? videoCols : audioCols);
      live += hostBytes(n, vals[n]);
    }
    for (const auto &n : s.op->out) {
      auto it = vals.find(n);
      if (it != vals.end()) live -= hostBytes(n, it->second);  // a recomputed value's first life ended already
    }
    if (s.backward) runCpuGradOp(*s.op, env, vals);
    else runCpuOp(*s.op, env, vals);
    for (const auto &n : s.op->out) {
      auto it = vals.find(n);
      if (it != vals.end()) live += hostBytes(n, it->second);
    }
    r.peakActivationBytes = std::max(r.peakActivationBytes, live);
    if (s.backward && observe) observe(*s.op, vals);
    for (const auto &n : s.freeAfter) {
      auto it = vals.find(n);
      if (it == vals.end()) continue;
      live -= hostBytes(n, it->second);
      vals.erase(it);
    }
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
                           const RunOptions &opt, Executor *executor, uint64_t resume, const DeviceGrads *into) {
  const plan::Function *bwd = p.backward();
  if (!bwd) fail("plan.json#/functions/backward", "the plan has no backward (compile it with h3c compile --backward)");
  if (into) {
    for (const auto &[name, ptr] : into->weights) {
      // (an activation's gradient, "grad:@<input>", is an output too, but it always comes back as a host tensor)
      if (name.rfind('@', 0) == 0 || !bwd->outputs.count("grad:" + name))
        fail("backward:" + name, "is not a tensor this plan trains: its gradient cannot be left in device memory");
      if (ptr == 0) fail("backward:" + name, "has no device address for its gradient");
    }
    if (opt.device == "cpu" && !into->weights.empty())
      fail("backward", "gradients into device memory need a GPU backward (this one runs on the CPU)");
  }
  if (h3::configToJson(weights.config()).dump() != h3::configToJson(p.config).dump())
    fail("--config", "the weights' config differs from the plan's config");
  if (opt.device != "cpu") {
    // Never run a part of the backward and skip the rest: a device runs it only when every gradient op has a kernel.
    for (const plan::Op &op : bwd->ops)
      if (!op.kernel)
        fail(op.where + "/kernel", "gradient op '{}' ({}) has no {} kernel (\"kernel\": null): the backward runs on "
             "the CPU reference only (--device cpu)", plan::opKindName(op.kind), op.firstNode(), opt.device);
  }
  // A device executor borrows the activations (it uploads the request's bytes, and after a kept forward reads only
  // the extents): no float copy of the ~13 MB at S = 8,349 before the backward's first launch. The CPU reference
  // computes on the floats.
  const CanonicalRequest req = canonicalize(request, p.config, "--inputs",
                                            opt.device == "cpu" ? Activations::Copied : Activations::Borrowed);
  if (opt.device == "cpu") return runCpuBackward(p, weights, req, dy, opt.threads);
  if (p.options.sp != 1 || p.options.tp != 1) fail("plan.json#/options", "the backward runs on one rank");
  checkOutputGrads(p, req, dy);
  if (executor) {
    if (executor->device() != opt.device) fail("--device", "the executor runs on {}, not {}", executor->device(), opt.device);
    return executor->backward(p, weights, req, dy, opt, resume, into);
  }
  return makeExecutor(opt.device)->backward(p, weights, req, dy, opt, 0, into);
}

} // namespace h3c::rt
