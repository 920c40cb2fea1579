# A data set in several files: the same bits as one file (tokens at np=1, 2, 4; samples at np=1,
# 2), resume at another world size, and the refusals (tests/e2e/shards.sh).
foreach(case tokens samples resume refused_tokens refused_samples)
  mgtrain_e2e_test(shards.${case} 300 ${E2E}/shards.sh ${case})
endforeach()
