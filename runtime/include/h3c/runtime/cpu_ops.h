// The CPU reference implementation of every plan op kind (docs/contract.md sections 3 and 4), usable one op at a
// time so the GPU executor can audit its kernels against it (download inputs, runCpuOp, compare).
//
// Precision::Ordered follows the op's reduction order exactly (F32 accumulators, k_chunks / lane_tree / flash);
// Precision::Fp64 is the `reference` binding: the same rounding points for stored values, but every reduction in
// double and unordered. Results never depend on the thread count.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/ledger.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/weights.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace h3c::rt {

// A host activation: [batch][rows][cols]. Float dtypes keep values in `f` (already rounded to the dtype); I64 values
// (pack metadata) in `i`.
struct HostValue {
  DType dtype = DType::F32;
  int64_t batch = 1, rows = 0, cols = 0;
  std::vector<float> f;
  std::vector<int64_t> i;
  int64_t numel() const { return batch * rows * cols; }
  std::vector<int64_t> shape() const;  // [batch, rows, cols]
};

using ValueMap = std::map<std::string, HostValue>;

enum class Precision { Ordered, Fp64 };

// What an op runs against. In a multi-rank plan: the rank's weights (makeRankWeights) and its rows of S (the
// row count of values in the domain Sr).
struct OpEnv {
  const plan::Plan &plan;
  const CanonicalRequest &req;
  WeightSource &weights;
  Precision precision = Precision::Ordered;
  int threads = 1;
  int64_t rankRows = -1;  // -1: the plan has no Sr values
};

// Runs `op` (any kind but the layout ops): reads its inputs from `values` (graph inputs "@..." must be present; see
// graphInputValues()), writes its outputs. Throws h3c::Error naming op.where on any shape or attribute inconsistency.
void runCpuOp(const plan::Op &op, OpEnv &env, ValueMap &values);

// Runs a layout op (all_gather, split; docs/contract.md section 5.2) over the value maps of all ranks of the plan
// (index = rank, plan::rankGrid order): explicit copies of the rows or columns each rank holds.
void runLayoutOp(const plan::Op &op, const plan::Plan &p, const CanonicalRequest &req, std::vector<ValueMap> &ranks);

// The graph inputs of a canonical request as host values ("@hidden_states", ...). The runtime canonicalizes before
// the graph runs, so the per-row metadata inputs (@position_ids, @token_tags, @timestep_indices) are presented in
// canonical row order already, and the index inputs as the canonical positions of each modality's rows; `pack`'s
// metadata outputs are then the same rows (a rope_table reading @position_ids or pack:positions gets one table).
// withActivations false: without the three activations (the GPU executor uploads those from the request's bytes).
ValueMap graphInputValues(const CanonicalRequest &req, bool withActivations = true);

// Audit mode: the error of `got` (an executor's output value `name`) against `ref` (the same op's fp64 reference on
// the same inputs): max abs difference, and that relative to the reference's largest magnitude (NaN as infinite).
AuditError auditCompare(const HostValue &got, const HostValue &ref, const std::string &name);

// Runs `fn(begin, end)` over [0, n) split into contiguous ranges on up to `threads` std::threads.
void parallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)> &fn);

} // namespace h3c::rt
