// The `h3` dialect: the MiniMax-H3 graph as the fingerprint describes it (docs/contract.md sections 2-4).
#ifndef H3C_DIALECT_H3_DIALECT_TD
#define H3C_DIALECT_H3_DIALECT_TD

include "mlir/IR/OpBase.td"

def H3_Dialect : Dialect {
  let name = "h3";
  let cppNamespace = "::h3c::h3ir";
  let summary = "The MiniMax-H3 transformer graph with explicit reduction orders";
  let description = [{
    One op per fingerprint node kind (docs/contract.md section 3) plus the fused ops of `h3-fuse` and the
    collective of `h3-shard-tp`. Every op carries `nodes` (the fingerprint node ids it implements) and `values`
    (the plan names of its results). Activations have the type `!h3.act<[B,] domain, cols, dtype[, parts = N]>`.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

#endif
