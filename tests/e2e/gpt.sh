#!/usr/bin/env bash
# The gpt model plugin on text, end to end under mpirun: `data convert --text` writes byte tokens
# and streams (bounded memory on a file far larger than its buffer), and training reads such a
# file a window at a time (bounded memory again; data.in_memory gives the same bits); training at np=1, 2 and 4
# lowers the loss and reports test_loss and tokens_per_s; every sync strategy trains it; the step
# in device memory (the GPU's form, in_memory in lib.sh) gives the in-place bits; deterministic
# mode gives the same parameter bits at np=1, 2 and 4 and across accumulation splits; stopping and
# resuming mid-epoch gives the straight run's bits; weight decay on the matrices alone holds on every
# rank's range; and each bad input gets one line before step 1.
# Usage: gpt.sh convert|train|sync|deterministic|weight_decay|resume|bad_input
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/text_lib.sh"

case $1 in
  convert)
    convert_corpus
    expected=$(($(stat -c %s "$FORTUNES/cookie") + $(stat -c %s "$FORTUNES/computers")))
    grep -q "^wrote train.h5: $expected byte tokens from 2 files" convert.log || { cat convert.log; fail "convert line"; }
    h5ls train.h5 >listing.txt
    grep -qE "^tokens +Dataset \{$expected/Inf\}" listing.txt || { cat listing.txt; fail "/tokens is not 1-D of $expected"; }
    h5dump -H -d /tokens train.h5 | grep -q "H5T_STD_U8LE" || fail "/tokens is not uint8"
    h5dump -a /vocab_size train.h5 | grep -q "(0): 256" || fail "no vocab_size attribute of 256"
    h5dump -a /sources train.h5 | grep -q "$FORTUNES/computers" || fail "the sources are not named"
    # The bytes in order: the first file's, then the second's.
    h5dump -d /tokens -b LE -o tokens.bin train.h5 >/dev/null
    cat "$FORTUNES/cookie" "$FORTUNES/computers" | cmp - tokens.bin || fail "/tokens are not the files' bytes in order"
    "$MGTRAIN" data inspect train.h5 >inspect.txt 2>&1 || { cat inspect.txt; fail "data inspect"; }
    grep -q "vocabulary: 256" inspect.txt || { cat inspect.txt; fail "data inspect names no vocabulary"; }
    # Streaming: 300 MB of text through a converter whose peak memory stays far below that.
    head -c 300000000 /dev/urandom | base64 -w 100 >big.txt
    peak_kib=$(python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$MGTRAIN" data convert --text big.txt --out big.h5) ||
      fail "data convert --text on 400 MB"
    echo "converting $(stat -c %s big.txt) bytes: peak RSS $peak_kib KiB"
    [ "$peak_kib" -lt 150000 ] || fail "the converter held $peak_kib KiB for a 400 MB file: it does not stream"
    # Training reads such a corpus a window at a time: a rank's memory does not hold the file.
    write_text_config gpt
    "$MGTRAIN" train --config run.ini --data.train="$WORK/big.h5" --data.test= --train.max_steps=2 \
      --checkpoint.dir="$WORK/big" --json >big.json 2>big.log || { cat big.log; fail "training on the 400 MB corpus"; }
    peak_mb=$(json_field peak_rss_mb <<<"$(tail -1 big.json)")
    echo "training on $(stat -c %s big.txt) bytes of text: peak RSS $peak_mb MB"
    [ "${peak_mb%.*}" -lt 200 ] || fail "training held $peak_mb MB for a 400 MB corpus: it reads the whole file"
    ;;
  train)
    convert_corpus
    write_text_config gpt
    for np in 1 2 4; do
      run_np $np 600 train --config run.ini --checkpoint.dir="$WORK/np$np" --json >np$np.json 2>np$np.log ||
        { cat np$np.log; fail "gpt at np=$np"; }
      loss_fell np$np "gpt at np=$np"
      done_line=$(tail -1 np$np.json)
      test_loss=$(json_field test_loss <<<"$done_line")
      tokens=$(json_field tokens_per_s <<<"$done_line")
      echo "np=$np: test_loss $test_loss nats/token, $tokens tokens/s"
      awk -v l="$test_loss" 'BEGIN { exit !(l > 0.5 && l < 5.0) }' || { echo "$done_line"; fail "test_loss '$test_loss'"; }
      awk -v t="$tokens" 'BEGIN { exit !(t > 0) }' || { echo "$done_line"; fail "tokens_per_s '$tokens'"; }
    done
    # The file held in memory (data.in_memory) gives the windows read from the file one at a time.
    run_np 1 600 train --config run.ini --data.in_memory=true --checkpoint.dir="$WORK/in_memory" >in_memory.log 2>&1 ||
      { cat in_memory.log; fail "gpt with data.in_memory"; }
    "$MGTRAIN" compare np1/step-40.h5 in_memory/step-40.h5 || fail "data.in_memory = true changed the parameters"
    grep -q "^test loss .* nats/token (perplexity .*, .* bits per byte)" np2.json || { cat np2.json; fail "no test line"; }
    grep -qE "^epoch 1/1 step 40/40 loss [0-9.]+ tokens/s [0-9]+ " np2.json || { cat np2.json; fail "no tokens/s in the progress line"; }
    grep -q '"tokens_per_s"' np2/metrics.jsonl || fail "the metrics file has no tokens_per_s"
    "$MGTRAIN" eval --checkpoint np2/step-40.h5 --data test.h5 >eval.log 2>&1 || { cat eval.log; fail "eval"; }
    grep -q "nats/token  perplexity" eval.log || { cat eval.log; fail "eval reports no perplexity"; }
    in_memory device run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/device" >device.log 2>&1 ||
      { cat device.log; fail "gpt with the step in device memory"; }
    "$MGTRAIN" compare np2/step-40.h5 device/step-40.h5 --rtol 1e-5 ||
      fail "the parameters with the step in device memory differ from in place"
    ;;
  sync)
    convert_corpus
    write_text_config gpt
    run_np 2 600 train --config run.ini --sync.name=grad_accum --checkpoint.dir="$WORK/accum" >accum.log 2>&1 ||
      { cat accum.log; fail "grad_accum"; }
    loss_fell accum "grad_accum at np=2"
    run_np 2 600 train --config run.ini --sync.name=zero --checkpoint.dir="$WORK/zero" >zero.log 2>&1 ||
      { cat zero.log; fail "zero"; }
    loss_fell zero "zero at np=2"
    run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/allreduce" >allreduce.log 2>&1 ||
      { cat allreduce.log; fail "allreduce"; }
    "$MGTRAIN" compare allreduce/step-40.h5 zero/step-40.h5 --rtol 1e-4 >zero_compare.txt 2>&1 ||
      { cat zero_compare.txt; fail "zero's parameters are not allreduce's"; }
    run_np 3 600 train --config run.ini --sync.name=param_server --checkpoint.dir="$WORK/ps" >ps.log 2>&1 ||
      { cat ps.log; fail "param_server"; }
    loss_fell ps "param_server at np=3"
    ;;
  deterministic)
    convert_corpus
    write_text_config gpt
    det=(--config run.ini --train.max_steps=12 --sync.deterministic=true)
    for np in 1 2 4; do
      run_np $np 600 train "${det[@]}" --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 ||
        { cat np$np.log; fail "deterministic np=$np"; }
    done
    run_np 2 600 train "${det[@]}" --sync.name=grad_accum --sync.accum_steps=4 --checkpoint.dir="$WORK/accum" \
      >accum.log 2>&1 || { cat accum.log; fail "deterministic grad_accum"; }
    reference=$(params_hash np1/step-12.h5)
    for run in np2 np4 accum; do
      [ "$(params_hash $run/step-12.h5)" = "$reference" ] || fail "deterministic gpt: $run's parameters differ from np=1"
    done
    echo "deterministic gpt: the same parameter bits at np=1, 2, 4 and with 4 accumulation steps"
    ;;
  weight_decay)
    # optimizer.weight_decay_on = matrices: AdamW decays the weight matrices and embeddings, not the
    # biases and layer norms. The mask follows the store's layout onto each rank's range: a zero
    # shard, the step in device memory and a parameter server's shards give the bits of one rank.
    convert_corpus
    write_text_config gpt
    wd=(--config run.ini --train.max_steps=12 --sync.deterministic=true --optimizer.weight_decay=0.5)
    run_np 1 600 train "${wd[@]}" --optimizer.weight_decay_on=matrices --checkpoint.dir="$WORK/np1" >np1.log 2>&1 ||
      { cat np1.log; fail "weight_decay_on = matrices at np=1"; }
    run_np 1 600 train "${wd[@]}" --checkpoint.dir="$WORK/all" >all.log 2>&1 || { cat all.log; fail "weight decay on all"; }
    [ "$(params_hash all/step-12.h5)" != "$(params_hash np1/step-12.h5)" ] ||
      fail "weight_decay_on = matrices changed nothing: the mask is not applied"
    run_np 2 600 train "${wd[@]}" --optimizer.weight_decay_on=matrices --sync.name=zero --checkpoint.dir="$WORK/zero" \
      >zero.log 2>&1 || { cat zero.log; fail "weight_decay_on = matrices under zero"; }
    [ "$(params_hash zero/step-12.h5)" = "$(params_hash np1/step-12.h5)" ] ||
      fail "weight_decay_on = matrices: zero's shards at np=2 differ from np=1"
    in_memory device run_np 2 600 train "${wd[@]}" --optimizer.weight_decay_on=matrices \
      --checkpoint.dir="$WORK/device" >device.log 2>&1 || { cat device.log; fail "the step in device memory"; }
    "$MGTRAIN" compare np1/step-12.h5 device/step-12.h5 --rtol 1e-5 ||
      fail "weight_decay_on = matrices: the step in device memory differs from in place"
    run_np 3 600 train "${wd[@]}" --optimizer.weight_decay_on=matrices --sync.name=param_server --sync.servers=2 \
      --checkpoint.dir="$WORK/ps" >ps.log 2>&1 || { cat ps.log; fail "weight_decay_on = matrices under param_server"; }
    # A worker's pulls from two servers are not one moment's parameters: close, not the same bits (up
    # to 2e-4 with the decay on every parameter too). A mask off by a range would move a layer
    # norm's scales or a matrix by 1 - lr * weight_decay a step: 1.2% in 12 steps.
    "$MGTRAIN" compare np1/step-12.h5 ps/step-12.h5 --rtol 1e-3 --params-only >ps_compare.txt ||
      { cat ps_compare.txt; fail "weight_decay_on = matrices: two servers' shards differ from one rank's update"; }
    echo "weight decay on matrices: the same parameters at np=1, under zero and in device memory; within 1e-3 on two servers"
    ;;
  resume)
    convert_corpus
    write_text_config gpt
    # 8,000 bytes in windows of 32: 249 windows, 15 steps of 16 an epoch. The stop at step 25 falls
    # in the middle of the second epoch, and the 40 steps cross two epoch boundaries.
    head -c 8000 "$FORTUNES/wisdom" >small.txt
    "$MGTRAIN" data convert --text small.txt --out small.h5 >/dev/null
    sed -i "s|^train = .*|train = $WORK/small.h5|" run.ini
    run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
      { cat straight.log; fail "the straight run"; }
    grep -q "epoch 2" straight.log || { cat straight.log; fail "the run did not reach a second epoch"; }
    run_np 2 600 train --config run.ini --train.max_steps=25 --checkpoint.dir="$WORK/split" >split1.log 2>&1 ||
      { cat split1.log; fail "the first part"; }
    run_np 2 600 train --config run.ini --checkpoint.dir="$WORK/split" --resume latest >split2.log 2>&1 ||
      { cat split2.log; fail "the resumed part"; }
    for group in /params /optimizer/exp_avg /optimizer/exp_avg_sq; do
      [ "$(group_hash straight/step-40.h5 $group)" = "$(group_hash split/step-40.h5 $group)" ] ||
        fail "$group after a mid-epoch stop and resume differs from the straight run"
    done
    echo "gpt: stop at step 25 and resume gives the straight run's bits at step 40"
    ;;
  bad_input)
    convert_corpus
    write_text_config gpt
    expect_error() {  # expect_error PATTERN ARGS...: one error line matching PATTERN, no data or checkpoint
      local pattern=$1; shift
      rm -rf out
      "$MGTRAIN" "$@" >err.log 2>&1 && { cat err.log; fail "accepted: $*"; }
      one_error_line err.log | grep -qE "$pattern" || { cat err.log; fail "'$*': expected /$pattern/"; }
      [ -z "$(ls out/*.h5 2>/dev/null)" ] && [ ! -e out.h5 ] || fail "'$*' left something written"
    }
    : >empty.txt
    expect_error "empty.txt.*empty" data convert --text empty.txt --out out.h5
    expect_error "missing.txt" data convert --text missing.txt --out out.h5
    mkfifo fifo.txt
    expect_error "fifo.txt.*FIFO, expected a regular file" data convert --text fifo.txt --out out.h5
    expect_error "'\.'.*directory|\. .*directory" data convert --text . --out out.h5
    printf 'only a few bytes' >short.txt
    "$MGTRAIN" data convert --text short.txt --out short.h5 >/dev/null
    expect_error "short.h5.*16 tokens.*one window.*= 33" train --config run.ini --data.train="$WORK/short.h5" \
      --checkpoint.dir="$WORK/out"
    expect_error "model.heads.* 3 does not divide model.dim = 32" train --config run.ini --model.heads=3 \
      --checkpoint.dir="$WORK/out"
    expect_error "train.h5' holds [0-9]+ tokens, fewer than one window of model.context \+ 1 = 1000001" \
      train --config run.ini --model.context=1000000 \
      --checkpoint.dir="$WORK/out"
    expect_error "vocab_size 256, more than the model.s vocabulary of 100 \(model.vocab\)" train --config run.ini --model.vocab=100 \
      --checkpoint.dir="$WORK/out"
    expect_error "train.h5.*token file.*mlp|mlp.*token" train --config run.ini --model.name=mlp \
      --checkpoint.dir="$WORK/out"
    expect_error "$DATA_DIR/train.h5.*gpt|gpt.*token" train --config run.ini --data.train="$DATA_DIR/train.h5" \
      --data.test="$DATA_DIR/test.h5" --checkpoint.dir="$WORK/out"
    # Under mpirun at np=2 too: one line, no rank left.
    run_np 2 120 train --config run.ini --model.heads=3 --checkpoint.dir="$WORK/out" >np2.log 2>&1 &&
      { cat np2.log; fail "np=2 accepted heads = 3"; }
    one_error_line np2.log >/dev/null
    no_ranks_left
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
