# A layer plugin (examples/plugin's swish, built against the installed SDK) by name in model.layers.
mgtrain_e2e_test(layer_plugin.by_name 600 ${CMAKE_CURRENT_LIST_DIR}/layer_plugin.sh)
