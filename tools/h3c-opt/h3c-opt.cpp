// h3c-opt: mlir-opt for h3 (the h3 and func dialects, the h3 passes and `h3-pipeline`). Two translations switch it
// to mlir-translate mode: `--h3-to-cuda` (prints the CUDA kernels of a module, via the kernel emitter) and
// `--import-h3-fingerprint` (a fingerprint JSON file -> the h3 module the importer builds).
#include "h3c/Codegen/Translations.h"
#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

#include <cstring>

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--h3-to-cuda") == 0 || std::strcmp(argv[i], "--import-h3-fingerprint") == 0) {
      h3c::codegen::registerTranslations();
      return mlir::failed(mlir::mlirTranslateMain(argc, argv, "h3c-opt translation mode"));
    }
  }
  mlir::DialectRegistry registry;
  registry.insert<h3c::h3ir::H3Dialect, mlir::func::FuncDialect>();
  h3c::passes::registerAll();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "h3c optimizer driver\n", registry));
}
