// Op interfaces of the h3 dialect.
#ifndef H3C_DIALECT_H3_INTERFACES_TD
#define H3C_DIALECT_H3_INTERFACES_TD

include "mlir/IR/OpBase.td"

// Every op that sums floating-point values implements this, so the passes that give out and check reduction
// orders (h3-assign-reduction-order, h3-verify-strict) and the importer (which matches the fingerprint's
// reductions) ask the op instead of keeping their own list of reducing op kinds.
def H3_OrderedReductionOpInterface : OpInterface<"OrderedReduction"> {
  let cppNamespace = "::h3c::h3ir";
  let description = [{
    An op whose floating-point sums follow a fixed order (docs/contract.md section 4), carried as the optional
    `order` attribute (`#h3.order<...>`) until h3-assign-reduction-order sets it. The op type fixes the order
    kind; the order's parameters depend only on the reduced extents (and, for units, on the node), never on
    rows, batch, the sp/tp degrees or arch.
  }];
  let methods = [
    StaticInterfaceMethod<
      "The order kind docs/contract.md section 4 pins for this op type.",
      "::h3c::h3ir::OrderKind", "getRequiredOrderKind">,
    InterfaceMethod<
      [{The static extents this op reduces, one per reduction with a static extent, in the op's computation
        order (K of each GEMM, the normalized width of a norm, head_dim of attention's q.k). Sums over a row
        domain (attention's keys) are symbolic and not listed.}],
      "::llvm::SmallVector<int64_t>", "getReducedExtents">,
    InterfaceMethod<
      "The order attribute; null before h3-assign-reduction-order.",
      "::h3c::h3ir::OrderAttr", "getOrderAttr", (ins), [{ return $_op.getOrderAttr(); }]>,
    InterfaceMethod<
      "Sets the order attribute.",
      "void", "setOrderAttr", (ins "::h3c::h3ir::OrderAttr":$order), [{ $_op.setOrderAttr(order); }]>,
  ];
  // The order, when present, has the kind the op type requires (so no pass sees a lane_tree linear).
  let verify = [{ return ::h3c::h3ir::detail::verifyOrderedReduction($_op); }];
}

#endif
