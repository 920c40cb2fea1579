# The Slurm test brings up its own daemons; it needs root (munged, slurmd) and the Debian packages
# scripts/install_deps.sh installs.
mgtrain_e2e_test(slurm 900 ${E2E}/slurm.sh)
set_tests_properties(e2e.slurm PROPERTIES SKIP_RETURN_CODE 77)
