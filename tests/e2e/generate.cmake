# `mgtrain generate` on a gpt trained on fortunes text: reproducible sampling, the KV cache against
# the model's forward, and one line for each bad input.
foreach(case sample cache bad_input)
  mgtrain_e2e_test(generate.${case} 600 ${E2E}/generate.sh ${case})
endforeach()
