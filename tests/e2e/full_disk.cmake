# The metrics and TensorBoard files on a full disk (a small tmpfs: root only, exit 77 otherwise).
foreach(case metrics param_server tensorboard_start)
  mgtrain_e2e_test(full_disk.${case} 300 ${E2E}/full_disk.sh ${case})
  set_tests_properties(e2e.full_disk.${case} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
