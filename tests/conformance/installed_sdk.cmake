# The SDK as a vendor gets it: install the build into a temporary prefix, build
# the plugin template against it with find_package(halo), check that the
# installed halo finds the installed plugins with no environment, and run the
# installed suite on the template.
#   -DBUILD_DIR=<halo build> -DWORK_DIR=<scratch> -DTEMPLATE_DIR=<template> -DGENERATOR=<gen>
set(prefix "${WORK_DIR}/prefix")
set(tbuild "${WORK_DIR}/template-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 200)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

# No HALO_PLUGIN_PATH, no LD_LIBRARY_PATH: what a fresh shell has.
set(clean ${CMAKE_COMMAND} -E env --unset=HALO_PLUGIN_PATH --unset=LD_LIBRARY_PATH --unset=CMAKE_PREFIX_PATH)

run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(f include/halo/device_abi.h lib/cmake/halo/haloConfig.cmake lib/cmake/halo/haloConfigVersion.cmake
          lib/cmake/halo/haloTargets.cmake bin/halo bin/halo-conformance lib/halo/plugins/libhalo_plugin_cpu.so)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
message("installed into ${prefix}")

run("configuring the template with find_package(halo)" ${clean} ${CMAKE_COMMAND} -S "${TEMPLATE_DIR}" -B "${tbuild}"
    -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}")
run("building the template" ${CMAKE_COMMAND} --build "${tbuild}")
set(plugin "${tbuild}/libhalo_plugin_template.so")
if(NOT EXISTS "${plugin}")
  message(FATAL_ERROR "the template build did not produce ${plugin}")
endif()
message("built the template against the installed SDK: ${plugin}")

run("installed halo devices" ${clean} "${prefix}/bin/halo" devices)
if(NOT last_output MATCHES "(^|\n)cpu  ${prefix}/lib/halo/plugins/libhalo_plugin_cpu.so")
  message(FATAL_ERROR "the installed halo does not list the installed cpu plugin:\n${last_output}")
endif()
message("the installed halo lists the installed cpu plugin with no environment variables")

# The suite as installed: the reference is found beside the binary (../lib/halo/plugins).
run("installed halo-conformance on the template" ${clean} "${prefix}/bin/halo-conformance" --plugin "${plugin}")
if(NOT last_output MATCHES "reference ${prefix}/lib/halo/plugins/libhalo_plugin_cpu.so")
  message(FATAL_ERROR "the installed suite did not use the installed reference plugin:\n${last_output}")
endif()
string(REGEX MATCH "\\[  PASSED  \\][^\n]*" passed "${last_output}")
message("installed halo-conformance on the template: ${passed}")
# A plugin by name resolves through the installed layout too.
run("installed halo-conformance --plugin cpu" ${clean} "${prefix}/bin/halo-conformance" --plugin cpu
    --filter "Conformance.Exports*")
message("OK")
