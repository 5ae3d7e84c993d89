// `h3c generate`: the MiniMax-H3 samplers (sampler.h) around the executor (executor.h), recorded as a sealed
// trajectory (trajectory.h), resumable from its last sealed step.
//
// One request file gives the structure (encoder_hidden_states, the three index tensors, token_tags, position_ids)
// and the latent shapes (hidden_states / audio_hidden_states). As in diffusers' pipeline, the leading rows of each
// modality named by the request's metadata (h3c_condition_video_rows / h3c_condition_audio_rows, written by
// `h3c request make --layout` and scripts/diffusers_request.py; 0 when absent) are conditioning rows: their values
// come from the request and never change; every other row is generated. At step i the model sees the latents (F32)
// and the row timesteps of build_row_timesteps (request_layout.h): t_video for text and generated video rows,
// float32(max(t_video, 0.999)) for video conditioning rows, t_audio for generated audio rows, 1 for reference audio
// rows, reduced to the sorted distinct values and each row's index into them.
//
// Initial latents of the generated rows: the noise file (--noise: safetensors "video" [B, Nv - cv, Cv] and "audio"
// [B, Na - ca, Ca], F32, e.g. the pipeline's own noise), else philoxNormals(seed_b, modality, 0, ...) per item.
// Per-item seeds: --seeds s0,s1,... (one per batch item) or --seed S (item b gets S + b). The SDE noise of step i is
// philoxNormals(seed_b, modality, 1 + i, ...), so a batch item's trajectory depends only on its own seed and inputs.
#pragma once

#include "h3c/runtime/executor.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace h3c::rt {

struct GenerateOptions {
  std::string config;       // full | small | tiny | config.json path
  std::string plan;         // plan folder or plan.json
  std::string request;      // request .safetensors
  std::string checkpoint;   // checkpoint folder, or empty with synthetic >= 0
  int64_t synthetic = -1;   // synthetic weights seed
  int64_t steps = 0;        // grid points (terminal 0 included): steps - 1 model evaluations
  double videoShift = 12.0, audioShift = 3.0;
  std::optional<uint64_t> seed;  // item b's seed = seed + b (unless seeds are given)
  std::vector<uint64_t> seeds;   // one per batch item
  std::string noise;        // initial latents of the generated rows (safetensors), or empty for Philox noise
  std::string sampler = "ode";  // ode | sde
  double noiseLevel = 0.7;  // the SDE's a (Flow-GRPO's default)
  bool saveTensors = false;
  RunOptions run;           // device, mode, sp and tp (0 = the plan's), binds, threads
  int64_t bindFromStep = 0; // run.binds apply from this step on (a deliberate perturbation at step k)
  std::string ledgerDir;    // when set, each step's ledger is written there as step-NNNNN.json
  bool progress = false;    // a progress bar on stderr
  int64_t stopAfter = -1;   // testing: stop after this many sealed steps (as if killed), without final.json
  std::string signKey;      // Ed25519 private key (PEM): final.json's seal is signed into final.json.sig
  // Weights that replace the checkpoint's before the first step (runtime/weight_update.h, openUpdateFiles), in
  // order. The header records them and the weights' identity (weight_identity.h); a resume applies them again
  // (from the recorded paths, or these when given: files that moved) and checks the identity.
  std::vector<std::string> updates;
  // LoRA adapters `FILE[:SCALE]` merged after the updates (runtime/lora.h), recorded and re-applied the same way.
  std::vector<std::string> loras;
};

// Runs a new trajectory into `out` (must not exist). Returns the number of sealed steps.
int64_t generate(const std::filesystem::path &out, const GenerateOptions &o);
// Continues `traj` from its last sealed step with the options recorded in its header. From `o` it takes threads,
// ledgerDir, progress and stopAfter, and, for files that moved since the run started, plan, request and checkpoint
// (each checked against the hash the header recorded); nothing else may be given. Returns the sealed step count.
int64_t resumeGenerate(const std::filesystem::path &traj, const GenerateOptions &o);

} // namespace h3c::rt
