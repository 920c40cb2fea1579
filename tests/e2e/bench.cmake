mgtrain_e2e_test(bench.np2 300 ${E2E}/bench.sh)
