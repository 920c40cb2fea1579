foreach(policy abort skip)
  mgtrain_e2e_test(nonfinite.${policy} 180 ${E2E}/nonfinite.sh ${policy})
endforeach()
