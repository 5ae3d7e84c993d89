// The device LoRA merge (lora_merge.h): lora_merge.cuh, embedded at build time. The factors go up into one device
// buffer with a table of the terms (pointers, rank, the host's s_t), the merge kernel writes scratch and lowers a
// first-non-finite index, and only a clean result is copied over the weight.
#include "h3c/runtime/cuda/lora_merge.h"

#include "h3c/runtime/cuda/runtime_kernel.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <cstring>

namespace h3c::rt::cuda_src {
extern const char *const lora_merge;
} // namespace h3c::rt::cuda_src

namespace h3c::runtime::cuda {

namespace {

// lora_merge.cuh's h3l_term.
struct DeviceTerm {
  CUdeviceptr down = 0, up = 0;
  long long rank = 0;
  float scale = 0;
  float unused = 0;
};
static_assert(sizeof(DeviceTerm) == 32, "DeviceTerm must match h3l_term in lora_merge.cuh");

constexpr size_t kAlign = 256;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

} // namespace

const std::vector<std::string> &loraMergeKernelEntries() {
  static const std::vector<std::string> entries = {"h3c_lora_merge", "h3c_lora_copy"};
  return entries;
}

const h3c::plan::Kernel &loraMergeKernel(const std::string &entry, const std::string &arch) {
  const auto &e = loraMergeKernelEntries();
  if (std::find(e.begin(), e.end(), entry) == e.end())
    h3c::fail("LoRA merge kernels", "no entry '{}'", entry);
  return runtimeKernel(entry, arch, {"// h3c LoRA merge (runtime/lib/cuda/lora_merge.cuh)", h3c::rt::cuda_src::lora_merge});
}

void mergeLoraOnDevice(KernelRunner &runner, CUdeviceptr w, h3c::DType dtype, int64_t rows, int64_t cols,
                       const std::vector<std::pair<const h3c::rt::LoraModule *, double>> &terms, CUstream stream) {
  h3c::rt::checkLoraTerms(dtype, {rows, cols}, terms);
  if (terms.empty() || rows == 0 || cols == 0)
    return;
  const std::string where = "LoRA merge " + terms[0].first->target;
  const size_t elem = h3c::dtypeSize(dtype), bytes = size_t(rows) * size_t(cols) * elem;
  if (w % elem != 0)
    h3c::fail(where, "the device weight is not aligned to its {}-byte elements", elem);
  const DriverApi &d = driver();
  // Loaded (compiled) before anything is queued, so a compile error leaves nothing in flight.
  const LoadedKernel &merge = runner.load(loraMergeKernel("h3c_lora_merge", runner.arch()));
  const LoadedKernel &copy = runner.load(loraMergeKernel("h3c_lora_copy", runner.arch()));

  // Every term's down then up, each at a 256-byte boundary, then the term table.
  std::vector<DeviceTerm> table(terms.size());
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const auto &[m, scale] : terms) {
    offsets.push_back(total);
    total += alignUp(m->down.bytes.size());
    offsets.push_back(total);
    total += alignUp(m->up.bytes.size());
  }
  const size_t tableAt = total;
  total += alignUp(table.size() * sizeof(DeviceTerm));
  DeviceBuffer factors(total), scratch(std::max<size_t>(bytes, kAlign)), flag(sizeof(unsigned long long));
  // On every way out (a throw included) the stream is drained before the buffers above are freed.
  struct DrainStream {
    CUstream s;
    ~DrainStream() { driver().cuStreamSynchronize(s); }
  } drain{stream};
  for (size_t t = 0; t < terms.size(); ++t) {
    const h3c::rt::LoraModule &m = *terms[t].first;
    table[t].down = factors.get() + offsets[2 * t];
    table[t].up = factors.get() + offsets[2 * t + 1];
    table[t].rank = m.rank;
    table[t].scale = h3c::rt::loraTermScale(m, terms[t].second);
    // Pageable sources: each copy has taken its bytes when it returns.
    check(d.cuMemcpyHtoDAsync(table[t].down, m.down.bytes.data(), m.down.bytes.size(), stream), where + ": lora_A");
    check(d.cuMemcpyHtoDAsync(table[t].up, m.up.bytes.data(), m.up.bytes.size(), stream), where + ": lora_B");
  }
  const CUdeviceptr tablePtr = factors.get() + tableAt;
  check(d.cuMemcpyHtoDAsync(tablePtr, table.data(), table.size() * sizeof(DeviceTerm), stream), where + ": terms");
  static const unsigned long long none = ~0ull;  // static: an asynchronous copy's source
  check(d.cuMemcpyHtoDAsync(flag.get(), &none, sizeof none, stream), where + ": flag");

  CUdeviceptr in = w, out = scratch.get(), termsArg = tablePtr, flagArg = flag.get();
  long long rowsArg = rows, colsArg = cols;
  int bf16 = dtype == h3c::DType::BF16, nterms = int(terms.size());
  void *params[] = {&in, &out, &rowsArg, &colsArg, &bf16, &termsArg, &nterms, &flagArg};
  const unsigned gx = unsigned((cols + 255) / 256);
  const unsigned gy = unsigned(std::min<int64_t>((rows + 3) / 4, 65535));
  check(d.cuLaunchKernel(merge.fn, gx, gy, 1, 256, 1, 1, 0, stream, params, nullptr), where + ": merge kernel");
  unsigned long long firstBad = 0;
  check(d.cuMemcpyDtoHAsync(&firstBad, flag.get(), sizeof firstBad, stream), where + ": reading the flag");
  check(d.cuStreamSynchronize(stream), where);
  if (firstBad != none) {
    float value = 0;
    if (dtype == h3c::DType::BF16) {
      uint16_t b = 0;
      scratch.download(&b, 2, size_t(firstBad) * 2);
      value = h3c::bf16ToFloat(b);
    } else {
      scratch.download(&value, 4, size_t(firstBad) * 4);
    }
    h3c::fail(where, "merged element [{}, {}] is {} (strict: merged weights must be finite)",
              (long long)firstBad / cols, (long long)firstBad % cols, value);
  }

  CUdeviceptr src = scratch.get(), dst = w;
  long long words = (long long)(bytes / 2);
  void *copyParams[] = {&src, &dst, &words};
  const unsigned blocks = unsigned(std::clamp<long long>((words + 255) / 256, 1, 4096));
  check(d.cuLaunchKernel(copy.fn, blocks, 1, 1, 256, 1, 1, 0, stream, copyParams, nullptr), where + ": copy kernel");
  // The scratch and the factors are freed on return: the copy must have run.
  check(d.cuStreamSynchronize(stream), where);
}

} // namespace h3c::runtime::cuda
