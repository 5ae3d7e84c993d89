// The translations h3c-opt registers: `--h3-to-cuda` (module -> the CUDA source of every kernel its ops need, via
// the kernel emitter) and `--import-h3-fingerprint` (fingerprint JSON -> h3 module).
#pragma once

namespace h3c::codegen {
void registerTranslations();
} // namespace h3c::codegen
