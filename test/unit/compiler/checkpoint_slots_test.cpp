// The slot timeline of a checkpointed plan (docs/contract.md sections 5 and 14, `h3c compile --backward --checkpoint
// blocks`): over the order an executor runs it (the forward, then the backward with each segment's recompute right
// before the segment's first gradient reader) no two values live at once share a slot (each slot is its own region
// of the arena), every value fits its slot, and slot_bytes is the checkpointed live peak plus fragmentation instead
// of the whole-life figure (the reader's refusals: checkpoint_plan_test.cpp). The lives are derived here from the
// plan's functions and segments, not by plan::backwardSchedule or the placement's own code.
#include "h3c/Codegen/Compile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

using namespace h3c;

// (a named namespace holding the tests too: the unity build compiles a binary's test files as one translation
// unit, where anonymous namespaces would merge)
namespace checkpoint_slots_test {

// One life of a value: from the step that defines it to its last reader (both inclusive; the outputs of either
// function to the end), in `slot` (a recomputed value's second life: its recompute_slot).
struct Life {
  std::string value;
  int64_t slot = -1;
  size_t from = 0, to = 0;
};

struct Timeline {
  std::vector<Life> lives;
  size_t steps = 0;
};

// The executor's order written out from the plan: every forward op; then per backward op, the recompute ops of the
// segments whose `before` it is, then the op. Graph inputs come into being at step 0, the output gradients at the
// first step after the forward.
Timeline timeline(const plan::Plan &p) {
  const plan::Function &fwd = p.forward();
  const plan::Function &bwd = *p.backward();
  std::vector<const plan::Op *> order;
  for (const plan::Op &op : fwd.ops) order.push_back(&op);
  const size_t backwardStart = order.size();
  for (const plan::Op &op : bwd.ops) {
    for (const plan::Checkpoint &c : bwd.checkpoints)
      if (c.before == op.index)
        for (size_t k : c.recompute) order.push_back(&fwd.ops.at(k));
    order.push_back(&op);
  }
  Timeline t;
  t.steps = order.size();
  std::map<std::string, size_t> current;  // value -> its current life (an index into t.lives)
  auto define = [&](const std::string &name, size_t step) {
    const plan::Value &v = p.value(name);
    t.lives.push_back({name, current.count(name) ? v.recomputeSlot : v.slot, step, step});
    current[name] = t.lives.size() - 1;
  };
  for (const auto &n : fwd.inputs) define(n, 0);
  for (size_t s = 0; s < order.size(); ++s) {
    if (s == backwardStart)
      for (const auto &n : bwd.inputs) define(n, s);
    for (const auto &n : order[s]->in) t.lives.at(current.at(n)).to = s;
    for (const auto &n : order[s]->out) define(n, s);
  }
  for (const plan::Function *fn : {&fwd, &bwd})
    for (const auto &[key, v] : fn->outputs) t.lives.at(current.at(v)).to = t.steps;
  return t;
}

// The first two lives that share a slot while both live, as text ("" when none).
std::string sharedSlot(const Timeline &t) {
  std::map<int64_t, std::vector<const Life *>> bySlot;
  for (const Life &l : t.lives) bySlot[l.slot].push_back(&l);
  for (auto &[slot, ls] : bySlot) {
    if (slot < 0) return "'" + ls[0]->value + "' has no slot for a life";
    std::sort(ls.begin(), ls.end(), [](const Life *a, const Life *b) { return a->from < b->from; });
    size_t reach = 0;  // the last step of the lives so far
    const Life *holder = nullptr;
    for (const Life *l : ls) {
      if (holder && l->from <= reach)
        return "slot " + std::to_string(slot) + ": '" + holder->value + "' (steps " + std::to_string(holder->from) +
               ".." + std::to_string(holder->to) + ") and '" + l->value + "' (steps " + std::to_string(l->from) + ".." +
               std::to_string(l->to) + ")";
      if (!holder || l->to > reach) {
        reach = l->to;
        holder = l;
      }
    }
  }
  return "";
}

// Every value fits its slots: the slot holds the value's row domain, or S for a text, video or audio value (S = Nt +
// Nv + Na rows), with at least its bytes per row.
std::string misfit(const plan::Plan &p, const Timeline &t) {
  std::map<int64_t, const plan::Slot *> slots;
  for (const plan::Slot &s : p.slots) slots[s.id] = &s;
  for (const Life &l : t.lives) {
    const plan::Value &v = p.value(l.value);
    const plan::Slot &s = *slots.at(l.slot);
    auto it = s.bytesPerRow.find(v.rows);
    if (it == s.bytesPerRow.end() &&
        (v.rows == plan::Domain::Nt || v.rows == plan::Domain::Nv || v.rows == plan::Domain::Na))
      it = s.bytesPerRow.find(plan::Domain::S);
    if (it == s.bytesPerRow.end() || it->second < v.cols * int64_t(dtypeSize(v.dtype)))
      return "'" + l.value + "' does not fit slot " + std::to_string(l.slot);
  }
  return "";
}

// The most activation bytes live at one step (B = 1, `tokens` rows in every token domain), weight gradients apart
// (the backward's outputs other than the inputs' gradients "grad:@...").
int64_t livePeak(const plan::Plan &p, const Timeline &t, int64_t tokens) {
  std::set<std::string> weightGrads;
  for (const auto &[key, v] : p.backward()->outputs)
    if (key.rfind("grad:@", 0) != 0) weightGrads.insert(v);
  std::vector<int64_t> delta(t.steps + 2, 0);
  for (const Life &l : t.lives) {
    if (weightGrads.count(l.value)) continue;
    const plan::Value &v = p.value(l.value);
    const int64_t rows = v.rows == plan::Domain::T || v.rows == plan::Domain::One ? 1
                         : v.rows == plan::Domain::T3                             ? 3
                                                                                  : tokens;
    delta[l.from] += rows * v.cols * int64_t(dtypeSize(v.dtype));
    delta[l.to + 1] -= rows * v.cols * int64_t(dtypeSize(v.dtype));
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) peak = std::max(peak, live += d);
  return peak;
}

plan::Plan compilePlan(const char *config, int64_t tokens, bool checkpoint, bool loraOnly) {
  codegen::CompileOptions o;
  o.fuse = false;
  o.backward = true;
  o.checkpoint = checkpoint;
  o.tokens = tokens;
  if (loraOnly) {
    o.loraRank = 64;
    o.trainable = {"lora"};
  }
  const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig(config), config);
  return codegen::compile(fp, "0000", o).plan.plan;
}

void expectSoundTimeline(const plan::Plan &p, const char *what) {
  const Timeline t = timeline(p);
  EXPECT_EQ(sharedSlot(t), "") << what;
  EXPECT_EQ(misfit(p, t), "") << what;
  size_t second = 0;
  for (const auto &[n, v] : p.values) second += v.recomputeSlot >= 0;
  std::printf("%s: %zu steps, %zu lives (%zu recomputed values), %zu slots\n", what, t.steps, t.lives.size(), second,
              p.slots.size());
}

TEST(CheckpointSlots, NoTwoLiveValuesShareASlotOnTheTinyPlans) {
  for (bool lora : {false, true}) {
    const std::string what = lora ? "tiny, --trainable lora" : "tiny, all parameters";
    const plan::Plan whole = compilePlan("tiny", 256, false, lora), ck = compilePlan("tiny", 256, true, lora);
    expectSoundTimeline(whole, what.c_str());
    for (const auto &[n, v] : whole.values) EXPECT_LT(v.recomputeSlot, 0) << n;
    EXPECT_EQ(livePeak(whole, timeline(whole), 256), whole.stats.at("peak_live_bytes"));  // h3-plan-buffers' report
    expectSoundTimeline(ck, (what + ", checkpointed").c_str());
    // The checkpointed placement's report is the live peak of its lives, the schedule's checkpointed peak, and its
    // slots are fewer bytes than the whole-life ones.
    EXPECT_EQ(livePeak(ck, timeline(ck), 256), ck.stats.at("peak_live_bytes"));
    EXPECT_EQ(ck.stats.at("peak_live_bytes"), ck.stats.at("backward_peak_live_bytes_checkpointed"));
    EXPECT_GT(ck.stats.at("backward_peak_live_bytes"), ck.stats.at("peak_live_bytes"));
    EXPECT_LT(ck.stats.at("slot_bytes"), whole.stats.at("slot_bytes"));
    EXPECT_GE(ck.stats.at("slot_bytes"), ck.stats.at("peak_live_bytes"));
  }
}

// The full config at S = 8,349 with LoRA r64 adapters trained (docs/contract.md section 14's memory of one H200):
// its slots hold the 7.38 GB live peak with the block segments (h3-fuse-grad's bf16 gradients; the frozen AdaLN
// tables' gradients not computed, so no linear output kept for them) within a tenth of it, ~96 GB without them.
TEST(CheckpointSlots, FullConfigLoraSlotsAreTheCheckpointedPeak) {
  const int64_t S = 8349;
  const plan::Plan ck = compilePlan("full", S, true, true);
  const Timeline t = timeline(ck);
  EXPECT_EQ(sharedSlot(t), "");
  EXPECT_EQ(misfit(ck, t), "");
  const int64_t peak = livePeak(ck, t, S), slots = ck.stats.at("slot_bytes");
  EXPECT_EQ(peak, ck.stats.at("backward_peak_live_bytes_checkpointed"));
  EXPECT_GE(slots, peak);  // the slots hold the peak
  EXPECT_LT(slots, peak + peak / 10);  // and leave less than a tenth of it unused (7.92 GB against 7.38)
  EXPECT_NEAR(double(peak), 7.38e9, 0.05e9);  // section 14's table
  const plan::Plan whole = compilePlan("full", S, false, true);
  const int64_t wholeSlots = whole.stats.at("slot_bytes");
  EXPECT_GT(wholeSlots, int64_t(90e9));
  EXPECT_EQ(sharedSlot(timeline(whole)), "");
  std::printf("full, LoRA r64 trained, S = %lld: slot_bytes %.3f GB with the block segments (live peak %.3f GB), "
              "%.3f GB without (live peak %.3f GB); %zu slots, %zu slots\n",
              (long long)S, slots / 1e9, peak / 1e9, wholeSlots / 1e9,
              whole.stats.at("backward_peak_live_bytes") / 1e9, ck.slots.size(), whole.slots.size());
}

} // namespace checkpoint_slots_test
