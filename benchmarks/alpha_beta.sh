#!/usr/bin/env bash
# The all-reduce's cost model t(n) = a + b n, fitted to measurements: raw MPI_Allreduce of the
# gradient buffer, as `mgtrain bench` times it, for MLPs whose hidden width sets the buffer from
# about 13 KB to 52 MB. Two topologies in one run: NP ranks on this machine (shared memory), and
# 2 simulated nodes x NP/2 ranks (tests/multinode/nodes.sh: network namespaces on one bridge)
# with each node's link limited to RATE both ways. Prints every point, then per topology the fit
# and, for a ring over p ranks (t = 2(p-1) alpha + 2(p-1)/p n beta), alpha and the bandwidth
# 1/beta; also each example model's compute per step on one rank (bench, the example's batch).
# docs/scaling.md fits its model to these figures. Needs root (the simulated nodes).
# Usage: benchmarks/alpha_beta.sh [NP=4] [RATE=1gbit] [REPEAT=3]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
np=${1:-4} rate=${2:-1gbit} repeat=${3:-3}
source "$here/setup.sh"
source "$MGTRAIN_ROOT/tests/multinode/nodes.sh"
work=$MGTRAIN_BUILD/alpha-beta
mkdir -p "$work"

field() { sed -n "s/^{.*\"$1\":\\([0-9.e+-]*\\).*/\\1/p"; }

widths="4 64 512 4096 16384"
run_bench() {  # run_bench WHERE HIDDEN -> "bytes ms"
  local where=$1 hidden=$2 out
  local args=(bench --config examples/fashion_mnist_mlp.ini --model.hidden="$hidden" --steps 3 --warmup 1
    --allreduce-iterations 20 --json)
  if [ "$where" = one ]; then
    out=$(mpirun -np "$np" --oversubscribe "$mgtrain" "${args[@]}" 2>/dev/null | tail -n 1)
  else
    # shellcheck disable=SC2046  # the MCA options are separate words
    out=$(node_run n1 mpirun --hostfile "$work/hosts" -np "$np" $(sim_mpirun_options) "$mgtrain" "${args[@]}" \
      2>/dev/null | tail -n 1)
  fi
  echo "$(field gradient_bytes <<<"$out") $(field mpi_allreduce_ms <<<"$out")"
}

nodes_up 2 --rate "$rate"
printf 'n1 slots=%d\nn2 slots=%d\n' $((np / 2)) $((np / 2)) >"$work/hosts"
echo "topology bytes mpi_allreduce_ms(median of $repeat)"
for where in one two; do
  : >"$work/$where.points"
  for hidden in $widths; do
    times=()
    for _ in $(seq "$repeat"); do
      read -r bytes ms < <(run_bench "$where" "$hidden")
      times+=("$ms")
    done
    echo "$bytes $(median "${times[@]}")" | tee -a "$work/$where.points" | sed "s/^/$where /"
  done
done
nodes_down

# Two regimes, as Open MPI switches algorithms with the size: up to 2 MB (the example models'
# gradients are 0.9 to 1.7 MB) a least-squares fit on the relative error (weights 1/t^2: the
# smallest size fixes the intercept, the largest the slope); beyond, the slope between the two
# largest sizes, the bandwidth of large gradients.
for where in one two; do
  awk -v p="$np" -v where="$where" '
    { n[NR] = $1; t[NR] = $2 / 1000 }
    n[NR] <= 2e6 { w = 1 / (t[NR] * t[NR]); sw += w; sn += w * $1; st += w * t[NR]; snn += w * $1 * $1
                   snt += w * $1 * t[NR] }
    END {
      b = (sw * snt - sn * st) / (sw * snn - sn * sn); a = (st - b * sn) / sw
      alpha = a / (2 * (p - 1)); beta = b / (2 * (p - 1) / p)
      large = (n[NR] - n[NR - 1]) / (t[NR] - t[NR - 1])
      printf "%s, up to 2 MB: t = %.1f us + n / %.4f GB/s (ring over %d ranks: alpha %.1f us, 1/beta %.4f GB/s);",
        where, a * 1e6, 1 / b / 1e9, p, alpha * 1e6, 1 / beta / 1e9
      printf " beyond: %.4f GB/s\n", large / 1e9
      for (i = 1; i <= NR; ++i)
        printf "  %9d bytes: measured %8.3f ms, the small-size fit %8.3f ms\n", n[i], t[i] * 1e3, (a + b * n[i]) * 1e3
    }' "$work/$where.points"
done

echo "compute per step, one rank, the example's global batch (bench compute_ms + optimizer_ms):"
for model in mlp cnn resnet; do
  out=$(mpirun -np 1 "$mgtrain" bench --config "examples/fashion_mnist_$model.ini" --steps 20 --warmup 3 --json \
    2>/dev/null | tail -n 1)
  echo "$model: compute $(field compute_ms <<<"$out") ms, optimizer $(field optimizer_ms <<<"$out") ms," \
    "gradient $(field gradient_bytes <<<"$out") bytes, $(field samples_per_s <<<"$out") samples/s"
done
