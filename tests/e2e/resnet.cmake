# The resnet model plugin: residual blocks and batch norm on every executor, buffers in checkpoints.
foreach(case train resume deterministic sync_bn)
  mgtrain_e2e_test(resnet.${case} 900 ${E2E}/resnet.sh ${case})
endforeach()
mgtrain_e2e_avx2_test(resnet.deterministic 900 ${E2E}/resnet.sh deterministic)
