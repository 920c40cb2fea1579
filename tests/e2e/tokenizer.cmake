# SentencePiece tokenizers: training one, converting text with it, the gpt trained, evaluated,
# generating and exported through it, and one line for each bad input.
foreach(case train shards bad_input)
  mgtrain_e2e_test(tokenizer.${case} 300 ${E2E}/tokenizer.sh ${case})
endforeach()
