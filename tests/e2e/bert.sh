#!/usr/bin/env bash
# The bert model plugin (a bidirectional encoder trained as a masked language model) on text, end
# to end under mpirun: training lowers the masked-token loss and reports masked-token figures,
# which `mgtrain eval` gives again from the checkpoint; every sync strategy trains it;
# deterministic mode gives the same parameter bits at np=1, 2 and 4, across accumulation splits
# and on a resume at another world size; the encoder exports to ONNX (checked by mgtrain's own
# evaluator, and by ONNX Runtime where the ONNX tests' venv holds it) and generate refuses it;
# the examples train, the encoder declared as a list of layers too; and each bad input gets one
# line before step 1.
# Usage: bert.sh train|sync|deterministic|resume|export|layers|bad_input
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/text_lib.sh"

case $1 in
  train)
    convert_corpus
    write_text_config bert
    for norm in post pre; do
      run_np 2 120 train --config run.ini --model.norm=$norm --checkpoint.dir="$WORK/$norm" --json >$norm.json \
        2>$norm.log || { cat $norm.log; fail "bert ($norm-norm) at np=2"; }
      loss_fell $norm "bert ($norm-norm) at np=2" "masked-token loss"
    done
    # A window of 32 tokens predicts round(0.15 x 32) = 5 of them; the test file's windows are
    # floor((tokens - 1) / 32), so the line counts 5 masked tokens a window.
    tokens=$(h5ls test.h5 | sed -n 's/^tokens *Dataset {\([0-9]*\)\/Inf}/\1/p')
    masked=$(((tokens - 1) / 32 * 5))
    line=$(grep "^test masked-token loss" post.json) || { cat post.json; fail "no masked-token test line"; }
    echo "$line"
    [[ $line == *"on $masked masked tokens of $WORK/test.h5"* ]] || fail "the test line does not count $masked masked tokens"
    test_loss=$(json_field test_loss <<<"$(tail -1 post.json)")
    test_accuracy=$(json_field test_accuracy <<<"$(tail -1 post.json)")
    # Below a uniform guess over the 257 ids (5.55 nats), and better than chance.
    awk -v l="$test_loss" -v a="$test_accuracy" 'BEGIN { exit !(l > 1.0 && l < 4.5 && a > 0.05 && a < 1) }' ||
      fail "test figures: loss $test_loss, accuracy $test_accuracy"
    # eval draws the same fixed masks: the same figures from the checkpoint, at another batch too.
    for batch in 0 7; do
      args=(--checkpoint post/step-40.h5 --data test.h5)
      [ "$batch" = 0 ] || args+=(--batch "$batch")
      "$MGTRAIN" eval "${args[@]}" >eval$batch.log 2>&1 || { cat eval$batch.log; fail "eval"; }
      cat eval$batch.log
      grep -q "masked-token loss $(printf '%.4f' "$test_loss") nats/token .* masked-token accuracy $(printf '%.4f' \
        "$test_accuracy")  masked tokens $masked " eval$batch.log || fail "eval (batch $batch) disagrees with the test line"
    done
    ;;
  sync)
    convert_corpus
    write_text_config bert
    run_np 2 120 train --config run.ini --sync.name=grad_accum --sync.accum_steps=2 --checkpoint.dir="$WORK/accum" \
      >accum.log 2>&1 || { cat accum.log; fail "grad_accum"; }
    loss_fell accum "grad_accum at np=2" "masked-token loss"
    run_np 2 120 train --config run.ini --sync.name=zero --checkpoint.dir="$WORK/zero" >zero.log 2>&1 ||
      { cat zero.log; fail "zero"; }
    loss_fell zero "zero at np=2" "masked-token loss"
    run_np 2 120 train --config run.ini --checkpoint.dir="$WORK/allreduce" >allreduce.log 2>&1 ||
      { cat allreduce.log; fail "allreduce"; }
    "$MGTRAIN" compare allreduce/step-40.h5 zero/step-40.h5 --rtol 1e-4 >zero_compare.txt 2>&1 ||
      { cat zero_compare.txt; fail "zero's parameters are not allreduce's"; }
    run_np 3 120 train --config run.ini --sync.name=param_server --checkpoint.dir="$WORK/ps" >ps.log 2>&1 ||
      { cat ps.log; fail "param_server"; }
    loss_fell ps "param_server at np=3" "masked-token loss"
    # The step in device memory (the GPU's program on the CPU backend) gives the in-place figures.
    in_memory device run_np 2 120 train --config run.ini --checkpoint.dir="$WORK/device" >device.log 2>&1 ||
      { cat device.log; fail "bert with the step in device memory"; }
    "$MGTRAIN" compare allreduce/step-40.h5 device/step-40.h5 --rtol 1e-5 ||
      fail "the parameters with the step in device memory differ from in place"
    ;;
  deterministic)
    convert_corpus
    write_text_config bert
    det=(--config run.ini --train.max_steps=12 --sync.deterministic=true)
    for np in 1 2 4; do
      run_np $np 120 train "${det[@]}" --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 ||
        { cat np$np.log; fail "deterministic np=$np"; }
    done
    run_np 2 120 train "${det[@]}" --sync.name=grad_accum --sync.accum_steps=4 --checkpoint.dir="$WORK/accum" \
      >accum.log 2>&1 || { cat accum.log; fail "deterministic grad_accum"; }
    reference=$(params_hash np1/step-12.h5)
    for run in np2 np4 accum; do
      [ "$(params_hash $run/step-12.h5)" = "$reference" ] || fail "deterministic bert: $run's parameters differ from np=1"
    done
    # Another seed masks other positions: other bits (the masks are not a constant of the file).
    run_np 1 120 train "${det[@]}" --train.seed=12 --checkpoint.dir="$WORK/seed12" >seed12.log 2>&1 ||
      { cat seed12.log; fail "deterministic np=1, seed 12"; }
    [ "$(params_hash seed12/step-12.h5)" != "$reference" ] || fail "another seed gave the same parameters"
    echo "deterministic bert: the same parameter bits at np=1, 2, 4 and with 4 accumulation steps"
    ;;
  resume)
    convert_corpus
    write_text_config bert
    # 8,000 bytes in windows of 32: 249 windows, 15 steps of 16 an epoch; the stop at step 25 falls
    # mid-epoch, and the run resumes at another world size, in deterministic mode.
    head -c 8000 "$FORTUNES/wisdom" >small.txt
    "$MGTRAIN" data convert --text small.txt --out small.h5 >/dev/null
    sed -i "s|^train = .*|train = $WORK/small.h5|" run.ini
    det=(--config run.ini --sync.deterministic=true)
    run_np 2 120 train "${det[@]}" --checkpoint.dir="$WORK/straight" >straight.log 2>&1 ||
      { cat straight.log; fail "the straight run"; }
    run_np 2 120 train "${det[@]}" --train.max_steps=25 --checkpoint.dir="$WORK/split" >split1.log 2>&1 ||
      { cat split1.log; fail "the first part"; }
    run_np 4 120 train "${det[@]}" --checkpoint.dir="$WORK/split" --resume latest >split2.log 2>&1 ||
      { cat split2.log; fail "the resumed part at np=4"; }
    for group in /params /optimizer/exp_avg /optimizer/exp_avg_sq; do
      [ "$(group_hash straight/step-40.h5 $group)" = "$(group_hash split/step-40.h5 $group)" ] ||
        fail "$group after a stop at np=2 and a resume at np=4 differs from the straight run"
    done
    echo "bert: stop at step 25 (np=2) and resume at np=4 gives the straight run's bits at step 40"
    ;;
  export)
    convert_corpus
    write_text_config bert
    run_np 1 120 train --config run.ini --train.max_steps=5 --data.test= >train.log 2>&1 ||
      { cat train.log; fail "training"; }
    for norm in post pre; do
      [ $norm = post ] || run_np 1 120 train --config run.ini --train.max_steps=5 --data.test= --model.norm=pre \
        --checkpoint.dir="$WORK/ckpt_pre" >train_pre.log 2>&1 || { cat train_pre.log; fail "training (pre)"; }
      ckpt=ckpt/step-5.h5
      [ $norm = post ] || ckpt=ckpt_pre/step-5.h5
      "$MGTRAIN" export --checkpoint $ckpt --out bert_$norm.onnx >export_$norm.log 2>&1 ||
        { cat export_$norm.log; fail "export ($norm-norm)"; }
      cat export_$norm.log
      grep -qF 'input "input" int64 [N, T] token ids, T from 1 to 32; output "logits" [N, T, 257]' export_$norm.log ||
        fail "export ($norm-norm): not the encoder's input and output"
      grep -qE "^checked: [0-9]+ layer outputs agree with the model's forward" export_$norm.log ||
        fail "export ($norm-norm): the graph was not checked against the model's forward"
      [ -s bert_$norm.onnx ] || fail "export ($norm-norm) wrote no file"
    done
    # ONNX Runtime, where the venv of onnx_export.sh holds it (that test installs it from PyPI).
    venv=${ONNX_VENV:-$WORK/../onnx-venv}
    if "$venv/bin/python" -c "import onnxruntime, onnx, numpy, h5py" >/dev/null 2>&1; then
      for norm in post pre; do
        "$venv/bin/python" "$(dirname "$0")/bert_onnx_check.py" bert_$norm.onnx test.h5 32 257 ||
          fail "bert_onnx_check.py on the $norm-norm export"
      done
    else
      echo "note: no ONNX Runtime in $venv (e2e.onnx_export.* installs it): its check is left out"
    fi
    # A masked language model does not continue a prompt: generate refuses it by name.
    "$MGTRAIN" generate --checkpoint ckpt/step-5.h5 --prompt "The " --tokens 4 >generate.log 2>&1 &&
      { cat generate.log; fail "generate accepted a masked language model"; }
    one_error_line generate.log | grep -q "a masked language model (model.objective = mlm)" ||
      { cat generate.log; fail "generate's refusal does not name the objective"; }
    ;;
  layers)
    # The examples' configs on the fortunes text, made small enough for a test (2 layers of width
    # 32, windows of 32) with a warm-up that fits a short run: the bert plugin's, and the same
    # encoder declared as a list of layers (model.objective = mlm, the mask token embed's last id).
    convert_corpus
    text=(--data.train="$WORK/train.h5" --data.test="$WORK/test.h5" --checkpoint.every_steps=0 --train.max_steps=40
      --train.warmup_steps=5 --train.log_every=10 --train.global_batch=16 --optimizer.lr=0.002)
    small_bert=(--model.layers=2 --model.heads=2 --model.dim=32 --model.context=32)
    block="residual { linear 96, attention 2 bidirectional, linear 32 }, layernorm, residual { linear 128, gelu, linear 32 }, layernorm"
    small_list=(--model.input_shape=32 --model.layers="embed 257 32, layernorm, $block, $block, linear 32, gelu, layernorm, tied_head")
    for example in text_bert text_bert_layers; do
      small=("${small_bert[@]}")
      [ $example = text_bert ] || small=("${small_list[@]}")
      run_np 2 120 train --config "$EXAMPLES/$example.ini" "${text[@]}" "${small[@]}" --checkpoint.dir="$WORK/$example" \
        >$example.log 2>&1 || { cat $example.log; fail "examples/$example.ini"; }
      loss_fell $example "examples/$example.ini" "masked-token loss"
      grep -q "^test masked-token loss .* on [0-9]* masked tokens" $example.log ||
        { cat $example.log; fail "examples/$example.ini: no masked-token test line"; }
    done
    "$MGTRAIN" export --checkpoint text_bert_layers/step-40.h5 --out layers.onnx >export.log 2>&1 ||
      { cat export.log; fail "export of the declared bert"; }
    grep -qE "^checked: [0-9]+ layer outputs agree" export.log || { cat export.log; fail "the declared bert's export"; }
    # A list whose embed leaves no id above the file's tokens has no mask token to give.
    run_np 1 60 train --config "$EXAMPLES/text_bert_layers.ini" "${text[@]}" --checkpoint.dir="$WORK/out" \
      --model.layers="embed 256 32, linear 96, attention 2 bidirectional, linear 32, tied_head" \
      --model.input_shape=32 >small_vocab.log 2>&1 && { cat small_vocab.log; fail "a vocabulary with no room for the mask"; }
    one_error_line small_vocab.log | grep -q "vocab_size 256, more than the model.s vocabulary of 255" ||
      { cat small_vocab.log; fail "the vocabulary with no room for the mask is not named"; }
    ;;
  bad_input)
    convert_corpus
    write_text_config bert
    expect_error() {  # expect_error PATTERN ARGS...: one error line matching PATTERN, no checkpoint
      local pattern=$1; shift
      rm -rf out
      "$MGTRAIN" "$@" >err.log 2>&1 && { cat err.log; fail "accepted: $*"; }
      one_error_line err.log | grep -qE "$pattern" || { cat err.log; fail "'$*': expected /$pattern/"; }
      grep -q "^epoch .* step 1/" err.log && fail "'$*' trained a step first"
      [ -z "$(ls out/*.h5 2>/dev/null)" ] || fail "'$*' left a checkpoint"
    }
    expect_error "model.heads.* = 3 does not divide model.dim = 32: expected a divisor" train --config run.ini \
      --model.heads=3 --checkpoint.dir="$WORK/out"
    expect_error "model.context.* = 64 exceeds the position table of model.positions = 32 rows: expected a context of at most 32" \
      train --config run.ini --model.context=64 --model.positions=32 --checkpoint.dir="$WORK/out"
    expect_error "vocab_size 256, more than the model.s vocabulary of 200 \(model.vocab\): expected a model vocabulary of at least 256" \
      train --config run.ini --model.vocab=200 --checkpoint.dir="$WORK/out"
    expect_error "model.objective.*next_token" train --config run.ini --model.objective=next_token \
      --checkpoint.dir="$WORK/out"
    # Under mpirun at np=2 too: one line, no rank left.
    run_np 2 60 train --config run.ini --model.context=64 --model.positions=32 --checkpoint.dir="$WORK/out" \
      >np2.log 2>&1 && { cat np2.log; fail "np=2 accepted a context over the position table"; }
    one_error_line np2.log >/dev/null
    no_ranks_left
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
