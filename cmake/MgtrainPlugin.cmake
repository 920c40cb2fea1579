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
function(mgtrain_add_plugin kind name)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION;TARGET" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT kind MATCHES "^(model|optimizer|sync)$")
    message(FATAL_ERROR "mgtrain_add_plugin: kind must be model, optimizer or sync, not '${kind}'")
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

  if(ARG_OUTPUT_DIRECTORY)
    set(output_dir ${ARG_OUTPUT_DIRECTORY})
  elseif(in_tree AND DEFINED MGTRAIN_PLUGIN_BUILD_DIR)
    set(output_dir ${MGTRAIN_PLUGIN_BUILD_DIR})
  else()
    set(output_dir ${CMAKE_BINARY_DIR}/plugins)
  endif()
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${output_dir})

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
  # <prefix>/lib/mgtrain/plugins -> <prefix>/lib holds libmgtrain; out of tree, also the directory
  # of the mgtrain the plugin was built against, for a plugin installed into another prefix.
  set(rpath "$ORIGIN/../..")
  if(NOT in_tree AND DEFINED MGTRAIN_LIBRARY_DIR)
    list(APPEND rpath ${MGTRAIN_LIBRARY_DIR})
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
endfunction()
