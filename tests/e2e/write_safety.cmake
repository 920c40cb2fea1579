# Nothing written through a planted link, no output over an input, no temporary left by an
# interrupted or failed write (tests/e2e/write_safety.sh).
foreach(case links out_is_input interrupted full_disk)
  mgtrain_e2e_test(write_safety.${case} 600 ${E2E}/write_safety.sh ${case})
endforeach()
