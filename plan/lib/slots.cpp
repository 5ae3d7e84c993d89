// slots.h: the best-fit slot rule, the placement over the checkpointed schedule and the reader's check of it.
#include "h3c/plan/slots.h"

#include "h3c/plan/checkpoint.h"
#include "h3c/plan/ops.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>

namespace h3c::plan {

int64_t SlotAllocator::allocate(const std::string &domain, int64_t bytesPerRow) {
  int best = -1;
  for (int i = 0; i < int(slots_.size()); ++i) {
    const Slot &s = slots_[i];
    if (!s.free || s.domain != domain) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const Slot &cur = slots_[best];
    const bool fits = s.bytesPerRow >= bytesPerRow, curFits = cur.bytesPerRow >= bytesPerRow;
    if (fits != curFits ? fits : fits ? s.bytesPerRow < cur.bytesPerRow : s.bytesPerRow > cur.bytesPerRow) best = i;
  }
  if (best < 0) {
    slots_.push_back(Slot{domain, 0, false});
    best = int(slots_.size()) - 1;
  }
  slots_[best].free = false;
  slots_[best].bytesPerRow = std::max(slots_[best].bytesPerRow, bytesPerRow);
  return best;
}

void SlotAllocator::release(int64_t id) { slots_.at(size_t(id)).free = true; }

int64_t reportRows(Domain d, int64_t tokens) {
  return d == Domain::T || d == Domain::One ? 1 : d == Domain::T3 ? 3 : tokens;
}

namespace {

// Weight gradients: a gradient op's outputs past its activation outputs (ops.h outputRoles), in op order.
std::vector<std::string> weightGradients(const Function &bwd) {
  std::vector<std::string> out;
  for (const Op &op : bwd.ops)
    for (size_t k = outputRoles(op.kind, op.attrs).size(); k < op.out.size(); ++k) out.push_back(op.out[k]);
  return out;
}

// The values the checkpoint segments recompute, with the segment that does.
std::map<std::string, std::string> recomputedValues(const Plan &p) {
  std::map<std::string, std::string> out;
  if (const Function *b = p.backward())
    for (const Checkpoint &c : b->checkpoints)
      for (size_t k : c.recompute)
        for (const auto &v : p.forward().ops.at(k).out) out[v] = c.segment;
  return out;
}

} // namespace

void placeOnCheckpointedSchedule(Plan &p, int64_t tokens) {
  const Function *bwd = p.backward();
  if (!bwd || bwd->checkpoints.empty()) fail("--checkpoint", "internal error: placing slots of a plan without segments");
  const std::vector<std::string> grads = weightGradients(*bwd);
  const std::set<std::string> gradSet(grads.begin(), grads.end());
  for (auto &[n, v] : p.values) {
    v.slot = -1;
    v.recomputeSlot = -1;
  }
  const std::vector<ScheduleStep> steps = backwardSchedule(p, true);
  const size_t forwardSteps = p.forward().ops.size();  // the schedule's first steps: the forward's ops
  // Each life's last step, in the order of the definitions (a pinned output's: SIZE_MAX).
  std::vector<size_t> lifeEnd;
  {
    std::map<std::string, size_t> open;
    for (size_t t = 0; t < steps.size(); ++t) {
      for (const auto *names : {&steps[t].defineBefore, &steps[t].op->out})
        for (const auto &n : *names) {
          open[n] = lifeEnd.size();
          lifeEnd.push_back(SIZE_MAX);
        }
      for (const auto &n : steps[t].freeAfter) lifeEnd[open.at(n)] = t;
    }
  }
  // The lives in definition order: value, first step, last step (inclusive: the step after which it is freed;
  // SIZE_MAX: never), and whether the forward keeps it into the backward.
  struct Life {
    Value *v;
    std::string name;
    size_t from, to;
    bool keptAcross;
  };
  std::vector<Life> lives;
  auto bytesPerRow = [](const Value &v) { return v.cols * int64_t(dtypeSize(v.dtype)); };
  {
    size_t lifeNo = 0, step = 0;
    auto define = [&](const std::string &name, bool before) {
      const size_t end = lifeEnd.at(lifeNo++);
      if (gradSet.count(name)) return;
      auto vit = p.values.find(name);
      if (vit == p.values.end()) fail("plan.json#/values", "internal error: no value '{}'", name);
      // Times: the values defined before step t at 2t, step t's outputs at 2t + 1, a life freed after step t ends at
      // 2t + 1 (so an output of the step that frees another value never shares its slot; a value defined before
      // the next step may).
      lives.push_back({&vit->second, name, before ? 2 * step : 2 * step + 1,
                       end == SIZE_MAX ? SIZE_MAX : 2 * end + 1, step < forwardSteps && end >= forwardSteps});
    };
    for (const ScheduleStep &s : steps) {
      for (const auto &n : s.defineBefore) define(n, true);
      for (const auto &n : s.op->out) define(n, false);
      ++step;
    }
  }
  // The live peak over the timeline (the lower bound of any placement).
  int64_t peak = 0;
  {
    std::map<size_t, int64_t> delta;
    for (const Life &l : lives) {
      const int64_t b = bytesPerRow(*l.v) * reportRows(l.v->rows, tokens);
      delta[l.from] += b;
      if (l.to != SIZE_MAX) delta[l.to + 1] -= b;
    }
    int64_t live = 0;
    for (const auto &[t, d] : delta) peak = std::max(peak, live += d);
  }
  // The placement, knowing every life (not value by value as they come): the lives by size, largest first, each into
  // the smallest slot of its domain that is free over its whole life, else a new slot of its size. A slot's size is
  // then its first life's, and no life leaves more of its slot unused than the sizes force. A life the forward keeps
  // into the backward takes a slot of exactly its size (in a larger one the extra bytes would stay out of use for its
  // whole life). Ties keep definition order, so the placement is a function of the plan.
  std::vector<size_t> order(lives.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytesPerRow(*lives[a].v) > bytesPerRow(*lives[b].v); });
  struct Bin {
    Domain domain;
    int64_t bytesPerRow;
    std::map<size_t, size_t> busy;  // from -> to of the lives it holds
  };
  std::vector<Bin> bins;
  auto freeOver = [](const Bin &b, size_t from, size_t to) {
    auto it = b.busy.upper_bound(to);  // the first life starting after `to`
    if (it == b.busy.begin()) return true;
    return std::prev(it)->second < from;  // the last life starting at or before `to` ends before `from`
  };
  std::vector<int64_t> slotOf(lives.size(), -1);
  for (size_t i : order) {
    const Life &l = lives[i];
    // Every token domain is bounded by S (S = Nt + Nv + Na): a token-domain value takes an S slot, so the refiner's
    // text values reuse the transformer's slots.
    const bool token = l.v->rows == Domain::Nt || l.v->rows == Domain::Nv || l.v->rows == Domain::Na;
    const Domain domain = token ? Domain::S : l.v->rows;
    const int64_t size = bytesPerRow(*l.v);
    int64_t best = -1;
    for (size_t b = 0; b < bins.size(); ++b) {
      const Bin &bin = bins[b];
      if (bin.domain != domain || bin.bytesPerRow < size || (l.keptAcross && bin.bytesPerRow != size)) continue;
      if (best >= 0 && bins[size_t(best)].bytesPerRow <= bin.bytesPerRow) continue;
      if (freeOver(bin, l.from, l.to)) best = int64_t(b);
    }
    if (best < 0) {
      bins.push_back({domain, size, {}});
      best = int64_t(bins.size()) - 1;
    }
    bins[size_t(best)].busy[l.from] = l.to;
    slotOf[i] = best;
  }
  for (size_t i = 0; i < lives.size(); ++i) {
    Value &v = *lives[i].v;
    if (v.slot < 0) v.slot = slotOf[i];
    else if (v.recomputeSlot < 0) v.recomputeSlot = slotOf[i];
    else fail("plan.json#/values/" + lives[i].name, "internal error: a third life in the checkpointed schedule");
  }
  p.slots.clear();
  int64_t total = 0;
  for (const Bin &b : bins) {
    p.slots.push_back({int64_t(p.slots.size()), {{b.domain, b.bytesPerRow}}, 0});
    total += b.bytesPerRow * reportRows(b.domain, tokens);
  }
  // Each weight gradient in a slot of its own after the activations' (as the plan emitter places them).
  for (const auto &g : grads) {
    Value &v = p.values.at(g);
    v.slot = int64_t(p.slots.size());
    p.slots.push_back({v.slot, {{Domain::One, v.cols * int64_t(dtypeSize(v.dtype))}}, 0});
  }
  for (const auto &[n, v] : p.values)
    if (v.slot < 0) fail("plan.json#/values/" + n, "internal error: the checkpointed schedule never defines it");
  p.stats["slot_bytes"] = total;
  p.stats["peak_live_bytes"] = peak;
}

void checkSlots(const Plan &p, const std::string &root) {
  const std::map<std::string, std::string> recomputed = recomputedValues(p);
  for (const auto &[n, v] : p.values) {
    const std::string w = root + "/values/" + n;
    if (v.recomputeSlot >= 0 && !recomputed.count(n))
      fail(w + "/recompute_slot", "'{}' is recomputed by no checkpoint segment: only a recomputed value has a "
           "second slot", n);
    if (v.recomputeSlot < 0 && recomputed.count(n))
      fail(w, "is recomputed by checkpoint segment '{}' but has no recompute_slot (recompile the plan with this h3c)",
           recomputed.at(n));
  }
  // The timeline an executor walks: the forward's ops (graph inputs before the first), and with a backward
  // backwardSchedule(p, true) (its inputs before its first step, each segment's recompute before its `before`).
  std::vector<ScheduleStep> steps;
  if (p.backward()) {
    steps = backwardSchedule(p, true);
  } else {
    for (const Op &op : p.forward().ops) steps.push_back({&op, false, false, {}, {}});
    if (!steps.empty()) steps[0].defineBefore = p.forward().inputs;
  }
  // Lives: from the step that defines a value to its last reader (never read: its own step; the outputs of either
  // function: to the end), the first in `slot`, a recomputed value's second in `recompute_slot`.
  struct Life {
    int64_t from, to;
    const std::string *name;
    bool second;
  };
  std::vector<Life> lives;
  std::map<std::string, size_t> current;
  auto define = [&](const std::string &name, int64_t t) {
    const bool second = current.count(name) > 0;
    lives.push_back({t, t, &name, second});
    current[name] = lives.size() - 1;
  };
  // Times: step t's op at 2t, the inputs that come into being before it at 2t - 1 (an input nobody reads is dead
  // before the op's outputs are written).
  for (size_t t = 0; t < steps.size(); ++t) {
    for (const auto &v : steps[t].defineBefore) define(v, 2 * int64_t(t) - 1);
    for (const auto &v : steps[t].op->in) {
      auto it = current.find(v);
      if (it != current.end()) lives[it->second].to = 2 * int64_t(t);
    }
    for (const auto &v : steps[t].op->out) define(v, 2 * int64_t(t));
  }
  for (const Function *fn : {&p.forward(), p.backward()})
    if (fn)
      for (const auto &[k, v] : fn->outputs) {
        auto it = current.find(v);
        if (it != current.end()) lives[it->second].to = INT64_MAX;
      }
  std::map<int64_t, std::vector<const Life *>> bySlot;
  for (const Life &l : lives) {
    const Value &v = p.value(*l.name);
    bySlot[l.second ? v.recomputeSlot : v.slot].push_back(&l);
  }
  for (auto &[slot, ls] : bySlot) {
    std::stable_sort(ls.begin(), ls.end(), [](const Life *a, const Life *b) { return a->from < b->from; });
    const Life *holder = nullptr;  // of the lives so far, the one that lasts longest
    for (const Life *l : ls) {
      if (holder && l->from <= holder->to)
        fail(root + "/values/" + *l->name + (l->second ? "/recompute_slot" : "/slot"),
             "shares slot {} with '{}', which is still live when '{}' is defined{}", slot, *holder->name, *l->name,
             l->second ? " again (its recompute)" : "");
      if (!holder || l->to > holder->to) holder = l;
    }
  }
}

} // namespace h3c::plan
