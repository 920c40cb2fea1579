# Rank 0's live bar on a terminal (tests/e2e/progress.sh): what it counts under train.max_steps,
# and warnings and errors printed while it is drawn. Without script(1) the cases skip.
foreach(case max_steps warnings final_error)
  mgtrain_e2e_test(progress.${case} 300 ${E2E}/progress.sh ${case})
  set_tests_properties(e2e.progress.${case} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
