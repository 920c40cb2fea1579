#!/usr/bin/env bash
# Where mgtrain writes, nobody else's file is written and nothing is left half-done:
# - links: a symbolic link planted at a name mgtrain writes (the checkpoint directory's lock and
#   metrics file, report.svg, an --out), or a hard link at the lock file, is refused naming it,
#   and what it leads to is not touched;
#   links planted at the temporaries' old names (".NAME.tmp-<pid>", which another user could
#   predict: the pid is known here because mgtrain is exec'd by a shell whose pid is $$) are
#   never followed (the temporaries' names now end in a random part) and the checkpoint
#   directory's clean-up removes them;
# - out_is_input: an output that is an input (the same path, another path, a hard link), a device
#   or a FIFO is refused without writing or waiting;
# - interrupted: SIGINT and SIGTERM mid-way through `data convert` and `eval --logits`, and
#   `ulimit -f` under data convert, export, eval --logits and a training rank's checkpoint, leave
#   no temporary and say so in one line (the signals: exit 128 + the signal);
# - full_disk: `data convert` onto a full tmpfs says "No space left on device" in one line naming
#   the output, not HDF5's dump of pointers (mounting needs root: a skip without it).
# Usage: write_safety.sh links|out_is_input|interrupted|full_disk
source "$(dirname "$0")/lib.sh"
# WRITE_SAFETY_KEEP_GOING=1 reports every failed check rather than stopping at the first: for
# seeing each one fail on an older build.
if [ "${WRITE_SAFETY_KEEP_GOING:-0}" = 1 ]; then
  set +e
  failures=0
  fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
  }
fi
write_config run.ini "[train]" "max_steps = 3" "log_every = 1"
mkdir -p victims
echo precious >victims/existing

# Runs mgtrain ARGS with a time limit as a process whose pid the shell code PLANT knows beforehand
# ($PID): it is exec'd by the shell that ran PLANT. Output to out.log and err.log; the exit status
# is echoed as "exit N". Usage: as_known_pid PLANT ARGS...
as_known_pid() {
  local plant=$1 rc=0; shift
  timeout --kill-after=10 300 bash -c 'PID=$$; eval "$1"; shift; exec "$MGTRAIN" "$@"' _ "$plant" "$@" \
    >out.log 2>err.log || rc=$?
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat err.log; fail "mgtrain $* hung and was killed by the time limit"; }
  echo "mgtrain $*: exit $rc"
  return $rc
}

# Expects mgtrain ARGS to be refused with one error line holding EXPECT. Usage: refused EXPECT ARGS...
refused() {
  local expect=$1 rc=0; shift
  timeout --kill-after=5 120 "$MGTRAIN" "$@" >out.log 2>err.log || rc=$?
  echo "mgtrain $*: exit $rc"
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat err.log; fail "mgtrain $* hung and was killed by the time limit"; }
  [ $rc -ne 0 ] || { cat out.log err.log; fail "exit code 0 for mgtrain $*"; }
  [ $rc -lt 128 ] || { cat err.log; fail "mgtrain $* died on signal $((rc - 128))"; }
  local line
  line=$(one_error_line err.log)
  echo "$line"
  grep -qF -- "$expect" <<<"$line" || fail "the error line does not say '$expect'"
}

untouched() {  # untouched NAME: victims/NAME was neither created nor written
  if [ "$1" = existing ]; then
    [ "$(cat victims/existing)" = precious ] || fail "victims/existing was written through a link"
  else
    [ ! -e "victims/$1" ] || fail "victims/$1 was created through a link"
  fi
}

no_temporaries() {  # no_temporaries DIR: nothing named *.tmp-* is left in DIR
  if ls -a "$1" | grep -q '\.tmp-'; then ls -la "$1"; fail "a temporary file is left in $1"; fi
}

train() {  # a 3-step run into ckpt (one rank, no mpirun)
  timeout --kill-after=10 300 "$MGTRAIN" train --config run.ini >train.log 2>&1 || { cat train.log; fail "training"; }
  [ -f ckpt/step-3.h5 ] || fail "no checkpoint"
}

LINK="is a symbolic link to '$WORK/victims"
case $1 in
  links)
    mkdir -p ckpt
    # The lock file, opened for reading and writing and then truncated.
    ln -s "$WORK/victims/existing" ckpt/.lock
    refused "its lock file '$WORK/ckpt/.lock' $LINK/existing': mgtrain writes no file through a link" \
      train --config run.ini
    untouched existing
    rm ckpt/.lock
    # A hard link is written through as well (where the kernel lets a user link others' files).
    ln victims/existing ckpt/.lock
    refused "its lock file '$WORK/ckpt/.lock' has 2 hard links: mgtrain writes no file that is also another" \
      train --config run.ini
    untouched existing
    rm ckpt/.lock
    # The metrics file, appended to; dangling: O_CREAT would create what it leads to.
    ln -s "$WORK/victims/metrics" ckpt/metrics.jsonl
    refused "metrics file '$WORK/ckpt/metrics.jsonl' $LINK/metrics'" train --config run.ini
    untouched metrics
    rm ckpt/metrics.jsonl

    # The write probe, the checkpoint's and latest's temporaries under their old, predictable names.
    as_known_pid 'ln -s "$WORK/victims/probe" ckpt/.write-check.tmp-$PID
                  ln -s "$WORK/victims/existing" ckpt/.step-3.h5.tmp-$PID
                  ln -s "$WORK/victims/latest" ckpt/.latest.tmp-$PID' train --config run.ini ||
      { cat err.log; fail "training next to the planted links"; }
    untouched probe
    untouched existing
    untouched latest
    [ "$(cat ckpt/latest)" = step-3.h5 ] || fail "latest does not name step-3.h5"
    no_temporaries ckpt  # the clean-up removed the links (the links, not what they lead to)
    grep -q "removed 3 temporary file(s)" out.log || { cat out.log; fail "the clean-up did not remove the links"; }

    # report.svg and its temporary.
    ln -s "$WORK/victims/existing" ckpt/report.svg
    refused "report 'ckpt/report.svg' $LINK/existing': mgtrain writes no file through a link" report ckpt
    untouched existing
    [ -L ckpt/report.svg ] || fail "the link was replaced"
    rm ckpt/report.svg
    as_known_pid 'ln -s "$WORK/victims/report" ckpt/.report.svg.tmp-$PID' report ckpt ||
      { cat err.log; fail "report next to a planted link"; }
    untouched report
    grep -q '^<svg' ckpt/report.svg || fail "no report written"
    rm ckpt/.report.svg.tmp-*

    # data convert's, export's and eval --logits' outputs and their temporaries.
    printf 'some text\n' >t.txt
    ln -s "$WORK/victims/existing" link.h5
    refused "output file 'link.h5' $LINK/existing': mgtrain writes no file through a link" \
      data convert --text t.txt --out link.h5
    as_known_pid 'ln -s "$WORK/victims/convert" .t.h5.tmp-$PID' data convert --text t.txt --out t.h5 ||
      { cat err.log; fail "data convert next to a planted link"; }
    untouched convert
    "$MGTRAIN" data inspect t.h5 >/dev/null || fail "the converted file does not read back"
    ln -s "$WORK/victims/existing" link.onnx
    refused "ONNX file 'link.onnx' $LINK/existing'" export --checkpoint ckpt/step-3.h5 --out link.onnx
    as_known_pid 'ln -s "$WORK/victims/export" .m.onnx.tmp-$PID' export --checkpoint ckpt/step-3.h5 --out m.onnx ||
      { cat err.log; fail "export next to a planted link"; }
    untouched export
    [ -s m.onnx ] || fail "no ONNX file"
    ln -s "$WORK/victims/existing" link.npy
    refused "logits file 'link.npy' $LINK/existing'" \
      eval --checkpoint ckpt/step-3.h5 --data "$DATA_DIR/test.h5" --logits link.npy
    as_known_pid 'ln -s "$WORK/victims/logits" .l.npy.tmp-$PID' \
      eval --checkpoint ckpt/step-3.h5 --data "$DATA_DIR/test.h5" --logits l.npy ||
      { cat err.log; fail "eval --logits next to a planted link"; }
    untouched logits
    untouched existing
    [ -s l.npy ] || fail "no logits file"
    ;;

  out_is_input)
    printf 'the input\n' >same.txt
    ln same.txt hard.txt
    for out in same.txt ./same.txt hard.txt; do
      refused "data convert: --out '$out' is the input 'same.txt' (the same file)" \
        data convert --text same.txt --out "$out"
    done
    [ "$(cat same.txt)" = "the input" ] || fail "the input was overwritten"
    train
    cp ckpt/step-3.h5 before.h5
    refused "export: --out 'ckpt/step-3.h5' is the input 'ckpt/step-3.h5'" \
      export --checkpoint ckpt/step-3.h5 --out ckpt/step-3.h5
    cmp -s before.h5 ckpt/step-3.h5 || fail "export overwrote its checkpoint"
    cp "$DATA_DIR/test.h5" test.h5
    refused "eval: --logits 'test.h5' is the input 'test.h5'" \
      eval --checkpoint ckpt/step-3.h5 --data test.h5 --logits test.h5
    cmp -s "$DATA_DIR/test.h5" test.h5 || fail "eval --logits overwrote its data file"
    cp ckpt/metrics.jsonl metrics.before
    refused "report: --out 'ckpt/metrics.jsonl' is the input 'ckpt/metrics.jsonl'" report ckpt --out ckpt/metrics.jsonl
    cmp -s metrics.before ckpt/metrics.jsonl || fail "report overwrote the metrics"
    # A FIFO would hang the writer; a device would be written (or, as root, replaced).
    mkfifo fifo
    refused "output file 'fifo' is a FIFO, not a regular file" data convert --text same.txt --out fifo
    [ -p fifo ] || fail "the FIFO was replaced"
    refused "ONNX file 'fifo' is a FIFO, not a regular file" export --checkpoint ckpt/step-3.h5 --out fifo
    mkdir d
    if mknod d/null c 1 3 2>/dev/null; then
      refused "output file 'd/null' is a character device, not a regular file" data convert --text same.txt --out d/null
      [ -c d/null ] || fail "the device was replaced"
      refused "report 'd/null' is a character device" report ckpt --out d/null
    else
      echo "(mknod needs root: the device is checked with /dev/null itself)"
      refused "output file '/dev/null' is a character device, not a regular file" \
        data convert --text same.txt --out /dev/null
    fi
    ;;

  interrupted)
    # Ctrl-C and SIGTERM while the temporary is being written. A background job of a script ignores
    # SIGINT: env gives it back its default action, as a terminal's foreground job has it. The
    # signal is sent once the temporary is there; a command that ended first (rc 0) is tried again
    # (a conversion on twice the input), so the test waits on the command, not on the machine's
    # speed. interrupt SIG OUT ARGS...: runs mgtrain ARGS, sends SIG once OUT's temporary is there,
    # and checks the exit status, the line and that nothing is left; returns 2 when mgtrain ended
    # (rc 0) before the signal was sent.
    interrupt() {
      local sig=$1 out=$2 rc=0 pid line; shift 2
      env --default-signal=INT "$MGTRAIN" "$@" >out.log 2>err.log &
      pid=$!
      while kill -0 $pid 2>/dev/null && ! ls -a | grep -q "^\.$out\.tmp-"; do sleep 0.02; done
      kill -s "$sig" $pid 2>/dev/null || true
      wait $pid || rc=$?
      [ $rc != 0 ] || return 2
      echo "mgtrain $*, SIG$sig: exit $rc"
      cat err.log
      [ $rc = $((128 + $(kill -l "$sig"))) ] || fail "exit $rc after SIG$sig, expected $((128 + $(kill -l "$sig")))"
      no_temporaries .
      [ ! -e "$out" ] || fail "$out was written"
      line=$(one_error_line err.log)
      grep -qF "stopped by SIG$sig: '$out' was not written (its unfinished temporary is removed)" <<<"$line" ||
        fail "no line saying $out was not written"
    }
    train
    for sig in INT TERM; do
      # A conversion that ended first is tried again on twice the input.
      size=256
      while :; do
        rm -f big.h5 && truncate -s "${size}M" big.txt
        rc=0
        interrupt $sig big.h5 data convert --text big.txt --out big.h5 || rc=$?
        [ $rc = 2 ] || break
        [ $size -lt 8192 ] || fail "data convert of ${size} MiB ended before SIG$sig could be sent"
        size=$((size * 2))
      done
      for try in $(seq 20); do
        rm -f l.npy
        rc=0
        interrupt $sig l.npy eval --checkpoint ckpt/step-3.h5 --data "$DATA_DIR/test.h5" --logits l.npy || rc=$?
        [ $rc = 2 ] || break
        [ "$try" -lt 20 ] || fail "eval ended 20 times before SIG$sig could be sent"
      done
    done
    rm -f big.txt

    # ulimit -f: a write past it fails (EFBIG), and each writer says so and removes its temporary.
    truncate -s 4M text.txt
    # limited EXPECT [mpi] ARGS...: mgtrain ARGS under ulimit -f 64 (KiB), refused with EXPECT. With
    # mpi, as the rank of mpirun -np 1: the limit is the rank's alone, not mpirun's (its PMIx
    # server's files would exceed it).
    limited() {
      local expect=$1 rc=0; shift
      if [ "$1" = mpi ]; then
        shift
        timeout --kill-after=10 300 mpirun -np 1 bash -c 'ulimit -f 64 && exec "$MGTRAIN" "$@"' _ "$@" \
          >out.log 2>err.log || rc=$?
      else
        (ulimit -f 64 && exec timeout --kill-after=10 300 "$MGTRAIN" "$@") >out.log 2>err.log || rc=$?
      fi
      echo "mgtrain $* under ulimit -f 64: exit $rc"
      [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat err.log; fail "exit $rc: expected a refusal, not a signal"; }
      local line
      line=$(one_error_line err.log)
      echo "$line"
      grep -qF -- "$expect" <<<"$line" || fail "the error line does not say '$expect'"
      no_temporaries .
    }
    limited "output file 'text.h5' could not be written: File too large (" data convert --text text.txt --out text.h5
    [ ! -e text.h5 ] || fail "text.h5 was written"
    limited "logits file 'l.npy' cannot be written: File too large" \
      eval --checkpoint ckpt/step-3.h5 --data "$DATA_DIR/test.h5" --logits l.npy
    [ ! -e l.npy ] || fail "l.npy was written"
    # An ONNX file of the MLP is larger than 64 KiB too.
    limited "ONNX file 'm.onnx' cannot be written: File too large" export --checkpoint ckpt/step-3.h5 --out m.onnx
    [ ! -e m.onnx ] || fail "m.onnx was written"
    # A training rank's checkpoint: the run ends with the reason, the temporary is gone.
    rm -rf ckpt
    limited "cannot write '$WORK/ckpt/.step-3.h5.tmp-" mpi train --config run.ini
    grep -qF "File too large; there is no earlier checkpoint in '$WORK/ckpt'" err.log || fail "the line gives no reason"
    no_temporaries ckpt
    ;;

  full_disk)
    disk=$WORK/disk
    [ "$(id -u)" = 0 ] || namespaces_unavailable "mounting a tmpfs needs root"
    mkdir -p "$disk"
    mount -t tmpfs -o size=1m tmpfs "$disk" || namespaces_unavailable "cannot mount a tmpfs on $disk"
    trap 'umount "$disk" 2>/dev/null || umount -l "$disk"' EXIT
    trap 'exit 1' INT TERM
    truncate -s 4M text.txt
    refused "output file '$disk/text.h5' could not be written: No space left on device (" \
      data convert --text text.txt --out "$disk/text.h5"
    ! grep -q 'buf = \|errno = \|time = ' err.log || fail "HDF5's internals reached the line"
    no_temporaries "$disk"
    [ ! -e "$disk/text.h5" ] || fail "text.h5 was written"
    ;;
  *) fail "unknown case '$1'" ;;
esac
[ "${failures:-0}" = 0 ] || { echo "$failures checks failed"; exit 1; }
echo PASS
