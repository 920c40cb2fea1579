# The GPU path's program (the step in device memory) on the CPU backend, and train.device without
# a GPU.
foreach(case parity_mlp parity_cnn_accum_adam parity_cnn_global_pool resume out_of_memory bf16 param_server deterministic no_gpu)
  mgtrain_e2e_test(gpu_path.${case} 600 ${E2E}/gpu_path.sh ${case})
endforeach()
mgtrain_e2e_avx2_test(gpu_path.parity_cnn_global_pool 600 ${E2E}/gpu_path.sh parity_cnn_global_pool)
foreach(policy abort skip)
  mgtrain_e2e_test(gpu_path.nonfinite.${policy} 180 ${E2E}/nonfinite.sh ${policy} device)
endforeach()
