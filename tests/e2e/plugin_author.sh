#!/usr/bin/env bash
# What a plugin author meets on the command line, at np=2 under mpirun. Usage: plugin_author.sh CASE
#   empty_override   --data.test= clears the INI's test file (the run trains, no test pass)
#   cli_error        a malformed option is reported once, by rank 0, and every rank exits 2
source "$(dirname "$0")/lib.sh"
np=2

# run CASE_ARGS...: runs training, stdout in out.log, stderr in err.log, sets rc.
run() {
  set +e
  run_np $np 150 "$@" >out.log 2>err.log
  rc=$?
  set -e
  echo "exit $rc"; cat err.log
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "the job hung and was killed by the time limit"
}
ok() { [ $rc -eq 0 ] || { cat out.log; fail "exit $rc"; }; ! grep -q '^mgtrain: error:' err.log || fail "an error was reported"; }

case $1 in
  empty_override)
    write_config run.ini
    run train --config run.ini --data.test= --train.max_steps=3
    ok
    grep -qE '^test = ?$' out.log || { cat out.log; fail "the resolved config does not show data.test empty"; }
    ! grep -q '^test accuracy' out.log || fail "a test pass ran although --data.test= cleared the file"
    ;;
  cli_error)
    write_config run.ini
    run train --config run.ini --resume
    [ $rc -eq 2 ] || fail "expected exit 2 for a command-line error, got $rc"
    line=$(one_error_line err.log)
    grep -qF '[rank 0] train:' <<<"$line" || fail "the error is not rank 0's: $line"
    grep -qF -- "--resume" <<<"$line" || fail "the error does not name --resume: $line"
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
