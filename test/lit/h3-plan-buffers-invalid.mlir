// RUN: h3c-opt %s --h3-plan-buffers -split-input-file -verify-diagnostics
// RUN: not h3c-opt %s --h3-plan-buffers="tokens=0" -split-input-file 2>&1 | FileCheck %s --check-prefix=TOKENS
// TOKENS: error: h3-plan-buffers: tokens must be >= 1

// expected-error @+1 {{'func.func' op argument 0 is not an h3 activation}}
func.func @not_an_activation(%x: i32) -> i32 {
  return %x : i32
}
