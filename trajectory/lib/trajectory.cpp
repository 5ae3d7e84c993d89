// The trajectory writer: creation (header + initial state as one atomic folder), durable per-step records, resume
// from the last sealed step, and the final record. Verification is in trajectory_verify.cpp, drift in
// trajectory_drift.cpp; the pieces they share are in trajectory_internal.h.
#include "trajectory_internal.h"

#include "h3c/support/json_read.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include <cmath>
#include <cstring>

namespace fs = std::filesystem;
using nlohmann::json;

namespace h3c::rt {

const char *trajModalityName(int m) { return m == 0 ? "video" : "audio"; }

std::string floatsSha256(const std::vector<float> &v) {
  static_assert(sizeof(float) == 4, "F32");
  // h3c only targets little-endian hosts (x86-64, aarch64), so the in-memory bytes are the safetensors bytes.
  return sha256Hex(std::string_view(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float)));
}

std::string computeSeal(const json &j) {
  json copy = j;
  if (copy.is_object())
    copy.erase("seal");
  return sha256Hex(canonicalJson(copy));
}

fs::path trajStepJson(const fs::path &dir, int64_t step) {
  return dir / "steps" / fmt::format("step-{:05d}.json", step);
}
fs::path trajStepTensors(const fs::path &dir, int64_t step) {
  return dir / "steps" / fmt::format("step-{:05d}.safetensors", step);
}
fs::path trajState(const fs::path &dir, int64_t sealed) { return dir / fmt::format("state-{:05d}.safetensors", sealed); }

namespace traj {

int64_t headerNumSteps(const json &h) { return h.at("num_steps").get<int64_t>(); }

std::vector<int64_t> noiseShape(const json &h, int m) {
  return h.at("noise").at(trajModalityName(m)).at("shape").get<std::vector<int64_t>>();
}

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

float gridValue(const json &h, const char *grid, int m, int64_t i) {
  return h.at(grid).at(trajModalityName(m)).at(static_cast<size_t>(i)).get<float>();
}

void checkHeader(const json &h, const std::string &where) {
  auto need = [&](const char *key) -> const json & {
    if (!h.contains(key))
      fail(where + "#/" + key, "missing required field");
    return h.at(key);
  };
  if (!h.is_object())
    fail(where, "expected a JSON object");
  if (need("schema") != kTrajectorySchema)
    fail(where + "#/schema", "expected \"{}\", got {}", kTrajectorySchema, h.at("schema").dump());
  const json &n = need("num_steps");
  if (!n.is_number_integer() || n.get<int64_t>() < 1)
    fail(where + "#/num_steps", "expected a positive integer, got {}", n.dump());
  const int64_t steps = n.get<int64_t>();
  if (!need("save_tensors").is_boolean())
    fail(where + "#/save_tensors", "expected true or false");
  for (const char *grid : {"sigmas", "timesteps"}) {
    const json &g = need(grid);
    for (int m = 0; m < kTrajModalities; ++m) {
      std::string w = fmt::format("{}#/{}/{}", where, grid, trajModalityName(m));
      if (!g.is_object() || !g.contains(trajModalityName(m)) || !g.at(trajModalityName(m)).is_array())
        fail(w, "expected an array of numbers");
      const json &a = g.at(trajModalityName(m));
      size_t expected = size_t(steps) + (grid[0] == 's' ? 1 : 0);
      if (a.size() != expected)
        fail(w, "expected {} values for {} steps, got {}", expected, steps, a.size());
      for (size_t i = 0; i < a.size(); ++i)
        if (!a[i].is_number())
          fail(w + "/" + std::to_string(i), "expected a number");
    }
  }
  const json &noise = need("noise");
  for (int m = 0; m < kTrajModalities; ++m) {
    std::string w = fmt::format("{}#/noise/{}", where, trajModalityName(m));
    if (!noise.is_object() || !noise.contains(trajModalityName(m)) || !noise.at(trajModalityName(m)).is_object())
      fail(w, "expected an object {{shape, sha256, items}}");
    const json &e = noise.at(trajModalityName(m));
    if (!e.contains("shape") || !e.at("shape").is_array() || e.at("shape").size() != 3)
      fail(w + "/shape", "expected [B, rows, cols]");
    for (size_t d = 0; d < 3; ++d)
      if (!e.at("shape")[d].is_number_integer() || e.at("shape")[d].get<int64_t>() < 0)
        fail(w + "/shape/" + std::to_string(d), "expected a non-negative integer");
  }
  const json &sampler = need("sampler");
  if (!sampler.is_object() || !sampler.contains("kind") || !sampler.contains("noise_level"))
    fail(where + "#/sampler", "expected {{kind, noise_level}}");
  if (sampler["kind"] == "ode") {
    if (!sampler["noise_level"].is_null())
      fail(where + "#/sampler/noise_level", "the ODE sampler has no noise level (null)");
  } else if (sampler["kind"] == "sde") {
    if (!sampler["noise_level"].is_number() || !(sampler["noise_level"].get<double>() > 0))
      fail(where + "#/sampler/noise_level", "expected a positive number");
  } else {
    fail(where + "#/sampler/kind", "expected \"ode\" or \"sde\", got {}", sampler["kind"].dump());
  }
  const json &cond = need("condition_rows");
  for (int m = 0; m < kTrajModalities; ++m) {
    const char *mn = trajModalityName(m);
    if (!cond.is_object() || !cond.contains(mn) || !cond[mn].is_number_integer() || cond[mn].get<int64_t>() < 0 ||
        cond[mn].get<int64_t>() > noiseShape(h, m)[1])
      fail(fmt::format("{}#/condition_rows/{}", where, mn), "expected an integer in [0, rows]");
  }
}

bool isSde(const json &h) { return h.at("sampler").at("kind") == "sde"; }

int64_t generatedCount(const json &h, int m) {
  const auto sh = noiseShape(h, m);
  return (sh[1] - h.at("condition_rows").at(trajModalityName(m)).get<int64_t>()) * sh[2];
}

std::vector<std::string> itemHashes(const std::vector<float> &v, int64_t items) {
  std::vector<std::string> out;
  if (items <= 0)
    return out;
  const size_t per = v.size() / size_t(items);
  for (int64_t b = 0; b < items; ++b)
    out.push_back(sha256Hex(std::string_view(reinterpret_cast<const char *>(v.data() + size_t(b) * per),
                                             per * sizeof(float))));
  return out;
}

json tensorSummary(const std::vector<float> &v, int64_t items) {
  double mx = 0;
  for (float x : v)
    mx = std::isnan(x) ? NAN : std::max(mx, double(std::fabs(x)));
  return json{{"sha256", floatsSha256(v)},
              {"max_abs", std::isnan(mx) ? json(nullptr) : json(mx)},
              {"items", itemHashes(v, items)}};
}

json sdeJson(const SdeRecord &r) {
  json items = json::array();
  for (size_t b = 0; b < r.sumSq.size(); ++b)
    items.push_back({{"sum_sq", r.sumSq[b]}, {"logprob", r.logprob[b]}});
  return json{{"std", r.std}, {"scale", r.scale}, {"log_scale", r.logScale}, {"count", r.count}, {"items", items}};
}

std::vector<float> readF32(const st::File &f, const std::string &name, const std::vector<int64_t> &shape) {
  const st::TensorInfo *t = f.find(name);
  if (!t)
    fail(f.path().string(), "tensor '{}' missing", name);
  if (t->dtype != DType::F32 || t->shape != shape)
    fail(f.path().string(), "tensor '{}': expected F32 {}, got {} {}", name, json(shape).dump(), dtypeName(t->dtype),
         json(t->shape).dump());
  std::vector<float> out(static_cast<size_t>(t->numel()));
  if (!out.empty())
    std::memcpy(out.data(), f.data(*t), out.size() * sizeof(float));
  return out;
}

void writeF32File(const fs::path &path, const std::vector<std::pair<std::string, const std::vector<float> *>> &ts,
                  const std::vector<std::vector<int64_t>> &shapes) {
  std::vector<st::TensorDecl> decls;
  for (size_t i = 0; i < ts.size(); ++i)
    decls.push_back(st::TensorDecl{ts[i].first, DType::F32, shapes[i]});
  st::Writer w(path, decls);
  for (const auto &info : w.order())
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].first == info.name)
        w.write(info.name, ts[i].second->data(), ts[i].second->size() * sizeof(float));
  w.commit();
}

ModalityFloats readState(const fs::path &path, const json &header) {
  st::File f(path);
  ModalityFloats out;
  for (int m = 0; m < kTrajModalities; ++m)
    out[m] = readF32(f, trajModalityName(m), noiseShape(header, m));
  return out;
}

} // namespace traj

namespace {

void writeState(const fs::path &path, const json &header, const ModalityFloats &lat) {
  traj::writeF32File(path, {{"video", &lat[0]}, {"audio", &lat[1]}}, {traj::noiseShape(header, 0),
                                                                      traj::noiseShape(header, 1)});
}

std::string pretty(const json &j) { return sealedJsonDump(j, 1) + "\n"; }

} // namespace

TrajectoryWriter::TrajectoryWriter(fs::path dir, json header, int64_t sealed, std::string lastSeal)
    : dir_(std::move(dir)), header_(std::move(header)), sealed_(sealed), lastSeal_(std::move(lastSeal)) {}

int64_t TrajectoryWriter::numSteps() const { return traj::headerNumSteps(header_); }

TrajectoryWriter TrajectoryWriter::create(const fs::path &dir, json header, const ModalityFloats &initial) {
  if (fs::exists(dir))
    fail(dir.string(), "already exists (use --resume to continue a trajectory, or choose a new --out)");
  header["schema"] = kTrajectorySchema;
  header.erase("seal");
  traj::checkHeader(header, dir.string() + "/header.json");
  for (int m = 0; m < kTrajModalities; ++m) {
    json &e = header["noise"][trajModalityName(m)];
    e["sha256"] = floatsSha256(initial[m]);
    e["items"] = traj::itemHashes(initial[m], traj::noiseShape(header, m)[0]);
  }
  for (int m = 0; m < kTrajModalities; ++m)
    if (int64_t(initial[m].size()) != traj::numel(traj::noiseShape(header, m)))
      fail(dir.string(), "initial {} latents hold {} values, the header's shape {} needs {}", trajModalityName(m),
           initial[m].size(), json(traj::noiseShape(header, m)).dump(), traj::numel(traj::noiseShape(header, m)));
  header["seal"] = computeSeal(header);

  AtomicDirectory out(dir);
  fs::create_directories(out.tempPath() / "steps");
  writeFileAtomic(out.tempPath() / "header.json", pretty(header));
  writeState(out.tempPath() / "initial.safetensors", header, initial);
  writeState(trajState(out.tempPath(), 0), header, initial);
  out.commit();
  std::string seal = header["seal"];
  return TrajectoryWriter(dir, std::move(header), 0, seal);
}

void TrajectoryWriter::append(const TrajectoryStep &s) {
  const std::string where = trajStepJson(dir_, s.step).string();
  if (s.step != sealed_)
    fail(where, "expected step {} next, got {}", sealed_, s.step);
  if (sealed_ >= numSteps())
    fail(where, "all {} steps are already sealed", numSteps());
  json rec = {{"schema", kTrajectoryStepSchema}, {"step", s.step}};
  for (int m = 0; m < kTrajModalities; ++m) {
    const char *mn = trajModalityName(m);
    const float grid[3] = {traj::gridValue(header_, "timesteps", m, s.step),
                           traj::gridValue(header_, "sigmas", m, s.step),
                           traj::gridValue(header_, "sigmas", m, s.step + 1)};
    const float got[3] = {s.t[m], s.sigma[m], s.sigmaNext[m]};
    for (int k = 0; k < 3; ++k)
      if (std::memcmp(&grid[k], &got[k], 4) != 0)
        fail(where, "{} {} of step {} is {}, the header's grid says {}", mn,
             k == 0 ? "t" : k == 1 ? "sigma" : "sigma_next", s.step, got[k], grid[k]);
    const int64_t n = traj::numel(traj::noiseShape(header_, m));
    if (int64_t(s.velocity[m].size()) != n || int64_t(s.latent[m].size()) != n)
      fail(where, "{} tensors of step {} hold {} / {} values, expected {}", mn, s.step, s.velocity[m].size(),
           s.latent[m].size(), n);
    rec["t"][mn] = s.t[m];
    rec["sigma"][mn] = s.sigma[m];
    rec["sigma_next"][mn] = s.sigmaNext[m];
    const int64_t items = traj::noiseShape(header_, m)[0];
    rec["velocity"][mn] = traj::tensorSummary(s.velocity[m], items);
    rec["latent"][mn] = traj::tensorSummary(s.latent[m], items);
    if (s.sde) {
      const SdeRecord &r = (*s.sde)[size_t(m)];
      if (int64_t(r.sumSq.size()) != items || int64_t(r.logprob.size()) != items)
        fail(where, "{} SDE record of step {} holds {} / {} items, expected {}", mn, s.step, r.sumSq.size(),
             r.logprob.size(), items);
      if (r.count != traj::generatedCount(header_, m))
        fail(where, "{} SDE record of step {} counts {} elements, the generated rows hold {}", mn, s.step, r.count,
             traj::generatedCount(header_, m));
      rec["sde"][mn] = traj::sdeJson(r);
    }
  }
  if (s.sde.has_value() != traj::isSde(header_))
    fail(where, "step {} {} SDE log-probabilities but the header's sampler is \"{}\"", s.step,
         s.sde ? "carries" : "lacks", header_["sampler"]["kind"].get<std::string>());
  if (!s.sde)
    rec["sde"] = nullptr;
  rec["tensors"] = nullptr;
  if (header_["save_tensors"].get<bool>()) {
    const fs::path tf = trajStepTensors(dir_, s.step);
    auto v = traj::noiseShape(header_, 0), a = traj::noiseShape(header_, 1);
    traj::writeF32File(tf,
                       {{"velocity.video", &s.velocity[0]},
                        {"velocity.audio", &s.velocity[1]},
                        {"latent.video", &s.latent[0]},
                        {"latent.audio", &s.latent[1]}},
                       {v, a, v, a});
    rec["tensors"] = {{"file", tf.filename().string()}, {"sha256", sha256File(tf)}};
  }
  if (!s.extra.is_null() && !s.extra.is_object())
    fail(where, "the record's extra data must be a JSON object");
  rec["extra"] = s.extra;
  writeState(trajState(dir_, s.step + 1), header_, s.latent);
  rec["prev"] = lastSeal_;
  rec["seal"] = computeSeal(rec);
  writeFileAtomic(trajStepJson(dir_, s.step), pretty(rec));  // the commit point
  std::error_code ec;
  fs::remove(trajState(dir_, s.step), ec);  // superseded; a leftover is harmless (verify notes it)
  ++sealed_;
  lastSeal_ = rec["seal"];
}

void TrajectoryWriter::finish() {
  if (sealed_ != numSteps())
    fail(dir_.string(), "cannot finish: {} of {} steps sealed", sealed_, numSteps());
  json last = readJsonFile(trajStepJson(dir_, sealed_ - 1).string());
  json fin = {{"schema", kTrajectoryFinalSchema},
              {"num_steps", numSteps()},
              {"latent",
               {{"video", last["latent"]["video"]["sha256"]}, {"audio", last["latent"]["audio"]["sha256"]}}},
              {"prev", lastSeal_}};
  fin["seal"] = computeSeal(fin);
  writeFileAtomic(dir_ / "final.json", pretty(fin));
}

TrajectoryWriter TrajectoryWriter::resume(const fs::path &dir, ModalityFloats &latents) {
  TrajectoryReport r = verifyTrajectory(dir);
  if (!r.valid)
    fail(dir.string(), "cannot resume: {}", r.problem);
  json header = readJsonFile((dir / "header.json").string());
  // Leftovers of the interrupted step: temp files, a state or tensors file written after the last record.
  for (const fs::path &folder : {dir, dir / "steps"})
    for (const auto &e : fs::directory_iterator(folder)) {
      const std::string name = e.path().filename().string();
      bool stale = traj::isTempName(name);
      int64_t idx;
      if (traj::parseIndexed(name, "state-", ".safetensors", idx) && idx != r.sealedSteps)
        stale = true;
      if (traj::parseIndexed(name, "step-", ".safetensors", idx) && idx >= r.sealedSteps)
        stale = true;
      if (stale)
        fs::remove(e.path());
    }
  latents = traj::readState(trajState(dir, r.sealedSteps), header);
  std::string lastSeal = header["seal"];
  if (r.sealedSteps > 0)
    lastSeal = readJsonFile(trajStepJson(dir, r.sealedSteps - 1).string())["seal"];
  TrajectoryWriter w(dir, std::move(header), r.sealedSteps, lastSeal);
  if (r.complete)
    fail(dir.string(), "the trajectory is already complete ({} steps)", r.numSteps);
  return w;
}

} // namespace h3c::rt
