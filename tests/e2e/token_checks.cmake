# Token files refused or named for what they are, and checkpoints named by `latest`
# (tests/e2e/token_checks.sh).
foreach(case unstored eval_streams misleading control_bytes latest)
  mgtrain_e2e_test(token_checks.${case} 300 ${E2E}/token_checks.sh ${case})
endforeach()
mgtrain_e2e_test(token_checks.cut_short 600 ${E2E}/token_checks.sh cut_short)
