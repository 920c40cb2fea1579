# Augmentation in the reader: bit-identical across world sizes and a resume; bad settings refused.
foreach(case world_sizes resume)
  mgtrain_e2e_test(augment.${case} 900 ${E2E}/augment.sh ${case})
endforeach()
foreach(case bad_entry flat_samples)
  mgtrain_e2e_test(augment.${case} 180 ${E2E}/augment.sh ${case})
endforeach()
