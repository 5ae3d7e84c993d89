// The activation type: a row domain (symbolic row count), a fixed column count, an element type, the batch axis
// and, for the rank partials of a row-parallel linear, the number of stacked rank partials.
#ifndef H3C_DIALECT_H3_TYPES_TD
#define H3C_DIALECT_H3_TYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "h3c/Dialect/H3/H3Dialect.td"

def H3_ActType : TypeDef<H3_Dialect, "Act"> {
  let mnemonic = "act";
  let summary = "A row-domain activation [B?, rows, cols]";
  let description = [{
    `!h3.act<B, S, 5376, bf16>`: batched (leading `B`), rows of domain `S`, 5376 columns, bf16 storage.
    Domains: S, Nt, Nv, Na, T, T3, 1 (docs/contract.md section 1). `parts = N` marks N stacked rank partials (F32)
    produced by a row-parallel linear and consumed by `h3.allreduce_tree`.
  }];
  let parameters = (ins StringRefParameter<"row domain">:$domain, "int64_t":$cols, "::mlir::Type":$elementType,
                        "bool":$batch, DefaultValuedParameter<"int64_t", "1">:$parts);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif
