// RUN: h3c-opt %s --h3-plan-buffers="tokens=10" | FileCheck %s
// Liveness by hand (bytes per row: S values 48 = 24 bf16, w 128, v 64; T values 96 = 24 f32):
//   args x -> slot 0 (S), temb -> slot 1 (T)
//   a = norm(x): no free S slot -> slot 2; x dies -> 0 free
//   b = norm(a): slot 0 (fits); a dies -> 2 free
//   t = silu(temb): no free T slot -> slot 3; temb dies -> 1 free
//   w = linear(b) 128 B/row: only free S slot is 2 (48) -> grows to 128; b dies -> 0 free
//   v = swiglu(w) 64 B/row: slot 0 grows to 64
// Live peak at S = 10: x 480 + temb 96 + a 480 ... max is after v: t 96 + w 1280 + v 640 = 2016.
// Slot bytes: 64*10 + 96 + 128*10 + 96 = 2112.

// CHECK: module attributes {h3.buffers = {peak_live_bytes = 2016 : i64, slot_bytes = 2112 : i64, slots = [{bytes_per_row = {S = 64 : i64}, fixed_bytes = 0 : i64, id = 0 : i64}, {bytes_per_row = {T = 96 : i64}, fixed_bytes = 0 : i64, id = 1 : i64}, {bytes_per_row = {S = 128 : i64}, fixed_bytes = 0 : i64, id = 2 : i64}, {bytes_per_row = {T = 96 : i64}, fixed_bytes = 0 : i64, id = 3 : i64}], tokens = 10 : i64}}
// CHECK-LABEL: func.func @chain
// CHECK-SAME: {h3.name = "@x", h3.slot = 0 : i64}
// CHECK-SAME: {h3.name = "@temb", h3.slot = 1 : i64}
// CHECK: h3.rms_norm {{.*}}h3.slots = [2]
// CHECK: h3.rms_norm {{.*}}h3.slots = [0]
// CHECK: h3.silu {{.*}}h3.slots = [3]
// CHECK: h3.linear {{.*}}h3.slots = [2]
// CHECK: h3.swiglu {{.*}}h3.slots = [0]
func.func @chain(%x: !h3.act<B, S, 24, bf16> {h3.name = "@x"}, %temb: !h3.act<T, 24, f32> {h3.name = "@temb"})
    -> (!h3.act<B, S, 32, bf16>, !h3.act<T, 24, f32>) {
  %a = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], nodes = ["a"], values = ["a"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  %b = h3.rms_norm %a {eps = 1.0e-05 : f64, weight = [], nodes = ["b"], values = ["b"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  %t = h3.silu %temb {nodes = ["t"], values = ["t"]} : (!h3.act<T, 24, f32>) -> !h3.act<T, 24, f32>
  %w = h3.linear %b {K = 24 : i64, N = 64 : i64, bias = [], weight = ["w"], nodes = ["w"], values = ["w"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 64, bf16>
  %v = h3.swiglu %w {nodes = ["v"], values = ["v"]} : (!h3.act<B, S, 64, bf16>) -> !h3.act<B, S, 32, bf16>
  return %v, %t : !h3.act<B, S, 32, bf16>, !h3.act<T, 24, f32>
}
