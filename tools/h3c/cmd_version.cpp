// `h3c version`: the version and build (as `h3c --version`) and what this build has (MLIR compiler, CUDA runtime).
#include "command.h"

#include "h3c/support/version.h"

#include <cstdio>

namespace cmd_version {
h3c::tool::Command cmd("version", "Print the h3c version and the features this build has", [](CLI::App &app) {
  app.callback([] {
    std::printf("h3c %s (build %s)\n", h3c::versionString(), h3c::buildString());  // as `h3c --version`
#ifdef H3C_WITH_MLIR
    std::printf("compiler: MLIR %s\n", H3C_WITH_MLIR);
#else
    std::printf("compiler: not built (H3C_ENABLE_MLIR=OFF)\n");
#endif
#ifdef H3C_HAVE_CUDA
    std::printf("cuda: yes (NVRTC, driver API)\n");
#else
    std::printf("cuda: not built\n");
#endif
  });
});
} // namespace cmd_version
