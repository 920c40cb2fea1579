# The bucketed all-reduce's bfloat16 wire (error feedback, checkpointed residuals) and its
# hierarchical form on one node; refused values.
foreach(case bf16 hierarchical refused)
  mgtrain_e2e_test(sync_wire.${case} 600 ${E2E}/sync_wire.sh ${case})
endforeach()
