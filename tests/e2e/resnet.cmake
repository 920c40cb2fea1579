# The resnet model plugin: residual blocks and batch norm on every executor, buffers in checkpoints.
foreach(case train resume deterministic)
  mgtrain_e2e_test(resnet.${case} 900 ${E2E}/resnet.sh ${case})
endforeach()
