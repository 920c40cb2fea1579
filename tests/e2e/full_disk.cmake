# The metrics and TensorBoard files on a full disk (a small tmpfs: root only, exit 77 otherwise).
mgtrain_e2e_test(full_disk.metrics 300 ${E2E}/full_disk.sh)
set_tests_properties(e2e.full_disk.metrics PROPERTIES SKIP_RETURN_CODE 77)
