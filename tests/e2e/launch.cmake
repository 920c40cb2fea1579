# `mgtrain launch` on one machine (tests/e2e/launch.sh); its restarts on the nodes left are
# multinode.launch.
foreach(case finishes not_restarted stopped refused)
  mgtrain_e2e_test(launch.${case} 300 ${E2E}/launch.sh ${case})
endforeach()
