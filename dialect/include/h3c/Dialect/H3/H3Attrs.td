// Attributes: the reduction order every reducing op must carry (docs/contract.md section 4) and the TP shard. Their
// kinds, and the epilogue / row-index enum attributes, are in H3Enums.td.
#ifndef H3C_DIALECT_H3_ATTRS_TD
#define H3C_DIALECT_H3_ATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "h3c/Dialect/H3/H3Dialect.td"
include "h3c/Dialect/H3/H3Enums.td"

def H3_OrderAttr : AttrDef<H3_Dialect, "Order"> {
  let mnemonic = "order";
  let summary = "The fixed order of a reduction's floating-point additions";
  let description = [{
    `#h3.order<k_chunks, k_step = 16, units = 1, acc = f32>` (linear-like ops; one unit: K in one chain),
    `#h3.order<lane_tree, lanes = 32, acc = f32>` (row norms),
    `#h3.order<flash, kv_block = 128, k_step = 16, acc = f32, p = bf16>` (attention),
    `#h3.order<row_units, units = 128, k_step = 16, acc = f32>` (the gradients' sums over token rows: units of 128
    canonical rows of an item, folded in order; docs/contract.md section 14).
    Parameters that do not apply to a kind are 0 / null and are not printed. The kind is an `OrderKind`; an
    unknown kind is a parse error.
  }];
  let parameters = (ins EnumParameter<H3_OrderKind>:$kind, "int64_t":$kStep, "int64_t":$units,
                        "int64_t":$lanes, "int64_t":$kvBlock, "::mlir::Type":$acc, "::mlir::Type":$p);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def H3_ShardAttr : AttrDef<H3_Dialect, "Shard"> {
  let mnemonic = "shard";
  let summary = "How an op is split over tensor-parallel ranks";
  let description = [{
    `#h3.shard<column, tp = 4, segments = 2>`: the op's full output columns form `segments` equal contiguous
    segments (qkv: 3, one per output; fc1: 2, value and gate halves; the AdaLN table: one per chunk; else 1) and
    rank j computes part j of each. The op's attributes and types are the rank's (local widths).
    `#h3.shard<replicated, tp = 1>`: every rank computes all of it. The kind is a `ShardKind`; an unknown kind is a
    parse error.
  }];
  let parameters = (ins EnumParameter<H3_ShardKind>:$kind, "int64_t":$tp, DefaultValuedParameter<"int64_t", "1">:$segments);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif
