# Installs the runtime as a prefix: bin/aotpack-run, lib/libaotpack.{so,a}, include/aotpack/,
# lib/cmake/aotpack/ (find_package(aotpack CONFIG)) and lib/pkgconfig/aotpack.pc. Every path is
# relative to the prefix, so the installed files (and the copy of them in an `aotpack build`
# output folder, aotpack/runtime_files.py) can be moved.
if(SKBUILD)
  # pip install (scikit-build-core): the prefix is the Python package's aotpack/_runtime
  # (pyproject.toml: wheel.install-dir), where aotpack/runtime_files.py looks. No lib64 here.
  file(RELATIVE_PATH aotpack_root "${CMAKE_INSTALL_PREFIX}" "${SKBUILD_PLATLIB_DIR}/aotpack/_runtime")
  if(NOT aotpack_root STREQUAL "")
    message(FATAL_ERROR "aotpack: scikit-build-core must install into aotpack/_runtime "
            "(pyproject.toml: wheel.install-dir = \"aotpack/_runtime\"); the install prefix is "
            "${CMAKE_INSTALL_PREFIX}")
  endif()
  set(AOTPACK_LIB_DIR lib)
  set(AOTPACK_BIN_DIR bin)
  set(AOTPACK_INC_DIR include)
else()
  include(GNUInstallDirs)
  set(AOTPACK_LIB_DIR ${CMAKE_INSTALL_LIBDIR})
  set(AOTPACK_BIN_DIR ${CMAKE_INSTALL_BINDIR})
  set(AOTPACK_INC_DIR ${CMAKE_INSTALL_INCLUDEDIR})
endif()
foreach(dir AOTPACK_LIB_DIR AOTPACK_BIN_DIR AOTPACK_INC_DIR)
  if(IS_ABSOLUTE "${${dir}}")
    message(FATAL_ERROR "aotpack: ${dir} = ${${dir}} must be relative to the install prefix "
            "(the CMake package and aotpack.pc are relocatable)")
  endif()
endforeach()

install(TARGETS aotpack aotpack_static EXPORT aotpackTargets
        LIBRARY DESTINATION ${AOTPACK_LIB_DIR}
        ARCHIVE DESTINATION ${AOTPACK_LIB_DIR}
        RUNTIME DESTINATION ${AOTPACK_BIN_DIR}
        INCLUDES DESTINATION ${AOTPACK_INC_DIR})
install(TARGETS aotpack-run RUNTIME DESTINATION ${AOTPACK_BIN_DIR})
install(DIRECTORY runtime_cpp/include/aotpack DESTINATION ${AOTPACK_INC_DIR})

# CMake package: aotpack::aotpack, aotpack::aotpack_static; aotpack_VERSION; SameMajorVersion.
include(CMakePackageConfigHelpers)
set(AOTPACK_CMAKE_DIR ${AOTPACK_LIB_DIR}/cmake/aotpack)
install(EXPORT aotpackTargets NAMESPACE aotpack:: DESTINATION ${AOTPACK_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/aotpackConfig.cmake.in
  ${PROJECT_BINARY_DIR}/aotpackConfig.cmake INSTALL_DESTINATION ${AOTPACK_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/aotpackConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/aotpackConfig.cmake
              ${PROJECT_BINARY_DIR}/aotpackConfigVersion.cmake
        DESTINATION ${AOTPACK_CMAKE_DIR})

# pkg-config: prefix=${pcfiledir}/<back up from lib/pkgconfig>, so it too can be moved.
file(RELATIVE_PATH AOTPACK_PC_PREFIX /prefix/${AOTPACK_LIB_DIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" AOTPACK_PC_PREFIX "${AOTPACK_PC_PREFIX}")  # "../..", no trailing /
set(AOTPACK_PC_PRIVATE_LIBS "-lstdc++ -lm")  # for `pkg-config --static` (libaotpack.a)
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND AOTPACK_PC_PRIVATE_LIBS " -l${lib}")
endforeach()
string(APPEND AOTPACK_PC_PRIVATE_LIBS " -pthread")
configure_file(${CMAKE_CURRENT_LIST_DIR}/aotpack.pc.in ${PROJECT_BINARY_DIR}/aotpack.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/aotpack.pc DESTINATION ${AOTPACK_LIB_DIR}/pkgconfig)

# The runtime's own sources, under share/aotpack/source: a wheel carries them so that
# `aotpack build --host-platform` (aotpack/portable.py, its _SOURCES) can build the runtime
# with zig for glibc 2.28 from a plain `pip install`, without a checkout. Their own component,
# so that tests/test_runtime_choice.py installs them alone, without building anything.
if(SKBUILD)
  set(aotpack_install_sources_default ON)
else()
  set(aotpack_install_sources_default OFF)
endif()
option(AOTPACK_INSTALL_SOURCES "Install the runtime's sources (share/aotpack/source)"
       ${aotpack_install_sources_default})
if(AOTPACK_INSTALL_SOURCES)
  set(aotpack_source_dest share/aotpack/source)
  install(FILES ${PROJECT_SOURCE_DIR}/CMakeLists.txt DESTINATION ${aotpack_source_dest}
          COMPONENT aotpack_sources)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime_cpp/src ${PROJECT_SOURCE_DIR}/runtime_cpp/include
                    ${PROJECT_SOURCE_DIR}/runtime_cpp/tools ${PROJECT_SOURCE_DIR}/runtime_cpp/cmake
          DESTINATION ${aotpack_source_dest}/runtime_cpp COMPONENT aotpack_sources)
endif()
