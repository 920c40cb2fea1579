# The configure-time check on the oneDNN found (tests/e2e/onednn_check.sh): CMake alone, no data.
add_test(NAME e2e.onednn_check COMMAND bash ${E2E}/onednn_check.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e.onednn_check PROPERTIES TIMEOUT 120 LABELS e2e
  ENVIRONMENT "${E2E_ENV};WORK=${PROJECT_BINARY_DIR}/test-work/onednn_check")
