# Data refused before step 1, and a data file cut short while it is read (tests/e2e/data_checks.sh).
foreach(case virtual_missing label_range mean_string std_missing csv_overflow lzf statistics_range dangling_link big_endian)
  mgtrain_e2e_test(data_checks.${case} 300 ${E2E}/data_checks.sh ${case})
endforeach()
mgtrain_e2e_test(data_checks.cut_short 600 ${E2E}/data_checks.sh cut_short)
