// h3-fuse: the fusions of docs/contract.md section 3, one rewrite pattern each, applied by the greedy driver. Each
// pattern checks the exact producer/consumer shape it fuses (node ids of one block, single uses of the
// intermediates, no sharding yet, agreeing reduction orders) and fails to match otherwise. A fused op carries the
// reduction order of its parts and lists every node it covers in node order, so the ledger still accounts for all
// nodes. Every fused op is created right before the last op it replaces, so the resulting op order does not depend
// on the order in which the driver visits the ops (the patterns' roots and anchors are disjoint).
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/StringSet.h"

namespace h3c::passes {
#define GEN_PASS_DEF_H3FUSE
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;
using h3c::passes::blockPrefix;
using h3c::passes::endsWith;
using h3c::passes::nodeList;

namespace {

ArrayAttr strArray(Builder &b, const std::vector<std::string> &v) { return h3c::passes::strArray(b, v); }

std::vector<std::string> concat(std::initializer_list<Operation *> ops) {
  std::vector<std::string> r;
  for (Operation *op : ops)
    for (auto &n : nodeList(op)) r.push_back(n);
  return r;
}

std::string valueName(Operation *op, unsigned i) {
  return cast<StringAttr>(op->getAttrOfType<ArrayAttr>("values")[i]).str();
}

std::string tensor(ArrayAttr names, unsigned i) { return cast<StringAttr>(names[i]).str(); }

bool plainLinear(LinearOp l) { return l && l.getEpilogue() == Epilogue::none && !l.getShard(); }

// The single user of `v`, or null.
Operation *singleUser(Value v) { return v.hasOneUse() ? *v.getUsers().begin() : nullptr; }

// Every user of the results of `ops` (other than `ops` themselves) comes after `at`, in its block, so the fused
// op created at `at` dominates them.
bool usersAfter(std::initializer_list<Operation *> ops, Operation *at) {
  for (Operation *op : ops)
    for (Value r : op->getResults())
      for (Operation *u : r.getUsers()) {
        if (u == at || llvm::is_contained(ops, u)) continue;
        if (u->getBlock() != at->getBlock() || u->isBeforeInBlock(at)) return false;
      }
  return true;
}

// The reduction order shared by `ops` (null if none has one), or failure when they disagree.
FailureOr<OrderAttr> sharedOrder(std::initializer_list<Operation *> ops) {
  OrderAttr o;
  bool first = true;
  for (Operation *op : ops) {
    auto a = op->getAttrOfType<OrderAttr>("order");
    if (first) o = a;
    else if (a != o) return failure();
    first = false;
  }
  return o;
}

// Benefits mirror the order in which the fusions were specified (qkv first): they only decide between patterns
// rooted at the same op, which the node-id checks already keep apart.
enum Benefit : unsigned { kTimeMlp = 1, kEpilogue = 2, kQkNormRope = 3, kQkv = 4, kQkvNormRope = 5 };

// to_q, to_k, to_v reading the same input -> qkv_linear (at to_v; the uses of all three must follow it).
struct FuseQkv : OpRewritePattern<LinearOp> {
  FuseQkv(MLIRContext *ctx) : OpRewritePattern(ctx, kQkv) {}

  LogicalResult matchAndRewrite(LinearOp q, PatternRewriter &rewriter) const override {
    if (!plainLinear(q) || !endsWith(firstNode(q), ".attn.to_q")) return failure();
    std::string p = blockPrefix(firstNode(q));
    LinearOp k, v;
    for (Operation *u : q.getX().getUsers()) {
      auto l = dyn_cast<LinearOp>(u);
      if (!plainLinear(l)) continue;
      if (firstNode(u) == p + "attn.to_k") k = l;
      if (firstNode(u) == p + "attn.to_v") v = l;
    }
    if (!k || !v || q.getK() != k.getK() || q.getK() != v.getK())
      return rewriter.notifyMatchFailure(q, "no plain to_k/to_v with the same K reading the same input");
    if (q.getBias().empty() != k.getBias().empty() || q.getBias().empty() != v.getBias().empty())
      return rewriter.notifyMatchFailure(q, "q/k/v disagree on having a bias");
    auto order = sharedOrder({q, k, v});
    if (failed(order)) return rewriter.notifyMatchFailure(q, "q/k/v reduction orders differ");
    // heads / head_dim from a consumer that knows them (qk_norm, rope or attention, or their fused forms).
    int64_t heads = 0, headDim = 0;
    for (Operation *u : q.getY().getUsers()) {
      if (auto h = u->getAttrOfType<IntegerAttr>("heads")) {
        heads = h.getInt();
        headDim = u->getAttrOfType<IntegerAttr>("head_dim").getInt();
      }
    }
    if (!heads) return rewriter.notifyMatchFailure(q, "no consumer names the head split");
    if (!usersAfter({q, k, v}, v)) return rewriter.notifyMatchFailure(q, "a q/k/v use precedes to_v");

    std::vector<std::string> weight = {tensor(q.getWeight(), 0), tensor(k.getWeight(), 0), tensor(v.getWeight(), 0)};
    std::vector<std::string> bias;
    for (LinearOp l : {q, k, v})
      for (Attribute a : l.getBias()) bias.push_back(cast<StringAttr>(a).str());
    rewriter.setInsertionPoint(v);
    auto f = QkvLinearOp::create(rewriter, q.getLoc(), TypeRange{q.getY().getType(), k.getY().getType(), v.getY().getType()}, q.getX(),
                                 ValueRange{}, q.getK(), heads, headDim, strArray(rewriter, weight),
                                 strArray(rewriter, bias), Epilogue::none, FloatAttr(), IntegerAttr(), *order,
                                 ShardAttr(), /*lora_k=*/IntegerAttr(), strArray(rewriter, concat({q, k, v})),
                                 strArray(rewriter, {valueName(q, 0), valueName(k, 0), valueName(v, 0)}));
    rewriter.replaceOp(q, f.getQOut());
    rewriter.replaceOp(k, f.getKOut());
    rewriter.replaceOp(v, f.getVOut());
    return success();
  }
};

// norm_q, norm_k (+ rope_q, rope_k when both norms feed only their rope) -> qk_norm_rope, at the last of them.
struct FuseQkNormRope : OpRewritePattern<QkNormOp> {
  // saved: the plan names func @backward reads (a training plan's), whose values must stay; empty otherwise.
  FuseQkNormRope(MLIRContext *ctx, llvm::StringSet<> saved = {})
      : OpRewritePattern(ctx, kQkNormRope), saved(std::move(saved)) {}
  llvm::StringSet<> saved;

  LogicalResult matchAndRewrite(QkNormOp nq, PatternRewriter &rewriter) const override {
    if (nq.getShard() || !endsWith(firstNode(nq), ".attn.norm_q")) return failure();
    std::string p = blockPrefix(firstNode(nq));
    QkNormOp nk;
    for (Operation *o = nq->getNextNode(); o && !nk; o = o->getNextNode())
      if (firstNode(o) == p + "attn.norm_k") nk = dyn_cast<QkNormOp>(o);
    if (!nk || nk.getShard() || nk.getHeads() != nq.getHeads() || nk.getHeadDim() != nq.getHeadDim() ||
        nk.getEps() != nq.getEps())
      return rewriter.notifyMatchFailure(nq, "no unsharded norm_k of the same shape after norm_q");
    auto order = sharedOrder({nq, nk});
    if (failed(order)) return rewriter.notifyMatchFailure(nq, "norm_q/norm_k reduction orders differ");
    auto rq = dyn_cast_or_null<RopeOp>(singleUser(nq.getY()));
    auto rk = dyn_cast_or_null<RopeOp>(singleUser(nk.getY()));
    bool rope = rq && rk && firstNode(rq) == p + "attn.rope_q" && firstNode(rk) == p + "attn.rope_k" &&
                rq.getCos() == rk.getCos() && rq.getSin() == rk.getSin() && rq.getX() == nq.getY() &&
                rk.getX() == nk.getY() && !rq.getShard() && !rk.getShard();
    Operation *last = rope ? (rq->isBeforeInBlock(rk) ? rk.getOperation() : rq.getOperation()) : nk.getOperation();
    if (rope ? !usersAfter({nq, nk, rq, rk}, last) : !usersAfter({nq, nk}, last))
      return rewriter.notifyMatchFailure(nq, "a use of the norms precedes the fused op's position");
    if (!saved.empty() && (!rope || saved.contains(h3c::passes::planName(nq.getY())) ||
                           saved.contains(h3c::passes::planName(nk.getY()))))
      return rewriter.notifyMatchFailure(nq, "the backward reads a norm's output (or there is no rope to fuse)");

    std::vector<Value> tables;
    if (rope) tables = {rq.getCos(), rq.getSin()};
    std::vector<std::string> weight = {tensor(nq.getWeight(), 0), tensor(nk.getWeight(), 0)};
    Operation *outQ = rope ? rq.getOperation() : nq.getOperation();
    Operation *outK = rope ? rk.getOperation() : nk.getOperation();
    std::vector<std::string> nodes = rope ? concat({nq, nk, rq, rk}) : concat({nq, nk});
    rewriter.setInsertionPoint(last);
    auto f = QkNormRopeOp::create(
        rewriter, nq.getLoc(), TypeRange{outQ->getResult(0).getType(), outK->getResult(0).getType()}, nq.getX(),
        nk.getX(), tables, nq.getHeads(), nq.getHeadDim(), rope ? rq.getRotaryDim() : 0, nq.getEpsAttr().getValue(),
        strArray(rewriter, weight), *order, ShardAttr(), strArray(rewriter, nodes),
        strArray(rewriter, {valueName(outQ, 0), valueName(outK, 0)}));
    rewriter.replaceOp(outQ, f.getQOut());
    rewriter.replaceOp(outK, f.getKOut());
    if (rope) {
      rewriter.eraseOp(nq);
      rewriter.eraseOp(nk);
    }
    return success();
  }
};

// qkv_linear + the qk_norm_rope that norms (and rotates) exactly its q and k -> qkv_linear with epilogue
// qk_norm_rope (at the qk_norm_rope). Only the Hopper GEMM (gemm_sm90*.cuh) carries this epilogue, and only for the
// shapes whose heads its accumulator layout holds whole: head_dim 128 (a row's head lies in one quad of threads) and
// a rotary width that is a multiple of 16 (a channel's rotation partner lies in the same thread). The caller adds
// this pattern for sm_90a with wgmma and tp = 1 only (h3-shard-tp does not split the fused form).
struct FuseQkvNormRope : OpRewritePattern<QkNormRopeOp> {
  FuseQkvNormRope(MLIRContext *ctx) : OpRewritePattern(ctx, kQkvNormRope) {}

  LogicalResult matchAndRewrite(QkNormRopeOp n, PatternRewriter &rewriter) const override {
    auto qkv = n.getQ().getDefiningOp<QkvLinearOp>();
    if (!qkv || qkv.getEpilogue() != Epilogue::none || qkv.getShard() || n.getShard()) return failure();
    if (n.getQ() != qkv.getQOut() || n.getK() != qkv.getKOut() || !n.getQ().hasOneUse() || !n.getK().hasOneUse())
      return rewriter.notifyMatchFailure(n, "q and k are not the qkv_linear's q and k, read by this op only");
    if (!qkv.getBias().empty()) return rewriter.notifyMatchFailure(n, "qkv_linear has a bias");
    if (n.getHeads() != qkv.getHeads() || n.getHeadDim() != qkv.getHeadDim())
      return rewriter.notifyMatchFailure(n, "heads differ");
    if (n.getHeadDim() != 128) return rewriter.notifyMatchFailure(n, "the epilogue needs head_dim 128");
    if (n.getRotaryDim() % 16) return rewriter.notifyMatchFailure(n, "the epilogue needs rotary_dim % 16 == 0");
    if (n.getOrderAttr() != laneTreeOrder(n.getContext()))
      return rewriter.notifyMatchFailure(n, "the norm's order is not the pinned lane_tree");
    auto bf16 = [](Value v) { return cast<ActType>(v.getType()).getElementType().isBF16(); };
    if (!bf16(qkv.getX()) || !bf16(qkv.getVOut()) || !bf16(n.getQOut()) || !bf16(n.getKOut()))
      return rewriter.notifyMatchFailure(n, "the Hopper GEMM reads and writes bf16");
    if (!usersAfter({qkv, n}, n)) return rewriter.notifyMatchFailure(n, "a use of v precedes the qk_norm_rope");

    std::vector<std::string> weight;
    for (Operation *op : {qkv.getOperation(), n.getOperation()})
      for (Attribute a : op->getAttrOfType<ArrayAttr>("weight")) weight.push_back(cast<StringAttr>(a).str());
    rewriter.setInsertionPoint(n);
    auto f = QkvLinearOp::create(
        rewriter, qkv.getLoc(), TypeRange{n.getQOut().getType(), n.getKOut().getType(), qkv.getVOut().getType()},
        qkv.getX(), n.getRopeTables(), qkv.getK(), qkv.getHeads(), qkv.getHeadDim(), strArray(rewriter, weight),
        qkv.getBias(), Epilogue::qk_norm_rope, n.getEpsAttr(), n.getRotaryDimAttr(), qkv.getOrderAttr(), ShardAttr(),
        /*lora_k=*/IntegerAttr(), strArray(rewriter, concat({qkv, n})),
        strArray(rewriter, {valueName(n, 0), valueName(n, 1), valueName(qkv, 2)}));
    rewriter.replaceOp(n, ValueRange{Value(f.getQOut()), Value(f.getKOut())});
    rewriter.replaceAllUsesWith(qkv.getVOut(), f.getVOut());
    rewriter.eraseOp(qkv);
    return success();
  }
};

// linear + gate_residual / residual / swiglu of the same block -> linear with that epilogue (at the consumer).
// A training plan's forward (`saved` not empty: the values func @backward reads) fuses gate_residual and residual
// where the backward does not read the linear's output (h3-backward drops gate_residual_grad's y where nothing reads
// the table's gradient), and swiglu with the linear's output, the swiglu's x [v | g] that the backward reads, as the
// fused op's second result `swiglu_x` (the kernel stores it beside y: the bytes the linear stores). A linear with an
// unmerged LoRA path (h3-lora ran before: training) keeps it: t stays its last operand, after the epilogue's.
struct FuseEpilogue : OpRewritePattern<LinearOp> {
  FuseEpilogue(MLIRContext *ctx, llvm::StringSet<> saved = {})
      : OpRewritePattern(ctx, kEpilogue), saved(std::move(saved)) {}
  llvm::StringSet<> saved;

  LogicalResult matchAndRewrite(LinearOp l, PatternRewriter &rewriter) const override {
    if (!plainLinear(l)) return failure();
    Operation *u = singleUser(l.getY());
    if (!u || u->getBlock() != l->getBlock()) return failure();
    std::string p = blockPrefix(firstNode(l));
    if (p.empty() || blockPrefix(firstNode(u)) != p)
      return rewriter.notifyMatchFailure(l, "the consumer is not in the linear's transformer/refiner block");
    // (a swiglu's x the backward reads: kept as the fused op's second result)
    const bool keepX = !saved.empty() && saved.contains(h3c::passes::planName(l.getY()));
    if (keepX && !isa<SwigluOp>(u))
      return rewriter.notifyMatchFailure(l, "the backward reads the linear's output");
    std::vector<Value> epi;
    Epilogue epilogue = Epilogue::none;
    IntegerAttr chunk, numChunks;
    RowIndexAttr rowIndex;
    if (auto g = dyn_cast<GateResidualOp>(u)) {
      // The linear must be the gated branch, not the residual stream.
      if (g.getY() != l.getY() || g.getX() == l.getY()) return failure();
      epilogue = Epilogue::gate_residual;
      epi.push_back(g.getX());
      epi.push_back(g.getTable());
      for (Value m : g.getRowMeta()) epi.push_back(m);
      chunk = g.getChunkAttr();
      numChunks = g.getNumChunksAttr();
      rowIndex = g.getRowIndexAttr();
    } else if (auto r = dyn_cast<ResidualOp>(u)) {
      if (r.getY() != l.getY() || r.getX() == l.getY()) return failure();
      epilogue = Epilogue::residual;
      epi.push_back(r.getX());
    } else if (auto s = dyn_cast<SwigluOp>(u)) {
      if (s.getShard()) return failure();
      epilogue = Epilogue::swiglu;
    } else {
      return failure();
    }
    if (l.getLoraK()) {
      if (l.getEpilogueOperands().size() != 1) return rewriter.notifyMatchFailure(l, "a LoRA linear reads x and t only");
      epi.push_back(l.getEpilogueOperands()[0]);
    }
    rewriter.setInsertionPoint(u);
    std::vector<std::string> values = {valueName(u, 0)};
    if (keepX) values.push_back(valueName(l, 0));
    auto f = LinearOp::create(rewriter, l.getLoc(), u->getResult(0).getType(), keepX ? l.getY().getType() : Type(),
                              l.getX(), epi, l.getK(), l.getN(), l.getWeight(), l.getBias(), epilogue, chunk,
                              numChunks, rowIndex, l.getOrderAttr(), ShardAttr(), l.getLoraKAttr(),
                              strArray(rewriter, concat({l, u})), strArray(rewriter, values));
    rewriter.replaceOp(u, f.getY());
    if (keepX) rewriter.replaceOp(l, f.getSwigluX());
    else rewriter.eraseOp(l);
    return success();
  }
};

// time_embedder.linear_1 -> act -> linear_2 -> time_embed (at linear_2), reading linear_1's input: the time_proj
// sinusoid. time_proj itself stays an op of its own (the host computes it, like the rope tables).
struct FuseTimeMlp : OpRewritePattern<LinearOp> {
  FuseTimeMlp(MLIRContext *ctx) : OpRewritePattern(ctx, kTimeMlp) {}

  LogicalResult matchAndRewrite(LinearOp l1, PatternRewriter &rewriter) const override {
    if (!plainLinear(l1) || firstNode(l1) != "time_embedder.linear_1") return failure();
    auto act = dyn_cast_or_null<SiluOp>(singleUser(l1.getY()));
    if (!act || firstNode(act) != "time_embedder.act") return rewriter.notifyMatchFailure(l1, "no single act user");
    auto l2 = dyn_cast_or_null<LinearOp>(singleUser(act.getY()));
    if (!plainLinear(l2) || firstNode(l2) != "time_embedder.linear_2")
      return rewriter.notifyMatchFailure(l1, "act does not feed only a plain linear_2");
    auto order = sharedOrder({l1, l2});
    if (failed(order)) return rewriter.notifyMatchFailure(l1, "linear_1/linear_2 reduction orders differ");
    // time_embed is all F32 on [T] rows; the sinusoid has freq_dim = K columns (the op verifier's shape).
    auto isF32T = [](Value v) {
      auto t = cast<ActType>(v.getType());
      return t.getDomain() == "T" && !t.getBatch() && t.getElementType().isF32();
    };
    if (!isF32T(l1.getX()) || !isF32T(l1.getY()) || !isF32T(l2.getY()) || l1.getK() % 2)
      return rewriter.notifyMatchFailure(l1, "not an F32 [T] time MLP on an even-width sinusoid");

    std::vector<std::string> weight, bias;
    for (LinearOp l : {l1, l2}) {
      weight.push_back(tensor(l.getWeight(), 0));
      for (Attribute a : l.getBias()) bias.push_back(cast<StringAttr>(a).str());
    }
    rewriter.setInsertionPoint(l2);
    auto f = TimeEmbedOp::create(rewriter, l2.getLoc(), l2.getY().getType(), l1.getX(), l1.getK(), l1.getN(), l2.getN(),
                                 strArray(rewriter, weight), strArray(rewriter, bias), *order,
                                 strArray(rewriter, concat({l1, act, l2})), strArray(rewriter, {valueName(l2, 0)}));
    rewriter.replaceOp(l2, f.getTemb());
    rewriter.eraseOp(act);
    rewriter.eraseOp(l1);
    return success();
  }
};

struct Fuse : h3c::passes::impl::H3FuseBase<Fuse> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    // Only the fusions: no folding, constant CSE or region simplification (h3 ops have no folders, and nothing
    // else may move or drop an op of the plan).
    GreedyRewriteConfig config;
    config.setUseTopDownTraversal(true)
        .enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    RewritePatternSet patterns(ctx);
    if (training) {
      // A --backward plan's forward: the backward's arguments name the forward values it reads.
      llvm::StringSet<> saved;
      getOperation().walk([&](func::FuncOp f) {
        if (f.getSymName() != "backward") return;
        for (unsigned i = 0; i < f.getNumArguments(); ++i)
          if (auto n = f.getArgAttrOfType<StringAttr>(i, "h3.name")) saved.insert(n.getValue());
      });
      if (saved.empty()) {
        getOperation().emitError() << "h3-fuse training=true: the module has no func @backward with named arguments";
        return signalPassFailure();
      }
      patterns.add<FuseQkNormRope>(ctx, saved);
      patterns.add<FuseEpilogue>(ctx, std::move(saved));
      if (failed(applyPatternsGreedily(getOperation(), std::move(patterns), config))) {
        getOperation().emitError() << "h3-fuse: the fusion patterns did not converge";
        signalPassFailure();
      }
      return;
    }
    patterns.add<FuseQkv, FuseQkNormRope, FuseEpilogue, FuseTimeMlp>(ctx);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns), config))) {
      getOperation().emitError() << "h3-fuse: the fusion patterns did not converge";
      return signalPassFailure();
    }
    // Second phase, on the finished qkv_linear and qk_norm_rope ops: the Hopper GEMM's qk_norm_rope epilogue. Not
    // on sm_100a or with --no-wgmma (the mma.sync kernel has no such epilogue), nor when tp > 1.
    if (arch != "sm_90a" || !wgmma || tp != 1 || !qkEpilogue) return;
    RewritePatternSet hopper(ctx);
    hopper.add<FuseQkvNormRope>(ctx);
    if (failed(applyPatternsGreedily(getOperation(), std::move(hopper), config))) {
      getOperation().emitError() << "h3-fuse: the Hopper epilogue fusion did not converge";
      signalPassFailure();
    }
  }
};

} // namespace
