// Keeps h3c_kernels a valid library while it has no other sources (removed when the emitter lands).
