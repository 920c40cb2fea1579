foreach(case overwrite_late rollback checksums compare)
  mgtrain_e2e_test(checkpoint_trust.${case} 300 ${E2E}/checkpoint_trust.sh ${case})
endforeach()
