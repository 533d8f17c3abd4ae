# The installed runtime as a package, used from outside the tree (cmake -P, run by ctest):
#   STEP=install    `cmake --install BUILD` into WORK/staging, then moved to WORK/prefix (the
#                   package must be relocatable, as in an `aotpack build` output folder)
#   STEP=package    consumer/ configured with find_package(aotpack) against WORK/prefix, built
#                   (C + shared, C++ + shared, C++ + static) and run
#   STEP=pkgconfig  consumer/consumer.c compiled with `cc $(pkg-config --cflags --libs aotpack)`
#                   (and statically with `--static`) and run; prints "SKIPPED: pkg-config is not
#                   installed" without pkg-config
# Other variables: SRC (consumer/), VERSION, LIBDIR (lib dir under the prefix), CC, CXX,
# GENERATOR.
set(prefix ${WORK}/prefix)

function(run_checked what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${what}: exit code ${rc}\n${out}${err}")
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "${what} failed")
  endif()
  set(run_output "${out}${err}" PARENT_SCOPE)
endfunction()

# A consumer program prints "consumer-<lang>: aotpack <loaded> (header <compiled>...".
function(run_consumer exe)
  run_checked(${exe} ${exe})
  string(REPLACE "." "\\." v "${VERSION}")
  if(NOT run_output MATCHES "consumer-c(pp)?: aotpack ${v} \\(header ${v}")
    message(FATAL_ERROR "${exe} did not print the version ${VERSION}")
  endif()
endfunction()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE ${WORK})
  run_checked("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/staging)
  file(RENAME ${WORK}/staging ${prefix})
elseif(STEP STREQUAL "package")
  set(build ${WORK}/consumer_build)
  file(REMOVE_RECURSE ${build})
  run_checked("configure the consumer" ${CMAKE_COMMAND} -S ${SRC} -B ${build} -G ${GENERATOR}
              -DCMAKE_PREFIX_PATH=${prefix} -DAOTPACK_EXPECT_VERSION=${VERSION}
              -DCMAKE_C_COMPILER=${CC} -DCMAKE_CXX_COMPILER=${CXX}
              -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
  if(NOT run_output MATCHES "consumer: aotpack ${VERSION} from ${prefix}/${LIBDIR}/cmake/aotpack")
    message(FATAL_ERROR "the consumer did not find aotpack in ${prefix}")
  endif()
  run_checked("build the consumer" ${CMAKE_COMMAND} --build ${build})
  foreach(exe consumer_c consumer_cpp consumer_cpp_static)
    run_consumer(${build}/${exe})
  endforeach()
elseif(STEP STREQUAL "pkgconfig")
  find_program(PKG_CONFIG pkg-config)
  if(NOT PKG_CONFIG)
    message("SKIPPED: pkg-config is not installed")
    return()
  endif()
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
  run_checked("pkg-config --modversion" ${PKG_CONFIG} --modversion aotpack)
  if(NOT run_output STREQUAL "${VERSION}\n")
    message(FATAL_ERROR "aotpack.pc says version '${run_output}', expected ${VERSION}")
  endif()
  run_checked("pkg-config --variable=libdir" ${PKG_CONFIG} --variable=libdir aotpack)
  string(STRIP "${run_output}" libdir)
  run_checked("pkg-config --cflags --libs" ${PKG_CONFIG} --cflags --libs aotpack)
  separate_arguments(flags UNIX_COMMAND "${run_output}")
  set(exe ${WORK}/consumer_pkgconfig)
  run_checked("cc consumer.c $(pkg-config --cflags --libs aotpack)"
              ${CC} -std=c99 ${SRC}/consumer.c ${flags} -Wl,-rpath,${libdir} -o ${exe})
  run_consumer(${exe})
  # Static: Libs.private (`pkg-config --static`) must be all libaotpack.a needs from C.
  run_checked("pkg-config --static --libs" ${PKG_CONFIG} --static --libs aotpack)
  separate_arguments(flags UNIX_COMMAND "${run_output}")
  list(TRANSFORM flags REPLACE "^-laotpack$" "${libdir}/libaotpack.a")
  run_checked("cc consumer.c libaotpack.a $(pkg-config --static --libs aotpack)"
              ${CC} -std=c99 ${SRC}/consumer.c -I${prefix}/include ${flags} -o ${exe}_static)
  run_consumer(${exe}_static)
else()
  message(FATAL_ERROR "STEP must be install, package or pkgconfig, not '${STEP}'")
endif()
