// The one source of the targets that own halo's precompiled headers
// (cmake/HaloPch.cmake): they build the headers, other targets reuse them.
