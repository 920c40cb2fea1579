#!/usr/bin/env bash
# `mgtrain generate` on a gpt trained for 40 to 200 steps on fortunes text: the same seed gives the
# same bytes, another seed other bytes, greedy decoding (temperature 0, or top-k 1) is the same on
# every run and for every seed, the output is exactly the bytes asked for (--echo puts the prompt
# before the same continuation), and a shorter run is a prefix of a longer one with the same seed.
# The KV cache's logits match the model's own forward over the same window (--check-cache) with a
# tied and an untied head, with dropout, a prompt longer than the context and the window sliding.
# Each bad input gets one error line naming it, a non-zero exit and nothing on standard output.
# Usage: generate.sh sample|cache|bad_input
source "$(dirname "$0")/lib.sh"
require_fortunes

# A small gpt (context 32) trained for 40 steps into $WORK/<dir>; extra arguments override keys.
train_gpt() {  # train_gpt DIR [--key=value ...]
  local dir=$1; shift
  [ -f train.h5 ] || "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >convert.log 2>&1 ||
    { cat convert.log; fail "data convert --text"; }
  cat >run.ini <<INI
[data]
train = $WORK/train.h5
[model]
name = gpt
layers = 2
heads = 4
dim = 32
context = 32
[optimizer]
name = adam
lr = 0.003
[train]
max_steps = 40
global_batch = 16
seed = 3
log_every = 20
INI
  "$MGTRAIN" train --config run.ini --checkpoint.dir="$WORK/$dir" "$@" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "training the gpt into $dir"; }
}

# Runs generate into FILE (stdout), its messages into FILE.err; fails on an error.
generate() {  # generate FILE ARGS...
  local out=$1; shift
  "$MGTRAIN" generate "$@" >"$out" 2>"$out.err" || { cat "$out.err"; fail "generate $*"; }
}

# FILE holds exactly N bytes.
bytes_are() {  # bytes_are FILE N
  [ "$(stat -c %s "$1")" = "$2" ] || fail "$1 holds $(stat -c %s "$1") bytes, expected $2"
}

PROMPT="You will be"

case $1 in
  sample)
    # Long enough that greedy decoding says more than one byte again and again (" the the").
    train_gpt ck --train.max_steps=200
    ckpt=ck/step-200.h5
    generate a.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --seed 7
    generate b.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --seed 7
    cmp a.txt b.txt || fail "the same seed gave different text"
    bytes_are a.txt 80
    generate c.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --seed 8
    cmp -s a.txt c.txt && fail "seeds 7 and 8 gave the same 80 bytes"
    # Token i is drawn with the random number of (seed, i): a shorter run is a prefix of a longer one.
    generate short.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 30 --seed 7
    bytes_are short.txt 30
    cmp short.txt <(head -c 30 a.txt) || fail "30 tokens with seed 7 are not the first 30 of 80"
    # The defaults: temperature 1, seed 0.
    generate default.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80
    generate seed0.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --seed 0 --temperature 1
    cmp default.txt seed0.txt || fail "the defaults are not --seed 0 --temperature 1"
    # Greedy: the same on every run, whatever the seed; top-k 1 is greedy too.
    generate greedy1.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 60 --temperature 0 --seed 1
    generate greedy2.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 60 --temperature 0 --seed 2
    cmp greedy1.txt greedy2.txt || fail "greedy decoding differs between runs"
    [ "$(fold -w1 greedy1.txt | sort -u | wc -l)" -ge 3 ] || fail "greedy decoding repeats one byte: undertrained"
    bytes_are greedy1.txt 60
    generate top1.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 60 --top-k 1 --seed 5
    cmp greedy1.txt top1.txt || fail "--top-k 1 is not greedy decoding"
    # A temperature too small for a normal double (strtod's ERANGE) is taken: it samples as 0 does.
    for t in 1e-320 1e-400; do
      generate tiny.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 60 --temperature $t --seed 3
      cmp greedy1.txt tiny.txt || fail "--temperature $t is not greedy decoding"
    done
    # Top-k sampling is reproducible too.
    generate k5a.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --top-k 5 --temperature 0.7 --seed 4
    generate k5b.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --top-k 5 --temperature 0.7 --seed 4
    cmp k5a.txt k5b.txt || fail "the same seed with --top-k 5 gave different text"
    # --echo: the prompt, then the same continuation.
    generate echo.txt --checkpoint $ckpt --prompt "$PROMPT" --tokens 80 --seed 7 --echo
    cmp echo.txt <(printf '%s' "$PROMPT"; cat a.txt) || fail "--echo is not the prompt followed by the continuation"
    # A prompt longer than the context (32) keeps its last 32 bytes.
    long=$(head -c 100 "$FORTUNES/cookie")
    generate long.txt --checkpoint $ckpt --prompt "$long" --tokens 50 --temperature 0
    generate tail.txt --checkpoint $ckpt --prompt "${long: -32}" --tokens 50 --temperature 0
    bytes_are long.txt 50
    cmp long.txt tail.txt || fail "a prompt longer than the context is not its last 32 bytes"
    [ ! -s a.txt.err ] || { cat a.txt.err; fail "generate wrote to standard error"; }
    printf 'seed 7:  %s\ngreedy:  %s\n' "$(tr '\n' ' ' <a.txt)" "$(tr '\n' ' ' <greedy1.txt)"
    ;;
  cache)
    # Every token's logits from the cache against the model's forward over the same window: the
    # prompt pass, one-token passes, and (11 + 60 > 32) the window sliding and computed again.
    check_cache() {  # check_cache NAME CHECKPOINT PROMPT ARGS...
      local name=$1 ckpt=$2 prompt=$3; shift 3
      generate "$name.txt" --checkpoint "$ckpt" --prompt "$prompt" --check-cache "$@"
      cat "$name.txt.err"
      grep -q "^cache check: the logits for [0-9]* tokens (\([1-9][0-9]*\) after the window slid) are within" \
        "$name.txt.err" || fail "$name: no cache check line, or the window never slid"
    }
    train_gpt tied
    check_cache tied_greedy tied/step-40.h5 "$PROMPT" --tokens 60 --temperature 0
    bytes_are tied_greedy.txt 60
    check_cache tied_sampled tied/step-40.h5 "$PROMPT" --tokens 60 --top-k 10 --seed 2
    check_cache tied_long tied/step-40.h5 "$(head -c 100 "$FORTUNES/cookie")" --tokens 10 --seed 1
    # The cache check gives the same bytes as a run without it.
    generate tied_plain.txt --checkpoint tied/step-40.h5 --prompt "$PROMPT" --tokens 60 --temperature 0
    cmp tied_plain.txt tied_greedy.txt || fail "--check-cache changed the text"
    train_gpt untied --model.tie_weights=false --model.dropout=0.1 --model.layers=3
    check_cache untied untied/step-40.h5 "$PROMPT" --tokens 60 --seed 9
    ;;
  bad_input)
    train_gpt ck
    ckpt=ck/step-40.h5
    expect_error() {  # expect_error PATTERN ARGS...: one error line matching PATTERN, no output
      local pattern=$1; shift
      "$MGTRAIN" generate "$@" >out.txt 2>err.log && { cat err.log; fail "accepted: generate $*"; }
      one_error_line err.log | grep -qE -- "$pattern" || { cat err.log; fail "'generate $*': expected /$pattern/"; }
      [ ! -s out.txt ] || fail "'generate $*' wrote $(stat -c %s out.txt) bytes to standard output"
    }
    # An image model's checkpoint.
    write_config image.ini "[train]" "max_steps = 2" "[checkpoint]" "dir = $WORK/image"
    "$MGTRAIN" train --config image.ini >image.log 2>&1 || { cat image.log; fail "training the mlp"; }
    expect_error "checkpoint '$WORK/image/step-2.h5' holds model 'mlp'.*expected a language model" \
      --checkpoint "$WORK/image/step-2.h5" --prompt "$PROMPT" --tokens 5
    # Missing, not HDF5, truncated, a directory that is no run's (a run's directory is its latest).
    expect_error "checkpoint 'missing.h5' does not exist" --checkpoint missing.h5 --prompt "$PROMPT" --tokens 5
    expect_error "checkpoint 'run.ini': cannot open as HDF5" --checkpoint run.ini --prompt "$PROMPT" --tokens 5
    head -c 20000 $ckpt >truncated.h5
    expect_error "checkpoint 'truncated.h5': cannot open as HDF5: truncated" --checkpoint truncated.h5 \
      --prompt "$PROMPT" --tokens 5
    mkdir not-a-run
    expect_error "checkpoint 'not-a-run' is a directory with no 'latest' file" --checkpoint not-a-run \
      --prompt "$PROMPT" --tokens 5
    if [ "$(id -u)" -ne 0 ]; then  # root reads any file
      cp $ckpt unreadable.h5
      chmod 000 unreadable.h5
      expect_error "unreadable.h5" --checkpoint unreadable.h5 --prompt "$PROMPT" --tokens 5
    fi
    # The prompt.
    expect_error "generate: --prompt is empty: expected at least one byte" --checkpoint $ckpt --prompt "" --tokens 5
    expect_error "generate: --prompt is required" --checkpoint $ckpt --tokens 5
    # A model of 128 tokens (ASCII): its token file says so, and cookie is ASCII throughout.
    cp train.h5 ascii.h5
    "$(h5py_python)" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); f.attrs.modify('vocab_size', 128)" ascii.h5
    train_gpt ascii --data.train="$WORK/ascii.h5" --model.vocab=128 --train.max_steps=5
    expect_error "generate: --prompt: byte 5 is 0xc3 \(token 195\), outside the vocabulary of model 'gpt' in checkpoint 'ascii/step-5.h5': expected tokens below 128" \
      --checkpoint ascii/step-5.h5 --prompt "fianc$(printf '\303\251')" --tokens 5
    generate ascii.txt --checkpoint ascii/step-5.h5 --prompt "fiance" --tokens 200 --seed 1
    [ "$(LC_ALL=C tr -d '\000-\177' <ascii.txt | wc -c)" = 0 ] || fail "a model of 128 tokens wrote a byte above 127"
    # --tokens, --temperature, --top-k, --seed.
    for n in 0 -3 1.5 abc 99999999999999999999; do
      expect_error "generate: --tokens: expected a positive integer, got '$n'" --checkpoint $ckpt --prompt "$PROMPT" \
        --tokens "$n"
    done
    expect_error "generate: --tokens is required" --checkpoint $ckpt --prompt "$PROMPT"
    for t in -1 -0.5 nan inf -inf 1e999 warm; do
      expect_error "generate: --temperature: expected a finite number >= 0 .*, got '$t'" --checkpoint $ckpt \
        --prompt "$PROMPT" --tokens 5 --temperature "$t"
    done
    for k in 0 -2 two; do
      expect_error "generate: --top-k: expected an integer >= 1, got '$k'" --checkpoint $ckpt --prompt "$PROMPT" \
        --tokens 5 --top-k "$k"
    done
    expect_error "generate: --seed: expected a non-negative integer.*, got '-1'" --checkpoint $ckpt \
      --prompt "$PROMPT" --tokens 5 --seed -1
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
