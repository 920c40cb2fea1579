# Finds cuDNN (the Debian/NVIDIA packages and the pip wheels ship no CMake package). Looks in
# CUDNN_ROOT, the CUDA toolkit found by find_package(CUDAToolkit), then /usr/local/cuda.
# Defines CUDNN::cudnn, CUDNN_VERSION (from cudnn_version.h) and CUDNN_INCLUDE_DIR/CUDNN_LIBRARY.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR NAMES cudnn_version.h cudnn.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${_cudnn_hints} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn
  HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${_cudnn_hints} PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
unset(_cudnn_hints)

# cuDNN 8 and later keep the version in cudnn_version.h; older ones in cudnn.h.
if(CUDNN_INCLUDE_DIR)
  set(_cudnn_header ${CUDNN_INCLUDE_DIR}/cudnn_version.h)
  if(NOT EXISTS ${_cudnn_header})
    set(_cudnn_header ${CUDNN_INCLUDE_DIR}/cudnn.h)
  endif()
  file(STRINGS ${_cudnn_header} _cudnn_defines REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${_part} +([0-9]+)" _match "${_cudnn_defines}")
    set(_cudnn_${_part} ${CMAKE_MATCH_1})
  endforeach()
  if(NOT _cudnn_MAJOR STREQUAL "")
    set(CUDNN_VERSION ${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL})
  endif()
  unset(_cudnn_header)
  unset(_cudnn_defines)
  unset(_match)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION ${CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
