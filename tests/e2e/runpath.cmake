# No library from the current directory: every built and installed ELF file's RUNPATH is absolute
# or $ORIGIN, and libraries planted where the launcher runs are not loaded.
mgtrain_e2e_test(runpath.no_current_directory 300 ${CMAKE_CURRENT_LIST_DIR}/runpath.sh)
