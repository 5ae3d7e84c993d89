// Keeps h3c_runtime a valid library while it has no other sources.
