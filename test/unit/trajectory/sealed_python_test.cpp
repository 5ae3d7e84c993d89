// Sealed files re-verified from Python (scripts/h3c_sealed.py, standard library only): the seal of every step's
// ledger (audit mode: many floats), and an SDE trajectory with conditioning rows and two batch items, whose every
// step the script recomputes from the saved tensors with its own transcription of the formulas (the Euler update,
// the SDE mean and sum_sq in emulated float32, the logprob formula). Skipped without python3.
#include "test_plans.h"

#include "h3c/runtime/request_layout.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"
#include "h3c/trajectory/generate.h"
#include "h3c/trajectory/trajectory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

using namespace h3c;
using namespace h3c::rt;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Runs the script; returns its exit status and output.
int python(const std::string &args, std::string &out) {
  const std::string cmd =
      std::string(H3C_PYTHON) + " " + std::string(H3C_SOURCE_DIR) + "/scripts/h3c_sealed.py " + args + " 2>&1";
  out.clear();
  FILE *p = ::popen(cmd.c_str(), "r");
  if (!p)
    return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class SealedPython : public ::testing::Test {
protected:
  void SetUp() override {
    if (std::system((std::string(H3C_PYTHON) + " -c 'import json, hashlib, struct' >/dev/null 2>&1").c_str()) != 0)
      GTEST_SKIP() << "no python3";
    root = fs::temp_directory_path() / ("h3c-sealedpy-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    fs::create_directories(root / "plan");
    const h3::Config c = h3::namedConfig("tiny");
    writeFileAtomic(root / "plan" / "plan.json", testplans::modelPlan(c, true).dump(1));
    LayoutSpec sp;
    sp.layout = "ref2va";
    sp.textTags = {1, 0, 1};
    sp.latentFrames = 2;
    sp.latentHeight = 4;
    sp.latentWidth = 4;
    sp.audioLatents = 2;
    LayoutReference img, aud;
    img.kind = LayoutReference::Kind::Image;
    img.height = img.width = 4;
    aud.kind = LayoutReference::Kind::Audio;
    aud.audioLatents = 1;
    sp.references = {img, aud};
    writeRequest(root / "req.safetensors", makeLayoutRequest(c, sp, 2, 3, DType::F32, 0.0f, 0.0f));
  }
  void TearDown() override { fs::remove_all(root); }

  GenerateOptions opts(const std::string &sampler) const {
    GenerateOptions o;
    o.config = "tiny";
    o.plan = (root / "plan").string();
    o.request = (root / "req.safetensors").string();
    o.synthetic = 4;
    o.steps = 5;
    o.seeds = {7, 8};
    o.sampler = sampler;
    o.noiseLevel = 0.8;
    o.saveTensors = true;
    o.run.threads = 2;
    o.run.mode = Mode::Audit;
    return o;
  }
  fs::path root;
};

} // namespace

TEST_F(SealedPython, LedgersAndTrajectoriesVerifyFromPython) {
  std::string out;
  for (const char *sampler : {"sde", "ode"}) {
    auto o = opts(sampler);
    o.ledgerDir = (root / (std::string("ledgers-") + sampler)).string();
    const fs::path t = root / sampler;
    ASSERT_EQ(generate(t, o), 4);
    ASSERT_EQ(python("trajectory " + t.string() + " --recompute", out), 0) << out;
    EXPECT_NE(out.find("every step recomputed"), std::string::npos) << out;
    for (int i = 0; i < 4; ++i) {
      const fs::path l = fs::path(o.ledgerDir) / fmt::format("step-{:05d}.json", i);
      ASSERT_EQ(python("ledger " + l.string(), out), 0) << out;
    }
  }
  // The ledger's floats are what Python writes back: its canonical form hashes to the seal we computed.
  json led = json::parse(readFile(root / "ledgers-sde" / "step-00000.json"));
  bool sawFloat = false;
  for (const auto &n : led["nodes"])
    sawFloat = sawFloat || (n.contains("audit") && n["audit"]["max_rel"].is_number_float());
  EXPECT_TRUE(sawFloat);

  // Tampering is seen from Python too: a resealed sum_sq no longer recomputes, an edited latent breaks the seal.
  const fs::path rp = trajStepJson(root / "sde", 2);
  json rec = json::parse(readFile(rp));
  rec["sde"]["video"]["items"][1]["sum_sq"] = rec["sde"]["video"]["items"][1]["sum_sq"].get<double>() * (1 + 1e-15);
  rec.erase("seal");
  rec["seal"] = sha256Hex(canonicalJson(rec));
  writeFileAtomic(rp, sealedJsonDump(rec, 1) + "\n");
  EXPECT_EQ(python("trajectory " + (root / "sde").string(), out), 1) << out;
  EXPECT_NE(out.find("logprob"), std::string::npos) << out;
  json rec1 = json::parse(readFile(trajStepJson(root / "ode", 1)));
  rec1["latent"]["audio"]["max_abs"] = 0.5;
  writeFileAtomic(trajStepJson(root / "ode", 1), sealedJsonDump(rec1, 1) + "\n");
  EXPECT_EQ(python("trajectory " + (root / "ode").string(), out), 1) << out;
  EXPECT_NE(out.find("seal mismatch"), std::string::npos) << out;
}
