# `mgtrain report`: a short 2-rank run drawn as an SVG (tests/e2e/report.sh).
mgtrain_e2e_test(report.np2 300 ${E2E}/report.sh)
