// The generate loop: schedules, initial noise, one executor run per step, the Euler update, the sealed record.
// Everything a resume needs is in the header's "run" object, and checked again on resume (plan and request hashes,
// weights description), so a resumed run continues exactly where the interrupted one stopped.
#include "h3c/trajectory/generate.h"

#include "h3c/plan/io.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"
#include "h3c/trajectory/sampler.h"
#include "h3c/trajectory/trajectory.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace fs = std::filesystem;
using nlohmann::json;

namespace h3c::rt {
namespace {

struct Prepared {
  h3::Config config;
  plan::Plan plan;
  Request request;
  std::unique_ptr<WeightSource> weights;
  std::array<std::vector<int64_t>, kTrajModalities> shape;
  MiniMaxH3Scheduler video, audio;
  std::vector<int64_t> audioRows;  // packed positions of the audio rows
  int64_t S = 0;
  Prepared(double vs, double as) : video(vs), audio(as) {}
};

std::string absolute(const std::string &p) { return fs::absolute(p).lexically_normal().string(); }

std::unique_ptr<Prepared> prepare(const GenerateOptions &o) {
  auto p = std::make_unique<Prepared>(o.videoShift, o.audioShift);
  p->config = h3::loadConfig(o.config);
  p->plan = plan::loadPlan(o.plan);
  if (h3::configToJson(p->config) != h3::configToJson(p->plan.config))
    fail("--config", "'{}' differs from the config the plan was compiled for", o.config);
  if (o.checkpoint.empty() && o.synthetic < 0)
    fail("h3c generate", "give --checkpoint DIR or --synthetic SEED");
  p->weights = o.checkpoint.empty() ? makeSyntheticWeights(p->config, uint64_t(o.synthetic))
                                    : makeCheckpointWeights(p->config, o.checkpoint);
  p->request = loadRequest(o.request);
  const char *names[kTrajModalities] = {"hidden_states", "audio_hidden_states"};
  for (int m = 0; m < kTrajModalities; ++m) {
    p->shape[m] = p->request.tensors.at(names[m]).shape;
    if (p->shape[m].size() != 3)
      fail(o.request, "'{}' must be [B, rows, cols], got {}", names[m], p->request.tensors.at(names[m]).shapeString());
  }
  p->S = p->request.tensors.at("token_tags").numel();
  p->audioRows = p->request.tensors.at("audio_indices").toInts();
  for (int64_t r : p->audioRows)
    if (r < 0 || r >= p->S)
      fail(o.request, "audio_indices holds {} outside [0, {})", r, p->S);
  p->video.setTimesteps(o.steps);
  p->audio.setTimesteps(o.steps);
  if (p->video.numSteps() != p->audio.numSteps())
    fail("--steps", "the video schedule (shift {}) has {} steps and the audio one (shift {}) {}: their grids collapsed "
         "differently; choose another --steps", o.videoShift, p->video.numSteps(), o.audioShift, p->audio.numSteps());
  return p;
}

json runDescription(const GenerateOptions &o, const Prepared &p) {
  json binds = json::array();
  for (const auto &b : o.run.binds)
    binds.push_back(b.glob + "=" + bindingName(b.binding));
  return json{{"config", o.config},
              {"plan", absolute(o.plan)},
              {"plan_sha256", p.plan.planSha256},
              {"request", absolute(o.request)},
              {"request_sha256", sha256File(o.request)},
              {"weights", p.weights->describe()},
              {"checkpoint", o.checkpoint.empty() ? json(nullptr) : json(absolute(o.checkpoint))},
              {"synthetic", o.synthetic},
              {"steps", o.steps},
              {"video_shift", o.videoShift},
              {"audio_shift", o.audioShift},
              {"seed", o.seed},
              {"device", o.run.device},
              {"mode", modeName(o.run.mode)},
              {"sp", o.run.sp > 0 ? o.run.sp : p.plan.options.sp},
              {"tp", o.run.tp > 0 ? o.run.tp : p.plan.options.tp},
              {"binds", binds},
              {"bind_from_step", o.bindFromStep}};
}

void progress(bool on, int64_t done, int64_t total, std::chrono::steady_clock::time_point t0) {
  if (!on)
    return;
  const int width = 30;
  const int fill = total ? int(width * done / total) : width;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\rstep %lld/%lld [%s%s] %.1fs", static_cast<long long>(done), static_cast<long long>(total),
               std::string(size_t(fill), '#').c_str(), std::string(size_t(width - fill), ' ').c_str(), s);
  if (done == total)
    std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int64_t run(Prepared &p, TrajectoryWriter &w, ModalityFloats &x, const GenerateOptions &o, const RunOptions &ro) {
  if (!o.ledgerDir.empty())
    fs::create_directories(o.ledgerDir);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = p.video.numSteps();
  progress(o.progress, w.sealedSteps(), n, t0);
  for (int64_t i = w.sealedSteps(); i < n; ++i) {
    if (o.stopAfter >= 0 && i >= o.stopAfter)
      return w.sealedSteps();
    TrajectoryStep st;
    st.step = i;
    st.t = {p.video.timesteps()[size_t(i)], p.audio.timesteps()[size_t(i)]};
    st.sigma = {p.video.sigmas()[size_t(i)], p.audio.sigmas()[size_t(i)]};
    st.sigmaNext = {p.video.sigmas()[size_t(i) + 1], p.audio.sigmas()[size_t(i) + 1]};

    // The model inputs of this step: the latents, and the row timesteps (build_row_timesteps).
    Request req = p.request;
    req.tensors["hidden_states"] = Tensor::fromFloats(DType::F32, p.shape[0], x[0].data());
    req.tensors["audio_hidden_states"] = Tensor::fromFloats(DType::F32, p.shape[1], x[1].data());
    // torch.unique(row_timesteps, sorted=True): only the values some row carries.
    std::vector<float> ts;
    if (p.S > int64_t(p.audioRows.size()))
      ts.push_back(st.t[0]);
    if (!p.audioRows.empty() && (ts.empty() || st.t[1] != st.t[0]))
      ts.push_back(st.t[1]);
    std::sort(ts.begin(), ts.end());
    const int64_t videoIdx = std::find(ts.begin(), ts.end(), st.t[0]) - ts.begin();
    const int64_t audioIdx = std::find(ts.begin(), ts.end(), st.t[1]) - ts.begin();
    std::vector<int64_t> rowTs(size_t(p.S), videoIdx);
    for (int64_t r : p.audioRows)
      rowTs[size_t(r)] = audioIdx;
    req.tensors["timestep"] = Tensor::fromFloats(DType::F32, {int64_t(ts.size())}, ts.data());
    req.tensors["timestep_indices"] = Tensor::fromInts({p.S}, rowTs.data());

    RunOptions stepOpt = ro;
    if (i < o.bindFromStep)
      stepOpt.binds.clear();
    RunResult rr = runModel(p.plan, *p.weights, req, stepOpt);
    if (!o.ledgerDir.empty())
      writeFileAtomic(fs::path(o.ledgerDir) / fmt::format("step-{:05d}.json", i), rr.ledger.dump(1) + "\n");
    LedgerVerdict v = verifyLedger(rr.ledger);
    if (ro.mode == Mode::Strict && !v.strictOk)
      fail("--mode strict", "step {}: {} node(s) did not run `row` (first: {}); the step is not sealed", i,
           v.offenders.size(), v.offenders.empty() ? "" : v.offenders.front());
    st.velocity[0] = rr.outputs.sample.toFloats();
    st.velocity[1] = rr.outputs.audio_sample.toFloats();
    for (int m = 0; m < kTrajModalities; ++m) {
      if (st.velocity[m].size() != x[m].size())
        fail("h3c generate", "step {}: the model's {} output holds {} values, the latents {}", i,
             trajModalityName(m), st.velocity[m].size(), x[m].size());
      (m == 0 ? p.video : p.audio).step(i, st.velocity[m].data(), x[m].data(), x[m].size());
    }
    st.latent = x;
    st.extra = {{"ledger_seal", rr.ledger.value("seal", "")},
                {"ledger_accepted", rr.ledger.value("accepted", false)}};
    w.append(st);
    progress(o.progress, i + 1, n, t0);
  }
  w.finish();
  return w.sealedSteps();
}

} // namespace

int64_t generate(const fs::path &out, const GenerateOptions &o) {
  if (fs::exists(out))
    fail(out.string(), "already exists (use --resume to continue it, or choose a new --out)");
  auto p = prepare(o);
  RunOptions ro = o.run;
  if (ro.tp <= 0)
    ro.tp = p->plan.options.tp;
  if (ro.sp <= 0)
    ro.sp = p->plan.options.sp;
  ModalityFloats x;
  const char *noise[kTrajModalities] = {kVideoNoiseName, kAudioNoiseName};
  json header;
  header["num_steps"] = p->video.numSteps();
  header["save_tensors"] = o.saveTensors;
  for (int m = 0; m < kTrajModalities; ++m) {
    const auto &sch = m == 0 ? p->video : p->audio;
    int64_t count = p->shape[m][0] * p->shape[m][1] * p->shape[m][2];
    x[m] = initialNoise(o.seed, noise[m], count);
    header["sigmas"][trajModalityName(m)] = sch.sigmas();
    header["timesteps"][trajModalityName(m)] = sch.timesteps();
    header["noise"][trajModalityName(m)] = {{"name", noise[m]}, {"shape", p->shape[m]}};
  }
  header["config"] = h3::configToJson(p->config);
  header["fingerprint_sha256"] = p->plan.fingerprintSha256;
  header["plan_sha256"] = p->plan.planSha256;
  header["seed"] = o.seed;
  header["run"] = runDescription(o, *p);
  TrajectoryWriter w = TrajectoryWriter::create(out, header, x);
  return run(*p, w, x, o, ro);
}

int64_t resumeGenerate(const fs::path &traj, const GenerateOptions &given) {
  const json header = json::parse(readFile(traj / "header.json"));
  if (!header.contains("run") || !header["run"].is_object())
    fail((traj / "header.json").string(), "no 'run' description: not written by h3c generate");
  const json &r = header["run"];
  GenerateOptions o;
  try {
    o.config = r.at("config");
    o.plan = r.at("plan");
    o.request = r.at("request");
    o.checkpoint = r.at("checkpoint").is_null() ? "" : r.at("checkpoint").get<std::string>();
    o.synthetic = r.at("synthetic");
    o.steps = r.at("steps");
    o.videoShift = r.at("video_shift");
    o.audioShift = r.at("audio_shift");
    o.seed = r.at("seed");
    o.saveTensors = header.at("save_tensors");
    o.run.device = r.at("device");
    o.run.mode = parseMode(r.at("mode"));
    o.run.tp = r.at("tp");
    o.run.sp = r.value("sp", int64_t(1));  // trajectories written before sequence parallelism: sp = 1
    for (const auto &b : r.at("binds"))
      o.run.binds.push_back(parseBindRule(b.get<std::string>()));
    o.bindFromStep = r.at("bind_from_step");
  } catch (const json::exception &e) {
    fail((traj / "header.json").string(), "#/run is incomplete: {}", e.what());
  }
  o.run.threads = given.run.threads;
  o.ledgerDir = given.ledgerDir;
  o.progress = given.progress;
  o.stopAfter = given.stopAfter;
  auto p = prepare(o);
  if (p->plan.planSha256 != r["plan_sha256"])
    fail(o.plan, "the plan changed since the trajectory was started (plan_sha256 {} != {})", p->plan.planSha256,
         r["plan_sha256"].get<std::string>());
  if (sha256File(o.request) != r["request_sha256"])
    fail(o.request, "the request changed since the trajectory was started");
  if (p->weights->describe() != r["weights"])
    fail("weights", "the weights changed since the trajectory was started: {} != {}", p->weights->describe().dump(),
         r["weights"].dump());
  ModalityFloats x;
  TrajectoryWriter w = TrajectoryWriter::resume(traj, x);
  for (int m = 0; m < kTrajModalities; ++m)
    if (int64_t(x[m].size()) != p->shape[m][0] * p->shape[m][1] * p->shape[m][2])
      fail(traj.string(), "the stored {} latents do not fit the request's shape", trajModalityName(m));
  return run(*p, w, x, o, o.run);
}

} // namespace h3c::rt
