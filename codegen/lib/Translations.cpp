// h3c-opt's translations. `--h3-to-cuda` prints, for every h3 op with a device kernel, a header comment (op, nodes,
// kernel id, entry) and the kernel source the emitter produces from the op's plan entry; the arch is the module's
// `h3.arch` when the input names one (no pass records it), sm_90a by default. `--import-h3-fingerprint` parses a
// fingerprint JSON.
#include "h3c/Codegen/Translations.h"

#include "h3c/Codegen/Importer.h"
#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/kernels/emit.h"
#include "h3c/models/fingerprint.h"
#include "h3c/support/json_read.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/SourceMgr.h"

#include <nlohmann/json.hpp>

#include <set>

using namespace mlir;

namespace h3c::codegen {

namespace {

LogicalResult toCuda(ModuleOp m, llvm::raw_ostream &os) {
  std::string arch = "sm_90a";
  if (auto a = m->getAttrOfType<StringAttr>("h3.arch")) arch = a.str();
  std::set<std::string> printed;
  bool ok = true;
  m.walk([&](Operation *op) {
    if (op->getName().getDialectNamespace() != "h3" || !ok) return;
    if (isa<h3ir::AllGatherOp, h3ir::SplitOp>(op)) {
      // A copy between ranks (or within one) the runtime performs: no kernel source to print.
      os << "// ---- " << op->getName().stripDialect() << " of " << passes::planName(op->getOperand(0))
         << ": performed by the runtime\n";
      return;
    }
    try {
      // Names do not enter kernels: the op is translated without requiring value names.
      plan::Op pop = passes::toPlanOp(op, /*requireNames=*/false);
      auto k = kernels::emitKernel(pop, passes::operandValues(op, /*requireNames=*/false), arch);
      if (!k) return;  // host op
      if (!printed.insert(k->id).second) return;
      std::string nodes;
      for (const auto &n : pop.nodes) nodes += (nodes.empty() ? "" : ", ") + n;
      os << "// ---- kernel " << k->id << " (entry " << k->entry << ") for " << plan::opKindName(pop.kind) << " ["
         << nodes << "]\n"
         << k->source << "\n";
    } catch (const std::exception &e) {
      op->emitOpError() << "[" << h3ir::firstNode(op) << "] no kernel: " << e.what();
      ok = false;
    }
  });
  return success(ok);
}

OwningOpRef<Operation *> importJson(llvm::SourceMgr &sm, MLIRContext *ctx) {
  const llvm::MemoryBuffer *buf = sm.getMemoryBuffer(sm.getMainFileID());
  std::string name = buf->getBufferIdentifier().str();
  try {
    auto j = parseJson(std::string_view(buf->getBufferStart(), buf->getBufferSize()), name);
    h3::Fingerprint fp = h3::fingerprintFromJson(j, name);
    OwningOpRef<ModuleOp> m = importFingerprint(*ctx, fp);
    return OwningOpRef<Operation *>(m.release().getOperation());
  } catch (const std::exception &e) {
    emitError(FileLineColLoc::get(ctx, name, 0, 0)) << e.what();
    return {};
  }
}

} // namespace

void registerTranslations() {
  static TranslateFromMLIRRegistration toCudaReg(
      "h3-to-cuda", "Print the CUDA kernels of an h3 module", toCuda,
      [](DialectRegistry &r) { r.insert<h3ir::H3Dialect, func::FuncDialect>(); });
  static TranslateToMLIRRegistration importReg(
      "import-h3-fingerprint", "Import a fingerprint JSON (h3-arch-fingerprint-v1) as an h3 module", importJson,
      [](DialectRegistry &r) { r.insert<h3ir::H3Dialect, func::FuncDialect>(); });
}

} // namespace h3c::codegen
