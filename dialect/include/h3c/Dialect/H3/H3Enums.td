// The closed vocabularies of the h3 dialect (docs/contract.md sections 3-5) as C++ enums, so that a misspelt
// epilogue, row index, shard kind or order kind is a parse error rather than a string a pass compares against.
// The plan keeps the same words: stringify<Enum>() gives them back.
#ifndef H3C_DIALECT_H3_ENUMS_TD
#define H3C_DIALECT_H3_ENUMS_TD

include "mlir/IR/EnumAttr.td"
include "h3c/Dialect/H3/H3Dialect.td"

// ---- linear epilogue ----
def H3_EpilogueNone : I32EnumAttrCase<"none", 0>;
def H3_EpilogueResidual : I32EnumAttrCase<"residual", 1>;
def H3_EpilogueGateResidual : I32EnumAttrCase<"gate_residual", 2>;
def H3_EpilogueSwiglu : I32EnumAttrCase<"swiglu", 3>;
def H3_EpilogueQkNormRope : I32EnumAttrCase<"qk_norm_rope", 4>;  // qkv_linear only
def H3_Epilogue : I32EnumAttr<"Epilogue", "what a linear applies after its reduction",
    [H3_EpilogueNone, H3_EpilogueResidual, H3_EpilogueGateResidual, H3_EpilogueSwiglu,
     H3_EpilogueQkNormRope]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::h3c::h3ir";
}

// ---- which AdaLN table row a token row reads ----
def H3_RowIndexAdaln : I32EnumAttrCase<"adaln", 0>;        // ts_index * 3 + tag
def H3_RowIndexTimestep : I32EnumAttrCase<"timestep", 1>;  // ts_index
def H3_RowIndex : I32EnumAttr<"RowIndex", "how a token row selects its AdaLN table row",
    [H3_RowIndexAdaln, H3_RowIndexTimestep]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::h3c::h3ir";
}

// ---- tensor-parallel split (parameter of #h3.shard) ----
def H3_ShardReplicated : I32EnumAttrCase<"replicated", 0>;
def H3_ShardColumn : I32EnumAttrCase<"column", 1>;
def H3_ShardKind : I32EnumAttr<"ShardKind", "how an op is split over tensor-parallel ranks",
    [H3_ShardReplicated, H3_ShardColumn]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::h3c::h3ir";
}

// ---- the axis a layout op (h3.all_gather, h3.split) moves ----
def H3_AxisRows : I32EnumAttrCase<"rows", 0>;  // the packed rows S, over the sequence-parallel ranks
def H3_AxisCols : I32EnumAttrCase<"cols", 1>;  // columns, over the tensor-parallel ranks
def H3_Axis : I32EnumAttr<"Axis", "the axis an all_gather or split moves",
    [H3_AxisRows, H3_AxisCols]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::h3c::h3ir";
}

// ---- reduction order (parameter of #h3.order) ----
def H3_OrderKChunks : I32EnumAttrCase<"k_chunks", 0>;
def H3_OrderLaneTree : I32EnumAttrCase<"lane_tree", 1>;
def H3_OrderFlash : I32EnumAttrCase<"flash", 2>;
def H3_OrderRowUnits : I32EnumAttrCase<"row_units", 3>;  // sums over token rows (gradients, section 14)
def H3_OrderKind : I32EnumAttr<"OrderKind", "the family of a fixed reduction order",
    [H3_OrderKChunks, H3_OrderLaneTree, H3_OrderFlash, H3_OrderRowUnits]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::h3c::h3ir";
}

// The two enums ops carry directly: `epilogue = #h3.epilogue<gate_residual>`, `row_index = #h3.row_index<adaln>`.
def H3_EpilogueAttr : EnumAttr<H3_Dialect, H3_Epilogue, "epilogue"> {
  let assemblyFormat = "`<` $value `>`";
}
def H3_RowIndexAttr : EnumAttr<H3_Dialect, H3_RowIndex, "row_index"> {
  let assemblyFormat = "`<` $value `>`";
}
def H3_AxisAttr : EnumAttr<H3_Dialect, H3_Axis, "axis"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif
