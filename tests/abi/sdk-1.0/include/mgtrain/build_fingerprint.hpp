#pragma once
// The build fingerprint a plugin carries in its descriptor: "<compiler>/<standard library>". C++
// objects of the standard library (std::string, std::vector, std::function) cross the plugin
// boundary, so the loader refuses a plugin whose standard library differs: libstdc++ or libc++,
// its major version, and its ABI (_GLIBCXX_USE_CXX11_ABI, _LIBCPP_ABI_VERSION). The compiler is
// recorded only to be shown: clang and gcc on the same libstdc++ produce the same ABI.
// Plain macros, no other mgtrain header, so a build system can compile this alone to learn the
// standard library of a compiler (MgtrainPlugin.cmake does).
#include <cstddef>  // defines the standard library's version macros

#define MGT_STRINGIFY_IMPL(x) #x
#define MGT_STRINGIFY(x) MGT_STRINGIFY_IMPL(x)
#if defined(__clang__)
#define MGT_COMPILER_ID "clang-" MGT_STRINGIFY(__clang_major__)
#elif defined(__GNUC__)
#define MGT_COMPILER_ID "gcc-" MGT_STRINGIFY(__GNUC__)
#else
#define MGT_COMPILER_ID "unknown"
#endif
#if defined(_LIBCPP_VERSION)
#define MGT_STDLIB_ID "libc++-" MGT_STRINGIFY(_LIBCPP_VERSION) "-abi" MGT_STRINGIFY(_LIBCPP_ABI_VERSION)
#elif defined(_GLIBCXX_RELEASE)
#define MGT_STDLIB_ID "libstdc++-" MGT_STRINGIFY(_GLIBCXX_RELEASE) "-cxx11abi" MGT_STRINGIFY(_GLIBCXX_USE_CXX11_ABI)
#else
#define MGT_STDLIB_ID "stdlib-unknown"
#endif
#define MGT_BUILD_FINGERPRINT MGT_COMPILER_ID "/" MGT_STDLIB_ID
