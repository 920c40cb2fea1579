#!/usr/bin/env bash
# `mgtrain bench --json` at np=2 for each sync strategy: one JSON line with the figures the
# benchmark promises, each a positive number (timings themselves are not asserted).
source "$(dirname "$0")/lib.sh"
write_config run.ini
for sync in "" "--sync.deterministic=true" "--sync.name=grad_accum --sync.accum_steps=2"; do
  # shellcheck disable=SC2086
  run_np 2 300 bench --config run.ini --steps 20 --warmup 5 --allreduce-iterations 5 $sync --json >out.log 2>&1 ||
    { cat out.log; fail "bench $sync"; }
  line=$(grep '^{' out.log | tail -n 1)
  echo "$sync: $line"
  for field in samples_per_s samples_per_s_np1 scaling_efficiency allreduce_busbw_gbs mpi_busbw_gbs compute_ms; do
    value=$(echo "$line" | json_field $field)
    awk -v v="$value" 'BEGIN { exit !(v > 0) }' || fail "bench $sync: $field is '$value'"
  done
done
