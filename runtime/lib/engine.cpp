// The resident engine (engine.h) and runModel(), its one-forward form.
#include "h3c/runtime/engine.h"

#include "h3c/runtime/weight_identity.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/error.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>

namespace h3c::rt {

namespace {

// H3C_GPU_PROFILE or H3C_PROFILE: the engine's host phases on stderr.
bool profileOn() { return std::getenv("H3C_GPU_PROFILE") || std::getenv("H3C_PROFILE"); }

// The CLI's --threads range, for every caller (the Python package passes its argument through).
void checkThreads(int threads) {
  if (threads < 0 || threads > 1024)
    fail("--threads", "{} is outside [0, 1024] (0 = all cores)", threads);
}

uint64_t planWeightBytes(const plan::Plan &p) {
  uint64_t total = 0;
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors)
      total += uint64_t(t.numel()) * dtypeSize(t.dtype);
  return total;
}

} // namespace

Engine::Engine(const plan::Plan &p, WeightSource &weights, const RunOptions &opt, uint64_t cpuCacheBytes)
    : plan_(p), source_(&weights), weights_(&weights), loraSlots_(loraSlotTargets(p)), opt_(opt) {
  checkThreads(opt.threads);
  if (opt.tp != p.options.tp)
    fail("--tp", "the plan was compiled for tp = {}, asked for {} (compile with --tp {})", p.options.tp, opt.tp, opt.tp);
  if (opt.sp != 0 && opt.sp != p.options.sp)
    fail("--sp", "the plan was compiled for sp = {}, asked for {} (compile with --sp {})", p.options.sp, opt.sp, opt.sp);
  if (h3::configToJson(weights.config()).dump() != h3::configToJson(p.config).dump())
    fail("--config", "the weights' config differs from the plan's config");
  if (opt.device == "cpu" && cpuCacheBytes > 0 && planWeightBytes(p) <= cpuCacheBytes) {
    cache_ = makeCachedWeights(weights);
    weights_ = cache_.get();
  }
  if (opt.device == "cpu") {  // the GPU executor writes updates into its device buffers instead
    overlay_ = std::make_unique<OverlayWeights>(*weights_);
    overlay_->holdAdapterSlots(p);  // (the GPU executor zeroes them in its buffers)
    weights_ = overlay_.get();
  }
}

Engine::~Engine() = default;

RunResult Engine::run(const Request &request, const RunOptions &opt, const DeviceIO *io) {
  if (opt.device != opt_.device || opt.tp != opt_.tp || (opt.sp != opt_.sp && opt.sp != 0 && opt_.sp != 0))
    fail("engine", "this engine runs device {} sp {} tp {}; asked for device {} sp {} tp {}", opt_.device, opt_.sp,
         opt_.tp, opt.device, opt.sp, opt.tp);
  checkThreads(opt.threads);
  // H3C_GPU_PROFILE (or H3C_PROFILE): the host phases of a forward on stderr, beside the executor's device times.
  static const bool profile = profileOn();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // Borrowed: the executor reads the activations from `request` itself (which outlives this call).
  CanonicalRequest req = canonicalize(request, plan_.config, "--inputs", Activations::Borrowed);
  const auto t1 = Clock::now();
  // The request's sha256 (~6 ms at S = 8,349) on a thread of its own while the executor runs; joined before the
  // ledger header takes it. A std::async future joins in its destructor, so a forward that throws waits for the
  // hash and leaves no thread behind; the executor's error is the one that propagates.
  std::future<std::string> requestSha = std::async(std::launch::async, [&request] { return requestSha256(request); });
  requireWeightsIntact();
  ensureExecutor();
  auto builder = std::make_shared<LedgerBuilder>(plan_, opt.mode, exec_->device(), opt.binds);
  LedgerBuilder &ledger = *builder;
  nlohmann::json info = exec_->deviceInfo();
  for (auto it = info.begin(); it != info.end(); ++it)
    ledger.header()[it.key()] = it.value();
  if (opt.hashNodes)
    ledger.header()["node_hash"] = kContentHashName;
  // NaN / Inf (inputs were refused by canonicalize): in a strict run a weight holding one is an error as it loads,
  // or at once when an earlier (audit) forward of this engine recorded it (a kept tensor is not loaded again);
  // otherwise, like the outputs (found only at the end), it goes into the ledger, whose strict rule then fails.
  const bool strict = opt.mode == Mode::Strict;
  source_->setStrictFinite(strict);
  if (const std::vector<std::string> known = currentNonFinite(); strict && !known.empty())
    fail("weights:" + known.front(), "a strict run refuses non-finite weights ({} tensor(s))", known.size());
  RunResult r;
  const auto t2 = Clock::now();
  r.outputs = exec_->run(plan_, *weights_, req, opt, ledger, io);
  const auto t3 = Clock::now();
  ledger.header()["request"] = {{"sha256", requestSha.get()}, {"B", req.B}, {"S", req.S}, {"Nt", req.Nt},
                                {"Nv", req.Nv}, {"Na", req.Na}, {"T", req.T}};
  const auto t4 = Clock::now();
  // After the run: a GPU load computed the checkpoint's content hash while uploading it (asked before, it would be
  // a hashing pass of its own).
  ledger.header()["checkpoint"] = weights_->describe();
  ledger.header()["weights"] = weightsRecord();
  for (const std::string &w : currentNonFinite())
    ledger.recordNonFinite("weight " + w);
  // The outputs: their bytes scanned here, or (outputs left in the caller's device memory) what the executor found
  // on the device; either way the same record, so the strict rule refuses a non-finite output on every path.
  // (value_or's scan of empty bytes costs nothing.)
  const Outputs &out = r.outputs;
  for (const auto &[name, nf] :
       {std::pair<const char *, Tensor::NonFinite>{"sample", out.sampleNonFinite.value_or(out.sample.nonFinite())},
        {"audio_sample", out.audioSampleNonFinite.value_or(out.audio_sample.nonFinite())}}) {
    if (nf.first >= 0)
      ledger.recordNonFinite(std::string("output ") + name + ": " + nf.text());
  }
  if (opt.sealLedger)
    r.ledger = ledger.finish();
  r.ledgerBuilder = std::move(builder);
  ++forwards_;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  lastPhases_ = {{"canonicalize", ms(t1 - t0)}, {"ledger_header", ms(t2 - t1)}, {"executor", ms(t3 - t2)},
                 {"request_sha_wait", ms(t4 - t3)}, {"outputs_ledger", ms(Clock::now() - t4)}};
  if (profile)
    std::fprintf(stderr, "h3c engine: forward %lld host phases: canonicalize %.2f ms, ledger header %.2f ms, "
                 "executor %.2f ms, request sha256 wait %.2f ms (hashed beside the executor), outputs + ledger%s "
                 "%.2f ms\n", (long long)forwards_, lastPhases_["canonicalize"], lastPhases_["ledger_header"],
                 lastPhases_["executor"], lastPhases_["request_sha_wait"], opt.sealLedger ? " (sealed)" : "",
                 lastPhases_["outputs_ledger"]);
  return r;
}

BackwardResult Engine::backward(const Request &request, const OutputGrads &dy, uint64_t resume,
                                const DeviceGrads *into) {
  requireWeightsIntact();  // as run() and forwardKept(): a backward runs its own forward when nothing was kept
  if (opt_.device == "cpu") return runBackward(plan_, *weights_, request, dy, opt_, nullptr, 0, into);
  ensureExecutor();
  return runBackward(plan_, *weights_, request, dy, opt_, exec_.get(), resume, into);
}

std::pair<Outputs, uint64_t> Engine::forwardKept(const Request &request) {
  if (!plan_.backward())
    fail("plan.json#/functions/backward", "the plan has no backward (compile it with h3c compile --backward)");
  requireWeightsIntact();
  std::pair<Outputs, uint64_t> r;
  if (opt_.device == "cpu") {
    r.first = run(request).outputs;
  } else {
    ensureExecutor();
    const auto t0 = std::chrono::steady_clock::now();
    // The activations borrowed, as the forward's (the executor uploads the request's own bytes): no float copy of
    // them before the step's first launch (canonicalize took 8.1-8.4 ms of a LoRA step's host time at S = 8,349).
    const CanonicalRequest req = canonicalize(request, plan_.config, "--inputs", Activations::Borrowed);
    if (profileOn())
      std::fprintf(stderr, "h3c engine: kept forward: canonicalize %.2f ms\n",
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    r.first = exec_->forwardKept(plan_, *weights_, req, opt_, r.second);
    ++forwards_;
  }
  if (opt_.mode == Mode::Strict)
    for (const auto &[name, t] : {std::pair<const char *, const Tensor *>{"sample", &r.first.sample},
                                  {"audio_sample", &r.first.audio_sample}})
      if (const Tensor::NonFinite nf = t->nonFinite(); nf.first >= 0)
        fail(std::string("output ") + name, "a strict forward refuses non-finite outputs: {}", nf.text());
  return r;
}

void Engine::requireWeightsIntact() const {
  if (weightsBroken_)
    fail("engine", "a weight update failed while writing to the device: the weights are neither the old nor the new "
         "ones; load them again (a new engine)");
}

void Engine::ensureExecutor() {
  if (!exec_)
    exec_ = makeExecutor(opt_.device);
}

void Engine::loadWeights(bool progress) {
  ensureExecutor();
  source_->setStrictFinite(opt_.mode == Mode::Strict);
  exec_->loadWeights(plan_, *weights_, progress);
}

std::vector<std::string> Engine::currentNonFinite() const {
  // The source's record ("<tensor>: <counts>"), less the tensors updates replaced (an update is finite).
  std::vector<std::string> v;
  for (const std::string &w : source_->nonFinite())
    if (!updated_.count(w.substr(0, w.find(':')))) v.push_back(w);
  return v;
}

void Engine::updateWeights(const std::vector<WeightInput> &inputs, h3::QkvLayout layout, uint64_t stream,
                           bool deviceChecked) {
  if (weightsBroken_)
    fail("update", "an earlier update failed while writing to the device; load the weights again (a new engine)");
  for (const WeightInput &in : inputs)
    if (in.device && opt_.device != "gpu")
      fail("update:" + in.name, "is in device memory; this engine runs on the CPU");
  const PreparedUpdate u = prepareWeightUpdate(plan_, inputs, layout, deviceChecked);
  if (u.tensors.empty()) return;
  for (const auto &t : u.tensors)
    if (loraTouched_.count(t))
      fail("update:" + t, "{} ({} loaded): unload the adapters first, then update and load them again",
           plan_.weightTensor(t).adapter ? "is an adapter slot a loaded LoRA adapter fills"
                                          : "has a LoRA adapter merged into it",
           loras_.size());
  std::map<std::string, std::string> hashes;
  if (overlay_) {
    // CPU: the new values of every tensor written, all built before the overlay changes (a tensor written in part
    // starts from its current value).
    std::map<std::string, Tensor> next;
    for (size_t i = 0; i < u.tensors.size(); ++i) {
      const plan::WeightTensor &t = plan_.weightTensor(u.tensors[i]);
      next[u.tensors[i]] = u.whole[i] ? Tensor::zeros(t.dtype, t.shape) : weights_->load(u.tensors[i]);
    }
    for (const WeightWrite &w : u.writes)
      std::memcpy(next.at(w.tensor).bytes.data() + w.offset, w.host, w.bytes);
    for (auto &[name, t] : next) {
      overlay_->set(name, std::move(t));
      hashes[name] = overlay_->contentHashOf(name);
    }
  } else {
    loadWeights(false);
    try {
      exec_->writeWeights(plan_, *weights_, u.writes, stream);
    } catch (...) {
      weightsBroken_ = true;
      throw;
    }
    hashes = exec_->weightHashes(plan_, *weights_, u.tensors);
  }
  for (auto &[name, h] : hashes) weightHashes_[name] = h;
  updated_.insert(u.tensors.begin(), u.tensors.end());
  ++updates_;
  weightsRecord_ = nullptr;
}

Tensor Engine::readWeight(const std::string &name) {
  plan_.weightTensor(name);  // throws naming a tensor the plan lacks
  if (overlay_) return overlay_->load(name);
  loadWeights(false);
  return exec_->readWeight(plan_, *weights_, name);
}

LoraTerms Engine::loraTerms(const std::string &tensor) const {
  LoraTerms terms;
  for (const LoadedLora &l : loras_)
    for (const LoraModule &m : l.adapter->modules)
      if (m.target == tensor) terms.push_back({&m, l.scale});
  return terms;
}

Tensor Engine::loraBaseValue(const std::string &tensor) {
  auto it = loraBase_.find(tensor);
  return it != loraBase_.end() ? it->second : overlay_->baseLoad(tensor);
}

void Engine::restoreLoraBase(const std::string &tensor) {
  auto it = loraBase_.find(tensor);
  if (overlay_) {
    if (it != loraBase_.end()) overlay_->set(tensor, it->second);
    else overlay_->erase(tensor);
  } else if (it != loraBase_.end()) {
    exec_->writeWeights(plan_, *weights_, {{tensor, 0, it->second.bytes.size(), it->second.bytes.data(), 0}}, 0);
  } else {
    exec_->restoreWeights(plan_, *weights_, {tensor});
  }
}

void Engine::applyMerged(const std::string &tensor, const LoraTerms &terms, bool holdsBase) {
  if (overlay_) {
    if (terms.empty()) restoreLoraBase(tensor);
    else overlay_->set(tensor, mergeLora(loraBaseValue(tensor), terms, opt_.threads));
    return;
  }
  if (!holdsBase) restoreLoraBase(tensor);
  if (!terms.empty()) exec_->mergeLora(plan_, *weights_, tensor, terms);
}

void Engine::rehash(const std::vector<std::string> &tensors) {
  if (overlay_)
    for (const auto &t : tensors) weightHashes_[t] = overlay_->contentHashOf(t);
  else
    for (auto &[name, h] : exec_->weightHashes(plan_, *weights_, tensors)) weightHashes_[name] = h;
  weightsRecord_ = nullptr;
}

void Engine::writeLoraSlots(const std::map<std::string, Tensor> &values) {
  if (overlay_) {
    for (const auto &[name, t] : values) overlay_->set(name, t);
    return;
  }
  std::vector<WeightWrite> writes;
  for (const auto &[name, t] : values) writes.push_back({name, 0, t.bytes.size(), t.bytes.data(), 0});
  try {
    exec_->writeWeights(plan_, *weights_, writes, 0);
  } catch (...) {
    weightsBroken_ = true;
    throw;
  }
}

void Engine::loadLora(LoraAdapter adapter, double scale) {
  if (weightsBroken_)
    fail("lora", "an earlier weight change failed while writing to the device; load the weights again (a new engine)");
  if (!std::isfinite(scale)) fail("lora:" + adapter.path, "the scale {} is not finite", scale);
  // On a plan with slots (docs/contract.md section 13) the modules the slots serve go in unmerged: the slots' values
  // with this adapter after the loaded ones, all computed before anything is written (a refused adapter changes
  // nothing), W untouched. The modules no slot serves (the AdaLN tables, norm_out, proj_in / proj_out) are merged
  // into their weights as section 12 says, like every module on a plan without slots.
  std::map<std::string, Tensor> slotValues;
  if (!loraSlots_.empty()) {
    LoadedAdapters all;
    for (const LoadedLora &l : loras_) all.push_back({l.adapter.get(), l.scale});
    all.push_back({&adapter, scale});
    slotValues = loraSlotValues(plan_, loraSlots_, all);
  }
  std::vector<std::string> targets;  // the weights merged
  for (const LoraModule &m : adapter.modules) {
    if (loraSlots_.count(m.target)) continue;
    const plan::WeightTensor &t = plan_.weightTensor(m.target);  // throws naming a tensor the plan lacks
    checkLoraTerms(t.dtype, t.shape, {{&m, scale}});
    targets.push_back(m.target);
  }
  ensureExecutor();
  if (!overlay_) loadWeights(false);
  // Tensors no adapter touched yet: their value now is their base. Where a hot update made it, it is kept on the
  // host for the unload (the source has another value); otherwise the unload reads it from the source again.
  std::set<std::string> fresh;
  std::map<std::string, Tensor> kept;
  for (const auto &t : targets)
    if (!loraTouched_.count(t)) {
      fresh.insert(t);
      if (updated_.count(t)) kept[t] = readWeight(t);
    }
  auto shared = std::make_shared<const LoraAdapter>(std::move(adapter));
  loraBase_.insert(kept.begin(), kept.end());
  loras_.push_back({shared, scale});
  auto forget = [&] {
    loras_.pop_back();
    for (const auto &[t, v] : kept) loraBase_.erase(t);
  };
  if (overlay_) {
    // CPU: every merged value computed first (a refused merge changes nothing), then set.
    std::map<std::string, Tensor> merged;
    try {
      for (const auto &t : targets) merged[t] = mergeLora(loraBaseValue(t), loraTerms(t), opt_.threads);
    } catch (...) {
      forget();
      throw;
    }
    for (auto &[t, v] : merged) overlay_->set(t, std::move(v));
  } else {
    // GPU: tensor by tensor on the device (a fresh tensor holds its base: merged in place; another is set back to
    // its base first); a refused merge leaves its tensor as it was, and the tensors merged before it are set back
    // to their previous adapters' values.
    size_t done = 0;
    try {
      for (; done < targets.size(); ++done)
        applyMerged(targets[done], loraTerms(targets[done]), fresh.count(targets[done]) != 0);
    } catch (...) {
      forget();
      try {
        for (size_t i = 0; i < done; ++i) applyMerged(targets[i], loraTerms(targets[i]), false);
      } catch (...) {
        weightsBroken_ = true;
      }
      throw;
    }
  }
  loraTouched_.insert(targets.begin(), targets.end());
  if (!slotValues.empty()) {
    writeLoraSlots(slotValues);
    for (const auto &[name, t] : slotValues) {
      loraTouched_.insert(name);
      targets.push_back(name);
    }
  }
  rehash(targets);
}

void Engine::unloadLoras() {
  if (loras_.empty()) return;
  const std::vector<std::string> targets(loraTouched_.begin(), loraTouched_.end());
  // Adapter slots back to zero; merged weights back to their bases.
  std::map<std::string, Tensor> zeros;
  for (const auto &t : targets)
    if (const plan::WeightTensor &w = plan_.weightTensor(t); w.adapter) zeros[t] = Tensor::zeros(w.dtype, w.shape);
  if (!zeros.empty()) writeLoraSlots(zeros);
  try {
    for (const auto &t : targets)
      if (!zeros.count(t)) restoreLoraBase(t);
  } catch (...) {
    weightsBroken_ = true;
    throw;
  }
  loras_.clear();
  loraBase_.clear();
  loraTouched_.clear();
  rehash(targets);
}

const nlohmann::json &Engine::weightsRecord() {
  if (!weightsRecord_.is_null()) return weightsRecord_;
  ensureExecutor();
  std::vector<std::string> missing;
  for (const auto &b : plan_.weights)
    for (const auto &t : b.tensors)
      if (!weightHashes_.count(t.name)) missing.push_back(t.name);
  if (overlay_)  // CPU: the hashes the overlay took as the forward loaded each tensor
    for (const auto &name : missing) weightHashes_[name] = overlay_->contentHashOf(name);
  else
    for (auto &[name, h] : exec_->weightHashes(plan_, *weights_, missing)) weightHashes_[name] = h;
  weightsRecord_ = {{"identity", kWeightsIdentityName},
                    {"hash", kContentHashName},
                    {"sha256", combineWeightHashes(plan_, weightHashes_)},
                    {"tensors", weightHashes_},
                    {"updates", updates_},
                    {"updated", std::vector<std::string>(updated_.begin(), updated_.end())},
                    {"lora", nlohmann::json::array()}};
  const bool unmerged = !loraSlots_.empty();
  for (const LoadedLora &l : loras_) {
    int64_t merged = 0;  // on a plan with slots: the modules no slot serves, merged into their weights
    for (const LoraModule &m : l.adapter->modules) merged += loraSlots_.count(m.target) ? 0 : 1;
    weightsRecord_["lora"].push_back({{"path", l.adapter->path},
                                      {"sha256", l.adapter->sha256},
                                      {"format", l.adapter->format},
                                      {"scale", l.scale},
                                      {"mode", unmerged ? "unmerged" : "merged"},
                                      {"modules", l.adapter->modules.size()}});
    if (unmerged) weightsRecord_["lora"].back()["merged_modules"] = merged;
  }
  return weightsRecord_;
}

RunResult runModel(const plan::Plan &p, WeightSource &weights, const Request &request, const RunOptions &opt) {
  Engine e(p, weights, opt, /*cpuCacheBytes=*/0);
  return e.run(request);
}

} // namespace h3c::rt
