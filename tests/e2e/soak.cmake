mgtrain_e2e_test(soak.mlp.np4 1200 ${E2E}/soak.sh)
