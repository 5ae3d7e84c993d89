// The one file that includes the generated version header (cmake/Version.cmake): a new commit recompiles only this.
#include "h3c/support/version.h"

#include "h3c_version_generated.h"

namespace h3c {

const char *versionString() { return H3C_VERSION_STRING; }
const char *buildString() { return H3C_BUILD_STRING; }
nlohmann::json versionJson() { return {{"version", versionString()}, {"build", buildString()}}; }

} // namespace h3c
