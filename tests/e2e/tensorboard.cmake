# TensorBoard event files, read back with the tensorboard Python package (installed into a venv
# under test-work on first use; exit 77, a skip, when python3-venv or PyPI is not available).
mgtrain_e2e_test(tensorboard 600 ${E2E}/tensorboard.sh)
set_tests_properties(e2e.tensorboard PROPERTIES SKIP_RETURN_CODE 77)
