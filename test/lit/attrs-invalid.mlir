// RUN: h3c-opt %s -split-input-file -verify-diagnostics
// The discardable h3.* attributes are declared by the dialect and verified where they appear: module (config_name,
// tp, arch, buffers), function argument (name, slot), function result (name), h3 op (slots). A misplaced, mistyped
// or unknown one is an error naming it.

// expected-error @+1 {{'h3.tp' must be an i64 >= 1}}
module attributes {h3.tp = 0 : i64} {
}

// -----

// expected-error @+1 {{'h3.arch' must be "sm_90a" or "sm_100a"}}
module attributes {h3.arch = "sm_80"} {
}

// -----

// expected-error @+1 {{'h3.config_name' must be a string}}
module attributes {h3.config_name = 3 : i64} {
}

// -----

// expected-error @+1 {{'h3.buffers' slot 0 needs bytes_per_row with exactly one row domain}}
module attributes {h3.buffers = {peak_live_bytes = 0 : i64, slot_bytes = 0 : i64, slots = [{bytes_per_row = {X = 8 : i64}, fixed_bytes = 0 : i64, id = 0 : i64}], tokens = 1 : i64}} {
}

// -----

// expected-error @+1 {{'h3.buffers' needs a non-negative i64 'tokens'}}
module attributes {h3.buffers = {peak_live_bytes = 0 : i64, slot_bytes = 0 : i64, slots = []}} {
}

// -----

// expected-error @+1 {{'h3.tp' belongs on the module}}
func.func @tp_on_func() attributes {h3.tp = 2 : i64} {
  return
}

// -----

func.func @slots_count(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{'h3.slots' must list one non-negative i64 slot per result (1)}}
  %y = h3.silu %x {nodes = ["n"], values = ["y"], h3.slots = [0, 1]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

// expected-error @+1 {{'h3.slots' belongs on h3 ops (one slot per result)}}
func.func @slots_on_func() attributes {h3.slots = [0]} {
  return
}

// -----

func.func @name_on_op(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{'h3.name' belongs on a function argument or result}}
  %y = h3.silu %x {nodes = ["n"], values = ["y"], h3.name = "y"} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

func.func @unknown_on_op(%x: !h3.act<B, S, 24, bf16>) {
  // expected-error @+1 {{has the unknown h3 attribute 'h3.slto'}}
  %y = h3.silu %x {nodes = ["n"], values = ["y"], h3.slto = [0]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}

// -----

// expected-error @+1 {{argument 0: 'h3.slot' must be a non-negative i64}}
func.func @negative_slot(%x: !h3.act<B, S, 24, bf16> {h3.slot = -1 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0: 'h3.name' must be a non-empty string}}
func.func @empty_name(%x: !h3.act<B, S, 24, bf16> {h3.name = ""}) {
  return
}

// -----

// expected-error @+1 {{argument 0 has the unknown h3 attribute 'h3.slots'}}
func.func @slots_on_argument(%x: !h3.act<B, S, 24, bf16> {h3.slots = [0]}) {
  return
}

// -----

// expected-error @+1 {{result 0 has the unknown h3 attribute 'h3.slot'}}
func.func @slot_on_result(%x: !h3.act<B, S, 24, bf16>) -> (!h3.act<B, S, 24, bf16> {h3.slot = 0 : i64}) {
  return %x : !h3.act<B, S, 24, bf16>
}
