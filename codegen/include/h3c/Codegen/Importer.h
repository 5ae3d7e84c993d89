// The fingerprint importer: h3::Fingerprint -> one h3 module. The func `@forward` takes the graph inputs as
// arguments (each named by `h3.name`), holds one op per fingerprint node in node order (ids in `nodes`, output value
// names in `values`) and returns `unpack:sample` and `unpack:audio_sample`.
#pragma once

#include "h3c/models/fingerprint.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace h3c::codegen {

// Loads the dialects the module uses into `ctx`. Throws h3c::Error naming the node id on a fingerprint the dialect
// rejects (unknown kind, missing attr, an input read before it is defined, a verifier failure).
mlir::OwningOpRef<mlir::ModuleOp> importFingerprint(mlir::MLIRContext &ctx, const h3::Fingerprint &fp);

// The dialects h3c modules use (h3, func).
void loadDialects(mlir::MLIRContext &ctx);

} // namespace h3c::codegen
