# halo_add_plugin(NAME SOURCES...): a device plugin shared library
# libhalo_plugin_<NAME>.so in the plugin directory of the build and install trees.
function(halo_add_plugin name)
  set(target halo_plugin_${name})
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE halo::abi halo_plugin_support)
  set_target_properties(${target} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY "${HALO_PLUGIN_OUTPUT_DIR}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  install(TARGETS ${target} LIBRARY DESTINATION "${HALO_PLUGIN_SUBDIR}")
endfunction()

# halo_add_gtest(NAME SOURCES... LIBS ...): one GoogleTest binary registered with ctest.
function(halo_add_gtest name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  halo_use_pch(${name} TEST)
  target_compile_definitions(${name} PRIVATE
    HALO_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    HALO_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endfunction()
