// h3c generate on the CPU reference, tiny config, hand-written plan (test_plans.h): the first step checked
// against an independent evaluation (runModel on inputs built here, the Euler update in double-rounded form), resume
// after an interruption byte-equal, a perturbation from step k named at step k, the CLI.
#include "test_plans.h"

#include "h3c/models/checkpoint.h"
#include "h3c/runtime/executor.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/philox.h"
#include "h3c/support/safetensors.h"
#include "h3c/runtime/request_layout.h"
#include "h3c/trajectory/generate.h"
#include "h3c/trajectory/sampler.h"
#include "h3c/trajectory/trajectory.h"

#include "rollout_test_util.h"
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

using testtraj::folderBytes;

using testtraj::r32;

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
  std::vector<float> nv(size_t(vs[0] * vs[1] * vs[2])), na(size_t(as[0] * as[1] * as[2]));
  for (size_t e = 0; e < nv.size(); ++e)
    nv[e] = philox::normal(9, 0, 0, e);  // item 0's seed is --seed; video is modality 0, the initial draw 0
  for (size_t e = 0; e < na.size(); ++e)
    na[e] = philox::normal(9, 1, 0, e);
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

std::vector<float> readF32(const fs::path &file, const std::string &name) {
  st::File f(file);
  const st::TensorInfo *t = f.find(name);
  if (!t || t->dtype != DType::F32)
    throw std::runtime_error(file.string() + ": no F32 " + name);
  std::vector<float> v(size_t(t->numel()));
  std::memcpy(v.data(), f.data(*t), v.size() * 4);
  return v;
}

// The latents before step i: the initial latents for step 0, else the saved latents of step i - 1.
std::vector<float> latentBefore(const LoadedTrajectory &t, int64_t i, const char *m) {
  if (i == 0)
    return readF32(t.dir / "initial.safetensors", m);
  return *loadStepTensor(t, i - 1, std::string("latent.") + m);
}

// A fl2va request (2 keyframe blocks of conditioning video rows), batch `batch`, written to `path`.
void writeLayoutRequest(const fs::path &path, int64_t batch) {
  LayoutSpec sp;
  sp.layout = "fl2va";
  sp.textTags = {1, 1, 0};
  sp.latentFrames = 2;
  sp.latentHeight = 4;
  sp.latentWidth = 4;
  sp.audioLatents = 2;
  sp.keyframes = {"first", "last"};
  writeRequest(path, makeLayoutRequest(h3::namedConfig("tiny"), sp, batch, 21, DType::F32, 0.0f, 0.0f));
}

} // namespace

// The ODE path is diffusers' Euler update at every step (the formula of sampler.h, recomputed here in the
// double-rounded form from the saved velocities), not only the first.
TEST_F(Generate, OdeTrajectoryIsTheEulerFormulaAtEveryStep) {
  auto o = opts();
  generate(root / "t", o);
  auto t = loadTrajectory(root / "t");
  for (int m = 0; m < 2; ++m) {
    const char *mn = m ? "audio" : "video";
    const auto sig = t.header["sigmas"][mn].get<std::vector<float>>(), ts = t.header["timesteps"][mn].get<std::vector<float>>();
    for (int64_t i = 0; i < 4; ++i) {
      auto x = latentBefore(t, i, mn), v = *loadStepTensor(t, i, std::string("velocity.") + mn),
           next = *loadStepTensor(t, i, std::string("latent.") + mn);
      const float sigT = r32(1.0 - double(ts[size_t(i)])), r = r32(double(sig[size_t(i) + 1]) / double(sig[size_t(i)]));
      const float omr = r32(1.0 - double(r));
      for (size_t k = 0; k < x.size(); ++k) {
        const float x0 = r32(double(x[k]) + double(r32(double(sigT) * double(v[k]))));
        ASSERT_EQ(next[k], r32(double(r32(double(r) * double(x[k]))) + double(r32(double(omr) * double(x0)))))
            << mn << " step " << i << " element " << k;
      }
    }
  }
}

// The SDE sampler on a pipeline layout with conditioning rows, batch 2: the conditioning rows never change, every
// step's sum_sq is recomputed here from the saved tensors (the mean in the double-rounded form), and a batch item
// run alone with its own seed has the same trajectory, bit for bit.
TEST_F(Generate, SdeLogProbabilitiesRecomputeAndItemsAreIndependent) {
  writeLayoutRequest(root / "fl2va.safetensors", 2);
  auto o = opts();
  o.request = (root / "fl2va.safetensors").string();
  o.sampler = "sde";
  o.noiseLevel = 0.7;
  o.seed.reset();
  o.seeds = {101, 202};
  ASSERT_EQ(generate(root / "sde", o), 4);
  auto t = loadTrajectory(root / "sde");
  ASSERT_TRUE(verifyTrajectory(root / "sde").complete);
  EXPECT_EQ(t.header["condition_rows"]["video"], 8);
  const Request req = loadRequest(o.request);
  const auto given = req.tensors.at("hidden_states").toFloats();
  const auto shape = req.tensors.at("hidden_states").shape;  // [2, Nv, 16]
  for (int m = 0; m < 2; ++m) {
    const char *mn = m ? "audio" : "video";
    const int64_t cond = t.header["condition_rows"][mn], rows = t.header["noise"][mn]["shape"][1],
                  cols = t.header["noise"][mn]["shape"][2];
    const auto sig = t.header["sigmas"][mn].get<std::vector<float>>(), ts = t.header["timesteps"][mn].get<std::vector<float>>();
    for (int64_t i = 0; i < 4; ++i) {
      auto x = latentBefore(t, i, mn), v = *loadStepTensor(t, i, std::string("velocity.") + mn),
           next = *loadStepTensor(t, i, std::string("latent.") + mn);
      const json &e = t.records[size_t(i)]["sde"][mn];
      const float coefStd = e["std"].get<float>();
      const float dt = r32(double(sig[size_t(i) + 1]) - double(sig[size_t(i)]));
      const float coef = r32(double(r32(double(r32(double(coefStd) * coefStd)) / double(r32(2.0 * sig[size_t(i)])))) *
                             double(dt));
      const float t0 = ts[size_t(i)], sigT = r32(1.0 - double(t0));
      const float r = r32(double(sig[size_t(i) + 1]) / double(sig[size_t(i)])), omr = r32(1.0 - double(r));
      for (int64_t b = 0; b < 2; ++b) {
        double ss = 0.0;
        for (int64_t k = b * rows * cols; k < (b + 1) * rows * cols; ++k) {
          if (k < (b * rows + cond) * cols) {  // a conditioning row: the request's value, forever
            if (m == 0) {
              ASSERT_EQ(next[size_t(k)], given[size_t(k)]) << "step " << i << " item " << b;
            }
            continue;
          }
          const float den = r32(double(x[size_t(k)]) + double(r32(double(sigT) * double(v[size_t(k)]))));
          const float ode = r32(double(r32(double(r) * double(x[size_t(k)]))) + double(r32(double(omr) * double(den))));
          const float eps = r32(double(x[size_t(k)]) - double(r32(double(t0) * double(v[size_t(k)]))));
          const float mu = r32(double(ode) + double(r32(double(coef) * double(eps))));
          const double d = double(next[size_t(k)]) - double(mu);
          ss = ss + d * d;
        }
        EXPECT_EQ(e["items"][size_t(b)]["sum_sq"].get<double>(), ss) << mn << " step " << i << " item " << b;
      }
    }
  }
  EXPECT_EQ(shape[0], 2);
  // Item 1 alone, seed 202: the same bits as item 1 of the batch at every step.
  writeRequest(root / "item1.safetensors", batchItem(req, 1));
  auto one = o;
  one.request = (root / "item1.safetensors").string();
  one.seeds = {202};
  generate(root / "one", one);
  auto u = loadTrajectory(root / "one");
  for (int m = 0; m < 2; ++m) {
    const char *mn = m ? "audio" : "video";
    EXPECT_EQ(u.header["noise"][mn]["items"][0], t.header["noise"][mn]["items"][1]);
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(u.records[size_t(i)]["latent"][mn]["items"][0], t.records[size_t(i)]["latent"][mn]["items"][1]);
      EXPECT_EQ(u.records[size_t(i)]["sde"][mn]["items"][0], t.records[size_t(i)]["sde"][mn]["items"][1]);
    }
  }
  // Seeds must match the batch.
  auto wrong = o;
  wrong.seeds = {1, 2, 3};
  EXPECT_THROW(generate(root / "wrong", wrong), Error);
  EXPECT_FALSE(fs::exists(root / "wrong"));
}

// --noise: the generated rows start from the given latents (a pipeline's own noise); conditioning rows from the
// request. A noise file of the wrong shape is refused before anything is written.
TEST_F(Generate, NoiseFileGivesTheStartingLatents) {
  writeLayoutRequest(root / "fl2va.safetensors", 1);
  const Request req = loadRequest(root / "fl2va.safetensors");
  const int64_t nv = req.tensors.at("hidden_states").shape[1], na = req.tensors.at("audio_hidden_states").shape[1];
  std::vector<float> video(size_t((nv - 8) * 16)), audio(size_t(na * 6));
  for (size_t k = 0; k < video.size(); ++k)
    video[k] = float(k % 7) * 0.25f - 0.75f;
  for (size_t k = 0; k < audio.size(); ++k)
    audio[k] = float(k % 5) * -0.5f;
  {
    st::Writer w(root / "noise.safetensors", {{"video", DType::F32, {1, nv - 8, 16}}, {"audio", DType::F32, {1, na, 6}}});
    w.write("audio", audio.data(), audio.size() * 4);  // the writer's order: by name within a dtype
    w.write("video", video.data(), video.size() * 4);
    w.commit();
  }
  auto o = opts();
  o.request = (root / "fl2va.safetensors").string();
  o.noise = (root / "noise.safetensors").string();
  o.seed.reset();  // the ODE from a noise file needs no seed
  generate(root / "t", o);
  auto init = readF32(root / "t" / "initial.safetensors", "video");
  const auto given = req.tensors.at("hidden_states").toFloats();
  for (int64_t k = 0; k < nv * 16; ++k)
    ASSERT_EQ(init[size_t(k)], k < 8 * 16 ? given[size_t(k)] : video[size_t(k - 8 * 16)]) << k;
  EXPECT_EQ(readF32(root / "t" / "initial.safetensors", "audio"), audio);
  auto t = loadTrajectory(root / "t");
  EXPECT_EQ(t.header["noise_source"]["kind"], "file");
  {
    st::Writer w(root / "bad.safetensors", {{"video", DType::F32, {1, nv, 16}}, {"audio", DType::F32, {1, na, 6}}});
    std::vector<float> z(size_t(nv * 16), 0.0f);
    w.write("audio", audio.data(), audio.size() * 4);
    w.write("video", z.data(), z.size() * 4);
    w.commit();
  }
  o.noise = (root / "bad.safetensors").string();
  try {
    generate(root / "bad", o);
    ADD_FAILURE() << "accepted a noise file with the conditioning rows";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("generated rows"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root / "bad"));
}

// A trajectory started on one node resumes on another where the plan and request live elsewhere: the files are
// identified by their hashes, and the result is the uninterrupted run's bytes.
TEST_F(Generate, ResumeAcceptsMovedFilesCheckedByHash) {
  auto o = opts();
  generate(root / "full", o);
  auto p = opts();
  p.stopAfter = 2;
  generate(root / "part", p);
  fs::rename(root / "plan", root / "plan-moved");
  fs::rename(root / "req.safetensors", root / "req-moved.safetensors");
  GenerateOptions again;
  try {
    resumeGenerate(root / "part", again);
    ADD_FAILURE() << "resumed without the plan";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("--plan"), std::string::npos) << e.what();
  }
  again.plan = (root / "plan-moved").string();
  again.request = (root / "req-moved.safetensors").string();
  EXPECT_EQ(resumeGenerate(root / "part", again), 4);
  EXPECT_EQ(folderBytes(root / "part"), folderBytes(root / "full"));
  // The drift report agrees: the same content.
  auto d = driftTrajectories(loadTrajectory(root / "full"), loadTrajectory(root / "part"));
  EXPECT_TRUE(d.identical);
  // Another request at the new place is refused by its hash.
  auto q = opts();
  q.plan = (root / "plan-moved").string();
  q.request = (root / "req-moved.safetensors").string();
  q.stopAfter = 1;
  generate(root / "part2", q);
  RequestShape sh;
  sh.text = 2;
  sh.audio = 4;
  sh.videoT = sh.videoH = sh.videoW = 2;
  writeRequest(root / "other.safetensors", makeRequest(h3::namedConfig("tiny"), sh, 11));
  GenerateOptions bad;
  bad.request = (root / "other.safetensors").string();
  EXPECT_THROW(resumeGenerate(root / "part2", bad), Error);
}

// A trajectory written from a plan and request at one place and the same run from copies elsewhere: every step is
// identical, the drift report says so and lists the paths only as run metadata.
TEST_F(Generate, DriftIgnoresWhereTheFilesCameFrom) {
  auto o = opts();
  generate(root / "a", o);
  fs::copy(root / "plan", root / "node2-plan", fs::copy_options::recursive);
  fs::copy_file(root / "req.safetensors", root / "node2-req.safetensors");
  auto b = o;
  b.plan = (root / "node2-plan").string();
  b.request = (root / "node2-req.safetensors").string();
  generate(root / "b", b);
  auto d = driftTrajectories(loadTrajectory(root / "a"), loadTrajectory(root / "b"));
  EXPECT_TRUE(d.identical) << d.text();
  EXPECT_EQ(d.headerDifferences, std::vector<std::string>{"run"});
  std::string out;
  EXPECT_EQ(runTool("trajectory drift " + (root / "a").string() + " " + (root / "b").string(), &out), 0) << out;
}

TEST_F(Generate, Cli) {
  const std::string common = "generate --config tiny --synthetic 3 --plan " + (root / "plan").string() +
                             " --inputs " + (root / "req.safetensors").string() + " --steps 4 --seed 2 --threads 2";
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
  // The SDE sampler with per-item seeds, resumed after a kill with the plan given at its (same) place.
  const std::string sde = "generate --config tiny --synthetic 3 --plan " + (root / "plan").string() + " --inputs " +
                          (root / "req.safetensors").string() + " --steps 4 --seeds 5 --sampler sde --noise-level 0.5";
  ASSERT_EQ(runTool(sde + " --out " + (root / "s").string(), &out), 0) << out;
  ASSERT_EQ(runTool(sde + " --out " + (root / "s2").string(), &out, "H3C_GENERATE_STOP_AFTER=1"), 0) << out;
  EXPECT_EQ(runTool("generate --resume " + (root / "s2").string() + " --plan " + (root / "plan").string(), &out), 0)
      << out;
  EXPECT_EQ(folderBytes(root / "s"), folderBytes(root / "s2"));
  EXPECT_EQ(runTool("trajectory verify " + (root / "s").string(), &out), 0) << out;
  EXPECT_EQ(runTool(sde + " --seed 1 --out " + (root / "s3").string(), &out), 2) << out;  // --seed and --seeds
  EXPECT_EQ(runTool("generate --config tiny --synthetic 3 --plan " + (root / "plan").string() + " --inputs " +
                        (root / "req.safetensors").string() + " --steps 4 --out " + (root / "s4").string(), &out), 2)
      << out;  // no seed and no noise file
  EXPECT_FALSE(fs::exists(root / "s4"));
}

// A NaN weight (issue 18): the step that meets it is never sealed, whatever the mode, and a resume says so again
// instead of failing on a sealed NaN step with a misleading message.
TEST_F(Generate, NonFiniteStepIsNeverSealed) {
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 3, root / "ck");
  const fs::path file = root / "ck" / st::singleFileName(st::kDiffusersPrefix);
  uint64_t at;
  {
    st::File f(file);
    const st::TensorInfo *t = f.find("transformer_blocks.0.ff.net.2.weight");
    ASSERT_NE(t, nullptr);
    at = f.header().dataOffset + t->begin;
  }
  std::string bytes = readFile(file);
  const uint16_t nan = 0x7FC0;
  std::memcpy(bytes.data() + at, &nan, 2);
  writeFileAtomic(file, bytes);
  GenerateOptions o = opts();
  o.synthetic = -1;
  o.checkpoint = (root / "ck").string();
  o.run.mode = Mode::Audit;
  try {
    generate(root / "traj", o);
    FAIL() << "a NaN step was sealed";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not sealed"), std::string::npos) << e.what();
  }
  TrajectoryReport r = verifyTrajectory(root / "traj");
  EXPECT_TRUE(r.valid) << r.problem;
  EXPECT_EQ(r.sealedSteps, 0);
  GenerateOptions again;
  EXPECT_THROW(resumeGenerate(root / "traj", again), Error);
  // Strict mode refuses the weight itself, naming it, before any step.
  o.run.mode = Mode::Strict;
  try {
    generate(root / "traj2", o);
    FAIL() << "strict mode ran a NaN weight";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.0.ff.net.2.weight"), std::string::npos) << e.what();
  }
}
