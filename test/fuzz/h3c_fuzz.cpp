// libFuzzer entry points for h3c's readers of untrusted files (issue 18), in one binary: H3C_FUZZ_TARGET picks the
// reader (scripts/fuzz.sh runs each with its own corpus). A finding is anything the sanitizers report (ASan, UBSan),
// a crash, a hang or an out-of-memory; an h3c::Error (or another exception, which the h3c driver also turns into
// "h3c: error: ...") is the reader refusing the input, as it should.
//   safetensors  st::parseHeader over the bytes (a whole file)
//   index        st::parseIndex (a sharded folder's index JSON)
//   config       parseJson + h3::configFromJson (config.json)
//   fingerprint  parseJson + h3::fingerprintFromJson
//   plan         parseJson + plan::planFromJson (kernel files are never found: the JSON checks run first)
//   request      the bytes as a request file: rt::loadRequest + rt::canonicalize for the tiny config
//   ledger       parseJson + rt::verifyLedger
//   trajectory   the bytes split at "\n--8<--\n" into header.json, steps/step-00000.json, final.json of a folder,
//                then rt::verifyTrajectory
//   lora         the bytes as a LoRA adapter file: rt::readLora for the tiny config (every layout's key rules, the
//                metadata JSON), then each module merged into a zero weight (rt::mergeLora)
#include "h3c/models/config.h"
#include "h3c/models/fingerprint.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/ledger.h"
#include "h3c/runtime/lora.h"
#include "h3c/runtime/request.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/json_read.h"
#include "h3c/support/safetensors.h"
#include "h3c/trajectory/trajectory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace fs = std::filesystem;
using namespace h3c;

namespace {

std::string target;
fs::path scratch;  // per-process folder for the file-based readers

void writeRaw(const fs::path &p, std::string_view bytes) {
  FILE *f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

void runOne(std::string_view in) {
  const std::string text(in);
  if (target == "safetensors") {
    st::parseHeader(reinterpret_cast<const uint8_t *>(text.data()), text.size(), "fuzz");
  } else if (target == "index") {
    st::parseIndex(text, "fuzz");
  } else if (target == "config") {
    h3::configFromJson(parseJson(text, "fuzz"), "fuzz#");
  } else if (target == "fingerprint") {
    h3::fingerprintFromJson(parseJson(text, "fuzz"), "fuzz#");
  } else if (target == "plan") {
    plan::planFromJson(parseJson(text, "fuzz"), scratch / "no-plan", "plan.json");
  } else if (target == "request") {
    writeRaw(scratch / "req.safetensors", text);
    rt::canonicalize(rt::loadRequest(scratch / "req.safetensors"), h3::namedConfig("tiny"), "fuzz");
  } else if (target == "ledger") {
    rt::verifyLedger(parseJson(text, "fuzz"));
  } else if (target == "trajectory") {
    const fs::path dir = scratch / "traj";
    fs::remove_all(dir);
    fs::create_directories(dir / "steps");
    const char *names[] = {"header.json", "steps/step-00000.json", "final.json"};
    size_t at = 0;
    for (int k = 0; k < 3 && at <= text.size(); ++k) {
      size_t cut = text.find("\n--8<--\n", at);
      writeRaw(dir / names[k], std::string_view(text).substr(at, cut == std::string::npos ? std::string::npos : cut - at));
      at = cut == std::string::npos ? text.size() + 1 : cut + 8;
    }
    rt::verifyTrajectory(dir);
  } else if (target == "lora") {
    writeRaw(scratch / "lora.safetensors", text);
    const rt::LoraAdapter a = rt::readLora(scratch / "lora.safetensors", h3::namedConfig("tiny"));
    for (const rt::LoraModule &m : a.modules) {
      const rt::Tensor w = rt::Tensor::zeros(DType::BF16, {m.up.shape.at(0), m.down.shape.at(1)});
      rt::mergeLora(w, {{&m, 0.5}}, 1);
    }
  } else {
    std::fprintf(stderr, "H3C_FUZZ_TARGET must be one of safetensors, index, config, fingerprint, plan, request, "
                         "ledger, trajectory, lora (got '%s')\n", target.c_str());
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *t = std::getenv("H3C_FUZZ_TARGET");
  target = t ? t : "";
  scratch = fs::temp_directory_path() / ("h3c_fuzz_" + target + "_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    runOne(std::string_view(reinterpret_cast<const char *>(data), size));
  } catch (const std::exception &) {
    // refused: the expected outcome for most inputs
  }
  return 0;
}
