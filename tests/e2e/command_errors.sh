#!/usr/bin/env bash
# Every subcommand under mpirun -np 2 given a bad key, or a bad input found before its first step:
# the job ends non-zero within the time limit (no rank left waiting), and a command that runs over
# MPI prints exactly one "mgtrain: error:" line naming what is wrong. The commands without MPI
# (eval, report, compare) run once per rank, so each rank may say it.
# Usage: command_errors.sh CASE
source "$(dirname "$0")/lib.sh"
write_config run.ini
# Short runs: the cases that get past their errors must still be quick.
bad=--sync.bogus=1
mpi=true
case $1 in
  train)        args=(train --config run.ini "$bad"); expect="sync.bogus" ;;
  bench)        args=(bench --config run.ini --steps 2 --warmup 0 "$bad"); expect="sync.bogus" ;;
  verify)       args=(verify --config run.ini --steps 2 "$bad"); expect="sync.bogus" ;;
  doctor)       args=(doctor --config run.ini "$bad"); expect="sync.bogus" ;;
  eval)         args=(eval --checkpoint none.h5 --data none.h5 "$bad"); expect="sync.bogus"; mpi=false ;;
  report)       args=(report "$WORK" "$bad"); expect="sync.bogus"; mpi=false ;;
  compare)      args=(compare a.h5 b.h5 "$bad"); expect="sync.bogus"; mpi=false ;;
  # Found by rank 0's single-rank reference run while the other rank waits for it.
  bench_data)   args=(bench --config run.ini --steps 2 --warmup 0 --data.train=/nonexistent/train.h5)
                expect="/nonexistent/train.h5" ;;
  # A parameter server cannot train on rank 0 alone: the line says it was the reference run.
  bench_param_server) args=(bench --config run.ini --steps 2 --warmup 0 --sync.name=param_server)
                expect="bench's single-rank reference run (rank 0 alone, which bench compares with all ranks): config key 'sync.servers' = 1" ;;
  # Not an error: more threads than this rank's cores are lowered to them, with a warning.
  threads)
    run_np 2 120 train --config run.ini --train.threads=100000 --train.max_steps=2 >out.log 2>err.log ||
      { cat out.log err.log; fail "training with train.threads = 100000 failed"; }
    cat err.log
    grep -q '^mgtrain: warning: \[rank 0\] train.threads = 100000 is more than the [0-9]* core(s) this rank may use' \
      err.log || fail "no warning that train.threads was lowered"
    exit 0 ;;
  # Too few file descriptors for MPI: one line from mgtrain before MPI_Init (Open MPI printed 30
  # lines of its own and mgtrain none), alone, and from rank 0 of a job whose ranks have too few
  # (mpirun's own limit left alone: below 32 mpirun itself fails). A soft limit below the hard one
  # is raised: the run trains.
  open_files)
    expect_line="the open-file limit (ulimit -n) is 12, hard limit 12, and a rank needs at least 32 (Open MPI's connections, plugins, data and checkpoint files): raise it (ulimit -n 1024) before mpirun"
    rc=0
    (ulimit -n 12 && exec timeout 60 "$MGTRAIN" train --config run.ini) >alone.log 2>&1 || rc=$?
    cat alone.log
    [ "$rc" = 2 ] || fail "ulimit -n 12: exit $rc, expected 2"
    [ "$(cat alone.log)" = "mgtrain: error: [rank 0] $expect_line" ] || fail "ulimit -n 12: not the one line"
    rc=0
    timeout 60 mpirun -np 2 --oversubscribe sh -c 'ulimit -n 12 && exec "$0" "$@"' "$MGTRAIN" train --config run.ini \
      >job.log 2>&1 || rc=$?
    [ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat job.log; fail "ranks with ulimit -n 12: exit $rc"; }
    [ "$(grep -c '^mgtrain: error:' job.log)" = 1 ] && grep -qxF "mgtrain: error: [rank 0] $expect_line" job.log ||
      { cat job.log; fail "ranks with ulimit -n 12: not rank 0's one line"; }
    hard=$(ulimit -Hn)
    if [ "$hard" = unlimited ] || [ "$hard" -ge 1024 ]; then
      (ulimit -Sn 12 && exec timeout 120 "$MGTRAIN" train --config run.ini --train.max_steps=2) >raised.log 2>&1 ||
        { cat raised.log; fail "a soft limit of 12 under a hard limit of $hard was not raised"; }
    fi
    exit 0 ;;
  *) fail "unknown case $1" ;;
esac

start=$(date +%s)
set +e
run_np 2 60 "${args[@]}" >out.log 2>err.log
rc=$?
set -e
echo "exit $rc after $(($(date +%s) - start)) s"
cat err.log
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "the job hung and was killed by the time limit"
[ $rc -ne 0 ] || fail "exit code 0 for bad input"
errors=$(grep -c '^mgtrain: error:' err.log || true)
if $mpi; then
  [ "$errors" -eq 1 ] || fail "expected exactly one 'mgtrain: error:' line, got $errors"
else
  [ "$errors" -ge 1 ] && [ "$errors" -le 2 ] || fail "expected one error line per rank at most, got $errors"
fi
grep '^mgtrain: error:' err.log | grep -qF -- "$expect" || fail "the error line does not mention '$expect'"
