// Fingerprint -> h3 module. Value types come from the node table (row domain and dtype of every output) and the
// kind-specific attrs (column counts); weights from the node's tensor list. The op's operands are the node's inputs
// in the fingerprint's operand order, which is the order the h3 ops declare.
#include "h3c/Codegen/Importer.h"

#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/support/error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "mlir/IR/Diagnostics.h"

#include <map>

using namespace mlir;
using nlohmann::json;

namespace h3c::codegen {

void loadDialects(MLIRContext &ctx) {
  ctx.getOrLoadDialect<h3ir::H3Dialect>();
  ctx.getOrLoadDialect<func::FuncDialect>();
}

namespace {

bool tokenDomain(const std::string &d) { return d == "S" || d == "Nt" || d == "Nv" || d == "Na"; }

class Importer {
public:
  Importer(MLIRContext &ctx, const h3::Fingerprint &fp) : ctx_(ctx), fp_(fp), b_(&ctx) {}

  OwningOpRef<ModuleOp> run() {
    Location loc = FileLineColLoc::get(&ctx_, "fingerprint.json", 0, 0);
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    auto *dialect = ctx_.getLoadedDialect<h3ir::H3Dialect>();
    dialect->getConfigNameAttrHelper().setAttr(*module, b_.getStringAttr(fp_.configName));

    // Graph inputs -> function arguments.
    std::vector<Type> argTypes;
    std::vector<std::string> argNames;
    for (const auto &g : h3::graphInputs(fp_.config)) {
      std::string where = "graph input " + g.name;
      if (g.shape.empty() || g.shape.size() > 3) fail(where, "unsupported shape rank {}", g.shape.size());
      bool batch = g.shape[0] == "B";
      std::vector<std::string> dims(g.shape.begin() + (batch ? 1 : 0), g.shape.end());
      if (dims.empty()) fail(where, "no row domain");
      int64_t cols = 1;
      if (dims.size() == 2) cols = parseInt(dims[1], where);
      if (dims.size() > 2) fail(where, "unsupported shape");
      argTypes.push_back(actType(dims[0], cols, g.dtype, batch, where));
      argNames.push_back(g.name);
    }
    Type outV = actType("Nv", fp_.config.videoPatchDim(), DType::F32, true, "sample");
    Type outA = actType("Na", fp_.config.audio_in_channels, DType::F32, true, "audio_sample");
    auto fnType = b_.getFunctionType(argTypes, {outV, outA});
    b_.setInsertionPointToEnd(module->getBody());
    auto fn = func::FuncOp::create(b_, loc, "forward", fnType);
    Block *body = fn.addEntryBlock();
    StringAttr nameAttr = dialect->getNameAttrHelper().getName();
    for (size_t i = 0; i < argNames.size(); ++i) {
      fn.setArgAttr(i, nameAttr, b_.getStringAttr(argNames[i]));
      values_[argNames[i]] = body->getArgument(i);
    }
    fn.setResultAttr(0, nameAttr, b_.getStringAttr("sample"));
    fn.setResultAttr(1, nameAttr, b_.getStringAttr("audio_sample"));
    b_.setInsertionPointToEnd(body);

    for (size_t i = 0; i < fp_.nodes.size(); ++i) importNode(fp_.nodes[i], i);

    Value sample = lookup("unpack:sample", "graph output sample");
    Value audio = lookup("unpack:audio_sample", "graph output audio_sample");
    if (sample.getType() != outV || audio.getType() != outA)
      fail("fingerprint graph outputs", "unpack outputs do not have the sample / audio_sample types");
    func::ReturnOp::create(b_, loc, ValueRange{sample, audio});

    // Verifier failures are collected and reported as one h3c::Error naming the node (op location).
    std::string diag;
    {
      ScopedDiagnosticHandler h(&ctx_, [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error) {
          llvm::raw_string_ostream os(diag);
          os << d.getLocation() << ": " << d.str() << "\n";
        }
        return success();
      });
      if (failed(verify(*module))) fail("fingerprint import", "the h3 module does not verify:\n{}", diag);
    }
    return module;
  }

private:
  using DType = h3c::DType;

  Type elt(DType d, const std::string &where) {
    switch (d) {
    case DType::BF16: return b_.getBF16Type();
    case DType::F32: return b_.getF32Type();
    case DType::I64: return b_.getI64Type();
    case DType::I32: return b_.getI32Type();
    default: fail(where, "unsupported dtype {}", std::string(dtypeName(d)));
    }
  }

  Type actType(const std::string &domain, int64_t cols, DType d, bool batch, const std::string &where) {
    if (!h3ir::isRowDomain(domain)) fail(where, "unknown row domain '{}'", domain);
    if (cols <= 0) fail(where, "non-positive column count {}", cols);
    return h3ir::ActType::get(&ctx_, domain, cols, elt(d, where), batch);
  }

  static int64_t parseInt(const std::string &s, const std::string &where) {
    try {
      size_t pos = 0;
      long long v = std::stoll(s, &pos);
      if (pos != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception &) {
      fail(where, "expected an integer dimension, got '{}'", s);
    }
  }

  Value lookup(const std::string &name, const std::string &where) {
    auto it = values_.find(name);
    if (it == values_.end()) fail(where, "reads value '{}' before any node defines it", name);
    return it->second;
  }

  const json &attr(const h3::Node &n, const char *key) {
    if (!n.attrs.is_object() || !n.attrs.contains(key)) fail("node " + n.id, "missing attr '{}'", key);
    return n.attrs.at(key);
  }
  int64_t ai(const h3::Node &n, const char *key) {
    const json &v = attr(n, key);
    if (!v.is_number_integer()) fail("node " + n.id + " attr " + key, "expected an integer");
    return v.get<int64_t>();
  }
  double af(const h3::Node &n, const char *key) {
    const json &v = attr(n, key);
    if (!v.is_number()) fail("node " + n.id + " attr " + key, "expected a number");
    return v.get<double>();
  }
  std::string as(const h3::Node &n, const char *key) {
    const json &v = attr(n, key);
    if (!v.is_string()) fail("node " + n.id + " attr " + key, "expected a string");
    return v.get<std::string>();
  }

  ArrayAttr strs(const std::vector<std::string> &v) {
    std::vector<Attribute> a;
    for (const auto &s : v) a.push_back(b_.getStringAttr(s));
    return b_.getArrayAttr(a);
  }

  // The column count of output `i` of node `n` given its input types.
  int64_t outCols(const h3::Node &n, size_t i, const std::vector<Value> &in) {
    const std::string &k = n.kind;
    auto inCols = [&](size_t j) {
      if (j >= in.size()) fail("node " + n.id, "has too few inputs for kind {}", k);
      return cast<h3ir::ActType>(in[j].getType()).getCols();
    };
    if (k == "rope_table") return ai(n, "rotary_dim");
    if (k == "linear") return ai(n, "out_features");
    if (k == "adaln_table") {
      int64_t rows = ai(n, "rows_per_timestep");
      if (rows <= 0 || ai(n, "out_features") % rows) fail("node " + n.id, "out_features not divisible by rows_per_timestep");
      return ai(n, "out_features") / rows;
    }
    if (k == "swiglu") return ai(n, "ffn_dim");
    if (k == "timestep_sinusoid") return ai(n, "dim");
    if (k == "pack") return i == 0 ? ai(n, "dim") : i == 1 ? 3 : 1;
    if (k == "unpack") {
      const json &d = attr(n, "dims");
      if (!d.is_array() || d.size() != 2 || i >= 2 || !d[i].is_number_integer()) fail("node " + n.id, "attr dims must be two integers");
      return d[i].get<int64_t>();
    }
    if (k == "rms_norm" || k == "norm_modulate" || k == "qk_norm" || k == "rope" || k == "attention" || k == "silu" ||
        k == "residual" || k == "gate_residual")
      return inCols(0);
    fail("node " + n.id, "unknown node kind '{}'", k);
  }

  std::vector<NamedAttribute> kindAttrs(const h3::Node &n) {
    std::vector<NamedAttribute> a;
    auto i64 = [&](const char *name, int64_t v) { a.push_back(b_.getNamedAttr(name, b_.getI64IntegerAttr(v))); };
    auto f64 = [&](const char *name, double v) { a.push_back(b_.getNamedAttr(name, b_.getF64FloatAttr(v))); };
    auto rowIndex = [&](const std::string &v) {
      std::optional<h3ir::RowIndex> ri = h3ir::symbolizeRowIndex(v);
      if (!ri) fail("node " + n.id + " attr row_index", "expected \"adaln\" or \"timestep\", got '{}'", v);
      a.push_back(b_.getNamedAttr("row_index", h3ir::RowIndexAttr::get(&ctx_, *ri)));
    };
    std::vector<std::string> weight, bias;
    for (const auto &t : n.tensors) {
      if (t.size() > 5 && t.compare(t.size() - 5, 5, ".bias") == 0) bias.push_back(t);
      else weight.push_back(t);
    }
    auto weights = [&](bool withBias) {
      a.push_back(b_.getNamedAttr("weight", strs(weight)));
      if (withBias) a.push_back(b_.getNamedAttr("bias", strs(bias)));
    };
    const std::string &k = n.kind;
    if (k == "rope_table") {
      i64("rotary_dim", ai(n, "rotary_dim"));
      f64("theta", af(n, "theta"));
    } else if (k == "linear") {
      i64("K", ai(n, "in_features"));
      i64("N", ai(n, "out_features"));
      weights(true);
    } else if (k == "adaln_table") {
      i64("K", ai(n, "in_features"));
      i64("N", ai(n, "out_features"));
      i64("rows_per_timestep", ai(n, "rows_per_timestep"));
      i64("num_chunks", ai(n, "chunks_per_row"));
      weights(true);
    } else if (k == "rms_norm") {
      f64("eps", af(n, "eps"));
      weights(false);
    } else if (k == "norm_modulate") {
      f64("eps", af(n, "eps"));
      weights(false);
      i64("shift_chunk", ai(n, "shift_chunk"));
      i64("scale_chunk", ai(n, "scale_chunk"));
      i64("num_chunks", ai(n, "num_chunks"));
      rowIndex(as(n, "row_index"));
    } else if (k == "qk_norm") {
      i64("heads", ai(n, "heads"));
      i64("head_dim", ai(n, "head_dim"));
      f64("eps", af(n, "eps"));
      weights(false);
    } else if (k == "rope") {
      i64("heads", ai(n, "heads"));
      i64("head_dim", ai(n, "head_dim"));
      i64("rotary_dim", ai(n, "rotary_dim"));
    } else if (k == "attention") {
      i64("heads", ai(n, "heads"));
      i64("head_dim", ai(n, "head_dim"));
    } else if (k == "gate_residual") {
      i64("chunk", ai(n, "chunk"));
      i64("num_chunks", ai(n, "num_chunks"));
      rowIndex(as(n, "row_index"));
    } else if (k == "timestep_sinusoid") {
      i64("freq_dim", ai(n, "dim"));
    }
    if (!weight.empty() && k != "linear" && k != "adaln_table" && k != "rms_norm" && k != "norm_modulate" &&
        k != "qk_norm")
      fail("node " + n.id, "kind {} reads no tensors, but lists {}", k, weight.front());
    return a;
  }

  // The fingerprint lists the reductions each node performs; they must be exactly the ones the h3 op declares
  // through OrderedReduction (so h3-assign-reduction-order gives every fingerprint reduction an order) with the
  // same extents: the static ones (dot, sum_squares, dot_qk) in order, the row-domain ones (attention's softmax and
  // P.V over the keys) over the op's rows.
  void checkReductions(const h3::Node &n, Operation *op, const std::string &where) {
    auto red = dyn_cast<h3ir::OrderedReduction>(op);
    if (bool(red) == n.reductions.empty())
      fail(where, "lists {} reductions but h3.{} {}", n.reductions.size(), n.kind, red ? "reduces" : "reduces nothing");
    if (!red) return;
    llvm::SmallVector<int64_t> extents = red.getReducedExtents();
    size_t next = 0;
    for (const auto &r : n.reductions) {
      std::string want;
      if (r.kind == "dot" || r.kind == "sum_squares" || r.kind == "dot_qk") {
        if (next == extents.size()) fail(where, "lists more static reductions than h3.{} performs", n.kind);
        want = std::to_string(extents[next++]);
      } else if (r.kind == "softmax" || r.kind == "dot_pv") {
        want = cast<h3ir::ActType>(op->getOperand(0).getType()).getDomain().str();
      } else {
        fail(where, "unknown reduction kind '{}'", r.kind);
      }
      if (r.extent != want) fail(where, "reduction {} has extent {}, the op reduces over {}", r.kind, r.extent, want);
    }
    if (next != extents.size())
      fail(where, "lists {} static reductions, h3.{} performs {}", next, n.kind, extents.size());
  }

  void importNode(const h3::Node &n, size_t index) {
    std::string where = "node " + n.id + " (#/nodes/" + std::to_string(index) + ")";
    std::vector<Value> in;
    for (const auto &name : n.inputs) in.push_back(lookup(name, where));
    if (n.outputs.empty() || n.outputs.size() != n.outputRows.size() || n.outputs.size() != n.outputDtypes.size())
      fail(where, "outputs, output_rows and output_dtypes must have the same non-zero length");
    std::vector<Type> types;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const std::string &rows = n.outputRows[i];
      // Per-row metadata (pack's outputs after the first: F32 positions, I64 tags and ts_index) and the rope tables
      // are shared by all batch items: no batch axis.
      bool meta = (n.kind == "pack" && i > 0) || n.kind == "rope_table";
      bool batch = tokenDomain(rows) && !meta;
      types.push_back(actType(rows, outCols(n, i, in), n.outputDtypes[i], batch, where + " output " + n.outputs[i]));
    }
    OperationState st(NameLoc::get(b_.getStringAttr(n.id)), "h3." + n.kind);
    if (!st.name.isRegistered()) fail(where, "node kind '{}' has no h3 op", n.kind);
    st.addOperands(in);
    st.addTypes(types);
    st.addAttributes(kindAttrs(n));
    st.addAttribute("nodes", strs({n.id}));
    st.addAttribute("values", strs(n.outputs));
    Operation *op = b_.create(st);
    checkReductions(n, op, where);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!values_.emplace(n.outputs[i], op->getResult(i)).second) fail(where, "redefines value '{}'", n.outputs[i]);
    }
  }

  MLIRContext &ctx_;
  const h3::Fingerprint &fp_;
  OpBuilder b_;
  std::map<std::string, Value> values_;
};

} // namespace

OwningOpRef<ModuleOp> importFingerprint(MLIRContext &ctx, const h3::Fingerprint &fp) {
  loadDialects(ctx);
  return Importer(ctx, fp).run();
}

} // namespace h3c::codegen
