# h3c_precompile(<target> [EXTRA <header>...]): a precompiled header of the heavy header-only dependencies every h3c
# translation unit includes (nlohmann/json, fmt, and the standard headers around them), so that each is parsed once
# per target instead of once per file. EXTRA adds target-specific ones (gtest, CLI11, MLIR). H3C_PCH=OFF disables it
# (then every file compiles exactly as before, only slower).
option(H3C_PCH "Precompile the heavy headers per target" ON)
# A unity build (scripts/build.sh) compiles each target as one or two translation units, where building the header
# costs more than it saves (measured: 12 s less CPU for h3c_compiler without it), so it is off there.
function(h3c_precompile target)
  if(NOT H3C_PCH OR CMAKE_UNITY_BUILD)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "EXTRA" ${ARGN})
  target_precompile_headers(${target} PRIVATE
    <nlohmann/json.hpp> <fmt/format.h> <filesystem> <functional> <map> <memory> <set> <string> <vector>
    ${ARG_EXTRA})
endfunction()
