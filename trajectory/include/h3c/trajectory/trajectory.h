// The sealed trajectory artifact of a sampler run (issues 7 and 15), its verification and the drift report between
// two runs.
//
// Layout of TRAJ/ (all JSON is sealed: "seal" = sha256 of the canonical JSON (support/canonical_json.h, the form
// Python's json re-serializes to the same bytes) of the object without "seal"):
//   header.json                     {"schema": "h3c-trajectory-v2", "num_steps": n, "sigmas": {"video": [...],
//                                    "audio": [...]}, "timesteps": {...}, "sampler": {"kind": "ode"|"sde",
//                                    "noise_level": null|a}, "condition_rows": {"video": cv, "audio": ca},
//                                    "noise": {"video": {"shape": [B, rows, cols], "sha256", "items": [per-item
//                                    sha256]}, "audio": {...}}, "save_tensors": bool, ...run description
//                                    (noise source, plan/fingerprint/checkpoint/request hashes, config)..., "seal"}
//   initial.safetensors             the initial latents ("video", "audio": F32 [B, rows, cols]), kept
//   state-00000.safetensors         latents before step 0 (= the initial latents)
//   steps/step-00000.json           {"schema": "h3c-trajectory-step-v2", "step": 0, "t", "sigma", "sigma_next"
//                                    (per modality), "velocity"/"latent": {"video": {"sha256", "max_abs", "items"},
//                                    ...}, "sde": null | {"video": {"std", "scale", "log_scale", "count", "items":
//                                    [{"sum_sq", "logprob"} per batch item]}, "audio": ...}, "tensors": null |
//                                    {"file", "sha256"}, "extra": null | {...}, "prev": <previous seal>, "seal"}
//   steps/step-00000.safetensors    with --save-tensors: velocity.video, velocity.audio, latent.video, latent.audio
//   state-00001.safetensors         latents after k sealed steps (only the latest is kept)
//   final.json                      {"schema": "h3c-trajectory-final-v2", "num_steps", "latent": {...sha256},
//                                    "prev": <seal of the last record>, "seal"} once every step is sealed
// "prev" chains every record to the one before (the header for step 0), so editing, dropping or reordering a record
// breaks the chain. sha256 of a tensor = sha256 of its little-endian F32 bytes; "items" hash each batch item's
// [rows, cols] slice the same way (what drift compares). The SDE fields follow sampler.h; verify checks that every
// logprob is the formula of its sum_sq, scale, log_scale and count. The header, the initial latents and the initial
// state are created together (an AtomicDirectory); each step is written tensors -> state -> record (the commit
// point, a write/fsync/rename) -> old state removed, so a run killed at any moment leaves a valid sealed prefix that
// `--resume` continues from.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace h3c::rt {

inline constexpr const char *kTrajectorySchema = "h3c-trajectory-v2";
inline constexpr const char *kTrajectoryStepSchema = "h3c-trajectory-step-v2";
inline constexpr const char *kTrajectoryFinalSchema = "h3c-trajectory-final-v2";
inline constexpr int kTrajModalities = 2;  // 0 video, 1 audio
const char *trajModalityName(int m);       // "video", "audio"

// sha256 (hex) of the little-endian F32 bytes of `v`.
std::string floatsSha256(const std::vector<float> &v);
// sha256 of canonical JSON of `j` without its "seal" member.
std::string computeSeal(const nlohmann::json &j);

using ModalityFloats = std::array<std::vector<float>, kTrajModalities>;

// The SDE part of one modality of a step record (sampler.h).
struct SdeRecord {
  float std = 0, scale = 0;
  double logScale = 0;
  int64_t count = 0;                   // generated elements per item
  std::vector<double> sumSq, logprob;  // per batch item
};

struct TrajectoryStep {
  int64_t step = 0;
  std::array<float, kTrajModalities> t{}, sigma{}, sigmaNext{};
  ModalityFloats velocity;  // the model output at this step
  ModalityFloats latent;    // the latents after this step
  std::optional<std::array<SdeRecord, kTrajModalities>> sde;  // set exactly when the header's sampler is "sde"
  nlohmann::json extra;     // sealed with the record as "extra" (generate: the step's ledger seal); null if unused
};

// Paths inside a trajectory folder.
std::filesystem::path trajStepJson(const std::filesystem::path &dir, int64_t step);
std::filesystem::path trajStepTensors(const std::filesystem::path &dir, int64_t step);
std::filesystem::path trajState(const std::filesystem::path &dir, int64_t sealed);

class TrajectoryWriter {
public:
  // A new trajectory at `dir` (which must not exist). `header` must hold num_steps, sigmas, timesteps, save_tensors,
  // sampler, condition_rows and noise.{video,audio}.shape; schema, the noise hashes and the seal are filled in here.
  // `initial` are the initial latents, checked against the noise shapes.
  static TrajectoryWriter create(const std::filesystem::path &dir, nlohmann::json header,
                                 const ModalityFloats &initial);
  // Reopens a trajectory: verifies the sealed prefix (throws h3c::Error when it is not valid), removes stale state
  // and temp files, and returns the latest latents in `latents`. Throws when the trajectory is already complete.
  static TrajectoryWriter resume(const std::filesystem::path &dir, ModalityFloats &latents);

  const nlohmann::json &header() const { return header_; }
  int64_t sealedSteps() const { return sealed_; }
  int64_t numSteps() const;
  // Seals the next step (s.step must equal sealedSteps()); t/sigma/sigmaNext must equal the header's grids.
  void append(const TrajectoryStep &s);
  // Writes final.json; every step must be sealed.
  void finish();
  const std::filesystem::path &dir() const { return dir_; }

private:
  TrajectoryWriter(std::filesystem::path dir, nlohmann::json header, int64_t sealed, std::string lastSeal);
  std::filesystem::path dir_;
  nlohmann::json header_;
  int64_t sealed_ = 0;
  std::string lastSeal_;
};

// What verify found. valid: the header, every record, the chain and the latest state check out (a sealed prefix);
// complete: additionally every step is sealed and final.json closes the chain.
struct TrajectoryReport {
  bool valid = false, complete = false;
  int64_t sealedSteps = 0, numSteps = 0;
  std::string problem;             // the first problem, naming the file ("" when valid)
  std::vector<std::string> notes;  // harmless leftovers of an interrupted run (stale state or temp files)
  nlohmann::json toJson() const;
};
TrajectoryReport verifyTrajectory(const std::filesystem::path &dir);

// A verified trajectory in memory (records only; tensors are read on demand).
struct LoadedTrajectory {
  std::filesystem::path dir;
  nlohmann::json header;
  std::vector<nlohmann::json> records;
  std::optional<nlohmann::json> final;
};
// Verifies (throws h3c::Error naming the problem unless valid) and loads.
LoadedTrajectory loadTrajectory(const std::filesystem::path &dir);
// The tensor `name` ("velocity.video", "latent.audio", ...) of step `step` when saved, else nullopt.
std::optional<std::vector<float>> loadStepTensor(const LoadedTrajectory &t, int64_t step, const std::string &name);

// Drift between two trajectories, by content: the initial latents, the grids, every step's velocity, latent and SDE
// log-probabilities per modality and batch item (hashes, and max |A - B| where tensors were saved). Paths, plan and
// checkpoint descriptions and other run metadata are listed as header differences but do not make two trajectories
// differ: bit-identical steps are identical wherever their files came from.
struct DriftPoint {
  int64_t step = 0;
  // Per modality: max |A - B| of the velocity and of the latent after the step; -1 when the hashes differ but a
  // tensor was not saved (unknown), 0 when equal.
  std::array<double, kTrajModalities> velocity{}, latent{};
  std::array<bool, kTrajModalities> velocityDiffers{}, latentDiffers{}, logprobDiffers{};
};
struct DriftReport {
  bool identical = true;
  // The first difference: kind "noise" | "sampler" | "sigma" | "velocity" | "latent" | "logprob" | "length", its
  // step (-1 before the first step), modality and batch item (-1 when none applies); field names the grid entry
  // (t / sigma / sigma_next) or the sampler field.
  std::string kind, modality, field;
  int64_t step = -1, item = -1;
  std::vector<std::string> headerDifferences;  // header fields that differ (other than the seal), informational
  int64_t stepsA = 0, stepsB = 0;
  std::vector<DriftPoint> points;  // one per step both trajectories sealed
  nlohmann::json toJson() const;
  std::string text() const;
};
DriftReport driftTrajectories(const LoadedTrajectory &a, const LoadedTrajectory &b);
// A hand-written SVG: per step, log10 of the max abs difference of the latent and velocity per modality.
std::string driftSvg(const DriftReport &r, const std::string &title);

} // namespace h3c::rt
