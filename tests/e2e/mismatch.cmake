foreach(case config plugin_version model_shapes)
  mgtrain_e2e_test(mismatch.${case} 180 ${E2E}/mismatch.sh ${case})
endforeach()
