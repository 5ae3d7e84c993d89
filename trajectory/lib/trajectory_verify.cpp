// Trajectory verification: the header seal, every record's seal and chain link, the grids, the saved tensors, the
// latest state and final.json. The first problem wins and names its file; leftovers of an interrupted run (temp
// files, superseded state, tensors of an unsealed step) are notes, not problems.
#include "trajectory_internal.h"

#include "h3c/support/error.h"
#include "h3c/support/json_read.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"
#include "h3c/trajectory/sampler.h"

#include <cstring>
#include <map>
#include <set>

namespace fs = std::filesystem;
using nlohmann::json;

namespace h3c::rt {
namespace {

json parseFile(const fs::path &p) {
  std::string text = readFile(p);
  try {
    return parseJson(text, p.string(), 16);
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    fail(p.string(), "invalid JSON: {}", e.what());
  }
}

void expectKeys(const json &j, const std::string &where, const std::set<std::string> &keys) {
  if (!j.is_object())
    fail(where, "expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!keys.count(it.key()))
      fail(where, "unknown field '{}'", it.key());
  for (const auto &k : keys)
    if (!j.contains(k))
      fail(where, "missing field '{}'", k);
}

bool sameFloat(const json &v, float expected) {
  if (!v.is_number())
    return false;
  float f = v.get<float>();
  return std::memcmp(&f, &expected, 4) == 0;
}

// The SDE part of a record: present exactly for the sde sampler, one item per batch item, and every logprob the
// formula of sampler.h applied to its sum_sq, scale, log_scale and count (bit for bit).
void checkSde(const json &rec, const json &header, const std::string &where) {
  if (!traj::isSde(header)) {
    if (!rec["sde"].is_null())
      fail(where, "'sde' must be null: the header's sampler is \"ode\"");
    return;
  }
  for (int m = 0; m < kTrajModalities; ++m) {
    const char *mn = trajModalityName(m);
    const std::string w = where + "#/sde/" + mn;
    const json &e = rec["sde"].is_object() && rec["sde"].contains(mn) ? rec["sde"][mn] : json();
    if (!e.is_object())
      fail(w, "missing: the sde sampler records every modality's log-probabilities");
    for (const char *k : {"std", "scale", "log_scale"})
      if (!e.contains(k) || !e[k].is_number())
        fail(w + "/" + k, "expected a number");
    if (!e.contains("count") || !e["count"].is_number_integer() ||
        e["count"].get<int64_t>() != traj::generatedCount(header, m))
      fail(w + "/count", "expected the generated element count {}", traj::generatedCount(header, m));
    const int64_t items = traj::noiseShape(header, m)[0];
    if (!e.contains("items") || !e["items"].is_array() || int64_t(e["items"].size()) != items)
      fail(w + "/items", "expected one entry per batch item ({})", items);
    SdeConstants k;
    k.scale = e["scale"].get<float>();
    k.logScale = e["log_scale"].get<double>();
    for (int64_t b = 0; b < items; ++b) {
      const json &it = e["items"][size_t(b)];
      if (!it.is_object() || !it.contains("sum_sq") || !it["sum_sq"].is_number() || !it.contains("logprob") ||
          !it["logprob"].is_number())
        fail(w + "/items/" + std::to_string(b), "expected {{sum_sq, logprob}}");
      const double lp = sdeLogProb(it["sum_sq"].get<double>(), k, e["count"].get<int64_t>());
      const double got = it["logprob"].get<double>();
      if (std::memcmp(&lp, &got, 8) != 0)
        fail(w + "/items/" + std::to_string(b), "logprob {} is not the formula of its sum_sq (gives {})", got, lp);
    }
  }
}

// Checks one record (already parsed) against the header and the previous seal.
void checkRecord(const json &rec, const json &header, int64_t i, const std::string &prevSeal, const fs::path &dir,
                 const std::string &where) {
  expectKeys(rec, where,
             {"schema", "step", "t", "sigma", "sigma_next", "velocity", "latent", "sde", "tensors", "extra", "prev",
              "seal"});
  if (rec["schema"] != kTrajectoryStepSchema)
    fail(where, "expected schema \"{}\"", kTrajectoryStepSchema);
  if (!rec["seal"].is_string() || rec["seal"] != computeSeal(rec))
    fail(where, "seal mismatch: the record was modified after it was sealed");
  if (!rec["step"].is_number_integer() || rec["step"].get<int64_t>() != i)
    fail(where, "holds step {} but is record {}: records were reordered or renamed", rec["step"].dump(), i);
  if (rec["prev"] != prevSeal)
    fail(where, "chain broken: 'prev' is not the seal of {} (a record was edited, dropped or reordered)",
         i == 0 ? std::string("header.json") : trajStepJson(dir, i - 1).filename().string());
  if (!rec["extra"].is_null() && !rec["extra"].is_object())
    fail(where, "'extra' must be null or an object");
  // The weights do not change within a trajectory: a step that records their identity must have the header's.
  if (rec["extra"].is_object() && rec["extra"].contains("weights_sha256") && header.contains("run") &&
      header["run"].is_object() && header["run"].contains("weights_sha256") &&
      rec["extra"]["weights_sha256"] != header["run"]["weights_sha256"])
    fail(where, "extra.weights_sha256 {} is not the header's run.weights_sha256 {}: the step ran with other weights",
         rec["extra"]["weights_sha256"].dump(), header["run"]["weights_sha256"].dump());
  for (int m = 0; m < kTrajModalities; ++m) {
    const char *mn = trajModalityName(m);
    const std::pair<const char *, float> grid[] = {{"t", traj::gridValue(header, "timesteps", m, i)},
                                                   {"sigma", traj::gridValue(header, "sigmas", m, i)},
                                                   {"sigma_next", traj::gridValue(header, "sigmas", m, i + 1)}};
    for (auto [key, value] : grid)
      if (!rec[key].is_object() || !rec[key].contains(mn) || !sameFloat(rec[key][mn], value))
        fail(where, "{}.{} does not equal the header's grid value {}", key, mn, value);
    const int64_t items = traj::noiseShape(header, m)[0];
    for (const char *kind : {"velocity", "latent"}) {
      const json &e = rec[kind].is_object() && rec[kind].contains(mn) ? rec[kind][mn] : json();
      if (!e.is_object() || !e.contains("sha256") || !e["sha256"].is_string())
        fail(where, "{}.{}.sha256 missing", kind, mn);
      if (!e.contains("items") || !e["items"].is_array() || int64_t(e["items"].size()) != items)
        fail(where, "{}.{}.items must hold one sha256 per batch item ({})", kind, mn, items);
    }
  }
  checkSde(rec, header, where);
  const bool saved = header["save_tensors"].get<bool>();
  if (!saved) {
    if (!rec["tensors"].is_null())
      fail(where, "'tensors' must be null: the header says tensors are not saved");
    return;
  }
  const fs::path tf = trajStepTensors(dir, i);
  if (!rec["tensors"].is_object() || rec["tensors"].value("file", "") != tf.filename().string())
    fail(where, "'tensors' must name {}", tf.filename().string());
  if (!fs::exists(tf))
    fail(tf.string(), "missing (the record {} refers to it)", where);
  if (rec["tensors"]["sha256"] != sha256File(tf))
    fail(tf.string(), "sha256 differs from the one sealed in {}", where);
  st::File f(tf);
  for (int m = 0; m < kTrajModalities; ++m)
    for (const char *kind : {"velocity", "latent"}) {
      auto v = traj::readF32(f, std::string(kind) + "." + trajModalityName(m), traj::noiseShape(header, m));
      if (floatsSha256(v) != rec[kind][trajModalityName(m)]["sha256"] ||
          json(traj::itemHashes(v, traj::noiseShape(header, m)[0])) != rec[kind][trajModalityName(m)]["items"])
        fail(tf.string(), "{}.{} does not hash to the value sealed in {}", kind, trajModalityName(m), where);
    }
}

void verifyInto(const fs::path &dir, TrajectoryReport &r) {
  if (!fs::is_directory(dir))
    fail(dir.string(), "not a trajectory folder");
  const fs::path hp = dir / "header.json";
  if (!fs::exists(hp))
    fail(hp.string(), "missing");
  const json header = parseFile(hp);
  traj::checkHeader(header, hp.string());
  if (!header.contains("seal") || header["seal"] != computeSeal(header))
    fail(hp.string(), "seal mismatch: the header was modified after it was sealed");
  r.numSteps = traj::headerNumSteps(header);
  // The initial latents, kept for the whole run (a trainer recomputes step 0 from them).
  const fs::path ip = dir / "initial.safetensors";
  if (!fs::exists(ip))
    fail(ip.string(), "missing (the initial latents)");
  const ModalityFloats init = traj::readState(ip, header);
  for (int m = 0; m < kTrajModalities; ++m) {
    const json &e = header["noise"][trajModalityName(m)];
    if (floatsSha256(init[m]) != e.value("sha256", "") ||
        json(traj::itemHashes(init[m], traj::noiseShape(header, m)[0])) != e.value("items", json()))
      fail(ip.string(), "{} latents do not hash to the values sealed in header.json", trajModalityName(m));
  }

  // Inventory.
  std::set<int64_t> records, tensors, states;
  bool hasFinal = false;
  for (const fs::path &folder : {dir, dir / "steps"}) {
    if (!fs::is_directory(folder))
      fail(folder.string(), "missing");
    const bool top = folder == dir;
    for (const auto &e : fs::directory_iterator(folder)) {
      const std::string name = e.path().filename().string();
      int64_t idx;
      if (traj::isTempName(name))
        r.notes.push_back(e.path().string() + ": temp file of an interrupted write");
      else if (top && (name == "header.json" || name == "steps" || name == "initial.safetensors" ||
                       name == "final.json.sig"))
        continue;
      else if (top && name == "final.json")
        hasFinal = true;
      else if (top && traj::parseIndexed(name, "state-", ".safetensors", idx))
        states.insert(idx);
      else if (!top && traj::parseIndexed(name, "step-", ".json", idx))
        records.insert(idx);
      else if (!top && traj::parseIndexed(name, "step-", ".safetensors", idx))
        tensors.insert(idx);
      else
        fail(e.path().string(), "unexpected file in a trajectory folder");
    }
  }
  int64_t k = 0;
  while (records.count(k))
    ++k;
  if (int64_t(records.size()) != k)
    fail(trajStepJson(dir, k).string(), "missing: the chain has a gap (records up to {} exist)", *records.rbegin());
  if (k > r.numSteps)
    fail(trajStepJson(dir, r.numSteps).string(), "more records than the header's {} steps", r.numSteps);

  // The chain.
  std::string prev = header["seal"];
  json last;
  for (int64_t i = 0; i < k; ++i) {
    const fs::path p = trajStepJson(dir, i);
    json rec = parseFile(p);
    checkRecord(rec, header, i, prev, dir, p.string());
    prev = rec["seal"];
    last = std::move(rec);
  }
  for (int64_t t : tensors)
    if (t >= k)
      r.notes.push_back(trajStepTensors(dir, t).string() + ": tensors of an unsealed step");

  // The latest state: the latents after k steps (the noise when k = 0).
  const fs::path sp = trajState(dir, k);
  if (!states.count(k))
    fail(sp.string(), "missing: the latents after {} sealed steps", k);
  ModalityFloats lat = traj::readState(sp, header);
  for (int m = 0; m < kTrajModalities; ++m) {
    const json &expected = k == 0 ? header["noise"][trajModalityName(m)]["sha256"]
                                  : last["latent"][trajModalityName(m)]["sha256"];
    if (floatsSha256(lat[m]) != expected)
      fail(sp.string(), "{} latents do not hash to the value sealed in {}", trajModalityName(m),
           k == 0 ? std::string("header.json") : trajStepJson(dir, k - 1).filename().string());
  }
  for (int64_t s : states)
    if (s != k)
      r.notes.push_back(trajState(dir, s).string() + ": superseded state");

  if (hasFinal) {
    const fs::path fp = dir / "final.json";
    json fin = parseFile(fp);
    expectKeys(fin, fp.string(), {"schema", "num_steps", "latent", "prev", "seal"});
    if (fin["schema"] != kTrajectoryFinalSchema)
      fail(fp.string(), "expected schema \"{}\"", kTrajectoryFinalSchema);
    if (fin["seal"] != computeSeal(fin))
      fail(fp.string(), "seal mismatch: final.json was modified after it was sealed");
    if (fin["num_steps"] != r.numSteps || k != r.numSteps)
      fail(fp.string(), "claims {} steps; the header has {} and {} records are sealed", fin["num_steps"].dump(),
           r.numSteps, k);
    if (fin["prev"] != prev)
      fail(fp.string(), "chain broken: 'prev' is not the seal of the last record (records were dropped or edited)");
    for (int m = 0; m < kTrajModalities; ++m)
      if (fin["latent"][trajModalityName(m)] != last["latent"][trajModalityName(m)]["sha256"])
        fail(fp.string(), "final {} latent hash differs from the last record's", trajModalityName(m));
  }
  r.sealedSteps = k;
  r.valid = true;
  r.complete = hasFinal;
}

} // namespace

nlohmann::json TrajectoryReport::toJson() const {
  return json{{"valid", valid},     {"complete", complete}, {"sealed_steps", sealedSteps},
              {"num_steps", numSteps}, {"problem", problem.empty() ? json(nullptr) : json(problem)},
              {"notes", notes}};
}

TrajectoryReport verifyTrajectory(const fs::path &dir) {
  TrajectoryReport r;
  try {
    verifyInto(dir, r);
  } catch (const std::exception &e) {
    r.valid = false;
    r.complete = false;
    r.problem = e.what();
  }
  return r;
}

LoadedTrajectory loadTrajectory(const fs::path &dir) {
  TrajectoryReport r = verifyTrajectory(dir);
  if (!r.valid)
    throw Error(dir.string(), "invalid trajectory: " + r.problem);
  LoadedTrajectory t;
  t.dir = dir;
  t.header = parseFile(dir / "header.json");
  for (int64_t i = 0; i < r.sealedSteps; ++i)
    t.records.push_back(parseFile(trajStepJson(dir, i)));
  if (r.complete)
    t.final = parseFile(dir / "final.json");
  return t;
}

std::optional<std::vector<float>> loadStepTensor(const LoadedTrajectory &t, int64_t step, const std::string &name) {
  if (step < 0 || step >= int64_t(t.records.size()) || t.records[size_t(step)]["tensors"].is_null())
    return std::nullopt;
  st::File f(trajStepTensors(t.dir, step));
  const int m = name.size() >= 5 && name.compare(name.size() - 5, 5, "video") == 0 ? 0 : 1;
  return traj::readF32(f, name, traj::noiseShape(t.header, m));
}

} // namespace h3c::rt
