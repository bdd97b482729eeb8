/* The "real" probe() that probe_a.c wraps. */
__attribute__((visibility("default"))) int probe(void) { return 42; }
