# The sharded optimizer (sync.name = zero) against allreduce, in deterministic mode, across
# checkpoints, strategies and world sizes, and its optimizer state per rank.
foreach(case parity_mlp parity_cnn deterministic resume memory device_memory nonfinite bad_config)
  mgtrain_e2e_test(zero.${case} 1200 ${E2E}/zero.sh ${case})
endforeach()
mgtrain_e2e_avx2_test(zero.deterministic 1200 ${E2E}/zero.sh deterministic)
