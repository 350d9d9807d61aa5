// The one source of halo_test_pch (cmake/HaloPch.cmake): an executable, so
// its precompiled header is built for position-independent executables as
// the test binaries are.
int main() { return 0; }
