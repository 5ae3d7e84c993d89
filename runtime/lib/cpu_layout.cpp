// The layout ops of a multi-rank plan on the CPU (docs/contract.md section 5.2): every rank has its own value map and
// an all_gather or split is a set of explicit copies between them. Nothing is added or rounded: a copy keeps bits.
#include "h3c/runtime/cpu_ops.h"

#include "h3c/support/error.h"

#include <algorithm>

namespace h3c::rt {

namespace {

// Copies `n` elements of row `from` of `src` (starting at column c0) to row `to` of `dst` (starting at column d0).
void copyRow(const HostValue &src, int64_t from, int64_t c0, HostValue &dst, int64_t to, int64_t d0, int64_t n) {
  if (src.dtype == DType::I64)
    std::copy_n(src.i.begin() + from * src.cols + c0, n, dst.i.begin() + to * dst.cols + d0);
  else
    std::copy_n(src.f.begin() + from * src.cols + c0, n, dst.f.begin() + to * dst.cols + d0);
}

HostValue shaped(const HostValue &like, int64_t rows, int64_t cols) {
  HostValue h;
  h.dtype = like.dtype;
  h.batch = like.batch;
  h.rows = rows;
  h.cols = cols;
  if (h.dtype == DType::I64) h.i.assign(size_t(h.numel()), 0);
  else h.f.assign(size_t(h.numel()), 0.f);
  return h;
}

const HostValue &valueOf(const ValueMap &m, const std::string &name, const plan::Op &op, int64_t rank) {
  auto it = m.find(name);
  if (it == m.end()) fail(op.where, "rank {} has no value '{}' (not computed or freed)", rank, name);
  return it->second;
}

} // namespace

void runLayoutOp(const plan::Op &op, const plan::Plan &p, const CanonicalRequest &req, std::vector<ValueMap> &ranks) {
  const plan::OpAttrs &a = op.attrs;
  const int64_t sp = p.options.sp, tp = p.options.tp;
  if (int64_t(ranks.size()) != sp * tp) fail(op.where, "expected {} ranks, got {}", sp * tp, ranks.size());
  const bool gather = op.kind == plan::OpKind::AllGather;
  const std::string &in = op.in.at(0), &out = op.out.at(0);
  const std::vector<plan::Rank> grid = plan::rankGrid(sp, tp);
  std::vector<HostValue> results(ranks.size());
  for (const plan::Rank &r : grid) {
    const HostValue &mine = valueOf(ranks[size_t(r.rank)], in, op, r.rank);
    if (a.axis == plan::Axis::Rows) {
      // Rows: sequence-parallel rank i holds rows [floor(i*S/sp), floor((i+1)*S/sp)) of every batch item.
      if (gather) {
        HostValue full = shaped(mine, req.S, mine.cols);
        for (int64_t i = 0; i < sp; ++i) {
          const HostValue &part = valueOf(ranks[size_t(i * tp + r.tpIndex)], in, op, i * tp + r.tpIndex);
          auto [b, e] = plan::rankRows(i, sp, req.S);
          if (part.rows != e - b || part.cols != mine.cols || part.batch != mine.batch)
            fail(op.where, "rank {}'s part of '{}' is [{}, {}, {}], expected [{}, {}, {}]", i * tp + r.tpIndex, in,
                 part.batch, part.rows, part.cols, mine.batch, e - b, mine.cols);
          for (int64_t bi = 0; bi < full.batch; ++bi)
            for (int64_t k = 0; k < e - b; ++k) copyRow(part, bi * part.rows + k, 0, full, bi * req.S + b + k, 0, full.cols);
        }
        results[size_t(r.rank)] = std::move(full);
      } else {
        auto [b, e] = plan::rankRows(r.spIndex, sp, req.S);
        if (mine.rows != req.S) fail(op.where, "'{}' has {} rows, expected all {} of S", in, mine.rows, req.S);
        HostValue part = shaped(mine, e - b, mine.cols);
        for (int64_t bi = 0; bi < part.batch; ++bi)
          for (int64_t k = 0; k < e - b; ++k) copyRow(mine, bi * req.S + b + k, 0, part, bi * part.rows + k, 0, part.cols);
        results[size_t(r.rank)] = std::move(part);
      }
      continue;
    }
    // Columns: tensor-parallel rank j holds part j of every segment, back to back (plan::partOf).
    const int64_t full = a.cols, local = a.cols / tp;
    if (gather) {
      HostValue whole = shaped(mine, mine.rows, full);
      for (int64_t j = 0; j < tp; ++j) {
        const int64_t src = r.spIndex * tp + j;
        const HostValue &part = valueOf(ranks[size_t(src)], in, op, src);
        if (part.cols != local || part.rows != mine.rows || part.batch != mine.batch)
          fail(op.where, "rank {}'s part of '{}' has {} columns, expected {}", src, in, part.cols, local);
        int64_t at = 0;
        for (auto [b, e] : plan::partOf(a.segments, j, tp)) {
          for (int64_t row = 0; row < part.batch * part.rows; ++row) copyRow(part, row, at, whole, row, b, e - b);
          at += e - b;
        }
      }
      results[size_t(r.rank)] = std::move(whole);
    } else {
      if (mine.cols != full) fail(op.where, "'{}' has {} columns, expected all {}", in, mine.cols, full);
      HostValue part = shaped(mine, mine.rows, local);
      int64_t at = 0;
      for (auto [b, e] : plan::partOf(a.segments, r.tpIndex, tp)) {
        for (int64_t row = 0; row < part.batch * part.rows; ++row) copyRow(mine, row, b, part, row, at, e - b);
        at += e - b;
      }
      results[size_t(r.rank)] = std::move(part);
    }
  }
  // Every rank's result is complete before any is stored (a gather reads the other ranks' inputs).
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r][out] = std::move(results[r]);
}

} // namespace h3c::rt
