// Activation checkpointing of the backward (docs/contract.md section 14, `h3c compile --checkpoint blocks`): the
// segments one per transformer block (and token refiner block), their checks, and the live-bytes peak of the
// forward-then-backward timeline with and without them. One owner of the rules, for the compiler (which writes the
// segments), the plan reader (which refuses segments that break them) and the buffer report.
#pragma once

#include "h3c/plan/plan.h"

#include <set>
#include <string>
#include <vector>

namespace h3c::plan {

// The block a node belongs to: "transformer_blocks.3" for "transformer_blocks.3.attn.to_q",
// "token_refiner.refiner_blocks.0" for its ops; "" for a node of no block (the embedders, the tables, pack, the
// output heads).
std::string blockOf(const std::string &node);

// Selective recompute (`h3c compile --keep KIND --keep-bytes N`): the forward keeps the outputs of the segments' ops
// of these kinds for the backward instead of the recompute rerunning them (attention: its output is the larger part
// of a block's recompute time at long rows, and one bf16 [rows, heads * d] tensor of memory). Kept values are the
// forward's own, so no bit changes. `maxBytes` (>= 0) caps the bytes these outputs add to the live peak at `tokens`
// rows: segments take the rule from the last block down (their backward runs first), op by op, while the sum fits (a
// small output, e.g. a block's adaLN table, still fits where a large one no longer does); -1: all.
// `all` (`--keep all`): every op of a segment, which is then left out: its block's values live from the forward to
// their backward readers and nothing of it is rerun (whole blocks within the cap: memory traded for recompute time).
struct KeepRule {
  std::set<OpKind> kinds;
  bool all = false;
  int64_t maxBytes = -1;
  int64_t tokens = 8192;
  bool any() const { return all || !kinds.empty(); }
  bool keeps(OpKind k) const { return all || kinds.count(k) > 0; }
};

// One segment per block of the plan's forward whose ops are consecutive (an op without nodes, a lora_down, belongs
// to the segment around it); a segment of which the backward reads nothing is left out. Throws naming the op when a
// block's ops are not consecutive or when a value the backward reads would need an op that defines a boundary value
// (one read after the segment) to be rerun. With `keep`, the ops of its kinds are left out of the recompute of the
// segments it selects (their outputs then live from the forward to their last backward reader); a kind the forward
// has no op of is refused, naming it; `keeping` (when given) counts the segments the rule applied to (those left
// out because nothing of them was left to rerun among them).
std::vector<Checkpoint> blockCheckpoints(const Plan &p, const KeepRule &keep = {}, size_t *keeping = nullptr);

// The reader's checks of functions.backward.checkpoints (`root` the plan's JSON pointer prefix): segments ascending
// and disjoint, each op of one named by the segment's block; recompute ops inside their segment, ascending, defining
// only values no forward op after the segment reads and no forward output; `kept` exactly what they read and do not
// define; every backward read of a recomputed value at a backward op in [before, last], and both ends such a read.
void checkCheckpoints(const Plan &p, const std::string &root);

// The order in which an executor runs a backward plan and when it frees each value: the forward's ops, then the
// backward's, with a checkpoint's recompute (its forward ops again) right before its `before` op when `checkpointed`.
// A value lives from its definition (graph inputs before the first step, the output gradients before the first
// backward step, a recomputed value anew at its recompute) to its last reader; the outputs of both functions are
// never freed. runCpuBackward and liveBytesPeak follow it, so the bytes the report gives are the runtime's.
struct ScheduleStep {
  const Op *op = nullptr;
  bool backward = false;   // a gradient op (else a forward op, run again when `recompute`)
  bool recompute = false;
  std::vector<std::string> defineBefore;  // inputs that come into being before this step
  std::vector<std::string> freeAfter;     // values whose life ends after this step
};
std::vector<ScheduleStep> backwardSchedule(const Plan &p, bool checkpointed);

// The peak of live activation bytes (B = 1, `tokens` rows in each token domain, as h3-plan-buffers' report) over the
// forward then the backward, values live from their definition to their last reader in either function (the
// forward's outputs to the end); with `checkpointed`, the plan's segments as runCpuBackward honours them. Weight
// gradients are left out (as from h3-plan-buffers' peak): they live from their op to the end either way.
int64_t liveBytesPeak(const Plan &p, int64_t tokens, bool checkpointed);

} // namespace h3c::plan
