# Module boundaries: which module includes which, and what libmgtrain exports and loads.
mgtrain_e2e_test(architecture.boundaries 120 ${CMAKE_CURRENT_LIST_DIR}/architecture.sh)
