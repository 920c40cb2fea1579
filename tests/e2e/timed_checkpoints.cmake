# checkpoint.every_seconds (tests/e2e/timed_checkpoints.sh).
foreach(case np2 param_server)
  mgtrain_e2e_test(timed_checkpoints.${case} 300 ${E2E}/timed_checkpoints.sh ${case})
endforeach()
