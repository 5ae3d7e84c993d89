// The `h3` dialect: the MiniMax-H3 graph as the fingerprint describes it (docs/contract.md sections 2-4).
#ifndef H3C_DIALECT_H3_DIALECT_TD
#define H3C_DIALECT_H3_DIALECT_TD

include "mlir/IR/OpBase.td"

def H3_Dialect : Dialect {
  let name = "h3";
  let cppNamespace = "::h3c::h3ir";
  let summary = "The MiniMax-H3 transformer graph with explicit reduction orders";
  let description = [{
    One op per fingerprint node kind (docs/contract.md section 3) plus the fused ops of `h3-fuse` and the layout
    ops of `h3-shard-tp` / `h3-shard-seq` (`h3.all_gather`, `h3.split`). Every op carries `nodes` (the fingerprint
    node ids it implements; none for layout ops) and `values` (the plan names of its results). Activations have
    the type `!h3.act<[B,] domain, cols, dtype>`.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;

  // The `h3.*` discardable attributes the importer and the passes write, declared so the dialect verifies them
  // (H3DialectAttrs.cpp) and code reaches them through typed helpers (getSlotsAttrHelper(), ...):
  //   module:        h3.config_name (importer), h3.tp (h3-shard-tp), h3.sp (h3-shard-seq), h3.buffers (h3-plan-buffers),
  //                  h3.arch (read by --h3-to-cuda when the input names a target; no pass writes it),
  //                  h3.adapter_slots (h3-lora: {slot name: [rows, cols]}, the unmerged LoRA slots)
  //   func:          h3.trainable (h3-backward, on func @backward: the tensors it trains, plan/trainable.h patterns)
  //   func argument: h3.name (importer: the plan value name), h3.slot (h3-plan-buffers)
  //   func result:   h3.name (importer: the plan output name)
  //   h3 op:         h3.slots (h3-plan-buffers: one slot per result)
  let discardableAttrs = (ins
    "::mlir::StringAttr":$config_name,
    "::mlir::IntegerAttr":$tp,
    "::mlir::IntegerAttr":$sp,
    "::mlir::StringAttr":$arch,
    "::mlir::DictionaryAttr":$buffers,
    "::mlir::DictionaryAttr":$adapter_slots,
    "::mlir::ArrayAttr":$trainable,
    "::mlir::StringAttr":$name,
    "::mlir::IntegerAttr":$slot,
    "::mlir::ArrayAttr":$slots
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

#endif
