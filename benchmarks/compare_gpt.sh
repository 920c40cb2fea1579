#!/usr/bin/env bash
# The gpt language model side by side with PyTorch DDP (gloo, one thread per rank) from PyPI,
# benchmarks/pytorch_gpt.py: the same model (4 layers, 4 heads, dim 128, context 128, tied head),
# AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on the matrices and embeddings), 100 warm-up
# steps, clipping at norm 1.0, a global batch of 32 windows, on the 90/10 split of the fortunes
# file `cookie` that examples/text_gpt.ini uses.
#
# 1. Throughput: mgtrain bench and pytorch_gpt.py alternating, REPEAT times each, at NP ranks;
#    prints every run's tokens/s, peak RSS of the largest rank, scaling from one rank to NP, and
#    the ratios of the medians. mgtrain bench runs rank 0 alone at the same global batch before
#    the NP-rank run; PyTorch runs world 1 after world NP.
# 2. Quality: both train QUALITY_STEPS steps from seed SEED at NP ranks (learning rate constant
#    after the warm-up) and report the test loss (nats per token over the contiguous windows of
#    the test text) and the relative difference. QUALITY_STEPS=0 skips it, REPEAT=0 the first part.
#
# Each timed run waits for the machine to be quiet first (setup.sh's wait_for_quiet) and prints the
# idle share it started at and the share of the cores other jobs took while it ran; the medians
# leave out rounds where that passed 5%.
#
# Usage: benchmarks/compare_gpt.sh [NP=2] [STEPS=100] [REPEAT=3] [QUALITY_STEPS=1000] [SEED=42]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
np=${1:-2} steps=${2:-100} repeat=${3:-3} quality_steps=${4:-1000} seed=${5:-42}
source "$here/setup.sh"
use_pytorch_venv

prepare_cookie "$mgtrain"
config=examples/text_gpt.ini  # model, optimizer, batch and warm-up as above
pytorch() { torch_env "$venv/bin/python" "$here/pytorch_gpt.py" --train data/cookie_train.txt "$@"; }
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" <<<"$2"; }

mgtrain_bench() { mpirun -np "$np" --oversubscribe "$mgtrain" bench --config "$config" --steps "$steps" --json | grep '^{'; }
# Runs a command once the machine is quiet: its output in $out, the idle share before it in $idle,
# the share of the cores other jobs took while it ran in $others.
timed() {
  local before after
  idle=$(wait_for_quiet)
  cpu_mark before
  out=$("$@")
  cpu_mark after
  others=$(others_share "$before" "$after")
}

# A round is clean when other jobs took at most 5% of the cores during each of its runs; the
# medians are over the clean rounds (over all of them where none is).
ours=() ours_rss=() ours_scaling=() theirs=() theirs_rss=() theirs_scaling=() clean=()
for _ in $(seq "$repeat"); do
  timed mgtrain_bench
  echo "mgtrain  $out  (idle before: $idle, others during: $others)"
  worst=$others
  # bench counts windows; each is `context` tokens of prediction.
  ours+=("$(awk -v s="$(field samples_per_s "$out")" 'BEGIN { print s * 128 }')")
  ours_rss+=("$(field peak_rss_mb "$out")") ours_scaling+=("$(field scaling_efficiency "$out")")
  timed pytorch --world "$np" --steps "$steps"
  echo "pytorch  $out  (idle before: $idle, others during: $others)"
  worst=$(awk -v a="$worst" -v b="$others" 'BEGIN { print (a > b) ? a : b }')
  line=$out
  theirs+=("$(field tokens_per_s "$line")") theirs_rss+=("$(field peak_rss_mb "$line")")
  if [ "$np" -gt 1 ]; then
    timed pytorch --world 1 --steps "$steps"
    echo "pytorch  $out  (idle before: $idle, others during: $others)"
    worst=$(awk -v a="$worst" -v b="$others" 'BEGIN { print (a > b) ? a : b }')
    theirs_scaling+=("$(awk -v a="$(field tokens_per_s "$line")" -v s="$(field tokens_per_s "$out")" -v n="$np" \
      'BEGIN { printf "%.4f", a / (n * s) }')")
  else
    theirs_scaling+=(1)
  fi
  clean+=("$(awk -v w="$worst" 'BEGIN { print (w <= 0.05) ? 1 : 0 }')")
done
# The medians of the named series over the clean rounds, or over all where none is clean.
clean_median() {
  local -n series=$1
  local picked=() i
  for i in "${!series[@]}"; do [ "${clean[$i]}" = 1 ] && picked+=("${series[$i]}"); done
  [ ${#picked[@]} -gt 0 ] || picked=("${series[@]}")
  median "${picked[@]}"
}
if [ "$repeat" -gt 0 ]; then
  clean_rounds=$(printf '%s\n' "${clean[@]}" | grep -c 1 || true)
  echo "clean rounds (other jobs <= 5% of the cores): $clean_rounds of $repeat$([ "$clean_rounds" -gt 0 ] || echo '; medians over all')"
  awk -v a="$(clean_median ours)" -v b="$(clean_median theirs)" -v n="$np" \
    -v ra="$(clean_median ours_rss)" -v rb="$(clean_median theirs_rss)" \
    -v sa="$(clean_median ours_scaling)" -v sb="$(clean_median theirs_scaling)" 'BEGIN {
      printf "gpt np=%s: mgtrain median %.0f tokens/s, PyTorch DDP median %.0f tokens/s, ratio %.2fx\n", n, a, b, a / b
      printf "gpt np=%s: peak RSS of the largest rank, medians: mgtrain %.0f MB, PyTorch DDP %.0f MB, ratio %.2f\n", n, ra, rb, ra / rb
      printf "gpt scaling 1 -> %s ranks, medians: mgtrain %.3f, PyTorch DDP %.3f\n", n, sa, sb
    }'
fi

[ "$quality_steps" -gt 0 ] || exit 0
runs=$MGTRAIN_BUILD/compare_gpt
mkdir -p "$runs"
# No wait for quiet here: the losses do not depend on the machine's load. train.epochs: the
# example's 10 epochs (53 steps each) would end the run first.
start=$SECONDS
line=$(mpirun -np "$np" --oversubscribe "$mgtrain" train --config "$config" --json \
  --train.max_steps="$quality_steps" --train.epochs=1000000 --train.lr_schedule=constant --train.seed="$seed" \
  --checkpoint.dir="$runs/mgtrain" --checkpoint.every_steps=0 --checkpoint.overwrite=true | grep '^{' | tail -1)
echo "mgtrain  $line  ($((SECONDS - start)) s)"
ours_loss=$(field test_loss "$line")
start=$SECONDS
# --warmup 0: every step trains and the first is step 1, as in mgtrain train.
line=$(pytorch --world "$np" --steps "$quality_steps" --warmup 0 --test data/cookie_test.txt --eval --seed "$seed")
echo "pytorch  $line  ($((SECONDS - start)) s)"
theirs_loss=$(field test_loss "$line")
awk -v a="$ours_loss" -v b="$theirs_loss" -v s="$quality_steps" -v n="$np" -v seed="$seed" 'BEGIN {
  printf "gpt test loss after %s steps at np=%s, seed %s: mgtrain %.4f, PyTorch DDP %.4f nats/token, relative difference %+.2f%%\n",
    s, n, seed, a, b, 100 * (a - b) / b
}'
