# The layers model plugin (a model declared in the config), the ResNet-20 example config, and the
# GPT declared as a list on text.
foreach(case cnn deterministic resnet_example gpt)
  mgtrain_e2e_test(layers_model.${case} 900 ${E2E}/layers_model.sh ${case})
endforeach()
