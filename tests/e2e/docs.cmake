mgtrain_e2e_test(docs.config_keys 60 ${E2E}/docs.sh)
