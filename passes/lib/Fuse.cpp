// h3-fuse: the fusions of docs/contract.md section 3. Each rewrite checks the exact producer/consumer shape it
// fuses (node ids of one block, single uses of the intermediates, no sharding yet) and leaves the ops apart
// otherwise. A fused op carries the reduction order of its parts (which must agree) and lists every node it covers
// in node order, so the ledger still accounts for all nodes.
#include "Common.h"
#include "h3c/Passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <set>

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

std::vector<std::string> concat(std::initializer_list<Operation *> ops) {
  std::vector<std::string> r;
  for (Operation *op : ops)
    for (auto &n : nodeList(op)) r.push_back(n);
  return r;
}

std::string valueName(Operation *op, unsigned i) {
  return cast<StringAttr>(op->getAttrOfType<ArrayAttr>("values")[i]).str();
}

bool plainLinear(LinearOp l) { return l && l.getEpilogue() == "none" && !l.getShard(); }

// The single user of `v`, or null.
Operation *singleUser(Value v) { return v.hasOneUse() ? *v.getUsers().begin() : nullptr; }

// Every user of the results of `ops` comes after `at` (so results may be redefined at `at`).
bool usersAfter(std::initializer_list<Operation *> ops, Operation *at) {
  for (Operation *op : ops)
    for (Value r : op->getResults())
      for (Operation *u : r.getUsers())
        if (u != at && u->isBeforeInBlock(at)) {
          bool replaced = false;
          for (Operation *o : ops) replaced |= o == u;
          if (!replaced) return false;
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

struct Fuse : h3c::passes::impl::H3FuseBase<Fuse> {
  std::set<Operation *> erased;

  void erase(Operation *op) {
    erased.insert(op);
    op->erase();
  }

  void setCommon(Operation *op, OpBuilder &b, const std::vector<std::string> &nodes,
                 const std::vector<std::string> &values, OrderAttr order) {
    op->setAttr("nodes", h3c::passes::strArray(b, nodes));
    op->setAttr("values", h3c::passes::strArray(b, values));
    if (order) op->setAttr("order", order);
  }

  // to_q, to_k, to_v reading the same input -> qkv_linear (at to_q; its uses all follow to_v).
  void fuseQkv(Operation *op) {
    auto q = dyn_cast<LinearOp>(op);
    if (!plainLinear(q) || !endsWith(h3c::h3ir::firstNode(op), ".attn.to_q")) return;
    std::string p = blockPrefix(firstNode(op));
    LinearOp k, v;
    for (Operation *u : q.getX().getUsers()) {
      auto l = dyn_cast<LinearOp>(u);
      if (!plainLinear(l)) continue;
      if (firstNode(u) == p + "attn.to_k") k = l;
      if (firstNode(u) == p + "attn.to_v") v = l;
    }
    if (!k || !v || q.getK() != k.getK() || q.getK() != v.getK()) return;
    if (q.getBias().empty() != k.getBias().empty() || q.getBias().empty() != v.getBias().empty()) return;
    auto order = sharedOrder({q, k, v});
    if (failed(order)) return;
    // heads / head_dim from a consumer that knows them (qk_norm, rope or attention).
    int64_t heads = 0, headDim = 0;
    for (Operation *u : q.getY().getUsers()) {
      if (auto h = u->getAttrOfType<IntegerAttr>("heads")) {
        heads = h.getInt();
        headDim = u->getAttrOfType<IntegerAttr>("head_dim").getInt();
      }
    }
    if (!heads) return;
    if (!usersAfter({q, k, v}, v)) return;
    OpBuilder b(v);  // at to_v: the last of the three
    std::vector<std::string> weight = {cast<StringAttr>(q.getWeight()[0]).str(), cast<StringAttr>(k.getWeight()[0]).str(),
                                       cast<StringAttr>(v.getWeight()[0]).str()};
    std::vector<std::string> bias;
    for (LinearOp l : {q, k, v})
      for (Attribute a : l.getBias()) bias.push_back(cast<StringAttr>(a).str());
    auto f = QkvLinearOp::create(b, q.getLoc(), TypeRange{q.getType(), k.getType(), v.getType()}, q.getX(), q.getK(),
                                 heads, headDim, h3c::passes::strArray(b, weight), h3c::passes::strArray(b, bias),
                                 OrderAttr(), ShardAttr(), b.getArrayAttr({}), b.getArrayAttr({}));
    setCommon(f, b, concat({q, k, v}), {valueName(q, 0), valueName(k, 0), valueName(v, 0)}, *order);
    q.getY().replaceAllUsesWith(f.getQOut());
    k.getY().replaceAllUsesWith(f.getKOut());
    v.getY().replaceAllUsesWith(f.getVOut());
    erase(q);
    erase(k);
    erase(v);
  }

  // norm_q, norm_k (+ rope_q, rope_k) -> qk_norm_rope.
  void fuseQkNormRope(Operation *op) {
    auto nq = dyn_cast<QkNormOp>(op);
    if (!nq || nq.getShard() || !endsWith(firstNode(op), ".attn.norm_q")) return;
    std::string p = blockPrefix(firstNode(op));
    QkNormOp nk;
    for (Operation *o = op->getNextNode(); o && !nk; o = o->getNextNode())
      if (firstNode(o) == p + "attn.norm_k") nk = dyn_cast<QkNormOp>(o);
    if (!nk || nk.getShard() || nk.getHeads() != nq.getHeads() || nk.getHeadDim() != nq.getHeadDim() ||
        nk.getEps() != nq.getEps())
      return;
    auto order = sharedOrder({nq, nk});
    if (failed(order)) return;
    auto rq = dyn_cast_or_null<RopeOp>(singleUser(nq.getY()));
    auto rk = dyn_cast_or_null<RopeOp>(singleUser(nk.getY()));
    bool rope = rq && rk && firstNode(rq) == p + "attn.rope_q" && firstNode(rk) == p + "attn.rope_k" &&
                rq.getCos() == rk.getCos() && rq.getSin() == rk.getSin() && rq.getX() == nq.getY() &&
                rk.getX() == nk.getY() && !rq.getShard() && !rk.getShard();
    Operation *last = rope ? (rq->isBeforeInBlock(rk) ? rk.getOperation() : rq.getOperation()) : nk.getOperation();
    if (rope ? !usersAfter({nq, nk, rq, rk}, last) : !usersAfter({nq, nk}, last)) return;
    OpBuilder b(last);
    std::vector<Value> tables;
    if (rope) tables = {rq.getCos(), rq.getSin()};
    std::vector<std::string> weight = {cast<StringAttr>(nq.getWeight()[0]).str(),
                                       cast<StringAttr>(nk.getWeight()[0]).str()};
    Operation *outQ = rope ? rq.getOperation() : nq.getOperation();
    Operation *outK = rope ? rk.getOperation() : nk.getOperation();
    auto f = QkNormRopeOp::create(b, nq.getLoc(), TypeRange{outQ->getResult(0).getType(), outK->getResult(0).getType()},
                                  nq.getX(), nk.getX(), tables, nq.getHeads(), nq.getHeadDim(),
                                  rope ? rq.getRotaryDim() : 0, nq.getEpsAttr().getValue(),
                                  h3c::passes::strArray(b, weight), OrderAttr(), ShardAttr(), b.getArrayAttr({}),
                                  b.getArrayAttr({}));
    std::vector<std::string> nodes = rope ? concat({nq, nk, rq, rk}) : concat({nq, nk});
    setCommon(f, b, nodes, {valueName(outQ, 0), valueName(outK, 0)}, *order);
    outQ->getResult(0).replaceAllUsesWith(f.getQOut());
    outK->getResult(0).replaceAllUsesWith(f.getKOut());
    if (rope) {
      erase(rq);
      erase(rk);
    }
    erase(nq);
    erase(nk);
  }

  // linear + gate_residual / residual / swiglu -> linear with an epilogue (at the consumer).
  void fuseEpilogue(Operation *op) {
    auto l = dyn_cast<LinearOp>(op);
    if (!plainLinear(l)) return;
    Operation *u = singleUser(l.getY());
    if (!u || u->getBlock() != op->getBlock()) return;
    std::string p = blockPrefix(firstNode(op));
    if (p.empty() || blockPrefix(firstNode(u)) != p) return;
    OpBuilder b(u);
    std::vector<Value> epi;
    std::string epilogue;
    if (auto g = dyn_cast<GateResidualOp>(u)) {
      if (g.getY() != l.getY() || g.getX() == l.getY()) return;
      epilogue = "gate_residual";
      epi.push_back(g.getX());
      epi.push_back(g.getTable());
      for (Value m : g.getRowMeta()) epi.push_back(m);
    } else if (auto r = dyn_cast<ResidualOp>(u)) {
      if (r.getY() != l.getY() || r.getX() == l.getY()) return;
      epilogue = "residual";
      epi.push_back(r.getX());
    } else if (auto s = dyn_cast<SwigluOp>(u)) {
      if (s.getShard()) return;
      epilogue = "swiglu";
    } else {
      return;
    }
    auto f = LinearOp::create(b, l.getLoc(), u->getResult(0).getType(), l.getX(), epi, l.getK(), l.getN(),
                              l.getWeight(), l.getBias(), epilogue, IntegerAttr(), IntegerAttr(), StringAttr(),
                              OrderAttr(), ShardAttr(), b.getArrayAttr({}), b.getArrayAttr({}));
    if (auto g = dyn_cast<GateResidualOp>(u)) {
      f.setChunk(g.getChunk());
      f.setNumChunks(g.getNumChunks());
      f.setRowIndex(g.getRowIndex());
    }
    setCommon(f, b, concat({l, u}), {valueName(u, 0)}, l.getOrderAttr());
    u->getResult(0).replaceAllUsesWith(f.getY());
    erase(u);
    erase(l);
  }

  // time_proj -> linear_1 -> act -> linear_2 -> time_embed (at linear_2).
  void fuseTimeEmbed(Operation *op) {
    auto ts = dyn_cast<TimestepSinusoidOp>(op);
    if (!ts) return;
    auto l1 = dyn_cast_or_null<LinearOp>(singleUser(ts.getY()));
    if (!plainLinear(l1) || firstNode(l1) != "time_embedder.linear_1") return;
    auto act = dyn_cast_or_null<SiluOp>(singleUser(l1.getY()));
    if (!act || firstNode(act) != "time_embedder.act") return;
    auto l2 = dyn_cast_or_null<LinearOp>(singleUser(act.getY()));
    if (!plainLinear(l2) || firstNode(l2) != "time_embedder.linear_2") return;
    auto order = sharedOrder({l1, l2});
    if (failed(order)) return;
    OpBuilder b(l2);
    std::vector<std::string> weight, bias;
    for (LinearOp l : {l1, l2}) {
      weight.push_back(cast<StringAttr>(l.getWeight()[0]).str());
      for (Attribute a : l.getBias()) bias.push_back(cast<StringAttr>(a).str());
    }
    auto f = TimeEmbedOp::create(b, l2.getLoc(), l2.getType(), ts.getT(), ts.getFreqDim(), l1.getN(), l2.getN(),
                                 h3c::passes::strArray(b, weight), h3c::passes::strArray(b, bias), OrderAttr(),
                                 b.getArrayAttr({}), b.getArrayAttr({}));
    setCommon(f, b, concat({ts, l1, act, l2}), {valueName(l2, 0)}, *order);
    l2.getY().replaceAllUsesWith(f.getTemb());
    erase(l2);
    erase(act);
    erase(l1);
    erase(ts);
  }

  void sweep(void (Fuse::*rewrite)(Operation *)) {
    erased.clear();
    for (Operation *op : h3c::passes::h3Ops(getOperation()))
      if (!erased.count(op)) (this->*rewrite)(op);
  }

  void runOnOperation() override {
    sweep(&Fuse::fuseQkv);
    sweep(&Fuse::fuseQkNormRope);
    sweep(&Fuse::fuseEpilogue);
    sweep(&Fuse::fuseTimeEmbed);
  }
};

} // namespace
