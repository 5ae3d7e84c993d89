// `h3c backward --config C (--checkpoint DIR | --synthetic SEED) --plan P --inputs REQ --grads G -o OUT [--device cpu|gpu]
// [--threads N] [--update FILE|DIR ...] [--lora FILE[:SCALE] ...]`: the gradients of a loss through a plan compiled
// with `h3c compile --backward` (docs/contract.md section 14). G holds the loss's gradients of the outputs ("sample",
// "audio_sample", F32 of the outputs' shapes); OUT gets the three input gradients under the request's names and the
// F32 gradient of every tensor the plan trains under its plan name (diffusers names; an adapter slot's, section 13).
// The weights are those `h3c run` would use with the same --update / --lora (adapter slots included: zero, or what
// an update or adapter writes into them). The CPU reference runs it, or the GPU's gradient kernels (--device gpu;
// refused, naming the op, while a gradient op has no kernel). No ledger records a backward yet.
#include "command.h"
#include "plan_run_args.h"

#include "h3c/models/config.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/backward.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"

#include <cstdio>
#include <cstring>

namespace cmd_backward {

struct Opts {
  h3c::tool::PlanRunArgs model;
  std::string grads, out, device = "cpu";
  std::vector<std::string> updates, loras;
  int threads = 0;
};

// An F32 tensor of the gradients file, by name.
h3c::rt::Tensor readGrad(const h3c::st::File &f, const std::string &name, const std::string &where) {
  const h3c::st::TensorInfo *t = f.find(name);
  if (!t) h3c::fail(where, "has no tensor '{}'", name);
  if (t->dtype != h3c::DType::F32) h3c::fail(where + ":" + name, "expected F32, got {}", h3c::dtypeName(t->dtype));
  std::vector<float> v(size_t(t->numel()));
  std::memcpy(v.data(), f.data(*t), t->nbytes());
  return h3c::rt::Tensor::fromFloats(h3c::DType::F32, t->shape, v.data());
}

h3c::tool::Command cmd("backward", "Gradients of a loss through a plan compiled with --backward (CPU reference)",
                       [](CLI::App &app) {
  auto o = std::make_shared<Opts>();
  o->model.add(app, "plan folder written by `h3c compile --backward`");
  app.add_option("--grads", o->grads, ".safetensors with the loss's gradients of sample and audio_sample (F32)")
      ->required();
  app.add_option("-o,--out", o->out, "output .safetensors: the input gradients (request names) and the F32 gradient "
                                     "of every tensor the plan trains (plan names)")->required();
  app.add_option("--update", o->updates, "a .safetensors file or folder of weights (any subset, diffusers or native "
                 "names, or adapter slots by plan name; BF16 or F32) replacing the checkpoint's (repeatable, in order)");
  app.add_option("--lora", o->loras, "a LoRA adapter FILE[:SCALE] loaded after the updates as `h3c run --lora` loads "
                 "it (into the adapter slots of a --lora-rank plan; repeatable)");
  app.add_option("--device", o->device, "cpu (the CPU reference) or gpu (the plan's gradient kernels)");
  app.add_option("--threads", o->threads, "CPU worker threads (0 = all cores; never changes a bit)")
      ->check(CLI::Range(0, 1024));
  app.callback([o] {
    o->model.requireWeights("h3c backward");
    std::vector<h3c::PathArg> inputs = o->model.paths();
    inputs.push_back({"--grads", o->grads});
    for (const auto &u : o->updates) inputs.push_back({"--update", u});
    for (const auto &l : o->loras) inputs.push_back({"--lora", h3c::rt::parseLoraSpec(l).path});
    h3c::checkOutputsApart(inputs, {{"--out", o->out}});
    h3c::h3::Config c = h3c::h3::loadConfig(o->model.config);
    h3c::plan::Plan plan = o->model.loadPlanFor(c);
    h3c::rt::RunOptions opt;
    opt.device = o->device;
    opt.threads = o->threads;
    std::unique_ptr<h3c::rt::WeightSource> w = o->model.weights(c);
    const h3c::st::File gf(o->grads);
    const h3c::rt::OutputGrads dy{readGrad(gf, "sample", "--grads"), readGrad(gf, "audio_sample", "--grads")};
    // The weights as an engine of the device holds them after the updates and adapters (the CPU's overlay, the GPU's
    // device buffers, adapter slots included); the backward runs on that engine.
    h3c::rt::Engine engine(plan, *w, opt, /*cpuCacheBytes=*/0);
    h3c::tool::applyUpdatesAndAdapters(engine, o->updates, o->loras, c);
    const h3c::rt::BackwardResult r = engine.backward(h3c::rt::loadRequest(o->model.inputs), dy);
    std::vector<h3c::st::TensorDecl> decls;
    std::map<std::string, const h3c::rt::Tensor *> byName;
    for (const auto *m : {&r.inputGrads, &r.weightGrads})
      for (const auto &[name, t] : *m) {
        decls.push_back({name, t.dtype, t.shape});
        byName[name] = &t;
      }
    h3c::st::Writer wr(o->out, decls);
    for (const auto &info : wr.order()) wr.write(info.name, byName.at(info.name)->bytes.data(), byName.at(info.name)->bytes.size());
    wr.commit();
    std::printf("wrote %s (%zu input and %zu weight gradients)\n", o->out.c_str(), r.inputGrads.size(),
                r.weightGrads.size());
  });
});

} // namespace cmd_backward
