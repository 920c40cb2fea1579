# A sync strategy with state of its own (examples/plugin's bf16_ef, built against the installed
# SDK): its residuals in the checkpoints, verify's resume check, a resume on another world size.
mgtrain_e2e_test(sync_plugin.bf16_ef 600 ${CMAKE_CURRENT_LIST_DIR}/sync_plugin.sh)
