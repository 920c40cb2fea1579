#!/usr/bin/env bash
# A checkpoint is plain HDF5: h5dump lists its parameters by canonical name, with the metadata.
source "$(dirname "$0")/lib.sh"
write_config run.ini
run_np 2 300 train --config run.ini --train.max_steps=5 >train.log 2>&1 || { cat train.log; fail "training failed"; }
[ "$(cat ckpt/latest)" = "step-5.h5" ] || fail "latest names $(cat ckpt/latest), expected step-5.h5"
listing=$(h5dump -n ckpt/step-5.h5)
echo "$listing"
for name in fc1.weight fc1.bias fc2.weight fc2.bias fc3.weight fc3.bias; do
  grep -q "dataset */params/$name\$" <<<"$listing" || fail "h5dump does not list /params/$name"
  grep -q "dataset */optimizer/momentum/$name\$" <<<"$listing" || fail "no optimizer state for $name"
done
h5dump -a /step ckpt/step-5.h5 | grep -q "(0): 5" || fail "attribute step is not 5"
h5dump -a /config ckpt/step-5.h5 | grep -q "global_batch = 128" || fail "the resolved config is not stored"
