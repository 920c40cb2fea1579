# The example plugins built from each kept SDK version's headers (tests/abi) load and train with
# today's mgtrain: a change that breaks a plugin author's binary fails here.
mgtrain_e2e_test(sdk.kept_versions_train 900 ${CMAKE_CURRENT_LIST_DIR}/sdk_abi.sh)
