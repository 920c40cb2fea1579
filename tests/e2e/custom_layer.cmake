# A plugin's own layer (examples/plugin's swish_mlp, built against the installed SDK) on the CPU
# path, the compiled step and in deterministic mode.
mgtrain_e2e_test(custom_layer.every_executor 600 ${CMAKE_CURRENT_LIST_DIR}/custom_layer.sh)
mgtrain_e2e_avx2_test(custom_layer.every_executor 600 ${CMAKE_CURRENT_LIST_DIR}/custom_layer.sh)
