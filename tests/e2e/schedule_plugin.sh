#!/usr/bin/env bash
# Learning-rate schedules: the metrics' lr is the rate applied at each step (the built-in cosine
# against its formula); a schedule plugin (examples/plugin's wsd, built out of tree against the
# installed SDK) trains with the rates of its formula and a resumed run continues its curve to the
# parameters of the run never stopped; a bad key, an unknown schedule, a bad value and a rate that
# is not finite or negative are each refused with one line. Usage: schedule_plugin.sh CASE
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH
case_name=$1

# 512 samples a step: 117 steps in the one epoch of Fashion-MNIST's 60000.
write_config run.ini "[train]" "global_batch = 512" "log_every = 5" "[data]" "test ="

steps_per_epoch() { sed -n 's/.* \([0-9][0-9]*\) steps\/epoch.*/\1/p' "$1" | head -n 1; }

# Every metrics record's lr against the formula FORMULA (an awk expression of k, the 0-based step,
# and of base, warmup, horizon and any -v given): equal to 9 significant digits, as written.
check_lr() {  # check_lr METRICS FORMULA [awk -v assignments...]
  local metrics=$1 formula=$2; shift 2
  grep '"lr"' "$metrics" | awk -F'[:,]' -v "$@" '
    { for (i = 1; i < NF; i++) { if ($i == "{\"step\"") s = $(i + 1); if ($i == "\"lr\"") v = $(i + 1) } }
    { k = s - 1; pi = atan2(0, -1); e = '"$formula"'
      diff = v - e; if (diff < 0) diff = -diff; m = e < 0 ? -e : e
      n++; if (diff > 2e-8 * m + 1e-15) { printf "step %d: lr %s, formula %.12g\n", s, v, e; bad++ } }
    END { if (n == 0) { print "no lr in the metrics"; exit 1 } exit bad > 0 }' ||
    fail "the metrics' lr of $metrics is not the schedule's rate at its step"
}

COSINE='k < warmup ? base * (k + 1) / warmup : base * 0.5 * (1 + cos(pi * ((k - warmup) / (horizon - warmup) < 1 ? (k - warmup) / (horizon - warmup) : 1)))'
# examples/plugin/wsd_schedule.cpp's formula; start: the step its decay starts.
WSD='k < warmup ? base * (k + 1) / warmup : (k < start ? base : base * (1 - (1 - final) * ((k - start + 1) / (horizon - start) < 1 ? (k - start + 1) / (horizon - start) : 1)))'

case $case_name in
cosine_lr)
  # Capped at 40 steps by train.max_steps, sooner than train.epochs' 117: the curve decays to 0 at
  # step 40, the run's last, as the key's help says.
  run_np 2 300 train --config run.ini --train.lr_schedule=cosine --train.warmup_steps=10 --train.max_steps=40 \
    --checkpoint.dir="$WORK/cosine" >cosine.log 2>&1 || { cat cosine.log; fail "cosine run"; }
  [ "$(steps_per_epoch cosine.log)" = 117 ] || { cat cosine.log; fail "expected 117 steps/epoch"; }
  check_lr cosine/metrics.jsonl "$COSINE" base=0.02 -v warmup=10 -v horizon=40
  last_lr=$(grep '"step":40,' cosine/metrics.jsonl | sed -n 's/.*"lr":\([^,}]*\).*/\1/p')
  awk -v lr="$last_lr" 'BEGIN { exit !(lr != "" && lr < 0.01 * 0.02) }' ||
    fail "the lr at step 40, the last of a run capped by train.max_steps, is '$last_lr', not ~0"
  # Without train.max_steps the curve spans train.epochs: 117 steps.
  run_np 2 300 train --config run.ini --train.lr_schedule=cosine --train.warmup_steps=10 \
    --checkpoint.dir="$WORK/cosine-epoch" >cosine-epoch.log 2>&1 || { cat cosine-epoch.log; fail "cosine run"; }
  check_lr cosine-epoch/metrics.jsonl "$COSINE" base=0.02 -v warmup=10 -v horizon=117
  ;;
wsd)
  build_example_plugins libmgtrain-schedule-wsd.so
  plugins=(--plugin-path "$PLUGIN_BUILD/plugins")
  "$MGTRAIN" plugins "${plugins[@]}" >plugins.txt 2>&1 || { cat plugins.txt; fail "mgtrain plugins"; }
  grep -Eq "^schedule +wsd +1.0.0 +.*libmgtrain-schedule-wsd.so$" plugins.txt || { cat plugins.txt; fail "plugins does not list wsd"; }
  "$MGTRAIN" config-keys "${plugins[@]}" >keys.txt 2>&1 || { cat keys.txt; fail "mgtrain config-keys"; }
  grep -q '^| `schedule.decay_fraction` | number > 0 | `0.2` | schedule wsd |' keys.txt ||
    { cat keys.txt; fail "config-keys does not list wsd's keys"; }
  wsd=(--config run.ini "${plugins[@]}" --train.lr_schedule=wsd --train.warmup_steps=10 --schedule.decay_fraction=0.3
       --schedule.final_ratio=0.1 --checkpoint.every_steps=50)
  run_np 2 300 train "${wsd[@]}" --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
    { cat straight.log; fail "wsd run"; }
  horizon=$(steps_per_epoch straight.log)
  start=$((horizon - $(awk -v h="$horizon" 'BEGIN { printf "%d", 0.3 * h + 0.5 }')))
  check_lr straight/metrics.jsonl "$WSD" base=0.02 -v warmup=10 -v horizon="$horizon" -v final=0.1 -v start="$start"
  # Stopped at step 50 by train.max_steps, then resumed without it: the same rates at the same steps,
  # and the parameters of the run never stopped.
  run_np 2 300 train "${wsd[@]}" --checkpoint.dir="$WORK/parts" --train.max_steps=50 >part1.log 2>&1 ||
    { cat part1.log; fail "wsd run to step 50"; }
  run_np 2 300 train "${wsd[@]}" --checkpoint.dir="$WORK/parts" --resume latest >part2.log 2>&1 ||
    { cat part2.log; fail "wsd run resumed at step 50"; }
  grep -q '"step":55,' parts/metrics.jsonl || { cat parts/metrics.jsonl; fail "the resumed run logged no step 55"; }
  check_lr parts/metrics.jsonl "$WSD" base=0.02 -v warmup=10 -v horizon="$horizon" -v final=0.1 -v start="$start"
  straight=$(group_hash "straight/step-$horizon.h5" params)
  resumed=$(group_hash "parts/step-$horizon.h5" params)
  echo "parameters at step $horizon: straight $straight, stopped and resumed $resumed"
  [ "$straight" = "$resumed" ] || fail "the resumed wsd run ends with other parameters than the straight one"
  # The checkpoint records the schedule plugin like every plugin it loaded.
  h5dump -a /plugins "straight/step-$horizon.h5" | grep -q "schedule:wsd@1.0.0" || fail "no schedule:wsd in /plugins"
  # A value its constructor refuses, one line naming the key.
  run_np 2 120 train "${wsd[@]}" --checkpoint.dir="$WORK/bad" --schedule.decay_fraction=1.5 >bad.log 2>&1 &&
    fail "decay_fraction = 1.5 accepted"
  one_error_line bad.log | grep -q "config key 'schedule.decay_fraction': expected a value in (0, 1], got 1.5" ||
    fail "decay_fraction = 1.5 not named"
  ;;
refused)
  schedules=(--config run.ini --plugin-path "$TEST_PLUGIN_DIR/schedules" --checkpoint.dir="$WORK/refused")
  # A key the chosen schedule does not declare.
  run_np 2 120 train "${schedules[@]}" --train.lr_schedule=bad_rate --schedule.bad_att=3 >key.log 2>&1 &&
    fail "an unknown schedule key accepted"
  one_error_line key.log | grep -q "schedule.bad_att" || fail "the unknown key is not named"
  # A [schedule] key with a built-in schedule, which has none.
  run_np 2 120 train --config run.ini --checkpoint.dir="$WORK/refused" --schedule.decay_fraction=0.3 >builtin.log 2>&1 &&
    fail "a schedule key accepted with the built-in constant schedule"
  one_error_line builtin.log | grep -q "schedule.decay_fraction" || fail "the key of no schedule is not named"
  # A name that is neither built in nor a plugin.
  run_np 2 120 train "${schedules[@]}" --train.lr_schedule=cosinus >name.log 2>&1 && fail "schedule 'cosinus' accepted"
  one_error_line name.log |
    grep -q "config key 'train.lr_schedule' = 'cosinus': not a built-in schedule (constant, cosine), and unknown schedule plugin 'cosinus': no libmgtrain-schedule-cosinus.so in .*; available schedule plugins: bad_rate" ||
    fail "the unknown schedule is not named with what there is"
  # A rate that is not finite, or negative, at step 7: the run stops there, naming both.
  for bad in nan negative; do
    run_np 2 120 train "${schedules[@]}" --train.lr_schedule=bad_rate --schedule.bad_at=7 --schedule.bad_rate=$bad \
      >rate-$bad.log 2>&1 && fail "a $bad rate accepted"
    one_error_line rate-$bad.log | grep -Eq "train.lr_schedule = bad_rate gave the learning rate (nan|-0.02[0-9]*) for step 7 \(rate\(6\)\): expected a finite rate >= 0" ||
      fail "the $bad rate is not named with the schedule and the step"
    no_ranks_left
  done
  ;;
*) fail "unknown case $case_name" ;;
esac
echo PASS
