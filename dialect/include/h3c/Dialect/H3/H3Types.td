// The activation type: a row domain (symbolic row count), a fixed column count, an element type and the batch axis.
#ifndef H3C_DIALECT_H3_TYPES_TD
#define H3C_DIALECT_H3_TYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "h3c/Dialect/H3/H3Dialect.td"

def H3_ActType : TypeDef<H3_Dialect, "Act"> {
  let mnemonic = "act";
  let summary = "A row-domain activation [B?, rows, cols]";
  let description = [{
    `!h3.act<B, S, 5376, bf16>`: batched (leading `B`), rows of domain `S`, 5376 columns, bf16 storage.
    Domains: S, Nt, Nv, Na, T, T3, 1, and Sr, the contiguous range of S one rank holds under sequence parallelism
    (docs/contract.md section 1). After h3-shard-tp the column count of a column-sharded value is the rank's.
  }];
  let parameters = (ins StringRefParameter<"row domain">:$domain, "int64_t":$cols, "::mlir::Type":$elementType,
                        "bool":$batch);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif
