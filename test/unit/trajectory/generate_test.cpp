// h3c generate on the CPU reference, tiny config, hand-written plan (test_plans.h): the first step checked
// against an independent evaluation (runModel on inputs built here, the Euler update in double-rounded form), resume
// after an interruption byte-equal, a perturbation from step k named at step k, the CLI.
#include "test_plans.h"

#include "h3c/runtime/executor.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/trajectory/generate.h"
#include "h3c/trajectory/sampler.h"
#include "h3c/trajectory/trajectory.h"

#include "tool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <sys/wait.h>
#include <unistd.h>

using namespace h3c;
using h3c::testtool::runTool;
using namespace h3c::rt;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

class Generate : public ::testing::Test {
protected:
  void SetUp() override {
    root = fs::temp_directory_path() / ("h3c-gen-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    fs::create_directories(root / "plan");
    const h3::Config c = h3::namedConfig("tiny");
    writeFileAtomic(root / "plan" / "plan.json", testplans::modelPlan(c).dump(1));
    RequestShape sh;
    sh.text = 3;
    sh.audio = 4;
    sh.videoT = 2;
    sh.videoH = 2;
    sh.videoW = 2;
    sh.shuffle = true;  // packed rows permuted: the audio rows are not a contiguous block
    writeRequest(root / "req.safetensors", makeRequest(c, sh, 11));
  }
  void TearDown() override { fs::remove_all(root); }

  GenerateOptions opts() const {
    GenerateOptions o;
    o.config = "tiny";
    o.plan = (root / "plan").string();
    o.request = (root / "req.safetensors").string();
    o.synthetic = 3;
    o.steps = 5;
    o.seed = 9;
    o.saveTensors = true;
    o.run.threads = 2;
    return o;
  }
  fs::path root;
};

std::map<std::string, std::string> folderBytes(const fs::path &dir) {
  std::map<std::string, std::string> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out[fs::relative(e.path(), dir).string()] = readFile(e.path());
  return out;
}

float r32(double x) { return float(x); }

} // namespace

TEST_F(Generate, FirstStepMatchesAnIndependentEvaluation) {
  auto o = opts();
  ASSERT_EQ(generate(root / "t", o), 4);
  auto rep = verifyTrajectory(root / "t");
  ASSERT_TRUE(rep.valid && rep.complete) << rep.problem;
  auto t = loadTrajectory(root / "t");
  EXPECT_EQ(t.header["run"]["steps"], 5);
  EXPECT_EQ(t.header["sigmas"]["video"].size(), 5u);

  // Step 0 by hand: noise in, t = (t_video, t_audio) = (0, 0) -> one distinct timestep 0 for every row.
  const h3::Config c = h3::namedConfig("tiny");
  plan::Plan plan = plan::loadPlan(root / "plan");
  Request req = loadRequest(root / "req.safetensors");
  const auto vs = req.tensors["hidden_states"].shape, as = req.tensors["audio_hidden_states"].shape;
  auto nv = initialNoise(9, "h3c/initial_noise/video", vs[0] * vs[1] * vs[2]);
  auto na = initialNoise(9, "h3c/initial_noise/audio", as[0] * as[1] * as[2]);
  req.tensors["hidden_states"] = Tensor::fromFloats(DType::F32, vs, nv.data());
  req.tensors["audio_hidden_states"] = Tensor::fromFloats(DType::F32, as, na.data());
  float t0 = 0.0f;
  req.tensors["timestep"] = Tensor::fromFloats(DType::F32, {1}, &t0);
  std::vector<int64_t> zeros(size_t(req.tensors["token_tags"].numel()), 0);
  req.tensors["timestep_indices"] = Tensor::fromInts({int64_t(zeros.size())}, zeros.data());
  auto w = makeSyntheticWeights(c, 3);
  RunOptions ro;
  ro.threads = 1;
  RunResult rr = runModel(plan, *w, req, ro);
  auto v0 = rr.outputs.sample.toFloats();
  auto savedV = loadStepTensor(t, 0, "velocity.video");
  ASSERT_TRUE(savedV);
  EXPECT_EQ(*savedV, v0);
  // x1 = r*x + (1-r)*(x + (1 - t)*v), sigma grid of shift 12 / 5 points, each op rounded once.
  const float s0 = t.header["sigmas"]["video"][0].get<float>(), s1 = t.header["sigmas"]["video"][1].get<float>();
  EXPECT_EQ(s0, 1.0f);
  const float r = r32(double(s1) / double(s0)), omr = r32(1.0 - double(r)), sigT = r32(1.0 - double(t0));
  auto savedX = loadStepTensor(t, 0, "latent.video");
  ASSERT_TRUE(savedX);
  for (size_t k = 0; k < nv.size(); ++k) {
    float x0 = r32(double(nv[k]) + double(r32(double(sigT) * double(v0[k]))));
    float x1 = r32(double(r32(double(r) * double(nv[k]))) + double(r32(double(omr) * double(x0))));
    ASSERT_EQ((*savedX)[k], x1) << k;
  }
  // Later steps: the two schedules give distinct t, so the model saw two timesteps.
  EXPECT_NE(t.records[1]["t"]["video"], t.records[1]["t"]["audio"]);
  EXPECT_TRUE(t.records[1]["extra"]["ledger_accepted"].get<bool>());
}

TEST_F(Generate, InterruptedRunResumesByteEqual) {
  auto o = opts();
  generate(root / "full", o);
  for (int64_t stop : {0, 1, 3}) {
    const fs::path d = root / ("part" + std::to_string(stop));
    auto p = opts();
    p.stopAfter = stop;
    EXPECT_EQ(generate(d, p), stop);
    auto r = verifyTrajectory(d);
    EXPECT_TRUE(r.valid && !r.complete) << r.problem;
    GenerateOptions again;
    again.run.threads = 1;  // thread count never changes a bit
    EXPECT_EQ(resumeGenerate(d, again), 4);
    EXPECT_EQ(folderBytes(d), folderBytes(root / "full")) << "stopped after " << stop;
  }
  EXPECT_THROW(generate(root / "full", o), Error);  // never overwrites
  GenerateOptions again;
  EXPECT_THROW(resumeGenerate(root / "full", again), Error);  // already complete
}

TEST_F(Generate, ChangedInputsRefuseToResume) {
  auto p = opts();
  p.stopAfter = 1;
  generate(root / "t", p);
  RequestShape sh;
  sh.text = 3;
  sh.audio = 4;
  sh.videoT = 2;
  sh.videoH = 2;
  sh.videoW = 2;
  writeRequest(root / "req.safetensors", makeRequest(h3::namedConfig("tiny"), sh, 12));
  GenerateOptions again;
  try {
    resumeGenerate(root / "t", again);
    ADD_FAILURE() << "resumed with a changed request";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("request changed"), std::string::npos) << e.what();
  }
}

TEST_F(Generate, PerturbationAtStepKIsNamedAtStepK) {
  auto a = opts();
  a.run.mode = Mode::Off;  // binds to `reference` are allowed outside strict mode
  generate(root / "a", a);
  auto b = a;
  b.run.binds = {parseBindRule("audio_proj_out=reference")};
  b.bindFromStep = 2;
  generate(root / "b", b);
  auto d = driftTrajectories(loadTrajectory(root / "a"), loadTrajectory(root / "b"));
  EXPECT_FALSE(d.identical);
  EXPECT_EQ(d.kind, "velocity");
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.modality, "audio");  // only the audio head changed at step 2
  EXPECT_EQ(d.points[2].velocity[0], 0.0);
  EXPECT_GT(d.points[2].velocity[1], 0.0);
  EXPECT_EQ(d.points[1].latent[1], 0.0);
  EXPECT_NE(std::find(d.headerDifferences.begin(), d.headerDifferences.end(), "run"), d.headerDifferences.end());
}

namespace {
} // namespace

TEST_F(Generate, Cli) {
  const std::string common = "generate --config tiny --synthetic 3 --plan " + (root / "plan").string() +
                             " --request " + (root / "req.safetensors").string() + " --steps 4 --seed 2 --threads 2";
  std::string out;
  ASSERT_EQ(runTool(common + " --out " + (root / "a").string(), &out), 0) << out;
  ASSERT_EQ(runTool(common + " --out " + (root / "b").string(), &out, "H3C_GENERATE_STOP_AFTER=1"), 0) << out;
  EXPECT_EQ(runTool("trajectory verify " + (root / "b").string(), &out), 1) << out;
  EXPECT_EQ(runTool("generate --resume " + (root / "b").string(), &out), 0) << out;
  EXPECT_EQ(runTool("trajectory verify " + (root / "b").string(), &out), 0) << out;
  EXPECT_EQ(runTool("trajectory drift " + (root / "a").string() + " " + (root / "b").string(), &out), 0) << out;
  EXPECT_EQ(folderBytes(root / "a"), folderBytes(root / "b"));
  // Missing options and a resume mixed with run options are errors (exit 2), nothing written.
  EXPECT_EQ(runTool("generate --config tiny --out " + (root / "c").string(), &out), 2) << out;
  EXPECT_FALSE(fs::exists(root / "c"));
  EXPECT_EQ(runTool("generate --resume " + (root / "b").string() + " --seed 3", &out), 2) << out;
  EXPECT_EQ(runTool(common + " --out " + (root / "a").string(), &out), 2) << out;  // exists
}
