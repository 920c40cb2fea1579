#!/usr/bin/env bash
# The all-reduce through the node's shared memory (sync.shared_memory, the default on one node),
# in a mount namespace of its own with a private /dev/shm, so that only this test's files are
# there (root and mount namespaces only: a skip otherwise, lib.sh's namespaces_unavailable):
#   clean: at np=2 it trains to the bits of Open MPI's all-reduce (a sum of two is the same in
#     either order, and the ranks' shared update of their parts is the whole update's, element by
#     element), with grad_accum's accumulated micro-batches too, and its memory has no name in
#     /dev/shm while the job runs nor after.
#   full: a /dev/shm with room for Open MPI's segments but not for the gradients: one note naming
#     the size and the reason, and the job trains through MPI instead.
#   one_set: a /dev/shm with room for one set of the shared update's gradient slots but not for
#     two: the job still trains through shared memory, without a note, to the bits of MPI's.
# Usage: shared_memory.sh clean|full|one_set
source "$(dirname "$0")/lib.sh"

if [ -z "${MGTRAIN_TEST_PRIVATE_SHM:-}" ]; then
  [ "$(id -u)" = 0 ] || namespaces_unavailable "a private /dev/shm needs root"
  command -v unshare >/dev/null || namespaces_unavailable "no unshare"
  # A chroot's root is no mount point, whose propagation cannot change: no namespace of our own.
  err=$(unshare --mount --propagation private true 2>&1) ||
    namespaces_unavailable "this machine cannot make a mount namespace for a private /dev/shm: ${err//$'\n'/ }"
  size=256m
  # Room for Open MPI's own segments (4 MB a rank), not for this model's two gradient slots (46 MB).
  [ "$1" = full ] && size=16m
  # Hidden layers of 1024: slots of 7.5 MB, 22 MB with the parameters in one set, 37 MB in two.
  [ "$1" = one_set ] && size=32m
  exec unshare --mount --propagation private -- env MGTRAIN_TEST_PRIVATE_SHM=$size "$0" "$@"
fi
mount -t tmpfs -o size="$MGTRAIN_TEST_PRIVATE_SHM" tmpfs /dev/shm ||
  namespaces_unavailable "cannot mount a tmpfs on /dev/shm in a mount namespace"
ours() { find /dev/shm -maxdepth 1 -name 'mgtrain-*'; }

write_config run.ini
case $1 in
  clean)
    common=(--config run.ini --train.max_steps=300 --train.log_every=10 --checkpoint.every_steps=0)
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/shm" >shm.log 2>&1 &
    job=$!
    # While it trains: the name is gone once every rank has mapped the memory.
    for _ in $(seq 1000); do
      grep -q "^epoch .* step" shm.log && break
      sleep 0.02
    done
    left_during=$(ours)
    kill -0 $job 2>/dev/null || fail "the job ended before /dev/shm was looked at"
    wait $job || { cat shm.log; fail "np=2 through shared memory"; }
    [ -z "$left_during" ] || fail "while the job ran, /dev/shm held $left_during"
    [ -z "$(ours)" ] || fail "after the job, /dev/shm holds $(ours)"
    ! grep -q "sync.shared_memory" shm.log || { cat shm.log; fail "a note about shared memory where it works"; }
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/mpi" --sync.shared_memory=off >mpi.log 2>&1 ||
      { cat mpi.log; fail "np=2 through MPI"; }
    "$MGTRAIN" compare shm/step-300.h5 mpi/step-300.h5 --rtol 0 >compare.log 2>&1 ||
      { cat compare.log; fail "at np=2 shared memory and MPI's all-reduce give other bits"; }
    # Micro-batches accumulated in the gradient before the reduce-scatter (grad_accum), which
    # backward may be writing straight into a slot: the bits of MPI's too.
    accum=(--sync.name=grad_accum --sync.accum_steps=2)
    run_np 2 300 train "${common[@]}" "${accum[@]}" --checkpoint.dir="$WORK/shm_accum" >shm_accum.log 2>&1 ||
      { cat shm_accum.log; fail "np=2 grad_accum through shared memory"; }
    run_np 2 300 train "${common[@]}" "${accum[@]}" --checkpoint.dir="$WORK/mpi_accum" --sync.shared_memory=off \
      >mpi_accum.log 2>&1 || { cat mpi_accum.log; fail "np=2 grad_accum through MPI"; }
    "$MGTRAIN" compare shm_accum/step-300.h5 mpi_accum/step-300.h5 --rtol 0 >compare_accum.log 2>&1 ||
      { cat compare_accum.log; fail "at np=2 grad_accum through shared memory and through MPI give other bits"; }
    ;;
  full)
    run_np 2 300 train --config run.ini --model.hidden=2048,2048 --train.max_steps=20 --checkpoint.dir="$WORK/full" \
      >full.log 2>&1 ||
      { cat full.log; fail "a job with a full /dev/shm must train through MPI"; }
    grep -E -q "^mgtrain: note: sync.shared_memory: could not create [0-9]+ bytes of shared memory '/mgtrain-[0-9a-f-]+': No space left on device; the all-reduce goes through MPI$" full.log ||
      { cat full.log; fail "no note naming the size and the reason"; }
    [ "$(grep -c "sync.shared_memory" full.log)" = 1 ] || fail "the note is not given once"
    grep -q "^done: 20 steps" full.log || fail "the job did not finish its 20 steps"
    [ -z "$(ours)" ] || fail "/dev/shm holds $(ours)"
    ;;
  one_set)
    common=(--config run.ini --model.hidden=1024,1024 --train.max_steps=30 --checkpoint.every_steps=0)
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/one" >one.log 2>&1 ||
      { cat one.log; fail "np=2 with room for one set of slots"; }
    ! grep -q "sync.shared_memory" one.log || { cat one.log; fail "a note: one set of slots did not fit either"; }
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/mpi" --sync.shared_memory=off >mpi.log 2>&1 ||
      { cat mpi.log; fail "np=2 through MPI"; }
    "$MGTRAIN" compare one/step-30.h5 mpi/step-30.h5 --rtol 0 >compare.log 2>&1 ||
      { cat compare.log; fail "with one set of slots shared memory and MPI's all-reduce give other bits"; }
    [ -z "$(ours)" ] || fail "/dev/shm holds $(ours)"
    ;;
  *) fail "usage: shared_memory.sh clean|full|one_set" ;;
esac
echo PASS
