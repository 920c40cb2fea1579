foreach(case overwrite_late rollback checksums compare finished downgraded hollow plugin_paths out_of_memory)
  mgtrain_e2e_test(checkpoint_trust.${case} 300 ${E2E}/checkpoint_trust.sh ${case})
endforeach()
