# The gpt model plugin on text: conversion, training at np=1, 2, 4 with every sync strategy,
# deterministic mode, weight decay on matrices, resume and bad input.
foreach(case convert train sync deterministic weight_decay resume bad_input)
  mgtrain_e2e_test(gpt.${case} 900 ${E2E}/gpt.sh ${case})
endforeach()
mgtrain_e2e_avx2_test(gpt.deterministic 900 ${E2E}/gpt.sh deterministic)
