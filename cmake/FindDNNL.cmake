# Finds oneDNN (Debian's libdnnl-dev ships no CMake package). Defines DNNL::dnnl and DNNL_VERSION.
# A oneDNN the build cannot use is refused here, in one line naming what was found and what is
# needed: one older than the version asked for (find_package(DNNL 2.6)), headers without a
# version file, or a build whose CPU threading is not OpenMP (mgtrain sets each rank's threads
# through OpenMP; the SYCL and TBB builds ignore that).
find_path(DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY NAMES dnnl)
set(_dnnl_reason "")
if(DNNL_INCLUDE_DIR)
  set(_dnnl_version_h "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  set(_dnnl_config_h "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_config.h")
  if(EXISTS "${_dnnl_version_h}" AND EXISTS "${_dnnl_config_h}")
    foreach(_part MAJOR MINOR PATCH)
      file(STRINGS "${_dnnl_version_h}" _line REGEX "#define DNNL_VERSION_${_part} +[0-9]+")
      string(REGEX REPLACE ".*DNNL_VERSION_${_part} +([0-9]+).*" "\\1" _dnnl_${_part} "${_line}")
    endforeach()
    set(DNNL_VERSION "${_dnnl_MAJOR}.${_dnnl_MINOR}.${_dnnl_PATCH}")
    file(STRINGS "${_dnnl_config_h}" _line REGEX "#define DNNL_CPU_RUNTIME ")
    if(NOT _line MATCHES "DNNL_RUNTIME_OMP")
      string(STRIP "${_line}" _line)
      set(_dnnl_reason "oneDNN ${DNNL_VERSION} at ${DNNL_INCLUDE_DIR} has '${_line}', expected DNNL_RUNTIME_OMP (the OpenMP CPU build, as Debian's libdnnl-dev)")
    endif()
  else()
    set(_dnnl_reason "oneDNN headers at ${DNNL_INCLUDE_DIR} lack oneapi/dnnl/dnnl_version.h or dnnl_config.h, expected oneDNN 2.6 or newer (Debian: libdnnl-dev)")
  endif()
endif()
if(_dnnl_reason)
  message(FATAL_ERROR "${_dnnl_reason}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR VERSION_VAR DNNL_VERSION)
if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION ${DNNL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${DNNL_INCLUDE_DIR})
endif()
