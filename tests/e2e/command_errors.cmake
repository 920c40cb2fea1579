# Every subcommand under mpirun -np 2 with a bad key, and `mgtrain bench` with a data file that
# only rank 0's reference run opens (tests/e2e/command_errors.sh): no rank may be left waiting.
# And train.threads far above the cores, lowered to them; an open-file limit too low for MPI.
foreach(case train bench verify doctor eval report compare bench_data bench_param_server threads open_files)
  mgtrain_e2e_test(command_errors.${case} 120 ${E2E}/command_errors.sh ${case})
endforeach()
