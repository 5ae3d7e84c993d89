// RUN: h3c-opt --h3-to-cuda %s -verify-diagnostics -o /dev/null
// Fail closed: an op the emitter cannot qualify (no reduction order) is an error naming the node.
func.func @no_order(%x: !h3.act<B, S, 24, bf16> {h3.name = "@x"}) {
  // expected-error @+1 {{[c.norm] no kernel:}}
  %y = h3.rms_norm %x {eps = 1.0e-05 : f64, weight = [], nodes = ["c.norm"], values = ["y"]} : (!h3.act<B, S, 24, bf16>) -> !h3.act<B, S, 24, bf16>
  return
}
