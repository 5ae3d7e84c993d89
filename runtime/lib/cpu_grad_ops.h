// One gradient op of a plan's backward (docs/contract.md section 14) on the CPU: its operands read from the value
// map at the kind's fixed positions (plan/ops.h), computed by runtime/grad_ops.h, its outputs (activation gradients,
// then the weight gradients of the tensors it lists) written back. Internal to the runtime (backward.cpp).
#pragma once

#include "h3c/runtime/cpu_ops.h"

namespace h3c::rt {

void runCpuGradOp(const plan::Op &op, OpEnv &env, ValueMap &values);

} // namespace h3c::rt
