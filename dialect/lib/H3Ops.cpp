// Verifiers of the h3 ops: shapes (row domain, batch axis, columns), dtypes and attribute ranges, per
// docs/contract.md section 3, and the OrderedReduction interface (its verifier and each op's reduced extents).
// Every message starts with the op's first node id so a failure names the node.
#include "h3c/Dialect/H3/H3Dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include <set>

using namespace mlir;
using namespace h3c::h3ir;

#define GET_OP_CLASSES
#include "h3c/Dialect/H3/H3Ops.cpp.inc"

namespace {

InFlightDiagnostic err(Operation *op) {
  auto d = op->emitOpError();
  std::string n = firstNode(op);
  if (!n.empty()) d << "[" << n << "] ";
  return d;
}

ActType act(Value v) { return cast<ActType>(v.getType()); }

// nodes/values: the ledger needs every op to name its nodes and every result to have one plan name.
LogicalResult verifyCommon(Operation *op, bool nodesMayBeEmpty = false) {
  auto nodes = op->getAttrOfType<ArrayAttr>("nodes");
  auto values = op->getAttrOfType<ArrayAttr>("values");
  if (!nodesMayBeEmpty && nodes.empty()) return op->emitOpError() << "lists no fingerprint node ids in 'nodes'";
  std::set<std::string> seen;
  for (Attribute a : nodes) {
    auto s = cast<StringAttr>(a).str();
    if (s.empty()) return op->emitOpError() << "has an empty node id";
    if (!seen.insert(s).second) return err(op) << "lists node '" << s << "' twice";
  }
  // Every integer attribute of an h3 op is a size, index or count: negative values are rejected here, so the
  // unsigned getters ODS generates for I64Attr are safe to compare with signed extents below.
  if (auto props = dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))
    for (NamedAttribute na : props)
      if (auto i = dyn_cast<IntegerAttr>(na.getValue()); i && i.getType().isInteger(64) && i.getInt() < 0)
        return err(op) << na.getName().getValue() << " must not be negative, got " << i.getInt();
  if (values.size() != op->getNumResults())
    return err(op) << "has " << values.size() << " value names for " << op->getNumResults() << " results";
  for (Attribute a : values)
    if (cast<StringAttr>(a).getValue().empty()) return err(op) << "has an empty value name";
  return success();
}

LogicalResult sameRows(Operation *op, ActType a, ActType b, llvm::StringRef what) {
  if (a.getDomain() != b.getDomain() || a.getBatch() != b.getBatch())
    return err(op) << what << ": rows " << (a.getBatch() ? "B x " : "") << a.getDomain() << " vs "
                   << (b.getBatch() ? "B x " : "") << b.getDomain();
  return success();
}

LogicalResult expect(Operation *op, ActType t, llvm::StringRef what, int64_t cols, Type elt = {},
                     llvm::StringRef domain = "", std::optional<bool> batch = std::nullopt) {
  if (cols > 0 && t.getCols() != cols) return err(op) << what << " must have " << cols << " columns, got " << t.getCols();
  if (elt && t.getElementType() != elt) return err(op) << what << " must be " << elt << ", got " << t.getElementType();
  if (!domain.empty() && t.getDomain() != domain)
    return err(op) << what << " must have row domain " << domain << ", got " << t.getDomain();
  if (batch && t.getBatch() != *batch) return err(op) << what << (*batch ? " needs" : " must not have") << " a batch axis";
  return success();
}

bool isFloat(Type t) { return t.isBF16() || t.isF32(); }

LogicalResult weightCount(Operation *op, ArrayAttr a, size_t lo, size_t hi, llvm::StringRef what) {
  if (a.size() < lo || a.size() > hi)
    return err(op) << "'" << what << "' must list " << lo << (lo == hi ? "" : " to " + std::to_string(hi))
                   << " tensor names, got " << a.size();
  return success();
}

// The row metadata of an AdaLN row gather: adaln = ts_index*3 + tag (two I64 [S] operands), timestep = ts_index.
LogicalResult verifyRowMeta(Operation *op, RowIndex rowIndex, ValueRange meta, ActType rowsOf) {
  size_t want = rowIndex == RowIndex::adaln ? 2 : 1;
  if (meta.size() != want)
    return err(op) << "row_index '" << stringifyRowIndex(rowIndex) << "' needs " << want
                   << " row metadata operands, got " << meta.size();
  for (Value m : meta) {
    ActType t = act(m);
    if (t.getDomain() != rowsOf.getDomain() || t.getBatch() || t.getCols() != 1 || !t.getElementType().isInteger(64))
      return err(op) << "row metadata must be i64 [" << rowsOf.getDomain() << "] without a batch axis";
  }
  return success();
}

LogicalResult verifyTableGather(Operation *op, ActType table, int64_t chunkCols, int64_t numChunks,
                                std::initializer_list<int64_t> chunks, RowIndex rowIndex) {
  if (numChunks <= 0) return err(op) << "num_chunks must be positive";
  for (int64_t c : chunks)
    if (c < 0 || c >= numChunks) return err(op) << "chunk " << c << " out of range [0, " << numChunks << ")";
  if (table.getCols() != numChunks * chunkCols)
    return err(op) << "table must have " << numChunks << " x " << chunkCols << " columns, got " << table.getCols();
  if (!table.getElementType().isBF16() || table.getBatch())
    return err(op) << "table must be a bf16 AdaLN table without a batch axis";
  llvm::StringRef want = rowIndex == RowIndex::adaln ? "T3" : "T";
  if (table.getDomain() != want)
    return err(op) << "row_index '" << stringifyRowIndex(rowIndex) << "' needs a table with row domain " << want
                   << ", got " << table.getDomain();
  return success();
}

// The epilogue operands of h3.linear.
LogicalResult verifyEpilogue(Operation *op, Epilogue epilogue, ValueRange ops, ActType y,
                             std::optional<int64_t> chunk, std::optional<int64_t> numChunks,
                             std::optional<RowIndex> rowIndex) {
  bool gated = epilogue == Epilogue::gate_residual;
  if (gated != (chunk.has_value() && numChunks.has_value() && rowIndex.has_value()))
    return err(op) << "chunk, num_chunks and row_index are required with, and only with, epilogue gate_residual";
  switch (epilogue) {
  case Epilogue::qk_norm_rope: return err(op) << "epilogue 'qk_norm_rope' belongs to qkv_linear only";
  case Epilogue::none:
  case Epilogue::swiglu:
    if (!ops.empty())
      return err(op) << "epilogue '" << stringifyEpilogue(epilogue) << "' takes no operands, got " << ops.size();
    return success();
  case Epilogue::residual: {
    if (ops.size() != 1) return err(op) << "epilogue 'residual' takes the residual stream, got " << ops.size() << " operands";
    ActType x = act(ops[0]);
    if (failed(sameRows(op, x, y, "residual stream")) || failed(expect(op, x, "residual stream", y.getCols())))
      return failure();
    return success();
  }
  case Epilogue::gate_residual: {
    if (ops.size() < 3) return err(op) << "epilogue 'gate_residual' takes residual, table and row metadata";
    ActType x = act(ops[0]);
    if (failed(sameRows(op, x, y, "residual stream")) || failed(expect(op, x, "residual stream", y.getCols())))
      return failure();
    if (failed(verifyTableGather(op, act(ops[1]), y.getCols(), *numChunks, {*chunk}, *rowIndex))) return failure();
    return verifyRowMeta(op, *rowIndex, ops.drop_front(2), y);
  }
  }
  return success();
}

LogicalResult verifyHeads(Operation *op, ActType t, int64_t heads, int64_t headDim, llvm::StringRef what) {
  if (heads <= 0 || headDim <= 0) return err(op) << "heads and head_dim must be positive";
  if (t.getCols() != heads * headDim)
    return err(op) << what << " must have heads x head_dim = " << heads * headDim << " columns, got " << t.getCols();
  if (!t.getElementType().isBF16()) return err(op) << what << " must be bf16";
  return success();
}

} // namespace

LogicalResult RopeTableOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType pos = act(getPositions());
  Type i64 = IntegerType::get(getContext(), 64);
  // positions are F32: diffusers casts position_ids (any real dtype) to float32 before the rotary product.
  if (failed(expect(op, pos, "positions", 3, Float32Type::get(getContext()), "S", false)) ||
      failed(expect(op, act(getTextIndices()), "text_indices", 1, i64, "Nt", false)) ||
      failed(expect(op, act(getVideoIndices()), "video_indices", 1, i64, "Nv", false)) ||
      failed(expect(op, act(getAudioIndices()), "audio_indices", 1, i64, "Na", false)))
    return failure();
  int64_t r = getRotaryDim();
  if (r <= 0 || r % 6 != 0) return err(op) << "rotary_dim must be a positive multiple of 6 (3 axes x 2 halves), got " << r;
  if (!(getTheta().convertToDouble() > 0)) return err(op) << "theta must be positive";
  for (Value v : {getCos(), getSin()}) {
    if (failed(expect(op, act(v), "cos/sin", r, Float32Type::get(getContext()), pos.getDomain(), false)))
      return failure();
  }
  return success();
}

LogicalResult TimestepSinusoidOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  int64_t f = getFreqDim();
  if (f <= 0 || f % 2) return err(op) << "freq_dim must be positive and even, got " << f;
  Type f32 = Float32Type::get(getContext());
  if (failed(expect(op, act(getT()), "timestep", 1, f32, "T", false))) return failure();
  return expect(op, act(getY()), "embedding", f, f32, "T", false);
}

// An unmerged LoRA path (lora_k): the last operand `t` is a bf16 [x's rows, lora_k] value made by h3.lora_down from
// the same x, lora_k a positive multiple of 64, x and the weights bf16 (docs/contract.md section 13).
static LogicalResult verifyLoraInput(Operation *op, Value x, std::optional<uint64_t> loraK, Value t) {
  if (!loraK) return success();
  if (*loraK == 0 || *loraK % 64) return err(op) << "lora_k must be a positive multiple of 64, got " << *loraK;
  if (!act(x).getElementType().isBF16()) return err(op) << "an unmerged LoRA path needs a bf16 input";
  if (failed(expect(op, act(t), "LoRA input", int64_t(*loraK), BFloat16Type::get(op->getContext())))) return failure();
  if (failed(sameRows(op, act(x), act(t), "LoRA input"))) return failure();
  auto down = t.getDefiningOp<LoraDownOp>();
  if (!down || down.getX() != x) return err(op) << "the LoRA input must be h3.lora_down of the same x";
  return success();
}

LogicalResult LinearOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), y = act(getY());
  if (getK() <= 0 || getN() <= 0) return err(op) << "K and N must be positive";
  if (failed(expect(op, x, "input", getK()))) return failure();
  if (!isFloat(x.getElementType())) return err(op) << "input must be bf16 or f32";
  const size_t lora = getLoraK() ? 1 : 0;  // the up slot after W, t after the epilogue operands
  if (lora && getEpilogueOperands().empty()) return err(op) << "lora_k without the LoRA input operand";
  if (failed(weightCount(op, getWeight(), 1 + lora, 1 + lora, "weight")) ||
      failed(weightCount(op, getBias(), 0, 1, "bias")))
    return failure();
  if (lora && failed(verifyLoraInput(op, getX(), getLoraK(), getEpilogueOperands().back()))) return failure();
  if (failed(sameRows(op, x, y, "output"))) return failure();
  Epilogue epi = getEpilogue();
  if (!isFloat(y.getElementType())) return err(op) << "output must be bf16 or f32";
  int64_t outCols = getN();
  if (epi == Epilogue::swiglu) {
    if (getN() % 2) return err(op) << "epilogue swiglu needs an even N, got " << getN();
    outCols = getN() / 2;
  }
  if (y.getCols() != outCols) return err(op) << "output must have " << outCols << " columns, got " << y.getCols();
  // The swiglu's x kept beside y (h3-fuse training=true): the linear's own bf16 output, all N columns.
  if (Value sx = getSwigluX()) {
    if (epi != Epilogue::swiglu) return err(op) << "swiglu_x is a result of the swiglu epilogue only";
    if (failed(expect(op, act(sx), "swiglu_x", getN(), BFloat16Type::get(getContext()))) ||
        failed(sameRows(op, x, act(sx), "swiglu_x")))
      return failure();
  }
  return verifyEpilogue(op, epi, getEpilogueOperands().drop_back(lora), y, getChunk(), getNumChunks(), getRowIndex());
}

LogicalResult AdalnTableOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  Type f32 = Float32Type::get(getContext());
  if (failed(expect(op, act(getTemb()), "temb", getK(), f32, "T", false))) return failure();
  int64_t rows = getRowsPerTimestep();
  if (rows != 1 && rows != 3) return err(op) << "rows_per_timestep must be 1 or 3, got " << rows;
  if (getN() <= 0 || getN() % rows) return err(op) << "N = " << getN() << " is not divisible by " << rows << " rows";
  int64_t cols = getN() / rows;
  if (getNumChunks() <= 0 || cols % getNumChunks())
    return err(op) << cols << " columns per row are not divisible into " << getNumChunks() << " chunks";
  if (failed(weightCount(op, getWeight(), 1, 1, "weight")) || failed(weightCount(op, getBias(), 0, 1, "bias")))
    return failure();
  return expect(op, act(getTable()), "table", cols, BFloat16Type::get(getContext()), rows == 3 ? "T3" : "T", false);
}

static LogicalResult verifyRopeTables(Operation *op, ActType x, Value cos, Value sin, int64_t headDim,
                                      int64_t rotary);

LogicalResult QkvLinearOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX());
  if (failed(expect(op, x, "input", getK()))) return failure();
  const bool normRope = getEpilogue() == Epilogue::qk_norm_rope;
  if (getEpilogue() != Epilogue::none && !normRope)
    return err(op) << "qkv_linear's epilogue is none or qk_norm_rope, got '" << stringifyEpilogue(getEpilogue()) << "'";
  const size_t lora = getLoraK() ? 1 : 0;  // the up slot last, t after the rope tables
  const size_t nw = (normRope ? 5 : 3) + lora;  // [Wq, Wk, Wv(, norm_q.weight, norm_k.weight)(, up slot)]
  if (failed(weightCount(op, getWeight(), nw, nw, "weight")) || failed(weightCount(op, getBias(), 0, 3, "bias")))
    return failure();
  if (lora && getRopeTables().empty()) return err(op) << "lora_k without the LoRA input operand";
  if (lora && failed(verifyLoraInput(op, getX(), getLoraK(), getRopeTables().back()))) return failure();
  if (!getBias().empty() && getBias().size() != 3) return err(op) << "bias must list 0 or 3 tensors";
  for (Value v : {getQOut(), getKOut(), getVOut()}) {
    if (failed(sameRows(op, x, act(v), "q/k/v")) || failed(verifyHeads(op, act(v), getHeads(), getHeadDim(), "q/k/v")))
      return failure();
  }
  auto tables = getRopeTables().drop_back(lora);
  if (!normRope) {
    if (getEps() || getRotaryDim() || !tables.empty())
      return err(op) << "eps, rotary_dim and rope tables belong to the qk_norm_rope epilogue";
    return success();
  }
  if (!getEps() || !(getEps()->convertToDouble() > 0) || !getRotaryDim())
    return err(op) << "the qk_norm_rope epilogue needs a positive eps and rotary_dim";
  if (tables.empty()) {
    if (*getRotaryDim() != 0) return err(op) << "rotary_dim must be 0 without rope tables";
    return success();
  }
  if (tables.size() != 2) return err(op) << "rope tables are cos and sin, got " << tables.size() << " operands";
  return verifyRopeTables(op, x, tables[0], tables[1], getHeadDim(), *getRotaryDim());
}

LogicalResult LoraDownOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op, /*nodesMayBeEmpty=*/true))) return failure();
  if (!getNodes().empty()) return err(op) << "implements no fingerprint node ('nodes' must be empty)";
  if (getK() <= 0 || getN() <= 0 || getN() % 64) return err(op) << "K must be positive and N a positive multiple of 64";
  Type bf16 = BFloat16Type::get(getContext());
  if (failed(expect(op, act(getX()), "input", getK(), bf16))) return failure();
  if (failed(weightCount(op, getWeight(), 1, 1, "weight"))) return failure();
  if (failed(expect(op, act(getT()), "result", getN(), bf16))) return failure();
  return sameRows(op, act(getX()), act(getT()), "result");
}

LogicalResult TimeEmbedOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  Type f32 = Float32Type::get(getContext());
  if (getFreqDim() <= 0 || getFreqDim() % 2) return err(op) << "freq_dim must be positive and even";
  if (getHidden() <= 0) return err(op) << "hidden must be positive";
  if (failed(weightCount(op, getWeight(), 2, 2, "weight")) || failed(weightCount(op, getBias(), 0, 2, "bias")))
    return failure();
  // The host-computed time_proj sinusoid, not the raw timesteps (time_proj is its own op).
  if (failed(expect(op, act(getSinusoid()), "sinusoid", getFreqDim(), f32, "T", false))) return failure();
  return expect(op, act(getTemb()), "temb", getOutDim(), f32, "T", false);
}

LogicalResult RmsNormOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), y = act(getY());
  if (!(getEps().convertToDouble() > 0)) return err(op) << "eps must be positive";
  if (failed(weightCount(op, getWeight(), 0, 1, "weight")) || failed(sameRows(op, x, y, "output"))) return failure();
  if (!isFloat(x.getElementType())) return err(op) << "input must be bf16 or f32";
  return expect(op, y, "output", x.getCols(), BFloat16Type::get(getContext()));
}

LogicalResult NormModulateOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), y = act(getY());
  if (!(getEps().convertToDouble() > 0)) return err(op) << "eps must be positive";
  if (getShiftChunk() == getScaleChunk()) return err(op) << "shift and scale must be different chunks";
  if (failed(weightCount(op, getWeight(), 0, 1, "weight")) || failed(sameRows(op, x, y, "output"))) return failure();
  if (failed(expect(op, x, "input", 0, BFloat16Type::get(getContext())))) return failure();
  if (failed(verifyTableGather(op, act(getTable()), x.getCols(), getNumChunks(), {int64_t(getShiftChunk()), int64_t(getScaleChunk())},
                               getRowIndex())))
    return failure();
  if (failed(verifyRowMeta(op, getRowIndex(), getRowMeta(), x))) return failure();
  if (failed(expect(op, y, "output", x.getCols()))) return failure();
  if (!isFloat(y.getElementType())) return err(op) << "output must be bf16 or f32";
  return success();
}

LogicalResult QkNormOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  if (!(getEps().convertToDouble() > 0)) return err(op) << "eps must be positive";
  if (failed(weightCount(op, getWeight(), 1, 1, "weight"))) return failure();
  if (failed(verifyHeads(op, act(getX()), getHeads(), getHeadDim(), "input")) ||
      failed(verifyHeads(op, act(getY()), getHeads(), getHeadDim(), "output")))
    return failure();
  return sameRows(op, act(getX()), act(getY()), "output");
}

static LogicalResult verifyRopeTables(Operation *op, ActType x, Value cos, Value sin, int64_t headDim,
                                      int64_t rotary) {
  if (rotary <= 0 || rotary % 2 || rotary > headDim)
    return err(op) << "rotary_dim must be even and in (0, head_dim = " << headDim << "], got " << rotary;
  for (Value v : {cos, sin})
    if (failed(expect(op, act(v), "cos/sin", rotary, Float32Type::get(op->getContext()), x.getDomain(), false)))
      return failure();
  return success();
}

LogicalResult RopeOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX());
  if (failed(verifyHeads(op, x, getHeads(), getHeadDim(), "input")) ||
      failed(verifyHeads(op, act(getY()), getHeads(), getHeadDim(), "output")) ||
      failed(sameRows(op, x, act(getY()), "output")))
    return failure();
  return verifyRopeTables(op, x, getCos(), getSin(), getHeadDim(), getRotaryDim());
}

LogicalResult QkNormRopeOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  if (!(getEps().convertToDouble() > 0)) return err(op) << "eps must be positive";
  if (failed(weightCount(op, getWeight(), 2, 2, "weight"))) return failure();
  ActType q = act(getQ());
  for (Value v : {getQ(), getK(), getQOut(), getKOut()})
    if (failed(verifyHeads(op, act(v), getHeads(), getHeadDim(), "q/k")) || failed(sameRows(op, q, act(v), "q/k")))
      return failure();
  auto tables = getRopeTables();
  if (tables.empty()) {
    if (getRotaryDim() != 0) return err(op) << "rotary_dim must be 0 without rope tables";
    return success();
  }
  if (tables.size() != 2) return err(op) << "rope tables are cos and sin, got " << tables.size() << " operands";
  return verifyRopeTables(op, q, tables[0], tables[1], getHeadDim(), getRotaryDim());
}

// Attention's row statistics (lse): f32, one column per head, q's rows.
static LogicalResult rowStatistics(Operation *op, ActType lse, ActType q, uint64_t heads, llvm::StringRef what) {
  if (failed(expect(op, lse, what, int64_t(heads), Float32Type::get(op->getContext())))) return failure();
  return sameRows(op, q, lse, what);
}

LogicalResult AttentionOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType q = act(getQ()), k = act(getK());
  if (!q.getBatch()) return err(op) << "attention runs on token-domain (batched) rows";
  for (Value v : {getQ(), getK(), getV(), getO()})
    if (failed(verifyHeads(op, act(v), getHeads(), getHeadDim(), "q/k/v/o"))) return failure();
  if (failed(sameRows(op, q, act(getO()), "o")) || failed(sameRows(op, k, act(getV()), "v"))) return failure();
  // Sequence parallel: a rank's query rows (Sr) attend all keys of S (gathered); otherwise one domain.
  bool spQuery = q.getDomain() == "Sr" && k.getDomain() == "S" && q.getBatch() == k.getBatch();
  if (!spQuery && failed(sameRows(op, q, k, "k"))) return failure();
  if (Value lse = getLse()) return rowStatistics(op, act(lse), q, getHeads(), "lse");
  return success();
}

LogicalResult SwigluOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), y = act(getY());
  if (x.getCols() % 2) return err(op) << "input must have an even number of columns (value; gate), got " << x.getCols();
  if (failed(sameRows(op, x, y, "output")) || failed(expect(op, x, "input", 0, BFloat16Type::get(getContext()))))
    return failure();
  return expect(op, y, "output", x.getCols() / 2, BFloat16Type::get(getContext()));
}

LogicalResult SiluOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  if (getX().getType() != getY().getType()) return err(op) << "output type must equal the input type";
  if (!isFloat(act(getX()).getElementType())) return err(op) << "input must be bf16 or f32";
  return success();
}

LogicalResult ResidualOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), y = act(getY()), z = act(getZ());
  if (failed(sameRows(op, x, y, "y")) || failed(sameRows(op, x, z, "output"))) return failure();
  if (failed(expect(op, y, "y", x.getCols())) || failed(expect(op, z, "output", x.getCols(), BFloat16Type::get(getContext()))))
    return failure();
  return success();
}

LogicalResult GateResidualOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), y = act(getY()), z = act(getZ());
  if (failed(sameRows(op, x, y, "y")) || failed(sameRows(op, x, z, "output"))) return failure();
  if (failed(expect(op, y, "y", x.getCols())) || failed(expect(op, z, "output", x.getCols(), BFloat16Type::get(getContext()))))
    return failure();
  if (failed(verifyTableGather(op, act(getTable()), x.getCols(), getNumChunks(), {int64_t(getChunk())}, getRowIndex())))
    return failure();
  return verifyRowMeta(op, getRowIndex(), getRowMeta(), x);
}

LogicalResult PackOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  MLIRContext *c = getContext();
  Type i64 = IntegerType::get(c, 64), bf16 = BFloat16Type::get(c), f32 = Float32Type::get(c);
  int64_t h = act(getText()).getCols();
  if (failed(expect(op, act(getText()), "text", h, {}, "Nt", true)) ||
      failed(expect(op, act(getVideo()), "video", h, {}, "Nv", true)) ||
      failed(expect(op, act(getAudio()), "audio", h, {}, "Na", true)) ||
      failed(expect(op, act(getVideoIndices()), "video_indices", 1, i64, "Nv", false)) ||
      failed(expect(op, act(getAudioIndices()), "audio_indices", 1, i64, "Na", false)) ||
      failed(expect(op, act(getTextIndices()), "text_indices", 1, i64, "Nt", false)) ||
      failed(expect(op, act(getPositionIds()), "position_ids", 3, f32, "S", false)) ||
      failed(expect(op, act(getTokenTags()), "token_tags", 1, i64, "S", false)) ||
      failed(expect(op, act(getTimestepIndices()), "timestep_indices", 1, i64, "S", false)) ||
      failed(expect(op, act(getX()), "packed rows", h, bf16, "S", true)) ||
      failed(expect(op, act(getPositions()), "positions", 3, f32, "S", false)) ||
      failed(expect(op, act(getTags()), "tags", 1, i64, "S", false)) ||
      failed(expect(op, act(getTsIndex()), "ts_index", 1, i64, "S", false)))
    return failure();
  return success();
}

LogicalResult UnpackOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType v = act(getVideo()), a = act(getAudio());
  if (failed(expect(op, v, "video head", 0, {}, "S", true)) || failed(expect(op, a, "audio head", 0, {}, "S", true)))
    return failure();
  if (failed(expect(op, act(getSample()), "sample", v.getCols(), v.getElementType(), "Nv", true)) ||
      failed(expect(op, act(getAudioSample()), "audio_sample", a.getCols(), a.getElementType(), "Na", true)))
    return failure();
  for (Value m : getRowMeta())
    if (!act(m).getElementType().isInteger(64) || act(m).getBatch()) return err(op) << "row metadata must be i64";
  return success();
}

// ---- layout ops ----

namespace {

// all_gather / split: `full` is the whole value, `part` what one rank holds (docs/contract.md section 5.2).
LogicalResult verifyLayout(Operation *op, ActType part, ActType full, Axis axis, int64_t parts, int64_t segments) {
  if (failed(verifyCommon(op, /*nodesMayBeEmpty=*/true))) return failure();
  if (!op->getAttrOfType<ArrayAttr>("nodes").empty()) return err(op) << "a layout op implements no node";
  if (parts < 2) return err(op) << "parts must be >= 2, got " << parts;
  if (part.getElementType() != full.getElementType() || part.getBatch() != full.getBatch())
    return err(op) << "part and full value differ in dtype or batch axis";
  if (axis == Axis::rows) {
    if (segments != 1) return err(op) << "a rows " << op->getName().stripDialect() << " has no column segments";
    if (part.getDomain() != "Sr" || full.getDomain() != "S")
      return err(op) << "moves between a rank's rows (Sr) and all of S, got " << part.getDomain() << " and "
                     << full.getDomain();
    if (part.getCols() != full.getCols()) return err(op) << "a rows " << op->getName().stripDialect() << " keeps the columns";
    return success();
  }
  if (part.getDomain() != full.getDomain()) return err(op) << "a cols " << op->getName().stripDialect() << " keeps the rows";
  if (segments < 1 || full.getCols() % (segments * parts))
    return err(op) << full.getCols() << " columns do not form " << segments << " segments of " << parts << " parts";
  if (part.getCols() * parts != full.getCols())
    return err(op) << "each of " << parts << " ranks holds " << full.getCols() / parts << " of " << full.getCols()
                   << " columns, got " << part.getCols();
  return success();
}

} // namespace

LogicalResult AllGatherOp::verify() {
  return verifyLayout(getOperation(), act(getPart()), act(getFull()), getAxis(), getParts(), getSegments());
}

LogicalResult SplitOp::verify() {
  return verifyLayout(getOperation(), act(getPart()), act(getFull()), getAxis(), getParts(), getSegments());
}

// ---- OrderedReduction ----

LogicalResult h3c::h3ir::detail::verifyOrderedReduction(Operation *op) {
  auto red = cast<OrderedReduction>(op);
  OrderAttr order = red.getOrderAttr();
  if (order && order.getKind() != red.getRequiredOrderKind())
    return err(op) << "carries order '" << stringifyOrderKind(order.getKind()) << "' but needs '"
                   << stringifyOrderKind(red.getRequiredOrderKind()) << "'";
  return success();
}

SmallVector<int64_t> LinearOp::getReducedExtents() { return {int64_t(getK())}; }
SmallVector<int64_t> AdalnTableOp::getReducedExtents() { return {int64_t(getK())}; }
SmallVector<int64_t> QkvLinearOp::getReducedExtents() { return {int64_t(getK())}; }
SmallVector<int64_t> LoraDownOp::getReducedExtents() { return {int64_t(getK())}; }
// linear_1 reduces the sinusoid's freq_dim channels, linear_2 the hidden ones.
SmallVector<int64_t> TimeEmbedOp::getReducedExtents() { return {int64_t(getFreqDim()), int64_t(getHidden())}; }
SmallVector<int64_t> RmsNormOp::getReducedExtents() { return {act(getX()).getCols()}; }
SmallVector<int64_t> NormModulateOp::getReducedExtents() { return {act(getX()).getCols()}; }
SmallVector<int64_t> QkNormOp::getReducedExtents() { return {int64_t(getHeadDim())}; }
SmallVector<int64_t> QkNormRopeOp::getReducedExtents() { return {int64_t(getHeadDim())}; }
// q.k over head_dim; the softmax and P.V sums run over the key rows, a symbolic row domain.
SmallVector<int64_t> AttentionOp::getReducedExtents() { return {int64_t(getHeadDim())}; }

// ---- gradient ops (H3GradOps.td; docs/contract.md section 14) ----

namespace {

// A gradient: f32, the rows and columns of the forward value it is the gradient of.
LogicalResult gradOf(Operation *op, Value grad, ActType of, llvm::StringRef what, bool mayRound = false) {
  ActType g = act(grad);
  if (!g.getElementType().isF32() && !(mayRound && g.getElementType().isBF16()))
    return err(op) << what << " must be f32" << (mayRound ? " (or bf16: its rounding fused by h3-fuse-grad)" : "")
                   << ", got " << g.getElementType();
  if (failed(sameRows(op, g, of, what))) return failure();
  return expect(op, g, what, of.getCols());
}

// `grads` names the gradients the op computes: "grad:<tensor>" for tensors of its weight, then bias lists, in that
// order; a frozen tensor (h3-backward's `trainable`, docs/contract.md section 14) is left out.
LogicalResult gradNames(Operation *op, ArrayAttr grads, ArrayAttr weight, ArrayAttr bias) {
  std::vector<std::string> listed;
  for (ArrayAttr l : {weight, bias})
    for (Attribute t : l) listed.push_back("grad:" + cast<StringAttr>(t).str());
  size_t next = 0;
  for (Attribute a : grads) {
    const std::string g = cast<StringAttr>(a).str();
    while (next < listed.size() && listed[next] != g) ++next;
    if (next == listed.size())
      return err(op) << "'grads' must name gradients of its weight, then bias tensors (\"grad:<tensor>\"), in that "
                        "order, each once; '" << g << "' is not the next of them";
    ++next;
  }
  return success();
}

} // namespace

LogicalResult GradAddOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  if (getA().getType() != getB().getType() || getA().getType() != getC().getType())
    return err(op) << "operands and result must have one type";
  return expect(op, act(getC()), "result", 0, Float32Type::get(getContext()));
}

LogicalResult GradRoundOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType g = act(getG()), gb = act(getGb());
  if (failed(expect(op, g, "g", 0, Float32Type::get(getContext()))) ||
      failed(expect(op, gb, "result", g.getCols(), BFloat16Type::get(getContext()))))
    return failure();
  return sameRows(op, g, gb, "result");
}

// A linear gradient's g: F32, or bf16 (h3.grad_round's bf(g)).
static LogicalResult gradOperand(Operation *op, ActType g, int64_t N) {
  if (failed(expect(op, g, "g", N))) return failure();
  if (!isFloat(g.getElementType())) return err(op) << "g must be f32 (or bf16: an h3.grad_round result)";
  return success();
}

LogicalResult LinearGradXOp::verify() {
  Operation *op = getOperation();
  const size_t lora = getLoraT() ? 1 : 0;
  if (failed(verifyCommon(op)) || failed(weightCount(op, getWeight(), 1 + lora, 1 + lora, "weight"))) return failure();
  ActType g = act(getG()), dx = act(getDx());
  if (failed(gradOperand(op, g, int64_t(getN())))) return failure();
  if (failed(sameRows(op, g, dx, "dx"))) return failure();
  if (Value r = getResidual(); r && r.getType() != getDx().getType())
    return err(op) << "residual must have dx's type (the part of the gradient dX is added to)";
  // The fused LoRA down path's dX (h3-fuse-grad): lora_t is bf(dt) [rows, lora_k], one k-block of the GEMM.
  if (bool(getLoraK()) != bool(lora)) return err(op) << "lora_t and lora_k come together";
  if (lora) {
    const int64_t L = int64_t(*getLoraK());
    if (L <= 0 || L > 64 || L % 16) return err(op) << "lora_k must be 16, 32, 48 or 64 (one k-block), got " << L;
    if (failed(expect(op, act(getLoraT()), "lora_t", L, BFloat16Type::get(getContext()))) ||
        failed(sameRows(op, g, act(getLoraT()), "lora_t")))
      return failure();
  }
  // swiglu_grad taken in (h3-fuse-grad): dx is its dx over x = [v | g] [rows, 2K], F32 or bf16 (its fused rounding).
  if (Value sx = getSwigluX()) {
    if (getResidual()) return err(op) << "swiglu_x and residual do not come together (swiglu_grad's dy is the dX alone)";
    if (failed(expect(op, act(sx), "swiglu_x", 2 * int64_t(getK()), BFloat16Type::get(getContext()))) ||
        failed(sameRows(op, g, act(sx), "swiglu_x")))
      return failure();
    return gradOf(op, getDx(), act(sx), "dx", /*mayRound=*/true);
  }
  // dx f32, or bf16 (h3-fuse-grad: the rounding of the grad_round that alone read it, folded in).
  if (!dx.getElementType().isF32() && !dx.getElementType().isBF16())
    return err(op) << "dx must be f32 (or bf16: its rounding fused by h3-fuse-grad), got " << dx.getElementType();
  return expect(op, dx, "dx", int64_t(getK()));
}

bool h3c::h3ir::computesBiasGradient(LinearGradWOp op) {
  if (op.getBias().empty()) return false;
  const std::string name = "grad:" + cast<StringAttr>(op.getBias()[0]).str();
  return llvm::any_of(op.getGrads(), [&](Attribute a) { return cast<StringAttr>(a).getValue() == name; });
}

LogicalResult LinearGradWOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op)) || failed(weightCount(op, getWeight(), 1, 1, "weight")) ||
      failed(weightCount(op, getBias(), 0, 1, "bias")) || failed(gradNames(op, getGrads(), getWeight(), getBias())))
    return failure();
  if (getGrads().empty()) return err(op) << "computes no gradient: every tensor it differentiates is frozen";
  ActType g = act(getG()), x = act(getX());
  if (failed(gradOperand(op, g, int64_t(getN()))) || failed(expect(op, x, "x", int64_t(getK()))) ||
      failed(sameRows(op, g, x, "x")))
    return failure();
  if (g.getElementType().isBF16() && computesBiasGradient(*this))
    return err(op) << "a bias gradient sums the F32 g: g must be f32";
  if (!isFloat(x.getElementType())) return err(op) << "x must be bf16 or f32";
  return success();
}

LogicalResult SwigluGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX()), dy = act(getDy());
  if (x.getCols() % 2) return err(op) << "x must have an even number of columns (value; gate), got " << x.getCols();
  if (failed(expect(op, dy, "dy", x.getCols() / 2, Float32Type::get(getContext()))) || failed(sameRows(op, x, dy, "dy")))
    return failure();
  return gradOf(op, getDx(), x, "dx", /*mayRound=*/true);
}

LogicalResult RmsNormGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  if (!(getEps().convertToDouble() > 0)) return err(op) << "eps must be positive";
  ActType x = act(getX());
  if (getGroup() == 0 || x.getCols() % int64_t(getGroup()))
    return err(op) << "group " << getGroup() << " must divide the " << x.getCols() << " columns";
  if (failed(weightCount(op, getWeight(), 0, 1, "weight")) || failed(gradNames(op, getGrads(), getWeight(), ArrayAttr::get(getContext(), {}))))
    return failure();
  if (failed(gradOf(op, getDy(), x, "dy")) || failed(gradOf(op, getDx(), x, "dx", /*mayRound=*/true))) return failure();
  // A rope_grad folded in (h3-fuse-grad): its tables and width, over a qk_norm's heads.
  if (getRopeTables().empty() != !getRotaryDim())
    return err(op) << "rope_tables and rotary_dim come together (the rope_grad folded in) or not at all";
  if (getRopeTables().empty()) return success();
  if (getRopeTables().size() != 2) return err(op) << "rope_tables are the rope's cos and sin";
  return verifyRopeTables(op, act(getDy()), getRopeTables()[0], getRopeTables()[1], getGroup(), *getRotaryDim());
}

LogicalResult NormModulateGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  if (!(getEps().convertToDouble() > 0)) return err(op) << "eps must be positive";
  if (getShiftChunk() == getScaleChunk()) return err(op) << "shift and scale must be different chunks";
  if (failed(weightCount(op, getWeight(), 0, 1, "weight")) || failed(gradNames(op, getGrads(), getWeight(), ArrayAttr::get(getContext(), {}))))
    return failure();
  ActType x = act(getX()), table = act(getTable());
  if (failed(verifyTableGather(op, table, x.getCols(), getNumChunks(),
                               {int64_t(getShiftChunk()), int64_t(getScaleChunk())}, getRowIndex())) ||
      failed(verifyRowMeta(op, getRowIndex(), getRowMeta(), x)) || failed(gradOf(op, getDx(), x, "dx")))
    return failure();
  if (failed(expect(op, act(getDy()), "dy", x.getCols(), Float32Type::get(getContext()))) ||
      failed(sameRows(op, act(getDy()), x, "dy")))
    return failure();
  // h3-fuse-grad's residual: the other part of dx's sum, a gradient of x's shape (F32), as dx is.
  if (Value r = getResidual()) {
    if (failed(gradOf(op, r, x, "residual"))) return failure();
    if (act(getDx()).getElementType() != act(r).getElementType())
      return err(op) << "the residual and dx (their sum) have one dtype";
  }
  return getDtable() ? gradOf(op, getDtable(), table, "dtable") : success();
}

LogicalResult GateResidualGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  // y serves the table's gradient only (dgate = the sums of dz * y): the two come together or not at all.
  if (!getY() != !getDtable()) return err(op) << "y and dtable come together (the table's gradient) or not at all";
  // The shape of the forward's y: y's own, or dz's (its gradient) where the op reads no y.
  ActType y = act(getY() ? getY() : getDz()), table = act(getTable());
  if (failed(verifyTableGather(op, table, y.getCols(), getNumChunks(), {int64_t(getChunk())}, getRowIndex())) ||
      failed(verifyRowMeta(op, getRowIndex(), getRowMeta(), y)) || failed(gradOf(op, getDz(), y, "dz")) ||
      failed(gradOf(op, getDy(), y, "dy", /*mayRound=*/true)))
    return failure();
  return getDtable() ? gradOf(op, getDtable(), table, "dtable") : success();
}

LogicalResult RopeGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType dy = act(getDy());
  if (dy.getCols() != int64_t(getHeads() * getHeadDim()))
    return err(op) << "dy must have heads x head_dim = " << getHeads() * getHeadDim() << " columns";
  if (failed(gradOf(op, getDx(), dy, "dx")) || failed(gradOf(op, getDy(), dy, "dy"))) return failure();
  return verifyRopeTables(op, dy, getCos(), getSin(), getHeadDim(), getRotaryDim());
}

LogicalResult AttentionGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType q = act(getQ());
  if (!q.getBatch()) return err(op) << "attention runs on token-domain (batched) rows";
  for (Value v : {getQ(), getK(), getV(), getO()})
    if (failed(verifyHeads(op, act(v), getHeads(), getHeadDim(), "q/k/v/o")) || failed(sameRows(op, q, act(v), "q/k/v/o")))
      return failure();
  if (failed(gradOf(op, getDo_(), q, "do")) || failed(gradOf(op, getDq(), q, "dq")) ||
      failed(gradOf(op, getDk(), q, "dk")) || failed(gradOf(op, getDv(), q, "dv", /*mayRound=*/true)))
    return failure();
  if (Value lse = getLse()) return rowStatistics(op, act(lse), q, getHeads(), "lse");
  return success();
}

LogicalResult SiluGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType x = act(getX());
  if (!x.getElementType().isF32()) return err(op) << "x must be f32 (the time embedder's silu)";
  return failure(failed(gradOf(op, getDy(), x, "dy")) || failed(gradOf(op, getDx(), x, "dx")));
}

LogicalResult AdalnTableGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op)) || failed(weightCount(op, getWeight(), 1, 1, "weight")) ||
      failed(weightCount(op, getBias(), 0, 1, "bias")) || failed(gradNames(op, getGrads(), getWeight(), getBias())))
    return failure();
  const int64_t rows = getRowsPerTimestep();
  if ((rows != 1 && rows != 3) || getN() % rows) return err(op) << "rows_per_timestep must be 1 or 3 and divide N";
  Type f32 = Float32Type::get(getContext());
  if (failed(expect(op, act(getTemb()), "temb", getK(), f32, "T", false)) ||
      failed(expect(op, act(getDtable()), "dtable", getN() / rows, f32, rows == 3 ? "T3" : "T", false)))
    return failure();
  return gradOf(op, getDtemb(), act(getTemb()), "dtemb");
}

LogicalResult PackGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  ActType dx = act(getDx());
  Type f32 = Float32Type::get(getContext());
  if (failed(expect(op, dx, "dx", 0, f32, "S", true))) return failure();
  const std::pair<Value, const char *> parts[] = {{getDtext(), "Nt"}, {getDvideo(), "Nv"}, {getDaudio(), "Na"}};
  for (auto [v, domain] : parts)
    if (failed(expect(op, act(v), std::string("d") + domain, dx.getCols(), f32, domain, true))) return failure();
  return success();
}

LogicalResult UnpackGradOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyCommon(op))) return failure();
  Type f32 = Float32Type::get(getContext());
  ActType s = act(getDsample()), a = act(getDaudioSample());
  if (failed(expect(op, s, "dsample", 0, f32, "Nv", true)) || failed(expect(op, a, "daudio_sample", 0, f32, "Na", true)) ||
      failed(expect(op, act(getDvideo()), "dvideo", s.getCols(), f32, "S", true)) ||
      failed(expect(op, act(getDaudio()), "daudio", a.getCols(), f32, "S", true)))
    return failure();
  return success();
}

// dX reduces over the weight's N output features; the row_units sums run over a symbolic row domain.
SmallVector<int64_t> LinearGradXOp::getReducedExtents() { return {int64_t(getN())}; }
SmallVector<int64_t> LinearGradWOp::getReducedExtents() { return {}; }
SmallVector<int64_t> RmsNormGradOp::getReducedExtents() { return {int64_t(getGroup())}; }
SmallVector<int64_t> NormModulateGradOp::getReducedExtents() { return {act(getX()).getCols()}; }
SmallVector<int64_t> GateResidualGradOp::getReducedExtents() { return {}; }
SmallVector<int64_t> AttentionGradOp::getReducedExtents() { return {int64_t(getHeadDim())}; }
SmallVector<int64_t> AdalnTableGradOp::getReducedExtents() { return {int64_t(getN())}; }
