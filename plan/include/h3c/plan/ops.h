// The op kinds of a plan and, for each, its fixed operand positions, the attributes it must carry and the reduction
// order it must declare (docs/contract.md sections 3-5). Both executors and the kernel emitter address operands by
// these positions; nothing looks at value names or node-id suffixes to find an operand.
#pragma once

#include <string>
#include <vector>

namespace h3c::plan {

struct OpAttrs;

enum class OpKind {
  RopeTable, TimestepSinusoid, Linear, AdalnTable, QkvLinear, TimeEmbed, RmsNorm, NormModulate, QkNorm, Rope,
  QkNormRope, Attention, Swiglu, Silu, Residual, GateResidual, Pack, Unpack,
  // Layout ops (docs/contract.md section 5.2): they move rows or columns between the ranks of a multi-rank plan and
  // compute nothing. all_gather: every rank of a group receives the parts of all ranks (a copy, no arithmetic);
  // split: every rank keeps its own part of a value it holds in full (a local copy).
  AllGather, Split,
  // The down projection of an unmerged LoRA adapter (docs/contract.md section 13): t = bf(x A^T) over the stacked
  // adapter slots of one base linear, k_chunks. It implements no node of the model (an adapter is no part of the
  // fingerprint); its output is the base linear's last input ("lora_t"), which continues that linear's chain.
  LoraDown,
  // The backward's gradient ops (docs/contract.md section 14; dialect/include/h3c/Dialect/H3/H3GradOps.td): the ops of
  // functions.backward, one per forward node kind it differentiates, plus grad_add (the sum of a value's gradient
  // parts) and grad_round (bf(g), the bf16 rounding several linear gradients of one g read: h3-fuse-grad). Every
  // gradient is F32 (grad_round's output: bf16). An op that differentiates weights (emitsWeightGrads) lists, after
  // its activation outputs, one F32 value per tensor of its `weights` then `bias` lists: that tensor's gradient
  // ("grad:<tensor>").
  GradAdd, LinearGradX, LinearGradW, SwigluGrad, RmsNormGrad, NormModulateGrad, GateResidualGrad, RopeGrad,
  AttentionGrad, SiluGrad, AdalnTableGrad, PackGrad, UnpackGrad, GradRound,
};
// What a GEMM applies after its reduction: none, residual, gate_residual, swiglu (linear); qk_norm_rope (qkv_linear
// only: the per-head norm of q and k and their rope in the epilogue, docs/contract.md section 3).
enum class Epilogue { None, Residual, GateResidual, Swiglu, QkNormRope };
// Which AdaLN table row a packed row reads: adaln = ts_index * 3 + tag (blocks), timestep = ts_index (norm_out).
enum class RowIndex { Adaln, Timestep };
// How an op's work is divided over the tensor-parallel ranks: every rank computes all of it (replicated), or rank j
// computes slice j of every column segment (column).
enum class ShardKind { Replicated, Column };
// The axis a layout op moves: rows (the packed rows S, over the sequence-parallel group) or columns (over the
// tensor-parallel group).
enum class Axis { Rows, Cols };
// row_units (section 14): sums over token rows in units of 128 canonical rows of an item, folded in unit order, then
// the items in batch order (the backward's weight, bias, norm-weight and table gradients).
enum class OrderKind { None, KChunks, LaneTree, Flash, RowUnits };

const char *opKindName(OpKind k);
bool parseOpKind(const std::string &s, OpKind &out);
const std::vector<OpKind> &allOpKinds();
const char *epilogueName(Epilogue e);
bool parseEpilogue(const std::string &s, Epilogue &out);
const char *rowIndexName(RowIndex r);
bool parseRowIndex(const std::string &s, RowIndex &out);
int64_t rowsPerTimestep(RowIndex r);  // 3 (adaln) or 1 (timestep)
const char *shardKindName(ShardKind k);
bool parseShardKind(const std::string &s, ShardKind &out);
const char *axisName(Axis a);
bool parseAxis(const std::string &s, Axis &out);
const char *orderKindName(OrderKind k);
bool parseOrderKind(const std::string &s, OrderKind &out);

// The order kind an op kind must declare (None: it reduces nothing).
OrderKind requiredOrder(OpKind k);
// Ops computed on the host (rope_table, timestep_sinusoid): they never have a kernel.
bool runsOnHost(OpKind k);
// all_gather and split: no nodes, no weights, no order, no kernel (the runtime performs them), no shard.
bool isLayoutOp(OpKind k);
// The GEMM kinds (linear, qkv_linear, adaln_table): a column shard splits their weight rows (and biases); other
// column-sharded ops (the q/k norms) read per-head weights every rank holds whole.
bool splitsWeights(OpKind k);
// The backward's gradient ops (section 14): they run only in functions.backward, and only there.
bool isGradOp(OpKind k);
// Gradient ops whose outputs end with the gradients of the tensors they list (weights, then biases), one each.
bool emitsWeightGrads(OpKind k);
// Outputs the host computes even when the op has a kernel: pack's per-row metadata (positions, tags, ts_index), as
// output positions.
std::vector<size_t> hostOutputs(OpKind k);

// Operand names at their fixed positions, for an op of kind `k` with these attrs (the epilogue, row index and rotary
// width decide which optional operands exist). The names are the roles ("x", "residual", "table", "ts_index",
// "tags", "cos", ...) that kernels name their parameters after; the plan's `in`/`out` list value names in this order.
std::vector<std::string> inputRoles(OpKind k, const OpAttrs &a);
// The position of input `role` among inputRoles(k, a) (e.g. a linear_grad_x's "lora_t", after g and the residual),
// or -1 when the op has no such input.
int64_t inputIndex(OpKind k, const OpAttrs &a, const std::string &role);
// For a gradient op that emitsWeightGrads, the activation outputs only (its weight gradients follow them).
std::vector<std::string> outputRoles(OpKind k, const OpAttrs &a);

// The attrs an op kind carries in plan.json (every one required), beside the ones every op carries (out_dtype,
// shard, and x_dtype when it has inputs). Keys as spelled in JSON. A linear or qkv_linear with an unmerged LoRA
// path (attrs lora_k > 0) also carries "lora_k" and reads "lora_t" as its last input, the up slot as its last weight.
std::vector<std::string> attrKeys(OpKind k, const OpAttrs &a);
// The GEMM kinds that may carry an unmerged LoRA path (linear, qkv_linear).
bool takesLora(OpKind k);

} // namespace h3c::plan
