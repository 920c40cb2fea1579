foreach(case flipped unreadable truncated nonfinite)
  mgtrain_e2e_test(corrupt_data.${case} 300 ${E2E}/corrupt_data.sh ${case})
endforeach()
