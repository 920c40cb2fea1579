# A model that is no stack of layers and an optimizer with no element update (tests/plugins), on
# every CPU rank's step.
mgtrain_e2e_test(custom_model.hand_written 600 ${CMAKE_CURRENT_LIST_DIR}/custom_model.sh)
