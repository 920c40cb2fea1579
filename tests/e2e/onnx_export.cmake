# `mgtrain export` to ONNX, run by ONNX Runtime from PyPI (installed into a venv under test-work on
# first use; exit 77, a skip, when PyPI cannot be reached) against `mgtrain eval --logits`: image
# models on Fashion-MNIST, the gpt (and a declared one without positions) and a declared model with
# examples/plugin's rope layer on the fortunes package's text; check: a layer whose export form is
# wrong is refused by name, before anything is written.
foreach(case mlp cnn resnet layers plugin_operator plugin_nodes gpt gpt_untied layers_nopositions rope check errors)
  mgtrain_e2e_test(onnx_export.${case} 900 ${E2E}/onnx_export.sh ${case})
  set_tests_properties(e2e.onnx_export.${case} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
