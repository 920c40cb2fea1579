mgtrain_e2e_test(json_output 180 ${E2E}/json_output.sh)
