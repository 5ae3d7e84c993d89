// checkpoint.h: activation checkpointing per block (docs/contract.md section 14).
#include "h3c/plan/checkpoint.h"

#include "h3c/plan/ops.h"
#include "h3c/plan/slots.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <map>
#include <set>

namespace h3c::plan {

std::string blockOf(const std::string &node) {
  // The first component ending in "blocks" followed by a number: "transformer_blocks.3", "token_refiner.refiner_blocks.0".
  size_t start = 0;
  while (start < node.size()) {
    size_t dot = node.find('.', start);
    if (dot == std::string::npos) return "";
    const std::string comp = node.substr(start, dot - start);
    if (comp.size() >= 6 && comp.compare(comp.size() - 6, 6, "blocks") == 0) {
      size_t next = node.find('.', dot + 1);
      const std::string num = node.substr(dot + 1, next == std::string::npos ? std::string::npos : next - dot - 1);
      if (!num.empty() && std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return node.substr(0, next == std::string::npos ? node.size() : next);
    }
    start = dot + 1;
  }
  return "";
}

namespace {

const std::string &opBlock(const Op &op, std::string &scratch) {
  scratch = op.nodes.empty() ? std::string() : blockOf(op.nodes[0]);
  return scratch;
}

// What the rules need of a plan: each forward value's defining op, the forward ops reading it, the forward outputs,
// and the backward ops reading each forward value.
struct Uses {
  std::map<std::string, size_t> def;                        // forward value -> forward op index
  std::map<std::string, std::vector<size_t>> fwdReaders;    // forward op indices, ascending
  std::map<std::string, std::vector<size_t>> bwdReaders;    // backward op indices, ascending
  std::set<std::string> outputs;                            // the forward's outputs
  explicit Uses(const Plan &p) {
    for (const Op &op : p.forward().ops) {
      for (const auto &v : op.in) fwdReaders[v].push_back(op.index);
      for (const auto &v : op.out) def[v] = op.index;
    }
    for (const auto &[k, v] : p.forward().outputs) outputs.insert(v);
    if (const Function *b = p.backward())
      for (const Op &op : b->ops)
        for (const auto &v : op.in) bwdReaders[v].push_back(op.index);
  }
  // Read after the forward ops [first, end) by a later forward op, or a forward output.
  bool boundary(const std::string &v, size_t end) const {
    if (outputs.count(v)) return true;
    auto it = fwdReaders.find(v);
    return it != fwdReaders.end() && it->second.back() >= end;
  }
};

// The values the backward reads from segment c (ops [first, end)), traced back through the ops that define them to
// values defined before the segment or by an op `skip` accepts (those are kept): c.recompute, c.kept, c.before and
// c.last. False when the backward reads nothing the segment would recompute.
template <class Skip>
bool traceSegment(const Function &fwd, const Uses &u, Checkpoint &c, Skip skip) {
  std::set<size_t> need;
  std::vector<std::string> work;
  for (size_t k = c.first; k < c.end; ++k)
    for (const auto &v : fwd.ops[k].out)
      if (u.bwdReaders.count(v) && !u.boundary(v, c.end)) work.push_back(v);
  while (!work.empty()) {
    const std::string v = work.back();
    work.pop_back();
    auto d = u.def.find(v);
    if (d == u.def.end() || d->second < c.first || need.count(d->second)) continue;
    const Op &op = fwd.ops[d->second];
    if (skip(op)) continue;
    for (const auto &o : op.out)
      if (u.boundary(o, c.end))
        fail(op.where, "segment '{}': rerunning this op would define '{}', which is read after the segment", c.segment,
             o);
    need.insert(d->second);
    for (const auto &in : op.in) work.push_back(in);
  }
  c.recompute.assign(need.begin(), need.end());
  c.kept.clear();
  std::set<std::string> defined, seen;
  bool any = false;
  size_t lo = SIZE_MAX, hi = 0;
  for (size_t k : c.recompute) {
    const Op &op = fwd.ops[k];
    for (const auto &in : op.in)
      if (!defined.count(in) && seen.insert(in).second) c.kept.push_back(in);
    for (const auto &o : op.out) {
      defined.insert(o);
      auto r = u.bwdReaders.find(o);
      if (r == u.bwdReaders.end()) continue;
      any = true;
      lo = std::min(lo, r->second.front());
      hi = std::max(hi, r->second.back());
    }
  }
  c.before = lo;
  c.last = hi;
  return any;
}

} // namespace

std::vector<Checkpoint> blockCheckpoints(const Plan &p, const KeepRule &keep, size_t *keeping) {
  const Function &fwd = p.forward();
  if (!p.backward()) fail("--checkpoint", "checkpoint segments belong to a backward (compile with --backward)");
  const Uses u(p);
  std::vector<Checkpoint> out;
  std::set<std::string> closed;  // blocks whose segment ended
  std::string scratch;
  size_t i = 0;
  while (i < fwd.ops.size()) {
    // A segment starts at the first op with a node of a block (a lora_down just before it stays outside: its
    // output is then kept, which costs a rank's columns only).
    const std::string block = opBlock(fwd.ops[i], scratch);
    if (block.empty()) { ++i; continue; }
    if (!closed.insert(block).second)
      fail(fwd.ops[i].where, "block '{}' has ops apart from its others: its segment would not be consecutive", block);
    size_t end = i + 1, j = i + 1;
    for (; j < fwd.ops.size(); ++j) {
      const std::string &b = opBlock(fwd.ops[j], scratch);
      if (b == block) end = j + 1;
      else if (!fwd.ops[j].nodes.empty()) break;  // another block's op, or one of no block
    }
    Checkpoint c;
    c.segment = block;
    c.first = i;
    c.end = end;
    // The values the backward reads from the segment, and the ops that define them and what those read, back to
    // values defined before the segment (kept).
    if (traceSegment(fwd, u, c, [](const Op &) { return false; })) out.push_back(std::move(c));
    i = j;
  }
  if (keeping) *keeping = 0;
  if (!keep.any()) return out;
  for (OpKind k : keep.kinds)
    if (std::none_of(fwd.ops.begin(), fwd.ops.end(), [&](const Op &op) { return op.kind == k; }))
      fail("--keep " + std::string(opKindName(k)), "the forward has no op of this kind");
  // Selective recompute: from the last segment down, and in a segment op by op, the ops of the rule's kinds stay out
  // of the recompute while the bytes of their outputs (which then live from the forward to their backward readers)
  // fit the cap: where a large output (a block's attention, 0.12 GB at 8,349 rows) no longer fits, a small one (its
  // adaLN table: 3 rows, 0.4 MB, whose rerun reads the block's 0.17 GB of adaLN weights) still does.
  int64_t used = 0;
  for (size_t s = out.size(); s-- > 0;) {
    Checkpoint &c = out[s];
    // (`--keep all` keeps whole blocks: a segment whose ops do not all fit keeps none.)
    std::set<const Op *> kept;
    int64_t bytes = 0;
    bool whole = true;
    for (size_t k : c.recompute) {
      if (!keep.keeps(fwd.ops[k].kind)) continue;
      int64_t opBytes = 0;
      for (const auto &o : fwd.ops[k].out) {
        const Value &v = p.value(o);
        opBytes += reportRows(v.rows, keep.tokens) * v.cols * int64_t(dtypeSize(v.dtype));
      }
      if (opBytes == 0) continue;
      if (keep.maxBytes >= 0 && used + bytes + opBytes > keep.maxBytes) {
        whole = false;
        continue;
      }
      kept.insert(&fwd.ops[k]);
      bytes += opBytes;
    }
    if (kept.empty() || (keep.all && !whole)) continue;
    Checkpoint k = c;
    // A segment whose recompute would then be empty keeps every value: it is dropped.
    if (!traceSegment(fwd, u, k, [&](const Op &op) { return kept.count(&op) > 0; })) {
      out.erase(out.begin() + s);
    } else {
      c = std::move(k);
    }
    if (keeping) ++*keeping;
    used += bytes;
  }
  return out;
}

void checkCheckpoints(const Plan &p, const std::string &root) {
  const Function *bwd = p.backward();
  if (!bwd) return;
  const Function &fwd = p.forward();
  const Uses u(p);
  std::string scratch;
  size_t prevEnd = 0;
  std::set<std::string> recomputed;  // over all segments
  for (size_t s = 0; s < bwd->checkpoints.size(); ++s) {
    const Checkpoint &c = bwd->checkpoints[s];
    const std::string w = root + "/functions/backward/checkpoints/" + std::to_string(s);
    if (c.first >= c.end || c.end > fwd.ops.size())
      fail(w + "/forward_ops", "[{}, {}) is no non-empty range of the {} forward ops", c.first, c.end, fwd.ops.size());
    if (c.first < prevEnd) fail(w + "/forward_ops", "overlaps or precedes the previous segment (which ends at {})", prevEnd);
    prevEnd = c.end;
    if (c.segment.empty() || blockOf(c.segment + ".x") != c.segment)
      fail(w + "/segment", "'{}' names no block (\"transformer_blocks.<n>\")", c.segment);
    for (size_t k = c.first; k < c.end; ++k) {
      const std::string &b = opBlock(fwd.ops[k], scratch);
      if (!fwd.ops[k].nodes.empty() && b != c.segment)
        fail(w + "/forward_ops", "forward op {} implements '{}', which is not of block '{}'", k, fwd.ops[k].firstNode(),
             c.segment);
    }
    if (c.recompute.empty()) fail(w + "/recompute", "a segment reruns at least one op");
    std::set<std::string> defined, seen;
    std::vector<std::string> kept;
    for (size_t r = 0; r < c.recompute.size(); ++r) {
      const size_t k = c.recompute[r];
      const std::string wr = w + "/recompute/" + std::to_string(r);
      if (k < c.first || k >= c.end) fail(wr, "op {} is outside the segment [{}, {})", k, c.first, c.end);
      if (r > 0 && k <= c.recompute[r - 1]) fail(wr, "the ops are not ascending");
      const Op &op = fwd.ops[k];
      for (const auto &in : op.in)
        if (!defined.count(in) && seen.insert(in).second) kept.push_back(in);
      for (const auto &o : op.out) {
        // The forward drops what the recompute defines: nothing after the segment may read it.
        if (u.boundary(o, c.end))
          fail(wr, "op {} defines '{}', which a forward op after the segment or an output reads", k, o);
        defined.insert(o);
        recomputed.insert(o);
      }
    }
    if (kept != c.kept)
      fail(w + "/kept", "is [{}], but the recompute reads [{}] from outside it (in first-read order)",
           fmt::join(c.kept, ", "), fmt::join(kept, ", "));
    size_t lo = SIZE_MAX, hi = 0;
    for (const auto &v : defined) {
      auto it = u.bwdReaders.find(v);
      if (it == u.bwdReaders.end()) continue;
      lo = std::min(lo, it->second.front());
      hi = std::max(hi, it->second.back());
    }
    if (lo == SIZE_MAX) fail(w + "/recompute", "no backward op reads what the segment recomputes");
    if (c.before != lo || c.last != hi || c.last >= bwd->ops.size())
      fail(w + "/backward_ops", "is [{}, {}], but the backward reads the recomputed values at ops {} to {}", c.before,
           c.last, lo, hi);
  }
}

// ---- the timeline ----------------------------------------------------------------------------------------------

std::vector<ScheduleStep> backwardSchedule(const Plan &p, bool checkpointed) {
  const Function &fwd = p.forward();
  const Function *bwd = p.backward();
  if (!bwd) fail("plan.json#/functions/backward", "the plan has no backward");
  std::vector<ScheduleStep> steps;
  for (const Op &op : fwd.ops) steps.push_back({&op, false, false, {}, {}});
  std::map<size_t, std::vector<const Checkpoint *>> at;
  if (checkpointed)
    for (const Checkpoint &c : bwd->checkpoints) at[c.before].push_back(&c);
  const size_t backwardStart = steps.size();
  for (const Op &op : bwd->ops) {
    auto it = at.find(op.index);
    if (it != at.end())
      for (const Checkpoint *c : it->second)
        for (size_t k : c->recompute) steps.push_back({&fwd.ops[k], false, true, {}, {}});
    steps.push_back({&op, true, false, {}, {}});
  }
  // Lives: a value lives from its definition (a graph input before the forward, an output gradient before the
  // backward) to its last reader; a recomputed value's second definition starts a second life. The outputs of both
  // functions are never freed.
  std::set<std::string> pinned;
  for (const Function *fn : {&fwd, bwd})
    for (const auto &[k, v] : fn->outputs) pinned.insert(v);
  std::map<std::string, size_t> lastOf;  // the current life's last step (its definition when nobody read it yet)
  auto close = [&](const std::string &v) {
    auto it = lastOf.find(v);
    if (it == lastOf.end()) return;
    if (!pinned.count(v)) steps[it->second].freeAfter.push_back(v);
    lastOf.erase(it);
  };
  for (const auto &v : fwd.inputs) {
    steps[0].defineBefore.push_back(v);
    lastOf[v] = 0;
  }
  for (const auto &v : bwd->inputs) {
    steps[backwardStart].defineBefore.push_back(v);
    lastOf[v] = backwardStart;
  }
  for (size_t t = 0; t < steps.size(); ++t) {
    for (const auto &v : steps[t].op->in) lastOf[v] = t;
    for (const auto &v : steps[t].op->out) {
      close(v);
      lastOf[v] = t;
    }
    // Weight gradients: the ops list them past their results; they are outputs (pinned) like the rest.
  }
  while (!lastOf.empty()) close(lastOf.begin()->first);
  return steps;
}

int64_t liveBytesPeak(const Plan &p, int64_t tokens, bool checkpointed) {
  // Weight gradients (an op's outputs past its activation outputs) are counted apart, as h3-plan-buffers does:
  // they live from their op to the end whatever the segments (section 14's memory adds them to the weights).
  std::set<std::string> weightGrads;
  for (const Op &op : p.backward()->ops)
    for (size_t k = outputRoles(op.kind, op.attrs).size(); k < op.out.size(); ++k) weightGrads.insert(op.out[k]);
  auto bytes = [&](const std::string &name) -> int64_t {
    if (weightGrads.count(name)) return 0;
    const Value &v = p.value(name);
    return reportRows(v.rows, tokens) * v.cols * int64_t(dtypeSize(v.dtype));
  };
  int64_t live = 0, peak = 0;
  std::set<std::string> alive;
  auto define = [&](const std::string &v) {
    if (alive.insert(v).second) live += bytes(v);
  };
  for (const ScheduleStep &s : backwardSchedule(p, checkpointed)) {
    for (const auto &v : s.defineBefore) define(v);
    for (const auto &v : s.op->out) define(v);
    peak = std::max(peak, live);
    for (const auto &v : s.freeAfter)
      if (alive.erase(v)) live -= bytes(v);
  }
  return peak;
}

} // namespace h3c::plan
