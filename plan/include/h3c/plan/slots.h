// Activation slots (docs/contract.md sections 5 and 14): the best-fit rule that places values into arena slots as
// they come over a timeline, used by h3-plan-buffers for the forward-then-backward timeline; the placement over
// plan::backwardSchedule of a plan with checkpoint segments, which knows every life before it places one (a
// recomputed value's second life in its own `recompute_slot`); and the reader's check that no two values live at
// once share a slot over the schedule an executor walks.
#pragma once

#include "h3c/plan/plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::plan {

// Best fit: a value takes the smallest free slot of its row domain that already holds it, else the largest free one
// of its domain (which grows to hold it), else a new slot (h3-plan-buffers' rule). Sizes are bytes per row (per batch
// item): one slot table serves every request size.
class SlotAllocator {
public:
  struct Slot {
    std::string domain;  // domainName spelling ("S", "1", ...)
    int64_t bytesPerRow = 0;
    bool free = false;
  };
  // The slot's id (its index).
  int64_t allocate(const std::string &domain, int64_t bytesPerRow);
  void release(int64_t id);
  const std::vector<Slot> &slots() const { return slots_; }

private:
  std::vector<Slot> slots_;
};

// The rows a buffer report counts for a domain (B = 1): `tokens` in every token domain, 1 for T and "1", 3 for T3.
int64_t reportRows(Domain d, int64_t tokens);

// Replaces the whole-life slots of a plan whose backward has checkpoint segments by a placement over
// backwardSchedule(p, true), knowing every life (from a value's definition to its last reader): the lives largest
// first, each into the smallest slot of its domain free over its whole life, else a new slot of its size (the online
// best-fit rule above left ~1 GB more slots than the live peak of the 33B LoRA plans, this ~0.4-0.6 GB). A recomputed
// value's first life is `slot`, its second (from its recompute to its last gradient reader) `recomputeSlot`.
// Token-domain values (S, Nt, Nv, Na) share S slots; a value kept from the forward into the backward takes a slot of
// exactly its size. Weight gradients keep a slot each after the activations' (outputs, live to the end). Sets the stats `slot_bytes` (the activation slots at `tokens` rows, B = 1) and `peak_live_bytes`
// (the schedule's peak of live activation bytes: backward_peak_live_bytes_checkpointed).
void placeOnCheckpointedSchedule(Plan &p, int64_t tokens);

// The reader's check of the slots (`root` the plan's JSON pointer prefix): `recompute_slot` exactly on the values a
// checkpoint segment recomputes, and no two values live at once in one slot over the timeline an executor walks
// (the forward's ops; with a backward, backwardSchedule(p, true)): a value lives from the step that defines it (its
// first life in `slot`, a recomputed value's second in `recompute_slot`) to its last reader, the outputs of either
// function to the end.
void checkSlots(const Plan &p, const std::string &root);

} // namespace h3c::plan
