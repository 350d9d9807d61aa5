# Precompiled headers (docs/testing.md, "Build time"). Two headers, each built
# once by a target that exists only to own it, and reused by the others:
#   halo_pch       cmake/pch/halo_pch.h: nlohmann-json, fmt, spdlog and the
#                  standard library; for halo's static libraries (-fPIC)
#   halo_test_pch  cmake/pch/halo_test_pch.h: the same and GoogleTest; for the
#                  test executables (-fPIE: GCC refuses a header precompiled
#                  for the other kind of code, so each kind has its own)
# halo_use_pch(TARGET [TEST]) makes TARGET reuse one. GCC checks a header
# against the flags of each compile and falls back to parsing it when they
# differ (-Winvalid-pch says so), so a mismatch costs time, never correctness.
# Macros count too: every target that shares a header links what its owner
# links (_halo_pch_libs), so they define the same ones; -pthread is on every
# file already (HaloDependencies.cmake).
option(HALO_PCH "Precompile the heavy third-party headers (nlohmann-json, fmt, spdlog, GoogleTest)" ON)

set(_halo_pch_libs fmt::fmt spdlog::spdlog nlohmann_json::nlohmann_json)
if(HALO_PCH)
  add_library(halo_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/pch/pch_anchor.cpp)
  target_link_libraries(halo_pch PRIVATE ${_halo_pch_libs})
  target_precompile_headers(halo_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/halo_pch.h)
  set_target_properties(halo_pch PROPERTIES UNITY_BUILD OFF)
endif()

function(halo_use_pch target)
  if(NOT HALO_PCH)
    return()
  endif()
  target_link_libraries(${target} PRIVATE ${_halo_pch_libs})
  if(ARGV1 STREQUAL "TEST")
    if(NOT TARGET halo_test_pch)
      add_executable(halo_test_pch ${PROJECT_SOURCE_DIR}/cmake/pch/pch_test_main.cpp)
      target_link_libraries(halo_test_pch PRIVATE ${_halo_pch_libs} GTest::gtest)
      target_compile_definitions(halo_test_pch PRIVATE HALO_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
        HALO_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
      target_include_directories(halo_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch)
      target_precompile_headers(halo_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/halo_test_pch.h)
      set_target_properties(halo_test_pch PROPERTIES UNITY_BUILD OFF)
    endif()
    target_precompile_headers(${target} REUSE_FROM halo_test_pch)
  else()
    target_precompile_headers(${target} REUSE_FROM halo_pch)
  endif()
endfunction()
