#!/usr/bin/env bash
# `mgtrain export` to ONNX, checked by ONNX Runtime. Each model case trains briefly at np=2 under
# mpirun (agreement is the point, not accuracy), exports the checkpoint, and tests/e2e/onnx_check.py
# checks the file with onnx.checker and runs it with ONNX Runtime on the whole Fashion-MNIST test
# set, fed the raw pixels: the predictions agree with `mgtrain eval --logits` on at least 99.9% of
# the rows and the logits differ by at most 1e-4. The gpt cases (the head tied to the embedding, and
# one of its own with dropout) train on the fortunes package's text and run the graph on 128
# windows of held-out text fed as int64 token ids: logits within 1e-4 of eval's, per token, and the
# mean cross-entropy within 1e-4 of eval's test loss; so does the gpt declared in model.layers with
# an embedding without positions (embed V D nopositions), whose embedding is a Gather alone. The errors case: a file that is no checkpoint,
# an output that cannot be written, a layer and a model with no ONNX form, a data file of the wrong
# kind; each one error line naming it, a non-zero exit and no file (nor a temporary one) left behind.
# It also exports a gpt to an --out holding an escape byte: the line quotes it escaped (\x1b).
# The checker needs python3 with the venv module (Debian: python3-venv) and PyPI for onnxruntime,
# onnx, numpy and h5py, installed into "$WORK/../onnx-venv" (ONNX_VENV overrides) on first use and
# reused; exits 77 (skip) when PyPI cannot be reached.
# The check case: a layer whose export form is wrong is refused by name (no Python needed).
# Usage: onnx_export.sh mlp|cnn|resnet|layers|plugin_operator|plugin_nodes|gpt|gpt_untied|layers_nopositions|rope|check|errors
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
: "${TEST_PLUGIN_DIR:?}"
case_name=$1

skip() { echo "SKIP: $*" >&2; exit 77; }

# The venv, made once and shared by the cases (under a lock: ctest may run them at once).
python=${PYTHON:-python3}
venv=${ONNX_VENV:-$WORK/../onnx-venv}
packages=(onnxruntime onnx numpy h5py)
has_packages() { "$venv/bin/python" -c "import onnxruntime, onnx, numpy, h5py" >/dev/null 2>&1; }
prepare_venv() {
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if ! has_packages; then
    command -v "$python" >/dev/null || fail "no $python on PATH (scripts/install_deps.sh installs python3, python3-venv)"
    if [[ ! -x "$venv/bin/pip" ]]; then
      rm -rf "$venv"
      "$python" -m venv "$venv" >venv.log 2>&1 || { cat venv.log; rm -rf "$venv"; fail "'$python -m venv' failed"; }
    fi
    if ! "$venv/bin/pip" install --disable-pip-version-check -q "${packages[@]}" >pip.log 2>&1; then
      tail -20 pip.log
      # Only an unreachable package index is a skip; anything else is a failure.
      index=${PIP_INDEX_URL:-https://pypi.org/simple}
      "$venv/bin/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/onnxruntime/', timeout=20)" \
        "$index" >/dev/null 2>&1 || skip "the package index $index cannot be reached for ${packages[*]}"
      fail "'pip install ${packages[*]}' into $venv failed, though $index is reachable"
    fi
    has_packages || fail "${packages[*]} installed into $venv but cannot be imported"
  fi
  flock -u 9
  exec 9>&-
}

# Trains NAME briefly at np=2 with the extra arguments, exports its checkpoint and checks it.
# Usage: train_export_check NAME [checker options --] [train arguments...]
train_export_check() {
  local name=$1 checker=()
  shift
  if [[ ${1:-} == --checkpoint-buffers ]]; then
    checker=(--checkpoint "$WORK/$name/step-40.h5")
    shift
  fi
  run_np 2 600 train --config run.ini --train.max_steps=40 --train.log_every=20 --checkpoint.dir="$WORK/$name" "$@" \
    >"$name-train.log" 2>&1 || { cat "$name-train.log"; fail "training $name"; }
  local ckpt=$WORK/$name/step-40.h5
  "$MGTRAIN" eval --checkpoint "$ckpt" --data "$DATA_DIR/test.h5" --logits "$name-logits.npy" --json \
    "${plugin_args[@]}" >"$name-eval.log" 2>&1 || { cat "$name-eval.log"; fail "eval --logits of $name"; }
  # By default the graph normalises as the training file's statistics say, which the model was
  # trained on; eval normalises each file by its own, so the comparison exports with the test
  # file's (--data).
  "$MGTRAIN" export --checkpoint "$ckpt" --out "$name.onnx" "${plugin_args[@]}" >"$name-export.log" 2>&1 ||
    { cat "$name-export.log"; fail "export of $name"; }
  grep -qF "samples of $DATA_DIR/train.h5, normalised in the graph: x / 255, then (x - 0.28" "$name-export.log" ||
    { cat "$name-export.log"; fail "export of $name: not normalised by the training file's statistics"; }
  "$MGTRAIN" export --checkpoint "$ckpt" --out "$name-test.onnx" --data "$DATA_DIR/test.h5" "${plugin_args[@]}" \
    >"$name-export-test.log" 2>&1 || { cat "$name-export-test.log"; fail "export of $name --data test.h5"; }
  cat "$name-export-test.log"
  [[ -s $name.onnx && -s $name-test.onnx ]] || fail "export of $name wrote no file"
  ! ls -a | grep -q '\.tmp-' || { ls -a; fail "export left a temporary file"; }
  "$venv/bin/python" "$HERE/onnx_check.py" "$name-test.onnx" "$DATA_DIR/test.h5" "$name-logits.npy" "${checker[@]}" ||
    fail "onnx_check.py on $name"
}

# Byte tokens of Debian's fortunes (scripts/install_deps.sh): the example's split of `cookie`
# (examples/text_gpt.ini), 128 windows of 64 held out for the test.
convert_text() {
  require_fortunes
  head -c 220000 "$FORTUNES/cookie" >train.txt
  # No pipe: under pipefail, tail killed by SIGPIPE once head has its bytes failed the script.
  tail -c +220001 "$FORTUNES/cookie" >rest.txt
  head -c $((128 * 64 + 1)) rest.txt >test.txt
  { "$MGTRAIN" data convert --text train.txt --out text_train.h5 &&
    "$MGTRAIN" data convert --text test.txt --out text_test.h5; } >convert.log 2>&1 ||
    { cat convert.log; fail "data convert --text"; }
}

write_gpt_config() {
  cat >gpt.ini <<INI
[data]
train = $WORK/text_train.h5
test = $WORK/text_test.h5
[model]
name = gpt
layers = 2
heads = 4
dim = 64
context = 64
[optimizer]
name = adam
lr = 0.003
[train]
max_steps = 40
global_batch = 16
seed = 5
log_every = 20
INI
}

# Trains a gpt briefly at np=2 with the extra arguments, exports it and checks it against eval's
# logits and test loss on the held-out windows. Usage: gpt_export_check NAME [train arguments...]
gpt_export_check() {
  local name=$1
  shift
  write_gpt_config
  run_np 2 600 train --config gpt.ini --checkpoint.dir="$WORK/$name" "$@" >"$name-train.log" 2>&1 ||
    { cat "$name-train.log"; fail "training $name"; }
  local ckpt=$WORK/$name/step-40.h5
  "$MGTRAIN" eval --checkpoint "$ckpt" --data text_test.h5 --logits "$name-logits.npy" --json "${plugin_args[@]}" \
    >"$name-eval.log" 2>&1 || { cat "$name-eval.log"; fail "eval --logits of $name"; }
  local loss
  loss=$(json_field loss <"$name-eval.log")
  [[ -n $loss ]] || { cat "$name-eval.log"; fail "eval of $name printed no loss"; }
  # A language model needs no data file: the training file may be gone.
  mv text_train.h5 text_train.h5.away
  "$MGTRAIN" export --checkpoint "$ckpt" --out "$name.onnx" "${plugin_args[@]}" >"$name-export.log" 2>&1 ||
    { cat "$name-export.log"; fail "export of $name"; }
  mv text_train.h5.away text_train.h5
  cat "$name-export.log"
  grep -qF 'input "input" int64 [N, T] token ids, T from 1 to 64; output "logits" [N, T, 256]' "$name-export.log" ||
    fail "export of $name: not token ids in and logits per token out"
  ! ls -a | grep -q '\.tmp-' || { ls -a; fail "export left a temporary file"; }
  "$venv/bin/python" "$HERE/onnx_check.py" "$name.onnx" text_test.h5 "$name-logits.npy" --loss "$loss" ||
    fail "onnx_check.py on $name"
}

write_config run.ini "[optimizer]" "lr = 0.05"
plugin_args=()
case $case_name in
  mlp)
    prepare_venv
    train_export_check mlp --model.name=mlp --model.hidden=128,64 --model.dropout=0.1
    ;;
  cnn)
    prepare_venv
    train_export_check cnn --model.name=cnn --model.channels=8,16 --model.hidden=32 --model.dropout=0.1
    ;;
  resnet)
    prepare_venv
    train_export_check resnet --checkpoint-buffers --model.name=resnet --model.depth=8 --model.width=8
    ;;
  layers)
    # Every SDK layer the grammar has: conv with stride and padding, batch norm, both poolings,
    # a residual block with a projection shortcut and one with the identity, dropout, flatten,
    # global pooling and a linear layer on an image input.
    prepare_venv
    layers='conv 8 k3 p1, bn, relu, avgpool 2, residual { conv 16 k3 s2 p1, bn, relu, conv 16 k3 p1, bn | conv 16 k1 s2, bn },
            relu, residual { conv 16 k3 p1, bn, relu }, maxpool 2 s1, dropout 0.1, conv 16 k1, relu, gap, flatten, linear 10'
    train_export_check layers --checkpoint-buffers --model.name=layers "--model.layers=${layers//$'\n'/ }"
    ;;
  plugin_operator)
    # A plugin's own layer that describes itself as one ONNX operator (tests/plugins/tanh_mlp.cpp).
    prepare_venv
    plugin_args=(--plugin-path "$TEST_PLUGIN_DIR/hand-written")
    train_export_check tanh_mlp --model.name=tanh_mlp "${plugin_args[@]}"
    ;;
  plugin_nodes)
    # The same layer described as four operators with scalar constants, 2 sigmoid(2x) - 1.
    prepare_venv
    plugin_args=(--plugin-path "$TEST_PLUGIN_DIR/hand-written")
    train_export_check tanh_nodes --model.name=tanh_mlp --model.export_nodes=true "${plugin_args[@]}"
    grep -q "tanh1.two_x" <("$venv/bin/python" -c 'import onnx, sys
print("\n".join(n.name for n in onnx.load(sys.argv[1]).graph.node))' tanh_nodes.onnx) ||
      fail "the composition's nodes are not in the graph"
    ;;
  gpt)
    prepare_venv
    convert_text
    gpt_export_check gpt
    ;;
  layers_nopositions)
    # The gpt declared in model.layers with an embed of the table alone (no position table): the
    # embedding is a Gather alone in the graph.
    prepare_venv
    convert_text
    layers="embed 256 64 nopositions, residual { layernorm, linear 192, attention 4 causal, linear 64 },
            residual { layernorm, linear 256, gelu, linear 64 }, layernorm, tied_head"
    gpt_export_check layers_nopositions --model.name=layers --model.input_shape=64 "--model.layers=${layers//$'\n'/ }"
    "$venv/bin/python" -c 'import onnx, sys
g = onnx.load(sys.argv[1]).graph
first = g.node[0]
assert (first.op_type, first.name, list(first.input)) == ("Gather", "embed1", ["embed1.weight", "input"]), first
assert not [t.name for t in g.initializer if "position" in t.name], "a position table in the graph"' \
      layers_nopositions.onnx || fail "the embedding without positions is not a Gather alone"
    ;;
  gpt_untied)
    # A head of its own (a token linear layer with a bias) and dropout, the identity in the graph.
    prepare_venv
    convert_text
    gpt_export_check gpt_untied --model.tie_weights=false --model.dropout=0.1
    ;;
  rope)
    # A layer plugin whose export form has constants of its own (its cos/sin tables and int64
    # shapes), a Split into two outputs and a Shape with attributes (examples/plugin's rope, built
    # against the installed SDK), in a declared language model; T stays free.
    prepare_venv
    convert_text
    build_example_plugins libmgtrain-layer-rope.so
    plugin_args=(--plugin-path "$PLUGIN_BUILD/plugins")
    gpt_export_check rope "${plugin_args[@]}" --model.name=layers --model.input_shape=64 \
      "--model.layers=embed 256 64, rope, residual { layernorm, linear 192, attention 4 causal, linear 64 }, layernorm, tied_head"
    grep -q "rope1.cos" <("$venv/bin/python" -c 'import onnx, sys
print("\n".join(t.name for t in onnx.load(sys.argv[1]).graph.initializer))' rope.onnx) ||
      fail "the rope layer's cos table is not an initializer of the graph"
    ;;
  check)
    # Before it writes, export runs the graph on a sample batch with mgtrain's own evaluator and
    # compares it with the model's forward at every layer. An RMSNorm layer whose export form leaves
    # out its eps (tests/plugins/rms_mlp.cpp, model.export_eps=false) is refused in one line naming
    # the layer and the difference, nothing written; described right it exports, saying what it
    # checked; --no-check writes the wrong one unchecked. Needs no Python.
    hand=(--plugin-path "$TEST_PLUGIN_DIR/hand-written")
    for form in right wrong; do
      eps=true
      [[ $form == wrong ]] && eps=false
      run_np 2 300 train --config run.ini --train.max_steps=5 --checkpoint.dir="$WORK/rms-$form" "${hand[@]}" \
        --model.name=rms_mlp --model.export_eps=$eps >"rms-$form.log" 2>&1 || { cat "rms-$form.log"; fail "training rms_mlp ($form)"; }
    done
    mkdir out
    "$MGTRAIN" export --checkpoint "$WORK/rms-right/step-5.h5" --out out/right.onnx "${hand[@]}" >right.log 2>&1 ||
      { cat right.log; fail "export of the RMSNorm described right"; }
    cat right.log
    grep -qF "checked: 4 layer outputs agree with the model's forward on the first 4 samples of '$DATA_DIR/train.h5'" \
      right.log || fail "export did not say what it checked"
    status=0
    "$MGTRAIN" export --checkpoint "$WORK/rms-wrong/step-5.h5" --out out/wrong.onnx "${hand[@]}" >wrong.log 2>&1 ||
      status=$?
    [[ $status -ne 0 ]] || { cat wrong.log; fail "export of an RMSNorm described without its eps exited 0"; }
    line=$(one_error_line wrong.log)
    echo "wrong: $line"
    for expected in "model 'rms_mlp': layer 'rms1' computes another output in the exported graph than in its forward" \
      "on the first 4 samples of '$DATA_DIR/train.h5': largest difference" "expected at most 0.0001" "--no-check"; do
      grep -qF -- "$expected" <<<"$line" || fail "the refusal does not say '$expected'"
    done
    [[ $(ls -A out) == right.onnx ]] || { ls -la out; fail "a refused export left a file"; }
    "$MGTRAIN" export --checkpoint "$WORK/rms-wrong/step-5.h5" --out out/wrong.onnx --no-check "${hand[@]}" \
      >no-check.log 2>&1 || { cat no-check.log; fail "export --no-check"; }
    [[ -s out/wrong.onnx ]] || fail "export --no-check wrote no file"
    ! grep -q "^checked:" no-check.log || { cat no-check.log; fail "export --no-check says it checked"; }
    ;;
  errors)
    run_np 2 300 train --config run.ini --train.max_steps=5 --checkpoint.dir="$WORK/mlp" >train.log 2>&1 ||
      { cat train.log; fail "training the mlp"; }
    ckpt=$WORK/mlp/step-5.h5
    mkdir out
    # Usage: refused NAME EXPECTED-TEXT export-arguments...: one error line naming what is wrong,
    # a non-zero exit, and nothing written in out/.
    refused() {
      local name=$1 expected=$2 status=0
      shift 2
      "$MGTRAIN" export "$@" >"$name.log" 2>&1 || status=$?
      [[ $status -ne 0 ]] || { cat "$name.log"; fail "$name: export exited 0"; }
      echo "$name: $(one_error_line "$name.log")"
      grep -qF -- "$expected" "$name.log" || { cat "$name.log"; fail "$name: the error does not say '$expected'"; }
      [[ -z $(ls -A out) ]] || { ls -la out; fail "$name: export left files in out/"; }
    }
    echo "not a checkpoint" >not_a_checkpoint.h5
    refused not_a_checkpoint "not_a_checkpoint.h5" --checkpoint not_a_checkpoint.h5 --out out/m.onnx
    refused missing_checkpoint "missing.h5' does not exist" --checkpoint missing.h5 --out out/m.onnx
    refused unwritable_out "ONNX file 'no/such/dir/m.onnx' cannot be written" --checkpoint "$ckpt" \
      --out no/such/dir/m.onnx
    refused out_is_directory "ONNX file 'out' is a directory, not a regular file" --checkpoint "$ckpt" --out out
    refused missing_data "data file 'missing.h5'" --checkpoint "$ckpt" --out out/m.onnx --data missing.h5
    # Data of the other kind: token ids for an image model, images for a language model.
    convert_text
    refused tokens_for_mlp "data file 'text_test.h5' is a token file (/tokens), but model 'mlp' reads sample files" \
      --checkpoint "$ckpt" --out out/m.onnx --data text_test.h5
    # A gpt of 128 tokens, trained on the text (ASCII) declared as of 128, refuses a file of 256.
    cp text_train.h5 text_train_128.h5
    "$(h5py_python)" "$HERE/h5edit.py" text_train_128.h5 setint / vocab_size 128
    write_gpt_config
    run_np 2 300 train --config gpt.ini --train.max_steps=2 --data.train="$WORK/text_train_128.h5" --data.test= \
      --model.vocab=128 --checkpoint.dir="$WORK/gpt" >gpt-train.log 2>&1 || { cat gpt-train.log; fail "training the gpt"; }
    refused images_for_gpt "data file '$DATA_DIR/test.h5' is not a token file (no dataset /tokens), but model" \
      --checkpoint "$WORK/gpt/step-2.h5" --out out/m.onnx --data "$DATA_DIR/test.h5"
    refused vocab_beyond_model "token file 'text_test.h5' has vocab_size 256, more than the vocabulary of 128" \
      --checkpoint "$WORK/gpt/step-2.h5" --out out/m.onnx --data text_test.h5
    # A gpt's line quotes --out with its control bytes escaped, as a sample model's does.
    mkdir escaped
    "$MGTRAIN" export --checkpoint "$WORK/gpt/step-2.h5" --out $'escaped/m\e[2J.onnx' >escaped.log 2>&1 ||
      { cat escaped.log; fail "export to a name with an escape byte"; }
    ! grep -q $'\e' escaped.log || { cat -v escaped.log; fail "export printed a raw escape byte"; }
    grep -qF 'wrote escaped/m\x1b[2J.onnx: model gpt' escaped.log || { cat escaped.log; fail "export did not quote --out"; }

    hand=(--plugin-path "$TEST_PLUGIN_DIR/hand-written")
    run_np 2 300 train --config run.ini --train.max_steps=5 --checkpoint.dir="$WORK/no-form" "${hand[@]}" \
      --model.name=tanh_mlp --model.export_form=false >no-form.log 2>&1 || { cat no-form.log; fail "training tanh_mlp"; }
    refused layer_without_form "model 'tanh_mlp': layer 'tanh1' has no ONNX form" \
      --checkpoint "$WORK/no-form/step-5.h5" --out out/m.onnx "${hand[@]}"
    run_np 2 300 train --config run.ini --train.max_steps=5 --checkpoint.dir="$WORK/hand-model" "${hand[@]}" \
      --model.name=residual_mlp >hand-model.log 2>&1 || { cat hand-model.log; fail "training residual_mlp"; }
    refused model_without_form "model 'residual_mlp' has no ONNX form: it is not a stack of layers" \
      --checkpoint "$WORK/hand-model/step-5.h5" --out out/m.onnx "${hand[@]}"

    # A failed export leaves an existing file as it was.
    echo "an older model" >out/m.onnx
    "$MGTRAIN" export --checkpoint "$WORK/hand-model/step-5.h5" --out out/m.onnx "${hand[@]}" >keep.log 2>&1 &&
      fail "export of residual_mlp exited 0"
    [[ $(cat out/m.onnx) == "an older model" && $(ls -A out) == m.onnx ]] ||
      { ls -la out; fail "a failed export changed out/m.onnx or left a file beside it"; }
    # eval --logits refuses an output it cannot write before it evaluates.
    "$MGTRAIN" eval --checkpoint "$ckpt" --data "$DATA_DIR/test.h5" --logits no/such/dir/l.npy >logits.log 2>&1 &&
      fail "eval --logits into a missing directory exited 0"
    echo "logits: $(one_error_line logits.log)"
    grep -qF "logits file 'no/such/dir/l.npy' cannot be written" logits.log || fail "eval --logits: unclear error"
    ;;
  *) fail "unknown case '$case_name'" ;;
esac
echo "PASS"
