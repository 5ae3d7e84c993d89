// EmitOptions::set: the command-line names of the kernel tuning fields (one table, so `h3c compile --tune` and the
// error message list the same names).
#include "h3c/kernels/emit.h"
#include "h3c/support/error.h"

#include <string>

namespace h3c::kernels {

void EmitOptions::set(const std::string &name, int value, const std::string &where) {
  struct Field {
    const char *name;
    int EmitOptions::*field;
    int lo, hi;  // the ranges the emitters accept (checked here too: the plan emitter turns an emitter's refusal
                 // into a kernel-less op, which a command-line typo must not cause)
  };
  const Field fields[] = {{"gemm_stages", &EmitOptions::sm90Stages, 2, 6},  // 2-4 unless gemm_pingpong
                          {"gemm_group_m", &EmitOptions::sm90GroupM, 1, 64},
                          {"gemm_inflight", &EmitOptions::sm90Inflight, 0, 1},
                          {"gemm_cluster", &EmitOptions::sm90Cluster, 1, 2},
                          {"gemm_pingpong", &EmitOptions::sm90Pingpong, 0, 1},
                          {"attn_stages", &EmitOptions::sm90AttnStages, 2, 5},
                          {"attn_overlap", &EmitOptions::sm90AttnOverlap, 0, 1},
                          {"attn_pingpong", &EmitOptions::sm90AttnPingpong, 0, 1}};
  std::string names;
  for (const Field &f : fields) {
    if (name == f.name) {
      if (value < f.lo || value > f.hi) fail(where, "{} must be in [{}, {}], got {}", name, f.lo, f.hi, value);
      this->*f.field = value;
      return;
    }
    names += names.empty() ? f.name : std::string(", ") + f.name;
  }
  fail(where, "unknown tuning name '{}' (known: {})", name, names);
}

} // namespace h3c::kernels
