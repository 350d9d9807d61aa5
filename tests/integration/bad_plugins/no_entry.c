/* A valid shared library that is not a halo plugin: no entry symbol. */
int halo_not_a_plugin(void) { return 42; }
