# MGTRAIN_SANITIZE: a comma-separated list of sanitizers for every target (address,undefined).
# MGTRAIN_FUZZ: build the libFuzzer targets under tests/fuzz (needs clang).
set(MGTRAIN_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined")
option(MGTRAIN_FUZZ "Build the libFuzzer targets (clang)" OFF)

if(MGTRAIN_SANITIZE)
  string(REPLACE " " "" _mgtrain_sanitize "${MGTRAIN_SANITIZE}")
  # Included before any add_subdirectory, so these reach every target: libraries, executables,
  # tests and the plugins (MODULE libraries). A sanitized plugin needs the runtime, so it can only
  # be dlopen'ed into a sanitized executable; keep such builds in their own build directory.
  set(_mgtrain_sanitize_flags -fsanitize=${_mgtrain_sanitize} -fno-omit-frame-pointer)
  if(_mgtrain_sanitize MATCHES "(^|,)undefined(,|$)")
    # A UB report should fail the test, not scroll past in the log.
    list(APPEND _mgtrain_sanitize_flags -fno-sanitize-recover=undefined)
  endif()
  # C and C++ only: nvcc does not take these flags (device code is not instrumented).
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_mgtrain_sanitize_flags}>")
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:${_mgtrain_sanitize_flags}>")
  message(STATUS "mgtrain: sanitizers ${_mgtrain_sanitize}")
endif()
