#!/usr/bin/env bash
# The `layers` model plugin (a model declared in model.layers) at np=2 under mpirun: the example
# config trains (the loss falls) and gives the same parameter bits as `model.name = cnn` with the
# same seed, its layers having the cnn's names; a declared model with batch norm and a residual
# block gives the same bits at np=1 and np=2 in deterministic mode. Also the ResNet-20 example
# starts and trains a few steps. Usage: layers_model.sh cnn | deterministic | resnet_example
source "$(dirname "$0")/lib.sh"
data=(--data.train="$DATA_DIR/train.h5" --data.test= --checkpoint.every_steps=0)
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }

case $1 in
  cnn)
    for model in layers cnn; do
      run_np 2 600 train --config "$EXAMPLES/fashion_mnist_$model.ini" "${data[@]}" --train.max_steps=30 \
        --train.log_every=10 --checkpoint.dir="$WORK/$model" >$model.log 2>&1 || { cat $model.log; fail "$model"; }
    done
    first=$(losses layers/metrics.jsonl | head -1)
    last=$(losses layers/metrics.jsonl | tail -1)
    echo "declared cnn at np=2: loss $first (step 10) -> $last (step 30)"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || { cat layers.log; fail "the loss did not fall"; }
    h5ls layers/step-30.h5/params >names.txt
    grep -q '^fc2\.weight ' names.txt || { cat names.txt; fail "no parameter fc2.weight"; }
    [ "$(group_hash layers/step-30.h5 /params)" = "$(group_hash cnn/step-30.h5 /params)" ] ||
      fail "the declared cnn's parameters differ from model.name = cnn's"
    ;;
  deterministic)
    write_config run.ini "[model]" "name = layers" \
      "layers = conv 8 k3 p1, bn, relu, residual { conv 8 k3 p1, bn, relu, conv 8 k3 p1, bn }, relu, avgpool 2, gap, linear 10"
    for np in 1 2; do
      run_np $np 600 train --config run.ini "${data[@]}" --train.max_steps=10 --sync.deterministic=true \
        --sync.micro_shards=4 --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 || { cat np$np.log; fail "np=$np"; }
    done
    h5ls -r np1/step-10.h5 >listing.txt
    grep -q '^/buffers/res1\.bn2\.running_var ' listing.txt || { cat listing.txt; fail "no res1.bn2 running statistics"; }
    [ "$(group_hash np1/step-10.h5 /params)" = "$(group_hash np2/step-10.h5 /params)" ] ||
      fail "deterministic declared-model parameters differ between np=1 and np=2"
    ;;
  resnet_example)
    run_np 2 600 train --config "$EXAMPLES/fashion_mnist_resnet.ini" "${data[@]}" --train.max_steps=4 \
      --train.log_every=2 --checkpoint.dir="$WORK/resnet" >resnet.log 2>&1 || { cat resnet.log; fail "resnet example"; }
    [ "$(losses resnet/metrics.jsonl | wc -l)" -eq 2 ] || { cat resnet.log; fail "no metrics for steps 2 and 4"; }
    grep -q '^augment = crop:4,flip' resnet.log || { cat resnet.log; fail "the resolved config lacks data.augment"; }
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
