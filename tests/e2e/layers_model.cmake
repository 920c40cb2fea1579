# The layers model plugin (a model declared in the config), the ResNet-20 example config, and the
# GPT declared as a list on text, with and without a position table.
foreach(case cnn deterministic resnet_example gpt gpt_nopositions)
  mgtrain_e2e_test(layers_model.${case} 900 ${E2E}/layers_model.sh ${case})
endforeach()
