# The header's AOTPACK_VERSION_* macros must say what project(VERSION) says (one version,
# written in three places: CMakeLists.txt, aotpack.h, aotpack/__init__.py; see
# tests/test_version_sources.py). AOTPACK_ABI_VERSION becomes the shared library's SOVERSION.
set(aotpack_header ${PROJECT_SOURCE_DIR}/runtime_cpp/include/aotpack/aotpack.h)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${aotpack_header})
file(STRINGS ${aotpack_header} aotpack_version_lines
     REGEX "^#define AOTPACK_(VERSION_(MAJOR|MINOR|PATCH|STRING)|ABI_VERSION) ")
foreach(line ${aotpack_version_lines})
  string(REGEX REPLACE "^#define (AOTPACK_[A-Z_]+) \"?([0-9.]+)\"?$" "\\1;\\2" pair "${line}")
  list(GET pair 0 name)
  list(GET pair 1 value)
  set(header_${name} ${value})
endforeach()
set(header_version
    "${header_AOTPACK_VERSION_MAJOR}.${header_AOTPACK_VERSION_MINOR}.${header_AOTPACK_VERSION_PATCH}")
if(NOT header_version STREQUAL PROJECT_VERSION
   OR NOT header_AOTPACK_VERSION_STRING STREQUAL PROJECT_VERSION
   OR NOT header_AOTPACK_ABI_VERSION MATCHES "^[0-9]+$")
  message(FATAL_ERROR "aotpack: runtime_cpp/include/aotpack/aotpack.h says version "
          "${header_version} (\"${header_AOTPACK_VERSION_STRING}\", ABI "
          "'${header_AOTPACK_ABI_VERSION}') but CMakeLists.txt says ${PROJECT_VERSION}: "
          "update AOTPACK_VERSION_* there (and aotpack/__init__.py) together")
endif()
set(AOTPACK_ABI_VERSION ${header_AOTPACK_ABI_VERSION})
