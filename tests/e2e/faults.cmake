# Every phase a rank can fail in, on the first and on the last of 4 ranks, with each way of
# failing (SIGKILL, exit, an exception, a hang) spread over them. The checkpoint phases are
# killed on rank 0, which writes: `latest` must never point at a broken file.
set(MGTRAIN_FAULT_CASES
  0:forward:hang 3:forward:kill
  0:backward:throw 3:backward:exit
  0:allreduce:exit 3:allreduce:hang
  0:optimizer:kill 3:optimizer:throw
  0:checkpoint-before-data:kill 3:checkpoint-before-data:hang
  0:checkpoint-after-data:kill 3:checkpoint-after-data:exit
  0:checkpoint-before-rename:kill 3:checkpoint-before-rename:throw)
foreach(case ${MGTRAIN_FAULT_CASES})
  string(REPLACE ":" ";" parts ${case})
  list(GET parts 0 rank)
  list(GET parts 1 phase)
  list(GET parts 2 action)
  mgtrain_e2e_test(faults.${phase}.rank${rank}.${action} 300 ${E2E}/faults.sh ${rank} ${phase} ${action})
endforeach()

# Stop signals at random moments and in bursts (tests/e2e/stop_signals.sh): never a crash, a final
# checkpoint whenever training had started. scripts/stress_signals.sh runs the long form.
mgtrain_e2e_test(stop_signals.burst 600 ${E2E}/stop_signals.sh burst 3)
mgtrain_e2e_test(stop_signals.mpirun 600 ${E2E}/stop_signals.sh mpirun 3)
mgtrain_e2e_test(stop_signals.random 600 ${E2E}/stop_signals.sh random 4)
mgtrain_e2e_test(stop_signals.one_rank 600 ${E2E}/stop_signals.sh one_rank 2)
