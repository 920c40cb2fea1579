#!/usr/bin/env bash
# Same config and seed twice: bitwise identical parameters. 2k steps straight versus k steps,
# stop, --resume latest, k more: bitwise identical parameters and optimizer state.
# Usage: reproducible.sh NP MODEL
source "$(dirname "$0")/lib.sh"
np=$1 model=$2
k=40
write_config run.ini "[model]" "dropout = 0.1"
common=(--config run.ini --model.name="$model" --train.log_every=10)

run_np "$np" 600 train "${common[@]}" --train.max_steps=$((2 * k)) --checkpoint.dir="$WORK/a" >a.log 2>&1 || { cat a.log; fail "run a"; }
run_np "$np" 600 train "${common[@]}" --train.max_steps=$((2 * k)) --checkpoint.dir="$WORK/b" >b.log 2>&1 || { cat b.log; fail "run b"; }
run_np "$np" 600 train "${common[@]}" --train.max_steps=$k --checkpoint.dir="$WORK/c" >c1.log 2>&1 || { cat c1.log; fail "run c, first half"; }
run_np "$np" 600 train "${common[@]}" --train.max_steps=$((2 * k)) --checkpoint.dir="$WORK/c" --resume latest >c2.log 2>&1 || { cat c2.log; fail "run c, resumed"; }
grep -q "resumed from step $k" c2.log || { cat c2.log; fail "the second half did not resume from step $k"; }

final=step-$((2 * k)).h5
pa=$(group_hash a/$final /params) pb=$(group_hash b/$final /params) pc=$(group_hash c/$final /params)
echo "params: straight $pa, again $pb, resumed $pc"
[ "$pa" = "$pb" ] || fail "two runs with the same seed differ"
[ "$pa" = "$pc" ] || fail "stop and resume differs from the straight run"
oa=$(group_hash a/$final /optimizer/momentum) oc=$(group_hash c/$final /optimizer/momentum)
echo "momentum: straight $oa, resumed $oc"
[ "$oa" = "$oc" ] || fail "optimizer state after resume differs"
# A different seed must give different parameters, or the comparison above proves nothing.
run_np "$np" 600 train "${common[@]}" --train.max_steps=$((2 * k)) --train.seed=8 --checkpoint.dir="$WORK/d" >d.log 2>&1 || { cat d.log; fail "run d"; }
[ "$(group_hash d/$final /params)" != "$pa" ] || fail "a different seed gave the same parameters"
