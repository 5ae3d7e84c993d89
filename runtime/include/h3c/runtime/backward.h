// The backward of a plan (docs/contract.md section 14): one forward that keeps the values the backward reads (saved
// activations), then the plan's backward function on the gradients of the forward's outputs. Returns the gradients
// of the three activation inputs and the F32 gradients of every weight tensor the plan trains
// (functions.backward.trainable), by name. The CPU reference runs it (runtime/grad_ops.h's numerics, op by op); the
// GPU executor runs the plan's gradient kernels (kernels/cuda/grad.cuh: the same bits but for attention's ex2 / lg2,
// which are the hardware's as in the forward).
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/runtime/executor.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/tensor.h"
#include "h3c/runtime/weights.h"

#include <functional>
#include <map>
#include <string>

namespace h3c::rt {

// The loss's gradients with respect to the forward's outputs: F32 of the outputs' shapes.
struct OutputGrads {
  Tensor sample;       // [B, Nv, videoPatchDim]
  Tensor audioSample;  // [B, Na, audio_in_channels]
};

struct BackwardResult {
  Outputs outputs;  // the forward's, as runModel returns them
  // "hidden_states", "audio_hidden_states", "encoder_hidden_states": F32, the inputs' shapes ([B, N, channels]).
  std::map<std::string, Tensor> inputGrads;
  // Every weight tensor the plan trains (plan names: diffusers names, adapter slots' own): F32 of its shape.
  std::map<std::string, Tensor> weightGrads;
  // The CPU reference only: the most host bytes its value map held at once in activations and their gradients
  // (weight gradients apart: they live to the end either way), measured after each op ran, before its dead values
  // were freed. A checkpointed plan's is lower (section 14).
  int64_t peakActivationBytes = 0;
  // The GPU executor only: the bytes of its activation arena for this run, every slot the plan's values of both
  // functions take (recompute slots included) at the request's extents, each rounded up to 256 bytes.
  int64_t arenaBytes = 0;
  // The GPU executor only: the backward started from a kept forward (Executor::forwardKept) instead of its own.
  bool forwardKept = false;
};

// Validates the request against the plan's config, then runs the forward and the backward on `opt.device` with
// `opt.threads` (a thread count never changes a bit). Fails closed: a plan without a backward function; any device
// but "cpu" while a gradient op has no kernel (naming it), or a plan of several ranks; output gradients of the wrong
// dtype or shape.
// `executor`: the device's executor to run it on (a resident engine's, holding its weights and kernels); null makes
// one for `opt.device`.
// `resume`: a ticket of executor->forwardKept (0: none), executor.h. `into`: weight gradients left in device memory
// (executor.h's DeviceGrads; a GPU executor only): every name a tensor the plan trains, checked before anything runs.
BackwardResult runBackward(const plan::Plan &p, WeightSource &weights, const Request &request, const OutputGrads &dy,
                           const RunOptions &opt, Executor *executor = nullptr, uint64_t resume = 0,
                           const DeviceGrads *into = nullptr);

// Throws naming the gradient unless each is F32 of its output's shape for this request.
void checkOutputGrads(const plan::Plan &p, const CanonicalRequest &req, const OutputGrads &dy);

// Called after each gradient op of the CPU reference with the value map holding its inputs and outputs (before the
// values it read last are freed): what the GPU checks compare each gradient kernel with, on the same inputs.
using GradOpObserver = std::function<void(const plan::Op &op, const ValueMap &values)>;

// The CPU reference on a canonical request (what runBackward runs for "cpu").
BackwardResult runCpuBackward(const plan::Plan &p, WeightSource &weights, const CanonicalRequest &req,
                              const OutputGrads &dy, int threads, const GradOpObserver &observe = {});

} // namespace h3c::rt
