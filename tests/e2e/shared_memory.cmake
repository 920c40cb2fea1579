# The all-reduce through the node's shared memory, in a private /dev/shm (root and a mount
# namespace: exit 77, a skip, otherwise, a failure with MGTRAIN_REQUIRE_NAMESPACES=1): the bits of
# MPI's at np=2 and no name left; a full /dev/shm falls back to MPI; one too small for two sets of
# slots takes one.
foreach(case clean full one_set)
  mgtrain_e2e_test(shared_memory.${case} 300 ${E2E}/shared_memory.sh ${case})
  set_tests_properties(e2e.shared_memory.${case} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
