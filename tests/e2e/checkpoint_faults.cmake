foreach(case enospc corrupt truncated fallback_hint two_jobs fresh_over_old bad_dir batch_change)
  mgtrain_e2e_test(checkpoint_faults.${case} 300 ${E2E}/checkpoint_faults.sh ${case})
endforeach()
# Mounting the small tmpfs needs root; elsewhere the case skips.
set_tests_properties(e2e.checkpoint_faults.enospc PROPERTIES SKIP_RETURN_CODE 77)
