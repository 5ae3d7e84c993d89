// `h3c generate`: the MiniMax-H3 sampler (sampler.h) around the executor (executor.h), recorded as a sealed
// trajectory (trajectory.h), resumable from its last sealed step.
//
// One request file gives the structure (encoder_hidden_states, the three index tensors, token_tags, position_ids);
// the shapes of its hidden_states / audio_hidden_states give the latent shapes (their values are not used). Every
// video and audio row is generated (no conditioning rows). At step i the model sees the latents (F32) and, as
// diffusers' build_row_timesteps does, the row timesteps t_video for video and text rows and t_audio for audio rows,
// reduced to timestep = the distinct values sorted ascending and timestep_indices = each row's index into it.
// Initial latents: initialNoise(seed, kVideoNoiseName / kAudioNoiseName) over [B, rows, cols].
#pragma once

#include "h3c/runtime/executor.h"

#include <filesystem>
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
  uint64_t seed = 0;        // initial noise
  bool saveTensors = false;
  RunOptions run;           // device, mode, sp and tp (0 = the plan's), binds, threads
  int64_t bindFromStep = 0; // run.binds apply from this step on (a deliberate perturbation at step k)
  std::string ledgerDir;    // when set, each step's ledger is written there as step-NNNNN.json
  bool progress = false;    // a progress bar on stderr
  int64_t stopAfter = -1;   // testing: stop after this many sealed steps (as if killed), without final.json
};

// Runs a new trajectory into `out` (must not exist). Returns the number of sealed steps.
int64_t generate(const std::filesystem::path &out, const GenerateOptions &o);
// Continues `traj` from its last sealed step with the options recorded in its header (threads, ledgerDir, progress
// and stopAfter are taken from `o`; everything else must not be given). Returns the number of sealed steps.
int64_t resumeGenerate(const std::filesystem::path &traj, const GenerateOptions &o);

} // namespace h3c::rt
