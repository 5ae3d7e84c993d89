// The generate loop: schedules, initial latents (conditioning rows from the request, generated rows from the noise),
// one forward of the resident engine per step (engine.h: weights loaded and kernels compiled once per process), the
// ODE or SDE update of the generated rows, the sealed record. Everything a resume needs is in the header's "run"
// object, and checked again on resume (plan, request and checkpoint content hashes), so a resumed run continues
// exactly where the interrupted one stopped, wherever its input files now live.
#include "h3c/trajectory/generate.h"

#include "h3c/plan/io.h"
#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/runtime/engine.h"
#include "h3c/runtime/lora.h"
#include "h3c/runtime/request_layout.h"
#include "h3c/support/json_read.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/version.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"
#include "h3c/support/signature.h"
#include "h3c/trajectory/sampler.h"
#include "h3c/trajectory/trajectory.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <optional>

namespace fs = std::filesystem;
using nlohmann::json;

namespace h3c::rt {
namespace {

struct Prepared {
  h3::Config config;
  plan::Plan plan;
  Request request;
  std::unique_ptr<WeightSource> weights;
  std::array<std::vector<int64_t>, kTrajModalities> shape;  // [B, rows, cols]
  std::array<int64_t, kTrajModalities> cond{};             // leading conditioning rows per modality
  std::vector<int64_t> videoIdx, audioIdx;
  std::vector<uint64_t> seeds;  // per item; empty when the noise came from a file and the sampler is the ODE
  bool sde = false;
  int64_t S = 0;
  MiniMaxH3Scheduler video, audio;
  Prepared(double vs, double as) : video(vs), audio(as) {}
  int64_t B() const { return shape[0][0]; }
  int64_t generated(int m) const { return (shape[m][1] - cond[m]) * shape[m][2]; }  // elements per item
  int64_t offset(int m, int64_t b) const { return (b * shape[m][1] + cond[m]) * shape[m][2]; }
};

std::string absolute(const std::string &p) { return fs::absolute(p).lexically_normal().string(); }

// The weights description without where a checkpoint lives (its content hash identifies it).
json weightsIdentity(const WeightSource &w) {
  json d = w.describe();
  d.erase("path");
  return d;
}

// The --update files, then the --lora adapters, applied in order before the first step.
void applyUpdates(Engine &engine, const h3::Config &c, const std::vector<std::string> &paths,
                  const std::vector<std::string> &loras) {
  for (const auto &path : paths) {
    const UpdateFiles u = openUpdateFiles(path, c);
    engine.updateWeights(u.inputs, u.layout);
  }
  for (const auto &spec : loras) {
    const LoraSpec l = parseLoraSpec(spec);
    engine.loadLora(readLora(l.path, c), l.scale);
  }
}

// `resuming`: the initial latents are in the trajectory already (no noise source needed).
std::unique_ptr<Prepared> prepare(const GenerateOptions &o, bool resuming) {
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
  canonicalize(p->request, p->config, o.request);  // fail closed before the first step
  const char *names[kTrajModalities] = {"hidden_states", "audio_hidden_states"};
  for (int m = 0; m < kTrajModalities; ++m)
    p->shape[m] = p->request.tensors.at(names[m]).shape;
  conditionRows(p->request, p->cond[0], p->cond[1], o.request);
  p->S = p->request.tensors.at("token_tags").numel();
  p->videoIdx = p->request.tensors.at("video_indices").toInts();
  p->audioIdx = p->request.tensors.at("audio_indices").toInts();
  if (o.sampler != "ode" && o.sampler != "sde")
    fail("--sampler", "expected ode or sde, got '{}'", o.sampler);
  p->sde = o.sampler == "sde";
  if (p->sde && (!(o.noiseLevel > 0) || !std::isfinite(o.noiseLevel)))
    fail("--noise-level", "the SDE noise level must be positive, got {}", o.noiseLevel);
  if (!o.seeds.empty() && o.seed)
    fail("--seeds", "give --seed or --seeds, not both");
  if (!o.seeds.empty()) {
    if (int64_t(o.seeds.size()) != p->B())
      fail("--seeds", "{} seeds for a batch of {} items (one per item)", o.seeds.size(), p->B());
    p->seeds = o.seeds;
  } else if (o.seed) {
    for (int64_t b = 0; b < p->B(); ++b)
      p->seeds.push_back(*o.seed + uint64_t(b));
  } else if ((o.noise.empty() && !resuming) || p->sde) {
    fail("--seed", "give --seed or --seeds (the {} needs them)", o.noise.empty() ? "initial noise" : "SDE noise");
  }
  p->video.setTimesteps(o.steps);
  p->audio.setTimesteps(o.steps);
  if (p->video.numSteps() != p->audio.numSteps())
    fail("--steps", "the video schedule (shift {}) has {} steps and the audio one (shift {}) {}: their grids collapsed "
         "differently; choose another --steps", o.videoShift, p->video.numSteps(), o.audioShift, p->audio.numSteps());
  return p;
}

// The initial latents: conditioning rows from the request, generated rows from the noise file or Philox.
ModalityFloats initialLatents(const Prepared &p, const std::string &noiseFile) {
  ModalityFloats x;
  const char *reqNames[kTrajModalities] = {"hidden_states", "audio_hidden_states"};
  std::optional<st::File> nf;
  if (!noiseFile.empty()) {
    nf.emplace(noiseFile);
    for (const auto &t : nf->tensors())
      if (t.name != "video" && t.name != "audio")
        fail(noiseFile, "unexpected tensor '{}' (a noise file holds \"video\" and \"audio\")", t.name);
  }
  for (int m = 0; m < kTrajModalities; ++m) {
    const auto &sh = p.shape[m];
    const std::vector<float> given = p.request.tensors.at(reqNames[m]).toFloats();
    x[m].assign(size_t(sh[0] * sh[1] * sh[2]), 0.0f);
    std::vector<float> noise;
    if (nf) {
      const std::vector<int64_t> want = {sh[0], sh[1] - p.cond[m], sh[2]};
      const st::TensorInfo *t = nf->find(trajModalityName(m));
      if (!t)
        fail(noiseFile, "tensor '{}' missing", trajModalityName(m));
      if (t->dtype != DType::F32 || t->shape != want)
        fail(noiseFile, "'{}' must be F32 {} (batch, generated rows, channels), got {} {}", trajModalityName(m),
             json(want).dump(), dtypeName(t->dtype), json(t->shape).dump());
      noise.resize(size_t(t->numel()));
      if (!noise.empty())
        std::memcpy(noise.data(), nf->data(*t), noise.size() * sizeof(float));
      for (float v : noise)
        if (!std::isfinite(v))
          fail(noiseFile, "'{}' holds a non-finite value", trajModalityName(m));
    }
    for (int64_t b = 0; b < sh[0]; ++b) {
      const size_t item = size_t(b * sh[1] * sh[2]), condElems = size_t(p.cond[m] * sh[2]);
      std::copy_n(given.begin() + long(item), condElems, x[m].begin() + long(item));
      float *dst = x[m].data() + p.offset(m, b);
      if (nf)
        std::copy_n(noise.begin() + long(size_t(b) * size_t(p.generated(m))), p.generated(m), dst);
      else
        philoxNormals(p.seeds[size_t(b)], uint32_t(m), 0, p.generated(m), dst);
    }
  }
  return x;
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
              {"seeds", p.seeds.empty() ? json(nullptr) : json(p.seeds)},
              {"noise", o.noise.empty() ? json(nullptr) : json(absolute(o.noise))},
              {"noise_sha256", o.noise.empty() ? json(nullptr) : json(sha256File(o.noise))},
              {"sampler", o.sampler},
              {"noise_level", p.sde ? json(o.noiseLevel) : json(nullptr)},
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
  // A bar redrawn in place on a terminal; one line per step anywhere else (a log file, a CI job).
  static const bool tty = isatty(fileno(stderr)) != 0;
  std::fprintf(stderr, "%sstep %lld/%lld [%s%s] %.1fs%s", tty ? "\r" : "", static_cast<long long>(done),
               static_cast<long long>(total), std::string(size_t(fill), '#').c_str(),
               std::string(size_t(width - fill), ' ').c_str(), s, tty ? "" : "\n");
  if (tty && done == total)
    std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// The update of the generated rows of every item: the Euler step, or the SDE step with its log-probabilities.
void update(const Prepared &p, int64_t i, double noiseLevel, TrajectoryStep &st, ModalityFloats &x) {
  if (p.sde)
    st.sde.emplace();
  for (int m = 0; m < kTrajModalities; ++m) {
    const MiniMaxH3Scheduler &sch = m == 0 ? p.video : p.audio;
    if (st.velocity[m].size() != x[m].size())
      fail("h3c generate", "step {}: the model's {} output holds {} values, the latents {}", i, trajModalityName(m),
           st.velocity[m].size(), x[m].size());
    const int64_t n = p.generated(m);
    SdeConstants k;
    if (p.sde) {
      k = sdeConstants(sch, i, noiseLevel);
      SdeRecord &r = (*st.sde)[size_t(m)];
      r.std = k.std;
      r.scale = k.scale;
      r.logScale = k.logScale;
      r.count = n;
    }
    std::vector<float> z(static_cast<size_t>(n)), mean(static_cast<size_t>(n));
    for (int64_t b = 0; b < p.B(); ++b) {
      float *xb = x[m].data() + p.offset(m, b);
      const float *vb = st.velocity[m].data() + p.offset(m, b);
      if (!p.sde) {
        sch.step(i, vb, xb, size_t(n));
        continue;
      }
      philoxNormals(p.seeds[size_t(b)], uint32_t(m), uint32_t(1 + i), n, z.data());
      const double sumSq = sdeStep(sch, i, k, vb, z.data(), xb, mean.data(), size_t(n));
      (*st.sde)[size_t(m)].sumSq.push_back(sumSq);
      (*st.sde)[size_t(m)].logprob.push_back(sdeLogProb(sumSq, k, n));
    }
  }
}

int64_t run(Prepared &p, Engine &engine, TrajectoryWriter &w, ModalityFloats &x, const GenerateOptions &o,
            const RunOptions &ro) {
  if (!o.ledgerDir.empty())
    fs::create_directories(o.ledgerDir);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = p.video.numSteps();
  progress(o.progress, w.sealedSteps(), n, t0);
  // The model inputs: the request's tensors once (text, positions, indices: ~5-10 MB at S = 8,349 that every step
  // copied), then each step's latents and row timesteps in place.
  Request req = p.request;
  // A step's sealed ledger (its JSON and seal: tens of ms at the full config) is built on a thread while the next
  // step's forward runs; the step is appended once it is, before the next step's record and before any error of a
  // later step propagates, so every step sealed before a failure is sealed as it was (the same files, in order).
  struct Pending {
    TrajectoryStep st;
    std::future<json> ledger;
  };
  std::optional<Pending> pending;
  auto ledgerFile = [&](int64_t step, const json &ledger) {
    if (!o.ledgerDir.empty())
      writeFileAtomic(fs::path(o.ledgerDir) / fmt::format("step-{:05d}.json", step), sealedJsonDump(ledger, 1) + "\n");
  };
  auto seal = [&] {
    if (!pending)
      return;
    Pending done = std::move(*pending);
    pending.reset();
    const json ledger = done.ledger.get();
    ledgerFile(done.st.step, ledger);
    done.st.extra = {{"ledger_seal", ledger.value("seal", "")}, {"ledger_accepted", ledger.value("accepted", false)}};
    // The identity of the weights that computed the step (the ledger's, docs/contract.md section 11): what a
    // trainer checks against its own (h3c.weights_identity) before it trains on the step.
    if (ledger.contains("header") && ledger["header"].contains("weights"))
      done.st.extra["weights_sha256"] = ledger["header"]["weights"].value("sha256", "");
    w.append(done.st);
    progress(o.progress, done.st.step + 1, n, t0);
  };
  try {
    for (int64_t i = w.sealedSteps(); i < n; ++i) {
      if (o.stopAfter >= 0 && i >= o.stopAfter) {
        seal();
        return w.sealedSteps();
      }
      TrajectoryStep st;
      st.step = i;
      st.t = {p.video.timesteps()[size_t(i)], p.audio.timesteps()[size_t(i)]};
      st.sigma = {p.video.sigmas()[size_t(i)], p.audio.sigmas()[size_t(i)]};
      st.sigmaNext = {p.video.sigmas()[size_t(i) + 1], p.audio.sigmas()[size_t(i) + 1]};

      // The model inputs of this step: the latents, and the row timesteps (build_row_timesteps).
      req.tensors["hidden_states"] = Tensor::fromFloats(DType::F32, p.shape[0], x[0].data());
      req.tensors["audio_hidden_states"] = Tensor::fromFloats(DType::F32, p.shape[1], x[1].data());
      const RowTimesteps ts = rowTimesteps(p.S, p.videoIdx, p.audioIdx, p.cond[0], p.cond[1], st.t[0], st.t[1],
                                           conditionVideoTimestep(st.t[0]), kReferenceAudioTimestep);
      req.tensors["timestep"] = Tensor::fromFloats(DType::F32, {int64_t(ts.timestep.size())}, ts.timestep.data());
      req.tensors["timestep_indices"] = Tensor::fromInts({p.S}, ts.index.data());

      RunOptions stepOpt = ro;
      if (i < o.bindFromStep)
        stepOpt.binds.clear();
      stepOpt.sealLedger = false;  // sealed below, beside the next forward
      RunResult rr = engine.run(req, stepOpt);
      seal();  // the previous step, whose ledger was built while this forward ran
      // A step that fails from here on leaves its ledger file as evidence, as a failed `h3c run` does.
      struct EvidenceOnFailure {
        std::function<void()> write;
        int unwinding = std::uncaught_exceptions();
        ~EvidenceOnFailure() {
          if (std::uncaught_exceptions() > unwinding) try {
              write();
            } catch (...) {  // the step's own error is the one reported
            }
        }
      } evidence{[&] { ledgerFile(i, rr.ledgerBuilder->finish()); }};
      LedgerVerdict v = rr.ledgerBuilder->verdict();  // the rule verifyLedger applies, without re-reading the JSON
      if (ro.mode == Mode::Strict && !v.strictOk)
        fail("--mode strict", "step {}: the strict rule failed ({} offender(s), first: {}); the step is not sealed", i,
             v.offenders.size(), v.offenders.empty() ? "" : v.offenders.front());
      st.velocity[0] = rr.outputs.sample.toFloats();
      st.velocity[1] = rr.outputs.audio_sample.toFloats();
      update(p, i, o.noiseLevel, st, x);
      st.latent = x;
      // Whatever the mode, a step with a NaN or Inf in what it records is never sealed: every later step and every
      // resume would build on it.
      for (int m = 0; m < kTrajModalities; ++m)
        for (const auto &[what, v] : {std::pair<const char *, const std::vector<float> *>{"velocity", &st.velocity[m]},
                                      {"latent", &st.latent[m]}}) {
          const Tensor::NonFinite nf = Tensor::fromFloats(DType::F32, {int64_t(v->size())}, v->data()).nonFinite();
          if (nf.first >= 0)
            fail("h3c generate", "step {}: the {} {} holds non-finite values: {}; the step is not sealed", i,
                 trajModalityName(m), what, nf.text());
        }
      if (st.sde)
        for (const SdeRecord &r : *st.sde)
          for (double lp : r.logprob)
            if (!std::isfinite(lp))
              fail("h3c generate", "step {}: a log-probability is {}; the step is not sealed", i, lp);
      // The builder refers to the engine's plan (alive through the loop) and is not touched by later forwards.
      pending = Pending{std::move(st), std::async(std::launch::async, [b = rr.ledgerBuilder] { return b->finish(); })};
    }
    seal();
  } catch (...) {
    // A step already computed is sealed as before (the error that stopped the run is the one reported; the step's
    // own sealing error, if any, gives way to it).
    try {
      seal();
    } catch (...) {
    }
    throw;
  }
  w.finish();
  if (!o.signKey.empty())
    writeSignature(w.dir() / "final.json", readJsonFile((w.dir() / "final.json").string()).at("seal"), o.signKey);
  return w.sealedSteps();
}

} // namespace

int64_t generate(const fs::path &out, const GenerateOptions &o) {
  if (fs::exists(out))
    fail(out.string(), "already exists (use --resume to continue it, or choose a new --out)");
  auto p = prepare(o, /*resuming=*/false);
  checkBindRules(o.run.binds, p->config);  // before the first step, even when the rules start later
  RunOptions ro = o.run;
  if (ro.tp <= 0)
    ro.tp = p->plan.options.tp;
  if (ro.sp <= 0)
    ro.sp = p->plan.options.sp;
  ModalityFloats x = initialLatents(*p, o.noise);
  // The weights first: on the GPU their upload computes the checkpoint's content hash that the header records.
  Engine engine(p->plan, *p->weights, ro);
  engine.loadWeights(o.progress);
  applyUpdates(engine, p->config, o.updates, o.loras);
  json header;
  header["num_steps"] = p->video.numSteps();
  header["save_tensors"] = o.saveTensors;
  header["sampler"] = {{"kind", o.sampler}, {"noise_level", p->sde ? json(o.noiseLevel) : json(nullptr)}};
  for (int m = 0; m < kTrajModalities; ++m) {
    const auto &sch = m == 0 ? p->video : p->audio;
    header["sigmas"][trajModalityName(m)] = sch.sigmas();
    header["timesteps"][trajModalityName(m)] = sch.timesteps();
    header["noise"][trajModalityName(m)] = {{"shape", p->shape[m]}};
    header["condition_rows"][trajModalityName(m)] = p->cond[m];
  }
  header["noise_source"] = o.noise.empty() ? json{{"kind", "philox"}, {"seeds", p->seeds}}
                                           : json{{"kind", "file"}, {"sha256", sha256File(o.noise)}};
  header["config"] = h3::configToJson(p->config);
  header["fingerprint_sha256"] = p->plan.fingerprintSha256;
  header["h3c"] = versionJson();  // the build that started the trajectory (each step's ledger names its own)
  header["plan_sha256"] = p->plan.planSha256;
  header["run"] = runDescription(o, *p);
  header["run"]["updates"] = json::array();
  for (const auto &u : o.updates) header["run"]["updates"].push_back(absolute(u));
  header["run"]["loras"] = json::array();
  for (const auto &l : o.loras) {
    const LoraSpec spec = parseLoraSpec(l);
    header["run"]["loras"].push_back(absolute(spec.path) + ":" + fmt::format("{}", spec.scale));
  }
  header["run"]["weights_sha256"] = engine.weightsRecord().at("sha256");
  TrajectoryWriter w = TrajectoryWriter::create(out, header, x);
  return run(*p, engine, w, x, o, ro);
}

int64_t resumeGenerate(const fs::path &traj, const GenerateOptions &given) {
  const json header = readJsonFile((traj / "header.json").string());
  if (!header.contains("run") || !header["run"].is_object())
    fail((traj / "header.json").string(), "no 'run' description: not written by h3c generate");
  const json &r = header["run"];
  GenerateOptions o;
  try {
    o.config = r.at("config");
    o.plan = given.plan.empty() ? r.at("plan").get<std::string>() : given.plan;
    o.request = given.request.empty() ? r.at("request").get<std::string>() : given.request;
    o.checkpoint = !given.checkpoint.empty()       ? given.checkpoint
                   : r.at("checkpoint").is_null() ? std::string()
                                                  : r.at("checkpoint").get<std::string>();
    o.synthetic = r.at("synthetic");
    o.steps = r.at("steps");
    o.videoShift = r.at("video_shift");
    o.audioShift = r.at("audio_shift");
    if (!r.at("seeds").is_null())
      o.seeds = r.at("seeds").get<std::vector<uint64_t>>();
    o.sampler = r.at("sampler");
    if (!r.at("noise_level").is_null())
      o.noiseLevel = r.at("noise_level");
    o.saveTensors = header.at("save_tensors");
    o.run.device = r.at("device");
    o.run.mode = parseMode(r.at("mode"));
    o.run.tp = r.at("tp");
    o.run.sp = r.value("sp", int64_t(1));  // trajectories written before sequence parallelism: sp = 1
    for (const auto &b : r.at("binds"))
      o.run.binds.push_back(parseBindRule(b.get<std::string>()));
    o.bindFromStep = r.at("bind_from_step");
    // Trajectories written before hot updates have neither key.
    o.updates = !given.updates.empty() ? given.updates : r.value("updates", std::vector<std::string>());
    o.loras = r.value("loras", std::vector<std::string>());
  } catch (const json::exception &e) {
    fail((traj / "header.json").string(), "#/run is incomplete: {}", e.what());
  }
  o.run.threads = given.run.threads;
  o.ledgerDir = given.ledgerDir;
  o.progress = given.progress;
  o.stopAfter = given.stopAfter;
  o.signKey = given.signKey;
  // The inputs are identified by content, not by path: a rollout node and a trainer node see different paths.
  for (auto [path, what] : {std::pair{&o.plan, "plan"}, {&o.request, "request"}})
    if (!fs::exists(*path))
      fail(*path, "the {} recorded in the trajectory is not there; give --{} with its new location", what, what);
  auto p = prepare(o, /*resuming=*/true);
  if (p->plan.planSha256 != r["plan_sha256"])
    fail(o.plan, "the plan changed since the trajectory was started (plan_sha256 {} != {})", p->plan.planSha256,
         r["plan_sha256"].get<std::string>());
  if (sha256File(o.request) != r["request_sha256"])
    fail(o.request, "the request changed since the trajectory was started (its sha256 differs)");
  json recorded = r["weights"];
  recorded.erase("path");
  // A checkpoint is checked against the recorded content hash while it loads (on the GPU, in the upload's one pass).
  if (auto *ck = dynamic_cast<CheckpointWeights *>(p->weights.get());
      ck && recorded.value("kind", "") == "checkpoint" && recorded.contains("content_sha256"))
    ck->expectContent(recorded["content_sha256"].get<std::string>(), "the trajectory's recorded content_sha256");
  Engine engine(p->plan, *p->weights, o.run);
  engine.loadWeights(o.progress);
  if (weightsIdentity(*p->weights) != recorded)
    fail("weights", "the weights changed since the trajectory was started: {} != {}",
         weightsIdentity(*p->weights).dump(), recorded.dump());
  if (!given.updates.empty() && given.updates.size() != r.value("updates", json::array()).size())
    fail("--update", "the trajectory was started with {} update(s), {} given", r.value("updates", json::array()).size(),
         given.updates.size());
  applyUpdates(engine, p->config, o.updates, o.loras);
  if (r.contains("weights_sha256") && engine.weightsRecord().at("sha256") != r["weights_sha256"])
    fail("weights", "the weights' identity {} differs from the trajectory's recorded weights_sha256 {} (an update "
         "file changed?)", engine.weightsRecord().at("sha256").get<std::string>(),
         r["weights_sha256"].get<std::string>());
  ModalityFloats x;
  TrajectoryWriter w = TrajectoryWriter::resume(traj, x);
  for (int m = 0; m < kTrajModalities; ++m)
    if (int64_t(x[m].size()) != p->shape[m][0] * p->shape[m][1] * p->shape[m][2])
      fail(traj.string(), "the stored {} latents do not fit the request's shape", trajModalityName(m));
  return run(*p, engine, w, x, o, o.run);
}

} // namespace h3c::rt
