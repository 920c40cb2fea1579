# The bert model plugin on text: masked-language-model training and its figures, every sync
# strategy, deterministic bits, resume at another world size, ONNX export, the examples (the
# encoder declared as a list of layers too) and bad input.
foreach(case train sync deterministic resume export layers bad_input)
  mgtrain_e2e_test(bert.${case} 300 ${E2E}/bert.sh ${case})
endforeach()
