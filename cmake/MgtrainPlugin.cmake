# mgtrain_add_plugin(<kind> <name> SOURCES ... [LIBRARIES ...] [OUTPUT_DIRECTORY dir]
#                    [INSTALL_DESTINATION dir | NO_INSTALL] [TARGET target])
# Builds libmgtrain-<kind>-<name>.so against the SDK. Used for the built-in plugins and, through
# find_package(mgtrain), by plugin authors out of tree.
# TARGET names the CMake target (default mgtrain-<kind>-<name>), for two builds of one plugin.
#
# In the mgtrain tree: links mgtrain_sdk, builds into MGTRAIN_PLUGIN_BUILD_DIR (the loader's
# build-tree fallback) and, for the built-in plugins under plugins/ (not the test suite's),
# installs into <prefix>/lib/mgtrain/plugins next to libmgtrain.
# Out of tree (find_package(mgtrain)): links mgtrain::sdk, builds into
# <build>/plugins (one directory to pass as --plugin-path) and installs into
# <prefix>/${CMAKE_INSTALL_LIBDIR}/mgtrain/plugins, which the loader searches when that prefix is
# mgtrain's own.
# Without a build type (a plain `cmake -S . -B build`) the plugin gets the Release flags: an
# unoptimised plugin slows every step of every run that loads it.
# Out of tree, the first call checks that this project's compiler uses the C++ standard library
# (and ABI) mgtrain was built against, which is what the loader compares; the compiler may differ.

# mgtrain_cxx_stdlib_id(<var> <include dir>): the C++ standard library of this project's compiler
# as the plugin loader compares it (MGT_STDLIB_ID of mgtrain/build_fingerprint.hpp under the include
# dir, e.g. libstdc++-12-cxx11abi1), with CMAKE_CXX_FLAGS; empty when the probe does not compile.
function(mgtrain_cxx_stdlib_id var include_dir)
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/mgtrain_stdlib_probe)
  file(WRITE ${dir}/probe.cpp
    "#include <mgtrain/build_fingerprint.hpp>\n"
    "const char mgtrain_probe[] = \"MGTRAIN_STDLIB_ID=[\" MGT_STDLIB_ID \"]\";\n"
    "int main(int argc, char**) { return mgtrain_probe[argc]; }\n")
  try_compile(probe_ok ${dir}/build SOURCES ${dir}/probe.cpp
    CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${include_dir}" CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
    COPY_FILE ${dir}/probe.bin)
  set(id "")
  if(probe_ok)
    file(STRINGS ${dir}/probe.bin line REGEX "MGTRAIN_STDLIB_ID=\\[[A-Za-z0-9+_.-]*\\]" LIMIT_COUNT 1)
    string(REGEX REPLACE ".*MGTRAIN_STDLIB_ID=\\[([A-Za-z0-9+_.-]*)\\].*" "\\1" id "${line}")
  endif()
  set(${var} "${id}" PARENT_SCOPE)
endfunction()

# Warns once per project when this compiler's standard library differs from mgtrain's.
function(_mgtrain_check_stdlib)
  get_property(checked GLOBAL PROPERTY _MGTRAIN_STDLIB_CHECKED)
  if(checked OR NOT MGTRAIN_CXX_STDLIB_ID OR NOT MGTRAIN_INCLUDE_DIR)
    return()
  endif()
  set_property(GLOBAL PROPERTY _MGTRAIN_STDLIB_CHECKED TRUE)
  mgtrain_cxx_stdlib_id(ours "${MGTRAIN_INCLUDE_DIR}")
  string(CONCAT theirs "mgtrain was built by ${MGTRAIN_CXX_COMPILER_ID} ${MGTRAIN_CXX_COMPILER_VERSION} "
                       "against the C++ standard library ${MGTRAIN_CXX_STDLIB_ID}")
  string(CONCAT here "this project's ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  if(NOT ours)
    message(WARNING "${theirs}; the standard library of ${here} could not be determined (the probe with "
                    "mgtrain/build_fingerprint.hpp did not compile): mgtrain refuses a plugin on another one")
  elseif(NOT ours STREQUAL MGTRAIN_CXX_STDLIB_ID)
    message(WARNING "${theirs}, ${here} uses ${ours}: mgtrain will refuse these plugins. Use a compiler on "
                    "the same standard library, major version and ABI (-D_GLIBCXX_USE_CXX11_ABI, "
                    "-stdlib=libc++ change it); the compiler itself may differ")
  elseif(NOT CMAKE_CXX_COMPILER_ID STREQUAL MGTRAIN_CXX_COMPILER_ID)
    message(STATUS "mgtrain: ${here} uses ${ours}, the standard library mgtrain was built against "
                   "(by ${MGTRAIN_CXX_COMPILER_ID}): compatible")
  endif()
endfunction()

function(mgtrain_add_plugin kind name)
  cmake_parse_arguments(ARG "NO_INSTALL;NO_DESCRIPTOR_CHECK" "OUTPUT_DIRECTORY;INSTALL_DESTINATION;TARGET"
                        "SOURCES;LIBRARIES" ${ARGN})
  if(NOT kind MATCHES "^(model|optimizer|sync|layer|schedule)$")
    message(FATAL_ERROR "mgtrain_add_plugin: kind must be model, optimizer, sync, layer or schedule, not '${kind}'")
  endif()
  if(NOT name MATCHES "^[A-Za-z0-9_]+$")
    message(FATAL_ERROR "mgtrain_add_plugin: name must be letters, digits and '_', not '${name}'")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "mgtrain_add_plugin(${kind} ${name}): no SOURCES given")
  endif()

  # In tree: the real (non-imported) library target; installed: the imported mgtrain::sdk.
  set(in_tree FALSE)
  if(TARGET mgtrain_sdk)
    get_target_property(sdk_imported mgtrain_sdk IMPORTED)
    if(NOT sdk_imported)
      set(in_tree TRUE)
    endif()
  endif()
  if(in_tree)
    set(sdk mgtrain_sdk)
  elseif(TARGET mgtrain::sdk)
    set(sdk mgtrain::sdk)
  else()
    message(FATAL_ERROR "mgtrain_add_plugin: no mgtrain SDK target; call find_package(mgtrain) first")
  endif()

  set(target mgtrain-${kind}-${name})
  if(ARG_TARGET)
    set(target ${ARG_TARGET})
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME mgtrain-${kind}-${name})
  target_link_libraries(${target} PRIVATE ${sdk} ${ARG_LIBRARIES})
  # Only the descriptor is exported (MGT_*_PLUGIN marks it visible).
  set_target_properties(${target} PROPERTIES PREFIX "lib" SUFFIX ".so" CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_features(${target} PRIVATE cxx_std_20)
  get_property(multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(NOT multi_config AND NOT CMAKE_BUILD_TYPE)
    separate_arguments(release_flags UNIX_COMMAND "${CMAKE_CXX_FLAGS_RELEASE}")
    target_compile_options(${target} PRIVATE "$<$<STREQUAL:$<CONFIG>,>:${release_flags}>")
    message(STATUS "mgtrain_add_plugin(${kind} ${name}): CMAKE_BUILD_TYPE is empty; building it with the "
                   "Release flags (${CMAKE_CXX_FLAGS_RELEASE}) (set CMAKE_BUILD_TYPE to choose)")
  endif()
  if(NOT in_tree)
    _mgtrain_check_stdlib()
  endif()

  if(ARG_OUTPUT_DIRECTORY)
    set(output_dir ${ARG_OUTPUT_DIRECTORY})
  elseif(in_tree AND DEFINED MGTRAIN_PLUGIN_BUILD_DIR)
    set(output_dir ${MGTRAIN_PLUGIN_BUILD_DIR})
  else()
    set(output_dir ${CMAKE_BINARY_DIR}/plugins)
  endif()
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${output_dir})
  # RUNPATH: the one it is installed with, also in the build tree (the build tree's own, padded with
  # ':' for the install-time edit, would end in an empty entry: the current directory). Installed,
  # <prefix>/lib/mgtrain/plugins -> <prefix>/lib holds libmgtrain; in tree, also the build's lib/
  # relative to the plugin; out of tree, the directory of the mgtrain it was built against (for a
  # plugin installed into another prefix). Never an absolute build directory in an installed plugin.
  set(rpath "$ORIGIN/../..")
  if(in_tree)
    file(RELATIVE_PATH to_library_dir "${output_dir}" "${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
    list(PREPEND rpath "$ORIGIN/${to_library_dir}")
  elseif(DEFINED MGTRAIN_LIBRARY_DIR)
    list(APPEND rpath ${MGTRAIN_LIBRARY_DIR})
  endif()
  list(REMOVE_DUPLICATES rpath)
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}" BUILD_WITH_INSTALL_RPATH ON
                                             INSTALL_RPATH_USE_LINK_PATH ON)
  # A source without an MGT_*_PLUGIN macro links into a library the loader would refuse at run
  # time; refuse it here instead (and remove it, so the next build checks again).
  if(NOT ARG_NO_DESCRIPTOR_CHECK AND CMAKE_NM)
    add_custom_command(TARGET ${target} POST_BUILD VERBATIM
      COMMAND sh -c "\"$1\" -D --defined-only \"$2\" | grep -q ' mgtrain_plugin_descriptor$' || { echo \"$2: \
exports no mgtrain_plugin_descriptor: declare the plugin with MGT_MODEL_PLUGIN, MGT_OPTIMIZER_PLUGIN, \
MGT_SYNC_PLUGIN or MGT_LAYER_PLUGIN in one of its sources (mgtrain/plugin.hpp)\" >&2; rm -f \"$2\"; exit 1; }"
              check "${CMAKE_NM}" "$<TARGET_FILE:${target}>")
  endif()

  if(ARG_NO_INSTALL)
    return()
  endif()
  # In tree, only the built-in plugins (plugins/) are installed, never the test suite's.
  if(in_tree AND NOT ARG_INSTALL_DESTINATION)
    string(FIND "${CMAKE_CURRENT_SOURCE_DIR}/" "${PROJECT_SOURCE_DIR}/plugins/" at)
    if(NOT at EQUAL 0)
      return()
    endif()
  endif()
  if(ARG_INSTALL_DESTINATION)
    set(destination ${ARG_INSTALL_DESTINATION})
  elseif(in_tree AND DEFINED MGTRAIN_PLUGIN_INSTALL_DIR)
    set(destination ${MGTRAIN_PLUGIN_INSTALL_DIR})
  else()
    include(GNUInstallDirs)
    set(destination ${CMAKE_INSTALL_LIBDIR}/mgtrain/plugins)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${destination})
endfunction()
