// Drift between two verified trajectories, by content: the first step, kind, modality and batch item where they
// differ, and per step the max abs difference of the velocity and of the latent per modality (from the saved tensors;
// hashes alone only say equal / different). The order in which "first" is decided: the initial latents (kind
// "noise", per modality then item), the sampler and conditioning rows (kind "header"), then for step 0, 1, ...:
// sigma (t / sigma / sigma_next), velocity, latent (each video before audio, items in order), logprob. Other header
// fields (paths, plan and checkpoint descriptions, options) are listed but never make two trajectories differ. A
// shorter trajectory that agrees with the longer one on their common steps differs by kind "length".
#include "trajectory_internal.h"

#include "h3c/support/error.h"

#include <algorithm>
#include <cmath>
#include <sstream>

using nlohmann::json;

namespace h3c::rt {
namespace {

double maxAbsDiff(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size())
    return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d))
      return NAN;
    m = std::max(m, d);
  }
  return m;
}

json valueOrNull(double v) { return v < 0 ? json(nullptr) : std::isnan(v) ? json("nan") : json(v); }

} // namespace

DriftReport driftTrajectories(const LoadedTrajectory &a, const LoadedTrajectory &b) {
  DriftReport r;
  r.stepsA = int64_t(a.records.size());
  r.stepsB = int64_t(b.records.size());
  auto setFirst = [&](const std::string &kind, int64_t step, const std::string &modality, int64_t item,
                      const std::string &field) {
    if (!r.identical)
      return;
    r.identical = false;
    r.kind = kind;
    r.step = step;
    r.modality = modality;
    r.item = item;
    r.field = field;
  };
  // The first item whose entry differs in two per-item arrays (-1: all equal; the array length when one is longer).
  auto firstItem = [](const json &x, const json &y) -> int64_t {
    const size_t n = std::min(x.size(), y.size());
    for (size_t i = 0; i < n; ++i)
      if (x[i] != y[i])
        return int64_t(i);
    return x.size() == y.size() ? -1 : int64_t(n);
  };

  // Header fields (other than the seal) that differ: informational (paths, descriptions, run options).
  json ha = a.header, hb = b.header;
  ha.erase("seal");
  hb.erase("seal");
  std::vector<std::string> keys;
  for (auto it = ha.begin(); it != ha.end(); ++it)
    keys.push_back(it.key());
  for (auto it = hb.begin(); it != hb.end(); ++it)
    if (!ha.contains(it.key()))
      keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  for (const auto &k : keys)
    if (!ha.contains(k) || !hb.contains(k) || ha[k] != hb[k])
      r.headerDifferences.push_back(k);

  // Content: the initial latents per modality and item, then the sampler and the conditioning rows.
  for (int m = 0; m < kTrajModalities; ++m) {
    const char *mn = trajModalityName(m);
    const json &na = ha["noise"][mn], &nb = hb["noise"][mn];
    if (na["shape"] != nb["shape"])
      setFirst("noise", -1, mn, -1, "shape");
    else if (int64_t it = firstItem(na["items"], nb["items"]); it >= 0)
      setFirst("noise", -1, mn, it, "");
  }
  for (const char *field : {"sampler", "condition_rows"})
    if (ha[field] != hb[field])
      setFirst("header", -1, "", -1, field);

  // Steps both sealed.
  const int64_t common = std::min(r.stepsA, r.stepsB);
  for (int64_t i = 0; i < common; ++i) {
    const json &ra = a.records[size_t(i)], &rb = b.records[size_t(i)];
    DriftPoint p;
    p.step = i;
    for (int m = 0; m < kTrajModalities; ++m) {
      const char *mn = trajModalityName(m);
      for (const char *key : {"t", "sigma", "sigma_next"})
        if (ra[key][mn] != rb[key][mn]) {
          setFirst("sigma", i, mn, -1, key);
          break;
        }
    }
    for (const char *kind : {"velocity", "latent"})
      for (int m = 0; m < kTrajModalities; ++m) {
        const char *mn = trajModalityName(m);
        const int64_t it = firstItem(ra[kind][mn]["items"], rb[kind][mn]["items"]);
        const bool differs = it >= 0 || ra[kind][mn]["sha256"] != rb[kind][mn]["sha256"];
        double value = 0;
        if (differs) {
          setFirst(kind, i, mn, it, "");
          const std::string name = std::string(kind) + "." + mn;
          auto ta = loadStepTensor(a, i, name), tb = loadStepTensor(b, i, name);
          value = ta && tb ? maxAbsDiff(*ta, *tb) : -1;
        }
        (kind[0] == 'v' ? p.velocityDiffers : p.latentDiffers)[m] = differs;
        (kind[0] == 'v' ? p.velocity : p.latent)[m] = value;
      }
    for (int m = 0; m < kTrajModalities; ++m) {
      const char *mn = trajModalityName(m);
      const json &sa = ra["sde"].is_object() ? ra["sde"][mn] : json(), &sb = rb["sde"].is_object() ? rb["sde"][mn] : json();
      if (sa == sb)
        continue;
      p.logprobDiffers[m] = true;
      const int64_t it = sa.is_object() && sb.is_object() ? firstItem(sa["items"], sb["items"]) : -1;
      setFirst("logprob", i, mn, it, it >= 0 ? "" : "scale");
    }
    r.points.push_back(p);
  }
  if (r.stepsA != r.stepsB)
    setFirst("length", common, "", -1, "");
  return r;
}

json DriftReport::toJson() const {
  json per = json::array();
  for (const auto &p : points) {
    json e = {{"step", p.step}};
    for (int m = 0; m < kTrajModalities; ++m) {
      e["velocity"][trajModalityName(m)] = valueOrNull(p.velocity[m]);
      e["latent"][trajModalityName(m)] = valueOrNull(p.latent[m]);
    }
    per.push_back(e);
  }
  json first = nullptr;
  if (!identical)
    first = {{"kind", kind},
             {"step", step < 0 ? json(nullptr) : json(step)},
             {"modality", modality.empty() ? json(nullptr) : json(modality)},
             {"item", item < 0 ? json(nullptr) : json(item)},
             {"field", field.empty() ? json(nullptr) : json(field)}};
  return json{{"identical", identical}, {"first_difference", first}, {"header_differences", headerDifferences},
              {"steps_a", stepsA},      {"steps_b", stepsB},         {"per_step", per}};
}

std::string DriftReport::text() const {
  std::ostringstream o;
  if (identical) {
    o << "identical: " << stepsA << " steps, same initial latents, velocities, latents and log-probabilities\n";
    if (!headerDifferences.empty()) {
      o << "(run metadata that differs, not content:";
      for (const auto &h : headerDifferences)
        o << " " << h;
      o << ")\n";
    }
    return o.str();
  }
  const std::string where = (modality.empty() ? std::string() : ", " + modality) +
                            (item < 0 ? std::string() : ", item " + std::to_string(item));
  o << "first difference: ";
  if (kind == "header")
    o << "header field '" << field << "'";
  else if (kind == "noise")
    o << "initial latents" << where << (field.empty() ? "" : " (" + field + ")");
  else if (kind == "length")
    o << "length: A has " << stepsA << " sealed steps, B has " << stepsB << " (equal up to step " << step << ")";
  else
    o << "step " << step << ", " << kind << (field.empty() ? "" : " (" + field + ")") << where;
  o << "\n";
  if (!headerDifferences.empty()) {
    o << "header fields that differ:";
    for (const auto &h : headerDifferences)
      o << " " << h;
    o << "\n";
  }
  auto cell = [](double v) {
    if (v < 0)
      return std::string("differs (no tensors)");
    if (std::isnan(v))
      return std::string("nan");
    return fmt::format("{:.3e}", v);
  };
  o << fmt::format("{:>5}  {:>20}  {:>20}  {:>20}  {:>20}\n", "step", "latent video", "latent audio",
                   "velocity video", "velocity audio");
  for (const auto &p : points)
    if (p.step >= std::max<int64_t>(step, 0))
      o << fmt::format("{:>5}  {:>20}  {:>20}  {:>20}  {:>20}\n", p.step, cell(p.latent[0]), cell(p.latent[1]),
                       cell(p.velocity[0]), cell(p.velocity[1]));
  return o.str();
}

} // namespace h3c::rt
