#!/usr/bin/env bash
# `mgtrain bench --json` at np=2 for each sync strategy: one JSON line with the figures the
# benchmark promises, each a positive number (timings themselves are not asserted), and the
# all-reduce's bus bandwidth flat and hierarchical for the strategies that offer both.
source "$(dirname "$0")/lib.sh"
write_config run.ini
for sync in "" "--sync.deterministic=true" "--sync.name=grad_accum --sync.accum_steps=2" "--sync.name=zero"; do
  # shellcheck disable=SC2086
  run_np 2 300 bench --config run.ini --steps 20 --warmup 5 --allreduce-iterations 5 $sync --json >out.log 2>&1 ||
    { cat out.log; fail "bench $sync"; }
  line=$(grep '^{' out.log | tail -n 1)
  echo "$sync: $line"
  for field in samples_per_s samples_per_s_np1 scaling_efficiency allreduce_busbw_gbs mpi_busbw_gbs compute_ms; do
    value=$(echo "$line" | json_field $field)
    awk -v v="$value" 'BEGIN { exit !(v > 0) }' || fail "bench $sync: $field is '$value'"
  done
  # The all-reduce flat, through one leader per node (on one node: a leaders' group of one) and
  # through shared memory; the deterministic reduction has no such choice.
  for field in flat_busbw_gbs hierarchical_busbw_gbs shared_memory_busbw_gbs; do
    value=$(echo "$line" | json_field $field)
    if [ "$sync" = "--sync.deterministic=true" ]; then
      [ "$value" = null ] || fail "bench $sync: $field is '$value', expected null"
    else
      awk -v v="$value" 'BEGIN { exit !(v > 0) }' || fail "bench $sync: $field is '$value'"
    fi
  done
done
# --repeat: alternating runs, medians, and each repeat's scaling efficiency.
run_np 2 300 bench --config run.ini --steps 10 --warmup 2 --allreduce-iterations 2 --repeat 3 --json >repeat.log 2>&1 ||
  { cat repeat.log; fail "bench --repeat 3"; }
line=$(grep '^{' repeat.log | tail -n 1)
echo "--repeat 3: $line"
[ "$(echo "$line" | json_field repeats)" = 3 ] || fail "repeats is not 3"
runs=$(echo "$line" | sed -n 's/.*"scaling_efficiency_runs":\[\([^]]*\)\].*/\1/p')
[ "$(echo "$runs" | tr ',' '\n' | grep -c .)" = 3 ] || fail "expected 3 scaling figures, got '$runs'"
