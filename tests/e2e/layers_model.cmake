# The layers model plugin (a model declared in the config), and the ResNet-20 example config.
foreach(case cnn deterministic resnet_example)
  mgtrain_e2e_test(layers_model.${case} 900 ${E2E}/layers_model.sh ${case})
endforeach()
