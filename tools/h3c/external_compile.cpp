// `h3c compile`: the executable h3c-compile beside h3c, the same driver with cmd_compile.cpp alone (CMakeLists.txt).
// It links the MLIR compiler, which h3c does not: loading MLIR's and LLVM's libraries and running their static
// initializers cost every h3c process 80 ms of CPU at start-up (measured on the 2-core machine), `run` and `ledger`
// alike.
#include "command.h"

namespace external_compile {
h3c::tool::Command cmd("compile", h3c::tool::kCompileHelp, std::string("h3c-compile"));
} // namespace external_compile
