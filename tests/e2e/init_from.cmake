# model.init_from: a new run from another run's parameters (fine-tuning): the report, the bits of
# loaded and new parameters, np=1/2/4, every sync strategy, resume, refusals, other models, a gpt.
foreach(case report bits world_sizes sync resume refused models gpt)
  mgtrain_e2e_test(init_from.${case} 300 ${E2E}/init_from.sh ${case})
endforeach()
