// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-fuse --h3-shard-tp="tp=2" --h3-verify-strict="arch=sm_100a" | FileCheck %s
// RUN: h3c-opt %S/Inputs/tiny_blocks.ir --h3-assign-reduction-order --h3-verify-strict | FileCheck %s --check-prefix=UNFUSED
// A module with every order assigned passes unchanged except for the recorded arch.
// CHECK: module attributes {h3.arch = "sm_100a", h3.tp = 2 : i64}
// CHECK: h3.allreduce_tree
// UNFUSED: module attributes {h3.arch = "sm_90a"}
// UNFUSED: h3.gate_residual
