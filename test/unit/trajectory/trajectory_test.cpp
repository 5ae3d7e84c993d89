// The sealed trajectory artifact: written by the real writer with the real sampler, driven by a fixed stand-in
// velocity function (the artifact does not care where velocities come from); then tampered, truncated, reordered,
// killed mid-run and resumed, and compared by the drift report.
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"
#include "h3c/trajectory/sampler.h"
#include "h3c/trajectory/trajectory.h"

#include "rollout_test_util.h"
#include "tool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sys/wait.h>
#include <unistd.h>

using namespace h3c;
using h3c::testtool::runTool;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Toy {
  uint64_t seed = 7;
  int64_t points = 6;  // grid points -> 5 steps
  bool saveTensors = true;
  int64_t perturbStep = -1;  // add `perturb` to this step's velocity of modality `perturbModality`, item perturbItem
  int perturbModality = 1;
  int64_t perturbItem = 1;
  float perturb = 0.0f;
  bool sde = false;          // the SDE sampler (noise level 0.7) with log-probabilities
  std::string runPath = "/rollout/node/plan";  // run metadata only: never content
};

// Two batch items; the first video row of each item is a conditioning row (kept as is).
const std::vector<int64_t> kShape[2] = {{2, 3, 16}, {2, 2, 6}};
const int64_t kCond[2] = {1, 0};

json toyHeader(const Toy &toy) {
  json h;
  rt::MiniMaxH3Scheduler sv(12.0), sa(3.0);
  sv.setTimesteps(toy.points);
  sa.setTimesteps(toy.points);
  h["num_steps"] = sv.numSteps();
  h["sigmas"] = {{"video", sv.sigmas()}, {"audio", sa.sigmas()}};
  h["timesteps"] = {{"video", sv.timesteps()}, {"audio", sa.timesteps()}};
  h["noise"] = {{"video", {{"shape", kShape[0]}}}, {"audio", {{"shape", kShape[1]}}}};
  h["sampler"] = {{"kind", toy.sde ? "sde" : "ode"}, {"noise_level", toy.sde ? json(0.7) : json(nullptr)}};
  h["condition_rows"] = {{"video", kCond[0]}, {"audio", kCond[1]}};
  h["save_tensors"] = toy.saveTensors;
  h["seed"] = toy.seed;
  h["model"] = "test stand-in velocity";
  h["run"] = {{"plan", toy.runPath}};
  return h;
}

// A deterministic stand-in for the transformer: couples the two modalities and depends on t.
rt::ModalityFloats toyVelocity(const rt::ModalityFloats &x, float tv, float ta) {
  rt::ModalityFloats v;
  double meanA = 0;
  for (float a : x[1])
    meanA += a;
  meanA /= double(x[1].size());
  for (float e : x[0])
    v[0].push_back(-e * (1.0f - tv) + float(meanA) * 0.125f);
  for (float e : x[1])
    v[1].push_back(-0.5f * e + ta * 0.25f);
  return v;
}

// Runs (or resumes) the toy generation into `dir`; stops after `stopAfter` steps when >= 0 (no final.json).
void runToy(const fs::path &dir, const Toy &toy, int64_t stopAfter = -1, bool resume = false) {
  rt::MiniMaxH3Scheduler sv(12.0), sa(3.0);
  sv.setTimesteps(toy.points);
  sa.setTimesteps(toy.points);
  rt::ModalityFloats x;
  std::optional<rt::TrajectoryWriter> w;
  const rt::MiniMaxH3Scheduler *sch[2] = {&sv, &sa};
  if (resume) {
    w.emplace(rt::TrajectoryWriter::resume(dir, x));
  } else {
    for (int m = 0; m < 2; ++m) {
      x[m].resize(96 / (m ? 4 : 1));
      rt::philoxNormals(toy.seed, uint32_t(m), 0, int64_t(x[m].size()), x[m].data());
    }
    w.emplace(rt::TrajectoryWriter::create(dir, toyHeader(toy), x));
  }
  for (int64_t i = w->sealedSteps(); i < sv.numSteps(); ++i) {
    if (stopAfter >= 0 && i >= stopAfter)
      return;
    rt::TrajectoryStep st;
    st.step = i;
    st.t = {sv.timesteps()[size_t(i)], sa.timesteps()[size_t(i)]};
    st.sigma = {sv.sigmas()[size_t(i)], sa.sigmas()[size_t(i)]};
    st.sigmaNext = {sv.sigmas()[size_t(i) + 1], sa.sigmas()[size_t(i) + 1]};
    st.velocity = toyVelocity(x, st.t[0], st.t[1]);
    if (i == toy.perturbStep) {
      auto &v = st.velocity[size_t(toy.perturbModality)];
      const size_t per = v.size() / 2;
      for (size_t e = size_t(toy.perturbItem) * per; e < size_t(toy.perturbItem + 1) * per; ++e)
        v[e] += toy.perturb;
    }
    if (toy.sde)
      st.sde.emplace();
    for (int m = 0; m < 2; ++m) {
      const int64_t rows = kShape[m][1], cols = kShape[m][2], n = (rows - kCond[m]) * cols;
      rt::SdeConstants k;
      if (toy.sde) {
        k = rt::sdeConstants(*sch[m], i, 0.7);
        auto &r = (*st.sde)[size_t(m)];
        r.std = k.std;
        r.scale = k.scale;
        r.logScale = k.logScale;
        r.count = n;
      }
      for (int64_t b = 0; b < 2; ++b) {
        const int64_t off = (b * rows + kCond[m]) * cols;
        if (!toy.sde) {
          sch[m]->step(i, st.velocity[m].data() + off, x[m].data() + off, size_t(n));
          continue;
        }
        std::vector<float> z(static_cast<size_t>(n)), mean(static_cast<size_t>(n));
        rt::philoxNormals(toy.seed + uint64_t(b), uint32_t(m), uint32_t(1 + i), n, z.data());
        double ss = rt::sdeStep(*sch[m], i, k, st.velocity[m].data() + off, z.data(), x[m].data() + off, mean.data(),
                                size_t(n));
        (*st.sde)[size_t(m)].sumSq.push_back(ss);
        (*st.sde)[size_t(m)].logprob.push_back(rt::sdeLogProb(ss, k, n));
      }
    }
    st.latent = x;
    w->append(st);
  }
  if (stopAfter >= 0)
    return;  // interrupted before final.json
  w->finish();
}

class Trajectory : public ::testing::Test {
protected:
  void SetUp() override {
    root = fs::temp_directory_path() /
           ("h3c-traj-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

using testtraj::folderBytes;

json readJson(const fs::path &p) { return json::parse(readFile(p)); }
void writeJson(const fs::path &p, const json &j) { writeFileAtomic(p, j.dump(1) + "\n"); }
json resealed(json j) {
  j.erase("seal");
  j["seal"] = sha256Hex(canonicalJson(j));
  return j;
}

void expectInvalid(const fs::path &dir, const std::string &file, const std::string &what) {
  auto r = rt::verifyTrajectory(dir);
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find(file), std::string::npos) << r.problem;
  EXPECT_NE(r.problem.find(what), std::string::npos) << r.problem;
}

} // namespace

TEST_F(Trajectory, WrittenRunVerifies) {
  const fs::path d = root / "a";
  runToy(d, Toy{});
  auto r = rt::verifyTrajectory(d);
  EXPECT_TRUE(r.valid) << r.problem;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.sealedSteps, 5);
  EXPECT_TRUE(r.notes.empty());
  // The layout: header, the initial latents, 5 records + tensors, only the final state, final.json.
  auto files = folderBytes(d);
  EXPECT_EQ(files.size(), 1u + 1 + 5 + 5 + 1 + 1);
  EXPECT_TRUE(files.count("initial.safetensors"));
  EXPECT_TRUE(files.count("state-00005.safetensors"));
  EXPECT_FALSE(files.count("state-00000.safetensors"));
  // The chain, recomputed here: record k's prev is the seal of what precedes it.
  json h = readJson(d / "header.json");
  std::string prev = h["seal"];
  EXPECT_EQ(prev, sha256Hex(canonicalJson([&] { json c = h; c.erase("seal"); return c; }())));
  for (int k = 0; k < 5; ++k) {
    json rec = readJson(rt::trajStepJson(d, k));
    EXPECT_EQ(rec["prev"], prev);
    EXPECT_EQ(rec["step"], k);
    prev = rec["seal"];
  }
  EXPECT_EQ(readJson(d / "final.json")["prev"], prev);
  // Same inputs, same bytes.
  runToy(root / "b", Toy{});
  EXPECT_EQ(folderBytes(d), folderBytes(root / "b"));
}

TEST_F(Trajectory, EditedRecordRejected) {
  const fs::path d = root / "t";
  runToy(d, Toy{});
  json rec = readJson(rt::trajStepJson(d, 2));
  rec["latent"]["audio"]["max_abs"] = 123.0;
  writeJson(rt::trajStepJson(d, 2), rec);
  expectInvalid(d, "step-00002.json", "seal mismatch");
}

TEST_F(Trajectory, EditedAndResealedRecordBreaksTheChain) {
  const fs::path d = root / "t";
  runToy(d, Toy{});
  json rec = readJson(rt::trajStepJson(d, 1));
  rec["velocity"]["video"]["sha256"] = std::string(64, '0');
  writeJson(rt::trajStepJson(d, 1), resealed(rec));
  // The edited record no longer matches its tensors file; with tensors not saved the chain catches it.
  expectInvalid(d, "step-00001.safetensors", "does not hash");

  const fs::path e = root / "u";
  Toy noTensors;
  noTensors.saveTensors = false;
  runToy(e, noTensors);
  json r1 = readJson(rt::trajStepJson(e, 1));
  r1["velocity"]["video"]["max_abs"] = 1.0;
  writeJson(rt::trajStepJson(e, 1), resealed(r1));
  expectInvalid(e, "step-00002.json", "chain broken");
  // The last record edited and resealed: final.json closes the chain.
  const fs::path f = root / "v";
  runToy(f, noTensors);
  json r4 = readJson(rt::trajStepJson(f, 4));
  r4["latent"]["video"]["max_abs"] = 9.0;
  writeJson(rt::trajStepJson(f, 4), resealed(r4));
  expectInvalid(f, "final.json", "chain broken");
  // A resealed record whose t disagrees with the header's grid.
  const fs::path g = root / "w";
  runToy(g, noTensors);
  json r0 = readJson(rt::trajStepJson(g, 0));
  r0["t"]["audio"] = 0.5;
  writeJson(rt::trajStepJson(g, 0), resealed(r0));
  expectInvalid(g, "step-00000.json", "t.audio does not equal the header's grid");
}

TEST_F(Trajectory, DroppedRecordsRejected) {
  const fs::path d = root / "t";
  runToy(d, Toy{});
  fs::remove(rt::trajStepJson(d, 2));
  expectInvalid(d, "step-00002.json", "gap");

  const fs::path e = root / "u";
  runToy(e, Toy{});
  fs::remove(rt::trajStepJson(e, 4));
  fs::remove(rt::trajStepTensors(e, 4));
  expectInvalid(e, "state-00004.safetensors", "missing");
  // Even with a forged state the final record names the dropped step.
  fs::copy_file(e / "state-00005.safetensors", e / "state-00004.safetensors");
  auto r = rt::verifyTrajectory(e);
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("state-00004.safetensors"), std::string::npos) << r.problem;
}

TEST_F(Trajectory, ReorderedRecordsRejected) {
  const fs::path d = root / "t";
  Toy toy;
  toy.saveTensors = false;
  runToy(d, toy);
  fs::rename(rt::trajStepJson(d, 1), root / "tmp.json");
  fs::rename(rt::trajStepJson(d, 3), rt::trajStepJson(d, 1));
  fs::rename(root / "tmp.json", rt::trajStepJson(d, 3));
  expectInvalid(d, "step-00001.json", "holds step 3 but is record 1");
}

TEST_F(Trajectory, TruncatedAndForeignFilesRejected) {
  const fs::path d = root / "t";
  runToy(d, Toy{});
  std::string text = readFile(rt::trajStepJson(d, 3));
  writeFileAtomic(rt::trajStepJson(d, 3), text.substr(0, text.size() / 2));
  expectInvalid(d, "step-00003.json", "");

  const fs::path e = root / "u";
  runToy(e, Toy{});
  std::string st = readFile(rt::trajStepTensors(e, 0));
  st[st.size() - 3] ^= 0x40;  // one bit of a tensor value
  writeFileAtomic(rt::trajStepTensors(e, 0), st);
  expectInvalid(e, "step-00000.safetensors", "sha256 differs");

  const fs::path f = root / "v";
  runToy(f, Toy{});
  json h = readJson(f / "header.json");
  h["seed"] = 8;
  writeJson(f / "header.json", h);
  expectInvalid(f, "header.json", "seal mismatch");

  const fs::path g = root / "w";
  runToy(g, Toy{});
  std::string s = readFile(g / "state-00005.safetensors");
  s[s.size() - 1] ^= 1;
  writeFileAtomic(g / "state-00005.safetensors", s);
  expectInvalid(g, "state-00005.safetensors", "latents do not hash");

  const fs::path k = root / "x";
  runToy(k, Toy{});
  writeFileAtomic(k / "notes.txt", "hello");
  expectInvalid(k, "notes.txt", "unexpected file");

  EXPECT_FALSE(rt::verifyTrajectory(root / "nothing").valid);
  EXPECT_THROW(rt::loadTrajectory(k), Error);
}

TEST_F(Trajectory, PrefixIsValidAndResumeIsByteEqual) {
  const fs::path full = root / "full";
  runToy(full, Toy{});
  for (int64_t stop : {0, 2, 5}) {
    const fs::path d = root / ("p" + std::to_string(stop));
    runToy(d, Toy{}, stop);
    // Leftovers of an interrupted step: a temp file, tensors and state written before the record.
    writeFileAtomic(d / "steps" / ".step-00009.json.tmp-1-2-deadbeef", "{");
    if (stop < 5) {
      fs::copy_file(full / "steps" / fmt::format("step-{:05d}.safetensors", stop), rt::trajStepTensors(d, stop));
      writeFileAtomic(rt::trajState(d, stop + 1), "partial");
    }
    auto r = rt::verifyTrajectory(d);
    EXPECT_TRUE(r.valid) << r.problem;
    EXPECT_FALSE(r.complete);
    EXPECT_EQ(r.sealedSteps, stop);
    EXPECT_FALSE(r.notes.empty());
    runToy(d, Toy{}, -1, /*resume=*/true);
    auto v = rt::verifyTrajectory(d);
    EXPECT_TRUE(v.valid && v.complete) << v.problem;
    EXPECT_TRUE(v.notes.empty());
    EXPECT_EQ(folderBytes(d), folderBytes(full)) << "stop " << stop;
  }
  rt::ModalityFloats x;
  EXPECT_THROW(rt::TrajectoryWriter::resume(full, x), Error);  // already complete
}

// A real kill: a child process writes the trajectory and is SIGKILLed at staggered moments; every leftover folder is
// a valid sealed prefix, and resuming it reproduces the uninterrupted run byte for byte.
TEST_F(Trajectory, KilledRunsLeaveValidPrefixes) {
  Toy toy;
  toy.points = 31;  // 30 steps
  const fs::path full = root / "full";
  const auto t0 = std::chrono::steady_clock::now();
  runToy(full, toy);
  const double runUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const auto expected = folderBytes(full);
  int prefixes = 0;
  // Kills spread over the measured run time; more attempts if none landed mid-run (a loaded machine).
  for (int attempt = 0; attempt < 16 && !(attempt >= 8 && prefixes > 0); ++attempt) {
    const fs::path d = root / ("k" + std::to_string(attempt));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        runToy(d, toy);
      } catch (...) {
        _exit(3);
      }
      _exit(0);
    }
    usleep(useconds_t(runUs * ((attempt % 8) + 0.5) / 8));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!fs::exists(d))
      continue;  // killed before the folder was renamed into place: nothing half-written exists
    auto r = rt::verifyTrajectory(d);
    ASSERT_TRUE(r.valid) << "attempt " << attempt << ": " << r.problem;
    prefixes += !r.complete;
    if (!r.complete)
      runToy(d, toy, -1, /*resume=*/true);
    EXPECT_EQ(folderBytes(d), expected) << "attempt " << attempt;
  }
  // Leftover temp folders of a kill before the header commit are named .<name>.tmp-...: no "k" folder half-made.
  for (const auto &e : fs::directory_iterator(root)) {
    std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "full" || n[0] == 'k' || n[0] == '.') << n;
  }
  RecordProperty("interrupted_prefixes", prefixes);
  EXPECT_GE(prefixes, 1);
}

TEST_F(Trajectory, DriftNamesStepKindAndModality) {
  runToy(root / "a", Toy{});
  runToy(root / "b", Toy{});
  auto a = rt::loadTrajectory(root / "a");
  auto same = rt::driftTrajectories(a, rt::loadTrajectory(root / "b"));
  EXPECT_TRUE(same.identical);
  EXPECT_EQ(same.points.size(), 5u);

  Toy p;
  p.perturbStep = 2;
  p.perturbModality = 1;
  p.perturb = 0.25f;
  runToy(root / "c", p);
  auto d = rt::driftTrajectories(a, rt::loadTrajectory(root / "c"));
  EXPECT_FALSE(d.identical);
  EXPECT_EQ(d.kind, "velocity");
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.modality, "audio");
  EXPECT_EQ(d.item, 1);  // only the second batch item was perturbed
  EXPECT_TRUE(d.headerDifferences.empty());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(d.points[size_t(i)].velocity[0], 0.0);
    EXPECT_EQ(d.points[size_t(i)].latent[1], 0.0);
  }
  // Step 2: audio velocity moved by exactly 0.25 (up to F32 rounding of the sum), video velocity untouched.
  EXPECT_NEAR(d.points[2].velocity[1], 0.25, 1e-6);
  EXPECT_EQ(d.points[2].velocity[0], 0.0);
  EXPECT_GT(d.points[2].latent[1], 0.0);
  EXPECT_EQ(d.points[2].latent[0], 0.0);
  EXPECT_GT(d.points[3].velocity[0], 0.0);  // the audio mean feeds the video velocity one step later
  json j = d.toJson();
  EXPECT_EQ(j["first_difference"]["kind"], "velocity");
  EXPECT_EQ(j["first_difference"]["step"], 2);
  EXPECT_EQ(j["first_difference"]["modality"], "audio");
  EXPECT_EQ(j["first_difference"]["item"], 1);
  std::string svg = rt::driftSvg(d, "a <vs> c");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;vs&gt; c"), std::string::npos);
  EXPECT_NE(svg.find("first: velocity audio"), std::string::npos);

  // Without saved tensors the difference is known by hash only.
  Toy pn = p;
  pn.saveTensors = false;
  Toy n;
  n.saveTensors = false;
  runToy(root / "d", n);
  runToy(root / "e", pn);
  auto h = rt::driftTrajectories(rt::loadTrajectory(root / "d"), rt::loadTrajectory(root / "e"));
  EXPECT_EQ(h.step, 2);
  EXPECT_EQ(h.points[2].velocity[1], -1.0);
  EXPECT_TRUE(h.toJson()["per_step"][2]["velocity"]["audio"].is_null());

  // A different seed: the initial noise differs first.
  Toy s;
  s.seed = 8;
  runToy(root / "f", s);
  auto sd = rt::driftTrajectories(a, rt::loadTrajectory(root / "f"));
  EXPECT_EQ(sd.kind, "noise");
  EXPECT_EQ(sd.modality, "video");
  EXPECT_EQ(sd.item, 0);
  EXPECT_EQ(sd.step, -1);

  // A prefix of the same run differs only by length.
  runToy(root / "g", Toy{}, 3);
  auto ld = rt::driftTrajectories(a, rt::loadTrajectory(root / "g"));
  EXPECT_EQ(ld.kind, "length");
  EXPECT_EQ(ld.step, 3);
}

// Two bit-identical runs whose run metadata differs (a rollout node's and a trainer node's paths) are identical; the
// metadata is listed, not counted.
TEST_F(Trajectory, DriftComparesContentNotPaths) {
  runToy(root / "a", Toy{});
  Toy moved;
  moved.runPath = "/trainer/elsewhere/plan";
  runToy(root / "b", moved);
  auto d = rt::driftTrajectories(rt::loadTrajectory(root / "a"), rt::loadTrajectory(root / "b"));
  EXPECT_TRUE(d.identical) << d.text();
  EXPECT_EQ(d.headerDifferences, std::vector<std::string>{"run"});
  EXPECT_NE(d.text().find("not content"), std::string::npos) << d.text();
  // The sampler itself is content: an ODE and an SDE run of the same noise differ at the header, before any step.
  Toy sde;
  sde.sde = true;
  runToy(root / "c", sde);
  auto e = rt::driftTrajectories(rt::loadTrajectory(root / "a"), rt::loadTrajectory(root / "c"));
  EXPECT_EQ(e.kind, "header");
  EXPECT_EQ(e.field, "sampler");
}

// SDE records: per item log-probabilities that verify checks against their formula, and drift names.
TEST_F(Trajectory, SdeLogProbabilitiesAreSealedAndChecked) {
  Toy sde;
  sde.sde = true;
  runToy(root / "a", sde);
  auto r = rt::verifyTrajectory(root / "a");
  ASSERT_TRUE(r.valid && r.complete) << r.problem;
  json rec = readJson(rt::trajStepJson(root / "a", 1));
  ASSERT_TRUE(rec["sde"].is_object());
  EXPECT_EQ(rec["sde"]["video"]["count"], 2 * 16);  // generated rows only
  EXPECT_EQ(rec["sde"]["video"]["items"].size(), 2u);
  // next - mean = scale * z: sum_sq / scale^2 is a chi-square with 32 degrees of freedom (mean 32, sd 8).
  const double scale = rec["sde"]["video"]["scale"].get<double>();
  for (int b = 0; b < 2; ++b) {
    const double chi = rec["sde"]["video"]["items"][b]["sum_sq"].get<double>() / (scale * scale);
    EXPECT_GT(chi, 4.0);
    EXPECT_LT(chi, 80.0);
  }
  // A resealed record whose logprob is not the formula of its sum_sq is refused.
  json bad = rec;
  bad["sde"]["audio"]["items"][1]["logprob"] = bad["sde"]["audio"]["items"][1]["logprob"].get<double>() + 1e-9;
  writeJson(rt::trajStepJson(root / "a", 1), resealed(bad));
  expectInvalid(root / "a", "step-00001.json", "not the formula");
  // Same seeds, same bits; another seed for the second item only: the first difference is that item's noise.
  runToy(root / "b", sde);
  runToy(root / "c", sde);
  auto same = rt::driftTrajectories(rt::loadTrajectory(root / "b"), rt::loadTrajectory(root / "c"));
  EXPECT_TRUE(same.identical);
  Toy other = sde;
  other.perturbStep = 3;
  other.perturbModality = 0;
  other.perturbItem = 0;
  other.perturb = 1e-3f;
  runToy(root / "d", other);
  auto d = rt::driftTrajectories(rt::loadTrajectory(root / "b"), rt::loadTrajectory(root / "d"));
  EXPECT_EQ(d.kind, "velocity");
  EXPECT_EQ(d.step, 3);
  EXPECT_EQ(d.modality, "video");
  EXPECT_EQ(d.item, 0);
  EXPECT_TRUE(d.points[3].logprobDiffers[0]);
  EXPECT_FALSE(d.points[2].logprobDiffers[0]);
}

TEST_F(Trajectory, Cli) {
  runToy(root / "a", Toy{});
  runToy(root / "b", Toy{});
  Toy p;
  p.perturbStep = 3;
  p.perturbModality = 0;
  p.perturb = 1e-3f;
  runToy(root / "c", p);
  runToy(root / "part", Toy{}, 2);
  std::string out;
  EXPECT_EQ(runTool("trajectory verify " + (root / "a").string(), &out), 0) << out;
  EXPECT_NE(out.find("OK: 5 steps"), std::string::npos) << out;
  EXPECT_EQ(runTool("trajectory verify " + (root / "part").string(), &out), 1) << out;
  EXPECT_NE(out.find("INCOMPLETE"), std::string::npos) << out;
  EXPECT_EQ(runTool("trajectory verify --json " + (root / "part").string(), &out), 1) << out;
  EXPECT_EQ(json::parse(out)["sealed_steps"], 2);
  EXPECT_EQ(runTool("trajectory verify " + (root / "missing").string(), &out), 2) << out;
  EXPECT_EQ(runTool("trajectory drift " + (root / "a").string() + " " + (root / "b").string(), &out), 0) << out;
  EXPECT_NE(out.find("identical"), std::string::npos) << out;
  EXPECT_EQ(runTool("trajectory drift --json " + (root / "a").string() + " " + (root / "c").string() + " --plot " +
                        (root / "drift.svg").string(), &out), 1) << out;
  json j = json::parse(out);
  EXPECT_EQ(j["first_difference"]["step"], 3);
  EXPECT_EQ(j["first_difference"]["modality"], "video");
  EXPECT_EQ(j["first_difference"]["item"], 1);
  EXPECT_NEAR(j["per_step"][3]["velocity"]["video"].get<double>(), 1e-3, 1e-6);
  EXPECT_EQ(readFile(root / "drift.svg").rfind("<svg", 0), 0u);
  // Tampered -> verify 1, drift refuses with exit 2.
  json rec = readJson(rt::trajStepJson(root / "b", 0));
  rec["step"] = 0.0;
  writeJson(rt::trajStepJson(root / "b", 0), rec);
  EXPECT_EQ(runTool("trajectory verify " + (root / "b").string(), &out), 1) << out;
  EXPECT_NE(out.find("INVALID"), std::string::npos) << out;
  EXPECT_EQ(runTool("trajectory drift " + (root / "a").string() + " " + (root / "b").string(), &out), 2) << out;
}
