# `mgtrain doctor` (tests/e2e/doctor.sh): the CPU-fallback report of this machine under mpirun and
# as a singleton, and the verdicts on GPUs, nodes and versions it cannot have, simulated with the
# test-only MGTRAIN_TEST_DOCTOR; the roles of a parameter server's ranks from the run's config, and
# the run's data checked as the run checks it. Only the cases given a config read the data.
foreach(case cpu singleton shared_gpu versions busy links mixed device_gpu param_server config_data)
  add_test(NAME e2e.doctor.${case} COMMAND bash ${E2E}/doctor.sh ${case})
  set_tests_properties(e2e.doctor.${case} PROPERTIES TIMEOUT 120 LABELS e2e SKIP_RETURN_CODE 77
    ENVIRONMENT "${E2E_ENV};WORK=${PROJECT_BINARY_DIR}/test-work/doctor.${case}")
endforeach()
set_tests_properties(e2e.doctor.device_gpu e2e.doctor.param_server e2e.doctor.config_data PROPERTIES
  FIXTURES_REQUIRED fashion_mnist)
