# How a run stops (tests/e2e/sigterm_mpirun.sh, tests/e2e/long_step.sh): SIGTERM to mpirun at a
# random step ends each run with a final checkpoint and one done: line (scripts/stress_sigterm.sh
# runs it at length), and a step that runs for minutes ends within seconds on a second signal or
# once train.stop_grace_s has passed, writing nothing new.
foreach(model mlp gpt slow_steps)
  mgtrain_e2e_test(sigterm_mpirun.${model} 600 ${E2E}/sigterm_mpirun.sh ${model} 3)
endforeach()
foreach(case second grace gpt)
  mgtrain_e2e_test(long_step.${case} 300 ${E2E}/long_step.sh ${case})
endforeach()
