#!/usr/bin/env bash
# What a plugin author meets on the command line, at np=2 under mpirun. Usage: plugin_author.sh CASE
#   empty_override   --data.test= clears the INI's test file (the run trains, no test pass)
#   cli_error        a malformed option is reported once, by rank 0, and every rank exits 2
#   other_optimizer  --optimizer.name=adam over an INI written for sgd: sgd's keys are ignored,
#                    with one note on rank 0 naming them and sgd
#   other_model      the same for the model: mlp's model.inputs under --model.name=cnn
#   unknown_in_other a key of no plugin in the section of the newly chosen one stays an error
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
one_note() {  # one_note TEXT: exactly one note line, holding TEXT
  local n
  n=$(grep -c '^mgtrain: note:' err.log || true)
  [ "$n" = 1 ] || fail "expected one 'mgtrain: note:' line (rank 0's), found $n"
  grep '^mgtrain: note:' err.log | grep -qF -- "$1" || fail "the note does not say '$1'"
}

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
  other_optimizer)
    write_config run.ini   # [optimizer] name = sgd, lr, momentum = 0.9
    run train --config run.ini --optimizer.name=adam --optimizer.lr=0.001 --train.max_steps=3
    ok
    one_note "ignoring config keys of plugins not chosen: optimizer.momentum (optimizer sgd, not the chosen optimizer adam)"
    grep -q '^name = adam' out.log || fail "the resolved config does not name adam"
    ! grep -q '^momentum' out.log || fail "sgd's momentum is in the resolved config"
    ;;
  other_model)
    write_config run.ini "[model]" "inputs = 784"
    run train --config run.ini --model.name=cnn --train.max_steps=2
    ok
    one_note "model.inputs (model mlp, not the chosen model cnn)"
    ;;
  unknown_in_other)
    write_config run.ini
    run train --config run.ini --optimizer.name=adam --optimizer.momentun=0.9
    [ $rc -eq 2 ] || fail "expected exit 2 for an unknown key, got $rc"
    line=$(one_error_line err.log)
    grep -qF "unknown config key 'optimizer.momentun'" <<<"$line" || fail "the error does not name optimizer.momentun"
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
