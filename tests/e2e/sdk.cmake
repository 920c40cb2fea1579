# The installable SDK: install mgtrain into a prefix, build examples/plugin against it with
# find_package(mgtrain), and train with the installed launcher and the new plugin.
mgtrain_e2e_test(sdk.install_and_plugin 600 ${CMAKE_CURRENT_LIST_DIR}/sdk.sh)
