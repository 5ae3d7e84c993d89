// The compiled plan (docs/contract.md section 5, schema "h3c-plan-v3"): everything a runtime needs to execute the
// model, and nothing of the compiler. This library owns the format: these structs, the one reader (plan/lib/read.cpp,
// strict and fail-closed, every error naming its JSON pointer) and the one writer (plan/lib/write.cpp). The compiler
// writes through it, both executors read through it; it links neither MLIR nor the kernel emitter.
//
// A plan folder holds plan.json and kernels/<id>.cu. Each kernel entry carries the exact CUDA source the runtime JIT-
// compiles, the NVRTC options, its hash and its launch ABI (block, dynamic shared memory, the grid as a function of
// the request's extents, and a typed parameter list), so a plan compiled on one machine runs on any machine that has
// the runtime.
#pragma once

#include "h3c/models/config.h"
#include "h3c/plan/extent.h"
#include "h3c/plan/ops.h"
#include "h3c/support/dtype.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace h3c::plan {

inline constexpr const char *kPlanSchema = "h3c-plan-v3";

// A value of the plan: rows in a symbolic domain, a fixed column count, a leading batch axis for token-domain
// activations, and the arena slot h3-plan-buffers assigned; a value a checkpoint segment recomputes (section 14) has
// a second slot for its second life, from its recompute to its last gradient reader (plan/slots.h). In a multi-rank plan (section 5.2) every value is what
// one rank holds: `cols` is the rank's width (a column-sharded value holds its slice of every segment) and rows in
// the domain Sr are the rank's range of S.
struct Value {
  std::string name;
  DType dtype = DType::F32;
  Domain rows = Domain::S;
  int64_t cols = 0;
  bool batch = false;
  int64_t slot = -1;  // -1: no slot
  int64_t recomputeSlot = -1;  // -1: not recomputed
};

struct Slot {
  int64_t id = 0;
  std::map<Domain, int64_t> bytesPerRow;  // row domain -> bytes per row (per batch item)
  int64_t fixedBytes = 0;
};

// The reduction order (section 4). kind None for ops that reduce nothing.
struct Order {
  OrderKind kind = OrderKind::None;
  int64_t kStep = 0, units = 0, lanes = 0, kvBlock = 0;  // the fields that apply to the kind
  int64_t unit = 0;  // row_units: the canonical rows of one unit partial (128)
  DType acc = DType::F32;
  DType p = DType::BF16;  // flash: the dtype P is rounded to before P V
  bool operator==(const Order &o) const {
    return kind == o.kind && kStep == o.kStep && units == o.units && lanes == o.lanes && kvBlock == o.kvBlock &&
           unit == o.unit && acc == o.acc && p == o.p;
  }
};

// Column segments: contiguous [begin, end) ranges that tile the full (tp = 1) columns from 0, in order. Over `parts`
// ranks, part j of a segment [b, e) is [b + j*(e-b)/parts, b + (j+1)*(e-b)/parts) (every segment splits evenly), and
// what rank j holds is the concatenation of its part of every segment.
using Segments = std::vector<std::pair<int64_t, int64_t>>;
// The full-width column ranges (in the full value's order) that part `part` of `parts` holds, in its local order.
Segments partOf(const Segments &segs, int64_t part, int64_t parts);

// How an op is divided over the tensor-parallel ranks, written out completely so that no executor derives it from
// names (section 5.2):
//   replicated: every rank computes the whole op (tp = 1 recorded);
//   column:     rank j computes part j of every output-column `segment` (the weight rows, stacked in the op's weight
//               order: qkv [Wq; Wk; Wv] has three segments, fc1 its value and gate halves, the AdaLN table its 18
//               chunks). The op's attrs, operands and kernel are the rank's: local widths (N, heads, H, F, ...).
struct Shard {
  ShardKind kind = ShardKind::Replicated;
  int64_t tp = 1;
  Segments segments;  // column only
};

// Every attribute an op kind may carry (section 5.1); `ops.h` lists which ones each kind requires. Executors read
// these typed fields; the JSON spelling exists only in the reader and the writer.
struct OpAttrs {
  int64_t K = 0, N = 0;
  Epilogue epilogue = Epilogue::None;
  int64_t chunk = 0, numChunks = 0, shiftChunk = 0, scaleChunk = 0, rowsPerTimestep = 0;
  RowIndex rowIndex = RowIndex::Adaln;
  double eps = 0, theta = 0, scale = 0;
  int64_t heads = 0, headDim = 0, rotaryDim = 0;
  Domain domain = Domain::S;
  int64_t H = 0, F = 0, cols = 0, videoCols = 0, audioCols = 0;
  int64_t freqDim = 0, hidden = 0, outDim = 0;
  // linear / qkv_linear: the width of the unmerged LoRA input "lora_t" (0: no LoRA path). The GEMM's chain runs over
  // x's k-chunks, then lora_t's against the up slot (docs/contract.md section 13).
  int64_t loraK = 0;
  // Gradient ops (section 14): rms_norm_grad's norm group (the row's width for rms_norm, head_dim for qk_norm);
  // attention_grad's kv_block, that of the forward attention whose row statistics it recomputes.
  int64_t group = 0, kvBlock = 0;
  // attention / attention_grad: 1 when the forward writes its row statistics (output "lse", f32 [rows, heads]) and
  // the backward reads them (input "lse") instead of rerunning the walk (h3-fuse-grad; section 14).
  int64_t lse = 0;
  // norm_modulate_grad / gate_residual_grad: 1 (the default, no key in the plan) when the op computes its AdaLN
  // table's gradient (output "dtable"; gate_residual_grad then reads "y" as well), 0 when nothing reads it (key
  // "table_grad": 0; h3-backward, section 14).
  int64_t tableGrad = 1;
  // linear with the swiglu epilogue: 1 when it also stores its own output [v | g] (bf16 [rows, N]) as the second
  // output "swiglu_x", the swiglu's x that the backward reads (h3-fuse training=true; key "swiglu_x": 1).
  int64_t swigluX = 0;
  // all_gather / split (section 5.2): the axis, the number of parts (sp for rows, tp for columns), the full width
  // `cols`, and for columns the segments of the full value.
  Axis axis = Axis::Rows;
  int64_t parts = 0;
  Segments segments;
  DType dtype = DType::F32, xDtype = DType::F32, wDtype = DType::BF16, outDtype = DType::F32;
  Shard shard;
};

struct Op {
  size_t index = 0;  // position in launch order
  OpKind kind = OpKind::Linear;
  std::vector<std::string> nodes;  // fingerprint node ids this op implements
  std::vector<std::string> in, out;  // value names at the kind's fixed operand positions (ops.h)
  std::vector<std::string> weights, biases;  // diffusers tensor names, in the order the kernel reads them
  // A gradient op that emitsWeightGrads: the tensors of weights then biases whose gradients it computes, in that
  // order (the trained ones, section 14: a frozen tensor gets none); its outputs end with one gradient per entry.
  // Empty for every other op.
  std::vector<std::string> grads;
  OpAttrs attrs;
  Order order;
  std::optional<std::string> kernel;  // null: the host computes it (runsOnHost) or the runtime (isLayoutOp)
  std::string where;                  // "plan.json#/functions/forward/ops/17", for messages

  const std::string &firstNode() const;  // "-" when none
};

// ---- kernels ----------------------------------------------------------------------------------------------------

// One dimension of a launch grid: ceil(extent / div), capped at maxPerSm * (the device's SM count) when maxPerSm > 0
// (persistent kernels).
struct GridDim {
  Extent extent = Extent::constant(1);
  int64_t div = 1;
  int64_t maxPerSm = 0;
};

struct Launch {
  std::array<int64_t, 3> block{256, 1, 1};
  int64_t smemBytes = 0;  // dynamic shared memory (> 48 KiB: the runtime raises the function's limit)
  std::array<GridDim, 3> grid;
  std::array<int64_t, 3> cluster{1, 1, 1};
  // Programmatic dependent launch (sm_90+): the kernel waits for the grids before it in the stream
  // (griddepcontrol.wait) before it touches global memory, so the runtime may launch it while the previous kernel
  // finishes (its CTAs take the SMs the previous one's last wave leaves). Timing only; a kernel without the wait must
  // never be launched so.
  bool gridDependency = false;
};

// Where a buffer parameter points: an operand of the op that launches the kernel (by position), or a weight.
enum class OperandRole { In, Out, Weight, Bias };

// A 2-D+ TMA descriptor the runtime encodes on the host (cuTensorMapEncodeTiled) for the operand it points at.
// Global dims and strides are extents of the request (innermost first, strides in bytes for dims >= 1).
struct TensorMapSpec {
  DType dtype = DType::BF16;
  std::vector<Extent> dims, strides;
  std::vector<int64_t> box;
  std::string swizzle = "128B";  // none | 32B | 64B | 128B
  std::string l2Promotion = "256B";  // none | 64B | 128B | 256B
  bool oobZero = true;               // out-of-bounds elements read as zero (else NaN fill)
  // The last byte the map addresses past its base at extents e, plus one (0 when a dimension is empty: nothing is
  // loaded). The reader and the runtime check a scratch map with it.
  int64_t spanBytes(const Extents &e) const;
};

// A typed kernel parameter, in the kernel signature's order.
//   buffer:     a device pointer to operand (role, index); `span` > 1: the kernel reads operands index..index+span-1
//               of that role as one contiguous array (the weight buffers guarantee the layout).
//   scalar:     a 64-bit integer whose value is `value` evaluated on the request's extents.
//   tensor_map: a 128-byte CUtensorMap (by value, __grid_constant__) describing the operand (with `span` > 1, the
//               operands index..index+span-1 as one matrix, as for buffers), or with `scratch` set the kernel's
//               scratch parameter of that name (a phase's output another phase reads by TMA: bf(g) of the Hopper
//               dX); such a map has no role, index or span.
//   scratch:    a device pointer to `value` bytes (evaluated on the request's extents) that belong to this launch of
//               the op: the kernel's phases pass values through them (attention's row statistics between its
//               backward's passes). Uninitialized: a phase writes every byte it or a later phase reads.
struct KernelParam {
  enum class Kind { Buffer, Scalar, TensorMap, Scratch };
  Kind kind = Kind::Buffer;
  std::string name;
  OperandRole role = OperandRole::In;
  int64_t index = 0, span = 1;
  Extent value;
  TensorMapSpec map;
  std::string scratch;  // tensor_map over a scratch parameter: its name (empty: over operand (role, index))
};

// A later launch of the same kernel module: another entry of the source, with its own geometry and the kernel's
// parameters. An op whose work needs a grid-wide barrier (a pass that reads what every CTA of the one before wrote)
// runs as phases, launched in order on one stream.
struct KernelPhase {
  std::string entry;
  Launch launch;
};

struct Kernel {
  std::string id, file, sha256, entry;
  std::string arch;                      // "sm_90a" | "sm_100a"
  std::vector<std::string> nvrtcOptions; // exactly what the runtime passes to nvrtcCompileProgram
  Launch launch;
  std::vector<KernelPhase> phases;  // launched after `entry`, in order (usually none)
  std::vector<KernelParam> params;
  std::string source;  // the CUDA text (read from `file` and checked against `sha256` when the plan is loaded)
};

// Weight buffers: every tensor an op reads lives in exactly one buffer; the tensors of a buffer are laid out back to
// back in the listed order (qkv: [Wq; Wk; Wv] so one GEMM reads them as one matrix). A runtime allocates one region
// per buffer; hot weight updates (later) replace tensors in place by name.
// `split` (tensor parallelism): the tensor's rows (dim 0; a bias's entries) form these segments and tensor-parallel
// rank j holds part j of each (partOf), back to back; empty = every rank holds the whole tensor. `shape` is always
// the checkpoint's (full) shape.
struct WeightTensor {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  Segments split;
  int64_t splitParts = 1;
  // An unmerged LoRA adapter slot (docs/contract.md section 13): no tensor of the checkpoint or the config; the
  // runtime holds it, zero until an adapter is loaded into it. BF16, [rows, cols] as the plan says.
  bool adapter = false;
  int64_t numel() const;
  // The shape rank j holds (dim 0 divided by splitParts when split).
  std::vector<int64_t> localShape() const;
};
struct WeightBuffer {
  std::string name;
  std::vector<WeightTensor> tensors;
};

// A function of the plan: its graph inputs, named outputs and ops in launch order. "forward", and with `h3c compile
// --backward` "backward" (docs/contract.md section 14): its inputs are the gradients of the forward's outputs
// ("@grad:unpack:sample", ...), it reads the forward's values it needs (saved activations: values of both functions,
// kept alive until the backward's last read), and its outputs name the gradients of the three activation inputs
// ("grad:@hidden_states" -> value) and of every weight tensor it trains ("grad:<tensor>" -> an F32 value, rows "1",
// cols = the tensor's element count).
// A checkpoint segment of the backward (docs/contract.md section 14, `h3c compile --checkpoint blocks`): one
// transformer block's forward ops, of which the forward keeps only the boundary (the values read after the segment)
// and `kept`; the values the backward reads from the segment are recomputed by rerunning `recompute` (the same ops,
// the same kernels: the same bits) right before backward op `before`, and live until their last backward reader
// (`last`, the last backward op reading one). plan/checkpoint.h computes and checks them.
struct Checkpoint {
  std::string segment;            // "transformer_blocks.3": the node-id prefix of the segment's ops
  size_t first = 0, end = 0;      // forward ops [first, end)
  std::vector<std::string> kept;  // what the recompute reads and does not define, in first-read order
  std::vector<size_t> recompute;  // forward op indices in [first, end), ascending
  size_t before = 0, last = 0;    // backward op indices: the first and the last reading a recomputed value
};

struct Function {
  std::string name;
  std::vector<std::string> inputs;             // "@hidden_states", ...
  std::map<std::string, std::string> outputs;  // "sample" -> "unpack:sample"
  std::vector<Op> ops;
  // The backward only: what it trains (`h3c compile --trainable`; plan/trainable.h patterns, {"*"} for all). The
  // outputs hold exactly the gradients of the tensors these select.
  std::vector<std::string> trainable;
  // The backward only: its checkpoint segments (empty: the forward keeps every value the backward reads).
  std::vector<Checkpoint> checkpoints;
};

struct Options {
  std::string arch = "sm_90a";
  int64_t sp = 1, tp = 1;
  bool fuse = true;
  bool wgmma = true;  // sm_90a: the bf16 linears and attention on the Hopper kernels (false: mma.sync; the same bits)
};

// The ranks of a plan (section 5.2): sp x tp, rank = sp_index * tp + tp_index (the tensor-parallel group of a rank is
// its tp neighbours). Sequence-parallel rank i holds rows [floor(i*S/sp), floor((i+1)*S/sp)) of every batch item's
// packed rows; tensor-parallel rank j holds part j of every column segment.
struct Rank {
  int64_t rank = 0, spIndex = 0, tpIndex = 0;
};
std::vector<Rank> rankGrid(int64_t sp, int64_t tp);
// [begin, end) of the S rows sequence-parallel rank i of sp holds.
std::pair<int64_t, int64_t> rankRows(int64_t spIndex, int64_t sp, int64_t S);

struct Plan {
  std::filesystem::path dir;  // the plan folder (kernel files are relative to it); empty for in-memory plans
  std::string planSha256;
  std::string fingerprintSha256;
  // The compiler that wrote the plan ({"version", "build"}: support/version.h); null for plans made in memory. Read
  // back as given, never interpreted.
  nlohmann::json producer;
  h3::Config config;
  Options options;
  std::vector<Rank> ranks;  // rankGrid(options.sp, options.tp) (the reader checks the plan lists exactly these)
  std::map<std::string, Value> values;
  std::vector<Slot> slots;
  std::vector<WeightBuffer> weights;
  std::map<std::string, Function> functions;
  std::map<std::string, Kernel> kernels;
  // Compiler statistics (ops, nodes, kernels, buffer report): written and read back as given, never interpreted.
  std::map<std::string, int64_t> stats;

  const Function &forward() const;  // functions.at("forward")
  const Function *backward() const;  // functions "backward", null when the plan has none
  const Value &value(const std::string &name) const;  // throws naming the value
  const Kernel &kernel(const Op &op) const;           // throws when the op has no kernel
  // The buffer holding `tensor` and the tensor's element offset in it; throws when no buffer lists it.
  std::pair<const WeightBuffer *, int64_t> weightLocation(const std::string &tensor) const;
  // The weight tensor named `tensor`; throws when no buffer lists it.
  const WeightTensor &weightTensor(const std::string &tensor) const;
  // For every value, the index of the last op of `fn` that reads it (SIZE_MAX for the function's outputs): lets
  // executors free activations as soon as they are dead.
  std::map<std::string, size_t> lastUse(const Function &fn) const;
};

} // namespace h3c::plan
