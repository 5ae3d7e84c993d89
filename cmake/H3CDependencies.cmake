# Finds h3c's dependencies. Header-only ones (nlohmann/json, fmt in header-only mode, CLI11) are searched in the
# system include path and in H3C_EXTRA_INCLUDE, so a GPU machine can build the runtime from carried headers.

find_path(H3C_JSON_INCLUDE nlohmann/json.hpp HINTS ${H3C_EXTRA_INCLUDE})
find_path(H3C_FMT_INCLUDE fmt/format.h HINTS ${H3C_EXTRA_INCLUDE})
find_path(H3C_CLI11_INCLUDE CLI/CLI.hpp HINTS ${H3C_EXTRA_INCLUDE})
find_path(H3C_OPENSSL_INCLUDE openssl/sha.h HINTS ${H3C_EXTRA_INCLUDE})
foreach(v H3C_JSON_INCLUDE H3C_FMT_INCLUDE H3C_CLI11_INCLUDE H3C_OPENSSL_INCLUDE)
  if(NOT ${v})
    message(FATAL_ERROR "h3c: ${v} not found: run scripts/install-deps.sh (or set H3C_EXTRA_INCLUDE)")
  endif()
endforeach()
# libcrypto: the development symlink on Debian, the runtime soname on machines that only have the library.
find_library(H3C_CRYPTO_LIB NAMES crypto libcrypto.so.3 PATHS /usr/lib/x86_64-linux-gnu)
if(NOT H3C_CRYPTO_LIB)
  message(FATAL_ERROR "h3c: libcrypto (OpenSSL) not found: run scripts/install-deps.sh")
endif()

add_library(h3c_deps INTERFACE)
target_include_directories(h3c_deps SYSTEM INTERFACE
  ${H3C_JSON_INCLUDE} ${H3C_FMT_INCLUDE} ${H3C_CLI11_INCLUDE} ${H3C_OPENSSL_INCLUDE})
target_link_libraries(h3c_deps INTERFACE ${H3C_CRYPTO_LIB})
# fmt: the compiled library where one is installed (Debian's libfmt-dev), so that its implementation is compiled
# once instead of in every translation unit; header-only mode where only the headers are, and wherever the headers
# come from H3C_EXTRA_INCLUDE (GPU machines): a system libfmt there may be another fmt version than the carried
# headers (the H200 machine has one), and its symbols would not match.
if(NOT H3C_EXTRA_INCLUDE)
  find_library(H3C_FMT_LIB NAMES fmt)
endif()
if(H3C_FMT_LIB)
  target_link_libraries(h3c_deps INTERFACE ${H3C_FMT_LIB})
else()
  target_compile_definitions(h3c_deps INTERFACE FMT_HEADER_ONLY=1)
endif()

# CUDA: headers and libraries from the toolkit; the driver library may be the toolkit's stub (no GPU needed to link).
set(H3C_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")
find_path(H3C_CUDA_INCLUDE cuda.h HINTS ${H3C_CUDA_ROOT}/include ${H3C_CUDA_ROOT}/targets/x86_64-linux/include)
find_path(H3C_NVRTC_INCLUDE nvrtc.h HINTS ${H3C_CUDA_ROOT}/include ${H3C_CUDA_ROOT}/targets/x86_64-linux/include)
find_library(H3C_NVRTC_LIB nvrtc HINTS ${H3C_CUDA_ROOT}/lib64 ${H3C_CUDA_ROOT}/targets/x86_64-linux/lib)
find_library(H3C_CUDA_DRIVER_LIB cuda HINTS ${H3C_CUDA_ROOT}/lib64/stubs ${H3C_CUDA_ROOT}/targets/x86_64-linux/lib/stubs)
if(H3C_CUDA_INCLUDE AND H3C_NVRTC_INCLUDE AND H3C_NVRTC_LIB AND H3C_CUDA_DRIVER_LIB)
  set(H3C_HAVE_CUDA ON)
  add_library(h3c_cuda INTERFACE)
  target_include_directories(h3c_cuda SYSTEM INTERFACE ${H3C_CUDA_INCLUDE})
  # The driver (libcuda.so.1) is opened with dlopen at run time, never linked: binaries must start on machines
  # without a GPU driver (CI). NVRTC too, on its first use (runtime/cuda/nvrtc_api.h): a process that never compiles
  # a kernel does not load it (45 ms of CPU at every test process's start-up on the 2-core machine).
  target_link_libraries(h3c_cuda INTERFACE ${CMAKE_DL_LIBS})
  target_compile_definitions(h3c_cuda INTERFACE H3C_HAVE_CUDA=1 H3C_CUDA_INCLUDE_DIR="${H3C_CUDA_INCLUDE}")
  message(STATUS "h3c: CUDA found at ${H3C_CUDA_ROOT} (nvrtc: ${H3C_NVRTC_LIB})")
else()
  set(H3C_HAVE_CUDA OFF)
  message(STATUS "h3c: CUDA not found at ${H3C_CUDA_ROOT} (need cuda.h, nvrtc.h, libnvrtc, libcuda): GPU runtime and NVRTC checks are disabled")
endif()

if(H3C_ENABLE_MLIR)
  find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-22/lib/cmake/mlir)
  message(STATUS "h3c: MLIR from ${MLIR_DIR}")
  list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
  include(TableGen)
  include(AddLLVM)
  include(AddMLIR)
  include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
  link_directories(${LLVM_BUILD_LIBRARY_DIR})
  add_definitions(${LLVM_DEFINITIONS})
  set(LLVM_TABLEGEN_EXE /usr/lib/llvm-22/bin/llvm-tblgen)
endif()

# GoogleTest: Debian's package here; on a GPU machine without it, the sources carried by scripts/gpu-plans.sh
# (carry/googletest, a copy of Debian's /usr/src/googletest) are built in-tree.
find_package(GTest QUIET)
if(NOT GTest_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/carry/googletest/CMakeLists.txt")
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${PROJECT_SOURCE_DIR}/carry/googletest ${PROJECT_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  add_library(GTest::gtest ALIAS gtest)
  add_library(GTest::gtest_main ALIAS gtest_main)
  set(GTest_FOUND ON)
endif()
