// RUN: not h3c-opt %s --h3-shard-seq="sp=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not h3c-opt %s --h3-shard-seq="sp=2" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not h3c-opt %s --h3-shard-tp="tp=2" --h3-shard-tp="tp=2" 2>&1 | FileCheck %s --check-prefix=TPTWICE
// ZERO: error: h3-shard-seq: sp must be >= 1, got 0
// A module already split by rows (it holds a rank's rows) is not split again.
// TWICE: error: h3-shard-seq: the module is already split by rows (it holds values of a rank's rows, Sr)
// TPTWICE: error: h3-shard-tp: the module is already split over tensor-parallel ranks

func.func @split(%k: !h3.act<B, S, 32, bf16>) -> !h3.act<B, S, 32, bf16> {
  %r = h3.split %k {axis = #h3.axis<rows>, parts = 2 : i64, nodes = [], values = ["r"]} : (!h3.act<B, S, 32, bf16>) -> !h3.act<B, Sr, 32, bf16>
  %g = h3.all_gather %r {axis = #h3.axis<rows>, parts = 2 : i64, nodes = [], values = ["g"]} : (!h3.act<B, Sr, 32, bf16>) -> !h3.act<B, S, 32, bf16>
  return %g : !h3.act<B, S, 32, bf16>
}
