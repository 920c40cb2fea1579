#!/usr/bin/env bash
# The GPU path's program (the step in device memory: its own copies, its own executor, the batch
# staged), checked on the CPU backend (in_memory device, lib.sh) against the step in place, under
# mpirun: the same losses and parameters (dropout masks, gradient accumulation, sgd and adam
# included); resume; out of memory; bf16; the sync strategies that work on host memory; and
# train.device = gpu on a machine without one.
# Usage: gpu_path.sh parity_mlp|parity_cnn_accum_adam|parity_cnn_global_pool|resume|out_of_memory|bf16|param_server|deterministic|no_gpu
source "$(dirname "$0")/lib.sh"

# Each logged loss of two runs' metrics files, side by side; fails beyond a relative 1e-5.
same_losses() {  # same_losses A.jsonl B.jsonl
  paste -d' ' <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1") <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$2") |
    awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad++; print "  loss", $1, $2 }
         END { if (n == 0 || bad > 0) { print "  " bad " of " n " losses differ"; exit 1 } }'
}

case $1 in
  parity_mlp|parity_cnn_accum_adam|parity_cnn_global_pool)
    if [ "$1" = parity_mlp ]; then
      write_config run.ini "[train]" "lr_schedule = cosine"
      extra=(--model.name=mlp --model.dropout=0.2)
    elif [ "$1" = parity_cnn_global_pool ]; then
      # The SDK's newest layer, global average pooling, on both executors and in deterministic
      # mode: the same parameter bits at np=1 and np=2.
      write_config run.ini
      extra=(--model.name=cnn --model.channels=8,16 --model.hidden=32 --model.global_pool=true)
      for np in 1 2; do
        run_np $np 600 train --config run.ini "${extra[@]}" --train.max_steps=30 --sync.deterministic=true \
          --checkpoint.dir="$WORK/det$np" >det$np.log 2>&1 || { cat det$np.log; fail "deterministic np=$np"; }
      done
      [ "$(group_hash det1/step-30.h5 /params)" = "$(group_hash det2/step-30.h5 /params)" ] ||
        fail "deterministic parameters with global pooling differ between np=1 and np=2"
    else
      write_config run.ini
      sed -i '/^momentum/d' run.ini  # adam has no such key
      extra=(--model.name=cnn --model.channels=8,16 --model.hidden=32 --optimizer.name=adam --optimizer.lr=0.002
             --sync.name=grad_accum --sync.accum_steps=2)
    fi
    for memory in host device; do
      in_memory $memory run_np 2 600 train --config run.ini "${extra[@]}" --train.max_steps=60 --train.log_every=10 \
        --checkpoint.dir="$WORK/$memory" --json >$memory.log 2>&1 || { cat $memory.log; fail "the step in $memory memory"; }
      grep -q '"device":"cpu"' $memory.log || { cat $memory.log; fail "the result does not say device cpu"; }
    done
    grep -q "^device: cpu (the CPU backend, in memory of the step's own" device.log || fail "no device line"
    same_losses host/metrics.jsonl device/metrics.jsonl || fail "the step's losses in device memory differ from in place"
    "$MGTRAIN" compare host/step-60.h5 device/step-60.h5 --rtol 1e-5 ||
      fail "the step's parameters in device memory differ from in place"
    ;;
  resume)
    write_config run.ini
    common=(--config run.ini --train.log_every=10)
    export MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1
    run_np 2 600 train "${common[@]}" --train.max_steps=40 --checkpoint.dir="$WORK/a" >a.log 2>&1 || { cat a.log; fail "run a"; }
    run_np 2 600 train "${common[@]}" --train.max_steps=20 --checkpoint.dir="$WORK/c" >c1.log 2>&1 || { cat c1.log; fail "run c, first half"; }
    run_np 2 600 train "${common[@]}" --train.max_steps=40 --checkpoint.dir="$WORK/c" --resume latest >c2.log 2>&1 ||
      { cat c2.log; fail "run c, resumed"; }
    grep -q "resumed from step 20" c2.log || { cat c2.log; fail "the second half did not resume from step 20"; }
    for group in /params /optimizer/momentum; do
      [ "$(group_hash a/step-40.h5 $group)" = "$(group_hash c/step-40.h5 $group)" ] ||
        fail "$group after stop and resume differs from the straight run"
    done
    ;;
  out_of_memory)
    # A "device" of 6 MB (test-only MGTRAIN_TEST_DEVICE_MEMORY_MB): a local micro-batch of 512 rows
    # does not fit, one of 256 does.
    write_config run.ini
    export MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1
    common=(--config run.ini --train.global_batch=1024 --train.max_steps=6 --train.log_every=2)
    set +e
    MGTRAIN_TEST_DEVICE_MEMORY_MB=6 run_np 2 120 train "${common[@]}" --checkpoint.dir="$WORK/refused" >refused.log 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] && [ $rc -lt 124 ] || { cat refused.log; fail "exit $rc, expected a clean failure"; }
    one_error_line refused.log | grep -q "out of device memory on rank 0: the micro-batch of 512 rows does not fit.*gpu.on_oom = halve" ||
      fail "the error does not name the micro-batch and the way out"
    no_ranks_left
    MGTRAIN_TEST_DEVICE_MEMORY_MB=6 run_np 2 300 train "${common[@]}" --gpu.on_oom=halve --checkpoint.dir="$WORK/halved" >halved.log 2>&1 ||
      { cat halved.log; fail "gpu.on_oom = halve"; }
    grep -q "warning: \[rank 0\] the micro-batch of 512 rows does not fit .* running it as 2 passes of 256 rows" halved.log ||
      { cat halved.log; fail "no warning about the halving"; }
    # The same global batch, so the same training as without a cap (up to the order of the sums).
    run_np 2 300 train "${common[@]}" --checkpoint.dir="$WORK/whole" >whole.log 2>&1 || { cat whole.log; fail "uncapped run"; }
    same_losses whole/metrics.jsonl halved/metrics.jsonl || fail "halving the micro-batch changed the losses"
    ;;
  bf16)
    # Mixed precision on the CPU backend (bf16 operands emulated exactly, FP32 sums): it must track
    # FP32 training closely, and must not be FP32 in disguise.
    write_config run.ini
    export MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1
    for precision in fp32 bf16; do
      run_np 2 600 train --config run.ini --gpu.precision=$precision --train.max_steps=200 \
        --train.log_every=40 --checkpoint.dir="$WORK/$precision" >$precision.log 2>&1 || { cat $precision.log; fail "gpu.precision = $precision"; }
    done
    paste -d' ' <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' fp32/metrics.jsonl) <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' bf16/metrics.jsonl) |
      awk '{ n++; d = ($1 - $2) / $1; if (d < 0) d = -d; print "  loss", $1, $2, d; if (d > 0.03) bad++ }
           END { exit !(n == 5 && bad == 0) }' || fail "bf16 losses are not within 3% of FP32's"
    if "$MGTRAIN" compare fp32/step-200.h5 bf16/step-200.h5 --rtol 0 >compare.log; then
      fail "bf16 training gave FP32's parameters bit for bit: the option changed nothing"
    fi
    # The CNN, whose convolutions take bf16 operands too (their emulation is checked against the
    # FP32 convolution in unit_kernels, and the GPU's against it in gpu_cudnn_ops): it trains.
    cnn=(--model.name=cnn --model.channels=4,8 --model.hidden=16 --train.max_steps=60 --train.log_every=20)
    for precision in fp32 bf16; do
      run_np 2 600 train --config run.ini --gpu.precision=$precision "${cnn[@]}" \
        --checkpoint.dir="$WORK/cnn-$precision" >cnn-$precision.log 2>&1 || { cat cnn-$precision.log; fail "CNN, gpu.precision = $precision"; }
    done
    paste -d' ' <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' cnn-fp32/metrics.jsonl) <(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' cnn-bf16/metrics.jsonl) |
      awk '{ n++; d = ($1 - $2) / $1; if (d < 0) d = -d; print "  cnn loss", $1, $2, d; if (d > 0.03) bad++ }
           END { exit !(n == 3 && bad == 0) }' || fail "CNN bf16 losses are not within 3% of FP32's"
    ;;
  param_server)
    # A parameter server's workers with the step in device memory: gradients go to the servers
    # through host memory. One worker in lock step (staleness 0) is deterministic, so it must match
    # the step in place bit for bit; two asynchronous workers must finish the run with the servers'
    # final state.
    write_config run.ini "[sync]" "name = param_server" "staleness = 0"
    for memory in host device; do
      in_memory $memory run_np 2 300 train --config run.ini --train.max_steps=40 --train.log_every=10 \
        --checkpoint.dir="$WORK/$memory" --json >$memory.log 2>&1 || { cat $memory.log; fail "the step in $memory memory"; }
    done
    grep -q "^device: cpu (.*sync 'param_server' on host memory" device.log ||
      { cat device.log; fail "no device line saying the sync runs on the host"; }
    same_losses host/metrics.jsonl device/metrics.jsonl || fail "the workers' losses differ from in place"
    "$MGTRAIN" compare host/step-40.h5 device/step-40.h5 --rtol 0 ||
      fail "the servers' final parameters differ from in place"
    in_memory device run_np 3 300 train --config run.ini --train.max_steps=40 --sync.staleness=2 \
      --checkpoint.dir="$WORK/async" --json >async.log 2>&1 || { cat async.log; fail "two asynchronous workers"; }
    grep -q "^device: cpu (the CPU backend, in memory of the step's own" async.log ||
      { cat async.log; fail "rank 0 did not train with the step in device memory"; }
    [ -f async/step-40.h5 ] || fail "no final checkpoint after two asynchronous workers"
    ;;
  deterministic)
    # sync.deterministic with the step in device memory: each micro-shard's gradient goes to the
    # host's fixed tree. The same bits at 1, 2 and 4 ranks, and with grad_accum's split of the same
    # 8 shards.
    write_config run.ini "[sync]" "deterministic = true"
    common=(--config run.ini --train.max_steps=20 --train.log_every=10 --model.dropout=0.1)
    for np in 1 2 4; do
      in_memory device run_np $np 300 train "${common[@]}" --sync.micro_shards=8 --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 ||
        { cat np$np.log; fail "np=$np"; }
    done
    in_memory device run_np 4 300 train "${common[@]}" --sync.name=grad_accum --sync.accum_steps=2 --checkpoint.dir="$WORK/accum" \
      >accum.log 2>&1 || { cat accum.log; fail "grad_accum, np=4 x 2"; }
    for run in np2 np4 accum; do
      [ "$(group_hash np1/step-20.h5 /params)" = "$(group_hash $run/step-20.h5 /params)" ] ||
        fail "deterministic parameters of $run differ from np=1's"
    done
    # In place (micro-shards through one pass together) the same training; here the same bits too.
    run_np 2 300 train --config run.ini --train.max_steps=20 --train.log_every=10 --model.dropout=0.1 \
      --sync.micro_shards=8 --checkpoint.dir="$WORK/host" >host.log 2>&1 || { cat host.log; fail "the step in place"; }
    same_losses host/metrics.jsonl np1/metrics.jsonl || fail "the step's losses in place differ from in device memory"
    ;;
  no_gpu)
    write_config run.ini
    set +e
    run_np 2 120 train --config run.ini --train.device=gpu --train.max_steps=5 >gpu.log 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] && [ $rc -lt 124 ] || { cat gpu.log; fail "exit $rc, expected a clean failure"; }
    one_error_line gpu.log | grep -q "train.device = gpu, but rank 0 .* has no usable GPU" || fail "the error does not say why"
    no_ranks_left
    # auto falls back to the CPU on such a machine.
    run_np 2 300 train --config run.ini --train.max_steps=5 --json >auto.log 2>&1 || { cat auto.log; fail "train.device = auto"; }
    grep -q '"device":"cpu"' auto.log || { cat auto.log; fail "auto did not train on the CPU"; }
    ;;
  *) fail "unknown case $1" ;;
esac
