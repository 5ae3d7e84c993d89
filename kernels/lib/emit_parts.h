// The emitter's shared parts (emit.cpp, emit_grad.cpp): the view of the op a template is specialized for, the typed
// parameter list that becomes both the plan's ABI and the kernel's signature, the launch helpers and `finish`, which
// names, hashes and assembles a kernel. Internal to h3c_kernels.
#pragma once

#include "h3c/kernels/emit.h"

#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#include <fmt/format.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace h3c::kernels {
namespace tmpl {
extern const char *const common;
extern const char *const detmath;
extern const char *const gemm_bf16;
extern const char *const gemm_epilogue;
extern const char *const gemm_epilogue_smem;
extern const char *const gemm_sm90;
extern const char *const gemm_sm90_pingpong;
extern const char *const gemm_sm90_tall;
extern const char *const hopper;
extern const char *const attention;
extern const char *const attention_sm90;
extern const char *const norm;
extern const char *const headops;
extern const char *const elementwise;
extern const char *const linear_f32;
extern const char *const time_embed;
extern const char *const adaln_sm90;
extern const char *const grad;
extern const char *const grad_common;
extern const char *const grad_linear_mma;
extern const char *const grad_linear_round;
extern const char *const grad_linear_sm90;
extern const char *const grad_linear_w_sm90;
extern const char *const grad_attention_mma;
extern const char *const grad_attention_sm90;
} // namespace tmpl

namespace emit_detail {

using plan::Domain;
using plan::Epilogue;
using plan::Extent;
using plan::KernelParam;
using plan::OpKind;
using plan::OperandRole;

// What the emitter knows about the op it specializes a template for.
struct OpView {
  const plan::Op &op;
  const OperandValues &vals;
  std::string where;
  EmitOptions options;

  const plan::OpAttrs &a() const { return op.attrs; }
  const plan::Value &in(size_t i) const {
    if (i >= vals.in.size()) fail(where, "expected at least {} inputs", i + 1);
    return vals.in[i];
  }
  const plan::Value &out(size_t i) const {
    if (i >= vals.out.size()) fail(where, "expected at least {} outputs", i + 1);
    return vals.out[i];
  }
  // Rows of an operand as the kernel sees them (batch items flattened).
  Extent rowsOfIn(size_t i) const { return Extent::rowsOf(in(i).rows, in(i).batch); }
  void requireOrder(plan::OrderKind k) const {
    if (op.order.kind != k)
      fail(where, "order.kind must be \"{}\" for a '{}' op, got \"{}\" (docs/contract.md section 4)",
           plan::orderKindName(k), plan::opKindName(op.kind), plan::orderKindName(op.order.kind));
  }
};

// The typed parameter list of a kernel, and the C parameter declarations the emitter writes as H3C_PARAMS (so the
// signature is generated from the same list the plan records).
struct Params {
  std::vector<KernelParam> list;
  std::vector<std::string> decls;

  void buffer(const std::string &name, OperandRole role, int64_t index, int64_t span = 1) {
    KernelParam p;
    p.kind = KernelParam::Kind::Buffer;
    p.name = name;
    p.role = role;
    p.index = index;
    p.span = span;
    list.push_back(p);
    decls.push_back((role == OperandRole::Out ? "void *__restrict__ " : "const void *__restrict__ ") + name);
  }
  void in(const std::string &name, int64_t index) { buffer(name, OperandRole::In, index); }
  void out(const std::string &name, int64_t index) { buffer(name, OperandRole::Out, index); }
  void weight(const std::string &name, int64_t index, int64_t span = 1) {
    buffer(name, OperandRole::Weight, index, span);
  }
  void bias(const std::string &name, int64_t index) { buffer(name, OperandRole::Bias, index); }
  void scalar(const std::string &name, const Extent &value) {
    KernelParam p;
    p.kind = KernelParam::Kind::Scalar;
    p.name = name;
    p.value = value;
    list.push_back(p);
    decls.push_back("const long long " + name);
  }
  // A TMA descriptor of a bf16 row-major matrix [rows, cols] (cols innermost) with the 128-byte swizzle, read in
  // boxes of boxCols x boxRows; out-of-range elements read as zeros.
  // span > 1: operands index..index+span-1 of the role form the matrix (qkv: [Wq; Wk; Wv]).
  void tensorMap(const std::string &name, OperandRole role, int64_t index, const Extent &rowsExt, int64_t cols,
                 int64_t boxCols, int64_t boxRows, int64_t span = 1) {
    KernelParam p;
    p.kind = KernelParam::Kind::TensorMap;
    p.name = name;
    p.role = role;
    p.index = index;
    p.span = span;
    p.map.dtype = DType::BF16;
    p.map.dims = {Extent::constant(cols), rowsExt};
    p.map.strides = {Extent::constant(cols * 2)};
    p.map.box = {boxCols, boxRows};
    list.push_back(p);
    decls.push_back("const __grid_constant__ H3cTensorMap " + name);
  }
  // A TMA descriptor of a batched bf16 activation [B, itemRows, cols] (cols innermost) with the 128-byte swizzle,
  // read in boxes of boxCols x boxRows of one item: rows past an item's end read as zeros, never the next item's.
  // `items`: the item count (default B; 1 for a value shared by the batch).
  void itemTensorMap(const std::string &name, OperandRole role, int64_t index, const Extent &itemRows, int64_t cols,
                     int64_t boxCols, int64_t boxRows, const Extent *items = nullptr) {
    tensorMap(name, role, index, itemRows, cols, boxCols, boxRows);
    KernelParam &p = list.back();
    p.map.dims.push_back(items ? *items : Extent::parse("B", name));
    p.map.strides.push_back(itemRows.scaled(cols * 2));
    p.map.box.push_back(1);
  }
  // A TMA descriptor (as tensorMap) of a bf16 matrix [rows, cols] in the scratch parameter `scratch` (declared
  // before it): what one phase writes and a later one loads by TMA; per item (as itemTensorMap) with `items`.
  void scratchTensorMap(const std::string &name, const std::string &scratch, const Extent &rowsExt, int64_t cols,
                        int64_t boxCols, int64_t boxRows, const Extent *items = nullptr) {
    if (items) itemTensorMap(name, OperandRole::In, 0, rowsExt, cols, boxCols, boxRows, items);
    else tensorMap(name, OperandRole::In, 0, rowsExt, cols, boxCols, boxRows);
    list.back().scratch = scratch;
  }
  // Scratch memory of `bytes` for this launch of the op (plan::KernelParam::Kind::Scratch), F32-aligned.
  void scratch(const std::string &name, const Extent &bytes) {
    KernelParam p;
    p.kind = KernelParam::Kind::Scratch;
    p.name = name;
    p.value = bytes;
    list.push_back(p);
    decls.push_back("void *__restrict__ " + name);
  }
  std::string signature() const {
    std::string s;
    for (size_t i = 0; i < decls.size(); ++i) s += (i ? ", " : "") + decls[i];
    return s;
  }
};

// A float literal with the exact F32 value (hex float, C++17).
inline std::string floatLit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", (double)(float)v);
  return buf;
}

struct Builder {
  std::ostringstream defs;
  void def(const std::string &k, const std::string &v) { defs << "#define " << k << " " << v << "\n"; }
  void def(const std::string &k, long long v) { def(k, std::to_string(v)); }
};

inline std::string stripPragmaOnce(std::string s) {
  auto p = s.find("#pragma once");
  if (p != std::string::npos) s.erase(p, 12);
  return s;
}

inline plan::GridDim dim(const Extent &e, int64_t div = 1) {
  plan::GridDim g;
  g.extent = e;
  g.div = div;
  return g;
}

inline plan::Launch launch(int64_t threads, int64_t smem, plan::GridDim x, plan::GridDim y = dim(Extent::constant(1)),
                    plan::GridDim z = dim(Extent::constant(1))) {
  plan::Launch l;
  l.block = {threads, 1, 1};
  l.smemBytes = smem;
  l.grid = {x, y, z};
  return l;
}

// The launch ABI as text: two ops whose kernels share a source but not their launch (a linear over the text rows
// and one over all packed rows) must not share a kernel id, since the plan keeps one launch per kernel.
inline std::string abiText(const Params &params, const plan::Launch &l) {
  std::ostringstream o;
  for (const auto &p : params.list) {
    o << int(p.kind) << ' ' << p.name << ' ' << int(p.role) << ' ' << p.index << ' ' << p.span << ' ' << p.value.text();
    for (const auto &d : p.map.dims) o << ' ' << d.text();
    for (const auto &s : p.map.strides) o << ' ' << s.text();
    for (auto b : p.map.box) o << ' ' << b;
    o << ' ' << p.map.swizzle << ' ' << p.map.l2Promotion << ' ' << p.map.oobZero << ' ' << p.scratch << ';';
  }
  for (const auto &g : l.grid) o << g.extent.text() << '/' << g.div << '/' << g.maxPerSm << ';';
  o << l.block[0] << ',' << l.block[1] << ',' << l.block[2] << ';' << l.smemBytes << ';' << l.cluster[0] << ','
    << l.cluster[1] << ',' << l.cluster[2] << ';' << l.gridDependency;
  return o.str();
}

// A later phase of a kernel (plan::KernelPhase): the macro the template names its entry by, and its launch.
struct PhaseSpec {
  std::string entryMacro;
  plan::Launch launch;
};

inline plan::Kernel finish(const std::string &name, const std::string &entryMacro, Builder &b, const Params &params,
                           const std::string &body, plan::Launch l, const std::string &arch,
                           const EmitOptions &options, std::vector<PhaseSpec> phases = {}) {
  b.def("H3C_PARAMS", params.signature());
  // Every kernel template waits for the grids before it first thing (common.cuh), so every kernel may be launched
  // as a programmatic dependent; a template without the wait must never be (it would race its producers).
  if (body.find("h3c_grid_dependency_wait();") == std::string::npos)
    fail("emitKernel", "kernel {}: the template does not call h3c_grid_dependency_wait()", name);
  l.gridDependency = options.gridDependency == 1;
  for (PhaseSpec &ph : phases) ph.launch.gridDependency = l.gridDependency;
  // The id hashes everything the kernel depends on (defines, templates and its launch ABI), so it changes with any
  // change.
  std::string tail = std::string(tmpl::common) + "\n" + stripPragmaOnce(tmpl::detmath) + "\n" + body;
  std::string abi = abiText(params, l);
  for (const PhaseSpec &ph : phases) abi += "|" + ph.entryMacro + ":" + abiText({}, ph.launch);
  std::string hash = sha256Hex(b.defs.str() + tail + "\n" + abi).substr(0, 8);
  plan::Kernel k;
  k.id = name + "_" + hash;
  k.entry = "h3c_" + k.id;
  k.file = "kernels/" + k.id + ".cu";
  std::ostringstream src;
  src << "// h3c kernel " << k.id << " (generated by h3c::kernels::emitKernel; docs/contract.md sections 3-6)\n";
  src << "#define " << entryMacro << " " << k.entry << "\n";
  for (size_t i = 0; i < phases.size(); ++i) {
    k.phases.push_back({k.entry + "_p" + std::to_string(i + 1), phases[i].launch});
    src << "#define " << phases[i].entryMacro << " " << k.phases.back().entry << "\n";
  }
  src << b.defs.str() << tail;
  k.source = src.str();
  k.sha256 = sha256Hex(k.source);
  k.arch = arch;
  k.nvrtcOptions = nvrtcOptions(arch);
  k.launch = l;
  k.params = params.list;
  return k;
}


// The backward's gradient ops (emit_grad.cpp, grad.cuh).
plan::Kernel emitGradKernel(const OpView &v, const std::string &arch);

} // namespace emit_detail
} // namespace h3c::kernels
