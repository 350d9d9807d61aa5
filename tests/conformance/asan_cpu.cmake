# The cpu plugin and the suite built with AddressSanitizer (a second, small
# configure of this source tree; only the two targets are built), then the
# suite's lifetime, error, version, buffer and paging tests under ASan+LSan.
#   -DSOURCE_DIR=<halo source> -DWORK_DIR=<scratch build dir> -DGENERATOR=<gen>
set(flags "-fsanitize=address -fno-omit-frame-pointer -O1 -g")
set(skip "text;jinja;model;cpu;cuda;engine;integration;serve;rbln")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
    "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_C_FLAGS=${flags}"
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address" "-DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address"
    "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address"
    -DHALO_BUILD_TESTS=ON -DHALO_BUILD_BENCHMARKS=OFF -DHALO_CONFORMANCE_NESTED=ON "-DHALO_SKIP_TEST_AREAS=${skip}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ASan configure failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}" --target halo_plugin_cpu halo-conformance -j 2
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ASan build failed:\n${out}\n${err}")
endif()
set(plugin "${WORK_DIR}/lib/halo/plugins/libhalo_plugin_cpu.so")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23" --unset=HALO_PLUGIN_PATH
    "${WORK_DIR}/bin/halo-conformance" --plugin "${plugin}" --device-option threads=2
    --filter "Conformance.Lifetime*:Conformance.Errors*:Conformance.Version*:Conformance.Limits*:Buffers*:Paging*:Golden.*llama_fp32"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 400)
string(REGEX MATCHALL "[^\n]*(PASSED|FAILED|ERROR: AddressSanitizer|ERROR: LeakSanitizer)[^\n]*" lines "${out}\n${err}")
string(REPLACE ";" "\n  " shown "${lines}")
message("halo-conformance under ASan on ${plugin}:\n  ${shown}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the suite failed under AddressSanitizer (exit ${rc}):\n${out}\n${err}")
endif()
