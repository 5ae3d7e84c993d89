// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=2" --h3-shard-seq="sp=2" -o %t.in.mlir
// RUN: h3c-opt %t.in.mlir --h3-verify-strict="arch=sm_100a" -o %t.out.mlir
// RUN: diff %t.in.mlir %t.out.mlir
// RUN: FileCheck %s --input-file %t.out.mlir
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order -o %t.unfused.mlir
// RUN: h3c-opt %t.unfused.mlir --h3-verify-strict | diff %t.unfused.mlir -
// RUN: FileCheck %s --check-prefix=UNFUSED --input-file %t.unfused.mlir
// A module with every order assigned passes, and the pass is a pure check: its output is its input, byte for byte
// (the arch is the pass option; nothing is recorded in the IR).
// CHECK: module attributes {h3.sp = 2 : i64, h3.tp = 2 : i64}
// CHECK: h3.all_gather
// UNFUSED-NOT: h3.arch
// UNFUSED: h3.gate_residual
